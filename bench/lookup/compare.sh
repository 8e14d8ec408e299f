#!/usr/bin/env bash
# Lookup service before and after a change, in the same run: two tiletuned
# builds (A, B), each on its own socket and seeded database, driven in turn
# by B's tt_lookup_bench at the same concurrency, RUNS times; prints the
# medians of each and B/A.
#
#   bench/lookup/compare.sh BUILD_A BUILD_B        # e.g. a release build of
#                                                  # the old revision and of HEAD
#   RUNS=7 REQUESTS=100000 CLIENTS="1 64" bench/lookup/compare.sh A B
set -euo pipefail
A=$(cd "$1" && pwd)
B=$(cd "$2" && pwd)
RUNS=${RUNS:-5}
REQUESTS=${REQUESTS:-100000}
CLIENTS=${CLIENTS:-"1 8 64"}
find_bin() { find "$1" -name "$2" -type f -perm -u+x | head -1; }
BENCH=$(find_bin "$B" tt_lookup_bench)
T=$(mktemp -d /tmp/tt-lookup-compare.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  rm -rf "$T"
}
trap cleanup EXIT
for side in A B; do
  build=${!side}
  "$(find_bin "$build" tt_lookup_bench)" seed "$T/$side.db" >/dev/null
  TILETUNED_CONFIG=/dev/null "$(find_bin "$build" tiletuned)" --socket "$T/$side.sock" --db "$T/$side.db" \
    --worker "" --log-level warn 2>"$T/$side.log" &
  pids+=($!)
  for _ in $(seq 100); do
    "$(find_bin "$build" tiletune)" --socket "$T/$side.sock" ping >/dev/null 2>&1 && break
    sleep 0.05
  done
done
RES=$T/results
: >"$RES"
for run in $(seq "$RUNS"); do
  for c in $CLIENTS; do
    for side in A B; do
      echo "side=$side $("$BENCH" socket "$T/$side.sock" "$c" "$REQUESTS")" | tee -a "$RES"
    done
  done
done
python3 - "$RES" <<'EOF'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=([\w.]+)", line))
    rows.setdefault((int(f["clients"]), f["side"]), []).append((float(f["rps"]), float(f["p99_us"])))
print("| clients | A req/s | B req/s | B/A | A p99 µs | B p99 µs | B/A |")
print("|--:|--:|--:|--:|--:|--:|--:|")
for c in sorted({k[0] for k in rows}):
    a, b = rows[(c, "A")], rows[(c, "B")]
    ra, rb = statistics.median(x[0] for x in a), statistics.median(x[0] for x in b)
    pa, pb = statistics.median(x[1] for x in a), statistics.median(x[1] for x in b)
    print(f"| {c} | {ra:,.0f} | {rb:,.0f} | {rb / ra:.3f} | {pa:.1f} | {pb:.1f} | {pb / pa:.3f} |")
EOF
