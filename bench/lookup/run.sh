#!/usr/bin/env bash
# The lookup service benchmark: tiletuned against redis-server on this
# machine, in the same run, at the same concurrency, then the in-process
# cost of a libtiletune cache hit. Writes the medians into docs/perf.md,
# between the markers of its "Lookup service" section.
#
#   bench/lookup/run.sh                 # release build in build-release/
#   RUNS=7 REQUESTS=200000 bench/lookup/run.sh
#   NO_DOC=1 bench/lookup/run.sh        # print only
#
# Both servers get the same load shape: CLIENTS connections driven by one
# event-loop thread, one request in flight per connection (redis-benchmark's
# default, no -P pipelining). Runs alternate tiletuned and redis at each
# concurrency so that machine noise hits both alike.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-release}
RUNS=${RUNS:-5}
REQUESTS=${REQUESTS:-100000}
CLIENTS=${CLIENTS:-"1 8 64"}
CACHE_ITERS=${CACHE_ITERS:-20000000}
# Threads hitting one client at once; past the core count they time-share.
CACHE_THREADS=${CACHE_THREADS:-1,2,8}
DOC=${DOC:-$ROOT/docs/perf.md}

for tool in redis-server redis-benchmark redis-cli python3 cmake ninja; do
  command -v "$tool" >/dev/null || { echo "run.sh: needs $tool" >&2; exit 1; }
done

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
ninja -C "$BUILD" tiletuned tiletune_cli tt_lookup_bench >/dev/null
DAEMON=$(find "$BUILD" -name tiletuned -type f -perm -u+x | head -1)
CLI=$(find "$BUILD" -name tiletune -type f -perm -u+x | head -1)
BENCH=$(find "$BUILD" -name tt_lookup_bench -type f -perm -u+x | head -1)

T=$(mktemp -d /tmp/tt-lookup-bench.XXXXXX)
DPID= RPID=
cleanup() {
  [ -n "$DPID" ] && kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null || true
  [ -n "$RPID" ] && kill "$RPID" 2>/dev/null && wait "$RPID" 2>/dev/null || true
  rm -rf "$T"
}
trap cleanup EXIT

"$BENCH" seed "$T/tt.db" >/dev/null
"$DAEMON" --socket "$T/tt.sock" --db "$T/tt.db" --log-level warn 2>"$T/daemon.log" &
DPID=$!
redis-server --port 0 --unixsocket "$T/redis.sock" --unixsocketperm 700 --save '' \
  --appendonly no --logfile "$T/redis.log" &
RPID=$!
for _ in $(seq 100); do
  "$CLI" --socket "$T/tt.sock" --timeout 200 ping >/dev/null 2>&1 &&
    redis-cli -s "$T/redis.sock" ping >/dev/null 2>&1 && break
  sleep 0.05
done
"$CLI" --socket "$T/tt.sock" ping >/dev/null
# A value as long as a LOOKUP reply (~130 bytes), under the key
# redis-benchmark's GET asks for without -r.
redis-cli -s "$T/redis.sock" set 'key:__rand_int__' "$(printf 'x%.0s' $(seq 130))" >/dev/null

RES=$T/results
: >"$RES"
for run in $(seq "$RUNS"); do
  for c in $CLIENTS; do
    line=$("$BENCH" socket "$T/tt.sock" "$c" "$REQUESTS")
    echo "run=$run server=tiletuned $line" | tee -a "$RES"
    csv=$(redis-benchmark -s "$T/redis.sock" -t get -c "$c" -n "$REQUESTS" --csv | grep '^"GET"')
    # "GET","rps","avg_ms","min_ms","p50_ms","p95_ms","p99_ms","max_ms"
    echo "$csv" | tr -d '"' | awk -F, -v run="$run" -v c="$c" '{
      printf "run=%s server=redis socket clients=%s requests=%s rps=%s p50_us=%.1f p99_us=%.1f\n",
             run, c, '"$REQUESTS"', $2, $5 * 1000, $7 * 1000 }' | tee -a "$RES"
  done
  line=$("$BENCH" cache "$T/tt.sock" "$CACHE_ITERS" "$CACHE_THREADS")
  echo "run=$run server=libtiletune $line" | tee -a "$RES"
done

python3 - "$RES" "$DOC" "$RUNS" "$REQUESTS" "${NO_DOC:-}" <<'EOF'
import os, platform, re, statistics, subprocess, sys, time
res, doc, runs, requests, no_doc = sys.argv[1:6]
rows = []
for line in open(res):
    rows.append(dict(kv.split("=", 1) for kv in line.split() if "=" in kv))
def med(server, clients, field):
    v = [float(r[field]) for r in rows if r.get("server") == server and r.get("clients") == clients]
    return statistics.median(v) if v else float("nan")
clients = sorted({r["clients"] for r in rows if "clients" in r}, key=int)
cpu = "unknown CPU"
for l in open("/proc/cpuinfo"):
    if l.startswith("model name"):
        cpu = l.split(":", 1)[1].strip()
        break
hit = statistics.median(float(r["hit_ns"]) for r in rows if r.get("server") == "libtiletune")
cache_rows = [r for r in rows if r.get("server") == "libtiletune"]
multi = sorted({int(k[len("hit_ns_"):-len("threads")]) for r in cache_rows for k in r
                if k.startswith("hit_ns_") and k.endswith("threads")})
hit_n = {n: statistics.median(float(r[f"hit_ns_{n}threads"]) for r in cache_rows) for n in multi}
out = []
out.append(f"Measured {time.strftime('%Y-%m-%d')} by `bench/lookup/run.sh` on {os.cpu_count()} cores "
           f"({cpu}), Linux {platform.release()}, release build; medians of {runs} runs of "
           f"{requests} requests per server and concurrency. redis: "
           f"{subprocess.run(['redis-server', '--version'], capture_output=True, text=True).stdout.split()[2]}, "
           "`redis-benchmark -t get -s SOCKET -c N -n REQUESTS` against `redis-server --port 0 "
           "--unixsocket SOCKET`. tiletuned: `tt_lookup_bench socket` (a mix of exact and nearest "
           "LOOKUPs over 108 tuned keys), the same load shape.")
out.append("")
out.append("| clients | tiletuned req/s | redis GET req/s | tiletuned p50 µs | redis p50 µs | tiletuned p99 µs | redis p99 µs |")
out.append("|--:|--:|--:|--:|--:|--:|--:|")
for c in clients:
    out.append(f"| {c} | {med('tiletuned', c, 'rps'):,.0f} | {med('redis', c, 'rps'):,.0f} | "
               f"{med('tiletuned', c, 'p50_us'):.1f} | {med('redis', c, 'p50_us'):.1f} | "
               f"{med('tiletuned', c, 'p99_us'):.1f} | {med('redis', c, 'p99_us'):.1f} |")
out.append("")
ncpu = os.cpu_count()
shared = "; ".join(f"{hit_n[n]:.1f} ns with {n} threads" + (" (more threads than cores: they time-share)"
                                                          if n > ncpu else "") for n in multi)
out.append(f"In-process cache hit (`tt_lookup` answered by libtiletune's cache, through the shared "
           f"library's PLT, counters included): **{hit:.1f} ns** with one thread"
           + (f"; per call with threads sharing one client: {shared}." if shared else "."))
out.append("")
top = clients[-1] if clients else None
if top:
    ok_rps = med('tiletuned', top, 'rps') >= med('redis', top, 'rps')
    ok_p99 = med('tiletuned', top, 'p99_us') <= med('redis', top, 'p99_us')
    out.append(f"Targets at {top} clients: throughput >= redis: **{'met' if ok_rps else 'missed'}**; "
               f"p99 <= redis: **{'met' if ok_p99 else 'missed'}**. Cache hit <= 50 ns up to "
               f"{ncpu} threads: **{'met' if max([hit] + [hit_n[n] for n in multi if n <= ncpu]) <= 50 else 'missed'}**.")
text = "\n".join(out)
print("\n" + text)
if no_doc:
    sys.exit(0)
begin, end = "<!-- lookup-bench:begin -->", "<!-- lookup-bench:end -->"
body = open(doc).read() if os.path.exists(doc) else "# Performance log\n"
block = f"{begin}\n{text}\n{end}"
if begin in body and end in body:
    body = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda m: block, body, flags=re.S)
elif "## Lookup service" in body:
    body = body.replace("## Lookup service\n", "## Lookup service\n\n" + block + "\n", 1)
else:
    body = body.rstrip("\n") + "\n\n## Lookup service\n\n" + block + "\n"
open(doc, "w").write(body)
print(f"\nwrote {doc}")
EOF
