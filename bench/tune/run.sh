#!/usr/bin/env bash
# The tuning pipeline benchmark (numbers in docs/perf.md, "Tuning
# pipeline"). On a GPU node, for each mode: a fresh database, tiletuned with
# the real tiletune-worker, `tiletune tune <grid> --mode M --wait`, timed.
# The cubin cache is shared and starts empty, so the FIRST mode pays the
# compiles (stated in the summary). In each mode the lookup latency is
# sampled three times on the idle daemon before the tune, every 2 s while it
# runs, and three times more on the idle daemon after it (the idle baseline
# moves between moments: p99 32.8 us in one set, 42.9 in another, same
# machine; analyze.py compares against the median of both sets).
#
#   bench/tune/run.sh BUILD OUT [GRID] [MODES] [CAP_S]
#     BUILD  a build directory (tiletuned, tiletune, tiletune-worker, libtiletune, tt_lookup_bench)
#     OUT    where databases, logs, defaults.csv and summary.md go
#     GRID   default (tune --default-grid, 108 keys) or "seqlen=..;hdim=..;dtype=..;causal=.."
#     MODES  "fast exhaustive" (default)
#     CAP_S  give a mode up after this many seconds (default 900); what
#            finished by then stays in its database and the summary says so
set -uo pipefail
build=$(cd "$1" && pwd)
out=$2
grid=${3:-default}
modes=${4:-fast exhaustive}
cap=${5:-900}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
# analyze.py writes the device's defaults here after the tunes; one left
# by an earlier run in OUT would stand in for them
rm -f "$out/defaults.csv"
daemon=$build/src/tuner/tiletuned
cli=$build/src/client/tiletune
lb=$build/bench/lookup/tt_lookup_bench
run=$(mktemp -d /tmp/tt-bench-tune.XXXXXX)
cache=$run/cache
mkdir -p "$cache"
if [[ $grid == default ]]; then
    tune_args=(--default-grid)
else
    IFS=';' read -r -a parts <<<"$grid"
    tune_args=()
    for p in "${parts[@]}"; do tune_args+=("--${p%%=*}" "${p#*=}"); done
fi

for mode in $modes; do
    sock=$run/$mode.sock db=$out/$mode.db log=$out/$mode.log
    rm -f "$db" "$db"-wal "$db"-shm
    [[ -x $lb ]] && "$lb" seed "$db" >/dev/null # a grid of another GPU's winners to look up
    "$daemon" --socket "$sock" --db "$db" --cache-dir "$cache" --worker-timeout 300 --log-level info \
        2>"$log" &
    dpid=$!
    for _ in $(seq 100); do "$cli" --socket "$sock" ping >/dev/null 2>&1 && break; sleep 0.1; done
    for _ in $(seq 300); do "$cli" --socket "$sock" status | grep -q '^gpus *[1-9]' && break; sleep 0.1; done
    if [[ -x $lb ]]; then
        for _ in 1 2 3; do "$lb" socket "$sock" 4 100000 | sed "s/^/idle-before-$mode: /" >>"$out/lookup.txt"; done
    fi
    t0=$(date +%s.%N)
    timeout "$cap" "$cli" --socket "$sock" tune "${tune_args[@]}" --mode "$mode" --wait >"$out/$mode.progress" 2>&1 &
    tpid=$!
    if [[ -x $lb ]]; then # samples all through the tune: compiles early, timing later
        sleep 1
        while kill -0 $tpid 2>/dev/null; do
            "$lb" socket "$sock" 4 100000 | sed "s/^/tuning-$mode: /" >>"$out/lookup.txt"
            sleep 2
        done
    fi
    wait $tpid
    rc=$?
    t1=$(date +%s.%N)
    echo "mode=$mode rc=$rc wall_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" | tee -a "$out/wall.txt"
    # The daemon is idle again once `tune --wait` returned done; a capped
    # tune (rc != 0) leaves it tuning, and those samples would not be idle.
    if [[ -x $lb && $rc -eq 0 ]]; then
        for _ in 1 2 3; do "$lb" socket "$sock" 4 100000 | sed "s/^/idle-after-$mode: /" >>"$out/lookup.txt"; done
    fi
    "$cli" --socket "$sock" jobs --all >>"$out/$mode.progress" 2>&1
    kill -TERM $dpid
    wait $dpid
done
# analyze.py compares configs through libtiletune and asks it for the
# device's built-in defaults (written to OUT/defaults.csv)
TILETUNE_LIB=${TILETUNE_LIB:-$build/src/client/libtiletune.so} python3 "$here/analyze.py" "$out" |
    tee "$out/summary.md"
rm -rf "$run"
