#!/bin/bash
# contrib/slurm on a real single-node Slurm cluster (Debian's slurmctld,
# slurmd and munge), brought up in a temporary directory with a stand-in
# GPU (gres.conf: one gpu) and tiletuned daemons whose worker is the test
# stand-in (tests/daemon/fake_worker.sh):
#   1. submit.sh over 3 shards, the merge job after the array: the merged
#      table holds the whole grid, config for config as one daemon that
#      tuned it alone, and none of the node's older winners;
#   2. a task cancelled while tuning: its tiletune job is cancelled on the
#      daemon, the merge job still runs (afterany), fails, writes nothing;
#   3. a damaged shard: the merge fails before importing anything.
# Skips (77) where Slurm cannot start: not root, Slurm or munge missing.
# Usage: slurm_test.sh CLI_BINARY TILETUNED_BINARY FAKE_WORKER CONTRIB_SLURM_DIR
set -uo pipefail
cli=$1 daemon_bin=$2 fake=$3 contrib=$4

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "starting slurmctld/slurmd needs root"
for b in slurmctld slurmd sbatch scontrol squeue scancel munged munge; do
    command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || skip "$b not installed (apt-get install slurmctld slurmd slurm-client munge)"
done
id munge >/dev/null 2>&1 || skip "no munge user (the munge package creates it)"
export PATH="$PATH:/usr/sbin"

tmp=$(mktemp -d /tmp/ttslurm-XXXXXX)
chmod 755 "$tmp"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    [ -f "$tmp/slurmd.pid" ] && kill "$(cat "$tmp/slurmd.pid")" 2>/dev/null
    [ -f "$tmp/slurmctld.pid" ] && kill "$(cat "$tmp/slurmctld.pid")" 2>/dev/null
    [ -f "$tmp/munge/munged.pid" ] && kill "$(cat "$tmp/munge/munged.pid")" 2>/dev/null
    sleep 0.5
    if [ "${KEEP:-0}" = 1 ] || [ "${failed:-0}" = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
failed=0
fail() {
    failed=1
    echo "FAIL: $*"
    for f in "$tmp"/run*/tiletune-*.out "$tmp/log/slurmctld.log"; do
        [ -f "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }
    done
    exit 1
}

# ---- munge and Slurm ----------------------------------------------------------
mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool" "$tmp/log" "$tmp/bin"
dd if=/dev/urandom of="$tmp/munge/key" bs=1024 count=1 status=none
chown -R munge:munge "$tmp/munge"
chmod 755 "$tmp/munge" # the socket's directory: every client must reach it
chmod 400 "$tmp/munge/key"
runuser -u munge -- munged --key-file="$tmp/munge/key" --socket="$tmp/munge/sock" \
    --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/munge/log" --seed-file="$tmp/munge/seed" ||
    skip "munged does not start: $(tail -n 3 "$tmp/munge/log" 2>/dev/null)"

host=$(hostname -s)
port=$((20000 + $$ % 20000))
cat >"$tmp/slurm.conf" <<CONF
ClusterName=ttci
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/sock
CredType=cred/munge
SlurmctldPort=$port
SlurmdPort=$((port + 1))
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
MpiDefault=none
KillWait=5
MinJobAge=3600
NodeName=$host CPUs=$(nproc) RealMemory=1000 Gres=gpu:1 Feature=fakegpu State=UNKNOWN
PartitionName=ci Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
# a stand-in GPU: Slurm hands out /dev/null as the device
echo "NodeName=$host Name=gpu File=/dev/null" >"$tmp/gres.conf"
export SLURM_CONF="$tmp/slurm.conf"
slurmctld -c -i >"$tmp/log/ctld.out" 2>&1 || skip "slurmctld does not start: $(tail -n 3 "$tmp/log/ctld.out")"
slurmd >"$tmp/log/d.out" 2>&1 || skip "slurmd does not start: $(tail -n 3 "$tmp/log/d.out")"
up=0
for _ in $(seq 1 100); do
    sinfo -h -o %t 2>/dev/null | grep -q '^idle' && { up=1; break; }
    sleep 0.2
done
[ "$up" = 1 ] || skip "the Slurm node never became idle: $(sinfo 2>&1 | tail -n 1); $(tail -n 3 "$tmp/log/slurmctld.log")"
echo "Slurm up on $host (ports $port, $((port + 1)))"

# ---- tiletune: the CLI on PATH, daemons with the stand-in worker ---------------
ln -s "$cli" "$tmp/bin/tiletune"
ln -s "$daemon_bin" "$tmp/bin/tiletuned"
export PATH="$tmp/bin:$PATH"
export TT_FAKE_PLAUSIBLE=1
start_daemon() { # NAME MODE: a daemon at $tmp/NAME.sock with the stand-in in MODE
    TT_FAKE_WORKER_MODE=$2 tiletuned --socket "$tmp/$1.sock" --db "$tmp/$1.db" --worker "$fake" \
        --cache-dir "$tmp/$1.cache" --log-level warn 2>"$tmp/log/$1.log" &
    pids+=($!)
    for _ in $(seq 1 100); do
        TILETUNE_SOCKET="$tmp/$1.sock" tiletune status 2>/dev/null | grep -q gpu && return 0
        sleep 0.1
    done
    fail "daemon $1 does not start: $(cat "$tmp/log/$1.log")"
}
job_state() { scontrol -o show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -n 1; }
wait_slurm() { # every job given has left the queue (timeout 120 s)
    for _ in $(seq 1 600); do
        [ -z "$(squeue -h -j "$(IFS=,; echo "$*")" 2>/dev/null)" ] && return 0
        sleep 0.2
    done
    fail "Slurm jobs $* still queued after 120 s: $(squeue)"
}

export SEQLENS=256,512,1024 HDIMS=64,128 DTYPES=fp16 CAUSAL=both TILETUNE_CONSTRAINT=fakegpu

# ---- 1. three shards and their merge ------------------------------------------------
start_daemon node gpu
start_daemon alone gpu
export TILETUNE_SOCKET="$tmp/node.sock"
# an older winner of this node, outside the grid: no shard may carry it
tiletune tune --seqlen 4096 --hdim 64 --dtype fp16 --causal no --wait >/dev/null || fail "seed tune"
mkdir -p "$tmp/run1" && cd "$tmp/run1" || exit 1
out=$(TILETUNE_OUT="$tmp/run1" "$contrib/submit.sh" 3) || fail "submit.sh: $out"
echo "$out"
array=$(echo "$out" | sed -n 's/^shards: job array \([0-9]*\).*/\1/p')
merge=$(echo "$out" | sed -n 's/.*merge: job \([0-9]*\).*/\1/p')
[ -n "$array" ] && [ -n "$merge" ] || fail "no job ids in '$out'"
wait_slurm "$array" "$merge"
for t in 1 2 3; do
    [ "$(job_state "${array}_$t")" = COMPLETED ] || fail "task $t ended $(job_state "${array}_$t")"
    n=$(grep -c '^{"kind":"best"' "$tmp/run1/$array/shard-$t-of-3.json")
    [ "$n" = 4 ] || fail "shard $t holds $n records, not its 4 keys"
done
[ "$(job_state "$merge")" = COMPLETED ] || fail "merge ended $(job_state "$merge")"
TILETUNE_SOCKET="$tmp/alone.sock" tiletune tune --seqlen $SEQLENS --hdim $HDIMS --dtype $DTYPES --causal both \
    --wait >/dev/null || fail "the full tune"
TILETUNE_SOCKET="$tmp/alone.sock" tiletune export -o "$tmp/full.json" 2>/dev/null || fail "full export"
d=$(tiletune diff "$tmp/run1/table.json" "$tmp/full.json") || fail "merged and full tables differ: $d"
echo "$d" | grep -q "^12 keys: 12 same config, 0 differ, 0 only in A, 0 only in B" || fail "diff says: $d"
grep -q '"seqlen_q":4096' "$tmp/run1/table.json" && fail "the node's older winner reached the merged table"
echo "ok   3 shards merged: the whole grid of 12 keys, as one daemon tuned it"

# ---- 2. a task cancelled while tuning ------------------------------------------------
export TT_FAKE_DELAY=4
start_daemon slow slow
export TILETUNE_SOCKET="$tmp/slow.sock" SEQLENS=256,512 HDIMS=64 CAUSAL=both
mkdir -p "$tmp/run2" && cd "$tmp/run2" || exit 1
out=$(TILETUNE_OUT="$tmp/run2" "$contrib/submit.sh" 2) || fail "submit.sh: $out"
array=$(echo "$out" | sed -n 's/^shards: job array \([0-9]*\).*/\1/p')
merge=$(echo "$out" | sed -n 's/.*merge: job \([0-9]*\).*/\1/p')
# job_reaches J STATE TENTHS: the daemon's tuning job J is in STATE within
# TENTHS tenths of a second
job_reaches() {
    for _ in $(seq 1 "$3"); do
        tiletune jobs --all --json 2>/dev/null | tr -d ' \n' | grep -q "\"job\":$1,\"state\":\"$2\"" && return 0
        sleep 0.1
    done
    return 1
}
job_reaches 1 running 150 || fail "task 1 never started tuning: $(tiletune jobs --all 2>&1)"
scancel "${array}_1"
job_reaches 1 cancelled 100 || fail "scancel left the daemon's job running: $(tiletune jobs --all 2>&1)"
# Task 2: its watch killed before the task's shell hears of it (scancel
# signals every process of a task, in no set order): the shell, woken by
# the watch's death, still cancels the tuning job.
job_reaches 2 running 300 || fail "task 2 never started tuning: $(tiletune jobs --all 2>&1)"
pkill -TERM -f "tiletune watch 2\$" || fail "no watch of task 2 to kill"
job_reaches 2 cancelled 100 ||
    fail "a task whose watch died left the daemon's job running: $(tiletune jobs --all 2>&1)"
wait_slurm "$array" "$merge"
[ "$(job_state "$merge")" = FAILED ] || fail "merge after cancelled tasks ended $(job_state "$merge")"
[ -e "$tmp/run2/table.json" ] && fail "a merge with missing shards wrote table.json"
grep -q "shards 1 2 of 2 are missing" "$tmp/run2"/tiletune-merge-*.out || fail "the merge did not name the missing shards"
echo "ok   cancelled tasks (scancel; a watch killed first): their tuning jobs cancelled, the merge ran and refused"

# ---- 3. a damaged shard ---------------------------------------------------------------
mkdir -p "$tmp/run3/99" && cd "$tmp/run3" || exit 1
cp "$tmp/run1/$(ls "$tmp/run1" | grep -E '^[0-9]+$' | head -n 1)"/shard-*.json "$tmp/run3/99/"
# one flipped digit in a record of shard 2: still JSON, the checksum fails
sed -i '2s/"reps":20/"reps":21/' "$tmp/run3/99/shard-2-of-3.json"
merge=$(TILETUNE_OUT="$tmp/run3" SHARDS=3 ARRAY_JOB=99 sbatch --parsable "$contrib/merge.sbatch") || fail "sbatch merge"
wait_slurm "$merge"
[ "$(job_state "$merge")" = FAILED ] || fail "merge of a damaged shard ended $(job_state "$merge")"
[ -e "$tmp/run3/table.json" ] && fail "a damaged shard still gave a table.json"
grep -q "checksum" "$tmp/run3"/tiletune-merge-*.out || fail "the merge did not say why"
echo "ok   a damaged shard: nothing imported, no table"
