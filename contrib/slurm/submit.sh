#!/bin/sh
# Tunes a grid across N nodes and merges the result (docs/fleet.md):
#   TILETUNE_OUT=/shared/tiletune contrib/slurm/submit.sh 8
# Extra sbatch options (partition, account) go in SBATCH_* variables.
set -eu
n=${1:?usage: submit.sh N_SHARDS}
here=$(cd "$(dirname "$0")" && pwd)
: "${TILETUNE_OUT:?set TILETUNE_OUT to a directory every node can write}"
mkdir -p "$TILETUNE_OUT"
array=$(sbatch --parsable --array="1-$n" --export=ALL "$here/tune-shard.sbatch")
merge=$(sbatch --parsable --dependency="afterok:${array%%;*}" --export=ALL,SHARDS="$n" "$here/merge.sbatch")
echo "shards: job array $array; merge: job $merge -> $TILETUNE_OUT/table.json"
