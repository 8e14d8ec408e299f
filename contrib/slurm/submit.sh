#!/bin/sh
# Tunes a grid across N nodes of one GPU model and merges the result
# (docs/fleet.md):
#   TILETUNE_OUT=/shared/tiletune TILETUNE_CONSTRAINT=h200 contrib/slurm/submit.sh 8
# TILETUNE_CONSTRAINT is the node feature of the GPU model (slurm.conf
# Feature=): shards measured on two models do not merge into one table.
# Extra sbatch options (partition, account) go in SBATCH_* variables.
set -eu
n=${1:?usage: submit.sh N_SHARDS}
here=$(cd "$(dirname "$0")" && pwd)
: "${TILETUNE_OUT:?set TILETUNE_OUT to a directory every node can write}"
: "${TILETUNE_CONSTRAINT:?set TILETUNE_CONSTRAINT to the node feature of one GPU model (e.g. h200)}"
mkdir -p "$TILETUNE_OUT"
array=$(sbatch --parsable --array="1-$n" --constraint="$TILETUNE_CONSTRAINT" --export=ALL "$here/tune-shard.sbatch")
array=${array%%;*}
# afterany, not afterok: a failed or cancelled shard must not leave the
# merge pending for ever; the merge checks every shard and fails instead.
merge=$(sbatch --parsable --dependency="afterany:$array" --export=ALL,SHARDS="$n",ARRAY_JOB="$array" \
    "$here/merge.sbatch")
merge=${merge%%;*}
echo "shards: job array $array -> $TILETUNE_OUT/$array/; merge: job $merge -> $TILETUNE_OUT/table.json"
