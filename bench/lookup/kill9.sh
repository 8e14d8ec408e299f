#!/usr/bin/env bash
# kill -9 during imports and job bursts, RUNS times: after each kill the
# daemon must start again on the database it left (its WAL recovered, not
# refused), the file must pass PRAGMA integrity_check, and the import must
# be all there or not at all (RECORDS winners of the import GPU, or none).
#
#   bench/lookup/kill9.sh                  # release build in build-release/
#   RUNS=100 RECORDS=20000 bench/lookup/kill9.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-100}
RECORDS=${RECORDS:-20000}
# the kill lands uniformly in 0.05..KILL_AFTER_MAX s after the import starts
# shellcheck source=bench/lookup/common.sh
source "$ROOT/bench/lookup/common.sh"
command -v sqlite3 >/dev/null || { echo "kill9.sh: needs sqlite3" >&2; exit 1; }

T=$(mktemp -d /tmp/tt-kill9.XXXXXX)
DPID=
cleanup() {
  [ -n "$DPID" ] && kill -9 "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null || true
  rm -rf "$T"
}
trap cleanup EXIT
start() {
  "$DAEMON" --socket "$T/s" --db "$T/tt.db" --worker "" --log-level warn 2>>"$T/log" &
  DPID=$!
  for _ in $(seq 200); do
    "$CLI" --socket "$T/s" --timeout 200 ping >/dev/null 2>&1 && return 0
    kill -0 "$DPID" 2>/dev/null || break
    sleep 0.05
  done
  echo "kill9.sh: the daemon did not start again:" >&2
  tail -3 "$T/log" >&2
  return 1
}

# the table to import: the seeded extra records of the import GPU
"$BENCH" seed "$T/src.db" "$RECORDS" >/dev/null
cp "$T/src.db" "$T/tt.db"
start
IMPGPU=$(sqlite3 "$T/tt.db" "SELECT fingerprint FROM gpu WHERE name = 'import GPU'")
python3 - "$T/s" "$IMPGPU" "$T/table" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile("rb")
s.sendall(f"EXPORT gpu={sys.argv[2]}\n".encode())
head = f.readline(); n = int(head.split(b"lines=")[1].split()[0])
open(sys.argv[3], "wb").write(b"".join(f.readline() for _ in range(n)))
PY
kill "$DPID"; wait "$DPID" || true
# the target: the same database without the import GPU's winners
sqlite3 "$T/tt.db" "DELETE FROM best WHERE gpu = '$IMPGPU'"
count() { sqlite3 "$T/tt.db" "SELECT count(*) FROM best WHERE gpu = '$IMPGPU'"; }

ok=0 whole=0 none=0
for run in $(seq "$RUNS"); do
  start
  python3 - "$T/s" "$T/table" <<'PY' &
import socket, sys, threading
def tune():
    try:
        t = socket.socket(socket.AF_UNIX); t.connect(sys.argv[1]); g = t.makefile("rb")
        for i in range(200):
            t.sendall(f"TUNE dtype=fp16,bf16 hdim=64,128 seqlen={128 + i} mode=fast\n".encode()); g.readline()
    except OSError:
        pass  # the kill
threading.Thread(target=tune, daemon=True).start()
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
body = open(sys.argv[2], "rb").read()
n = body.count(b"\n")
try:
    s.sendall(f"IMPORT policy=faster lines={n}\n".encode() + body)
    s.makefile("rb").readline()
except OSError:
    pass
PY
  CPID=$!
  sleep "$(python3 -c "import random; print(random.uniform(0.05, ${KILL_AFTER_MAX:-2.0}))")"
  kill -9 "$DPID"; wait "$DPID" 2>/dev/null || true
  wait "$CPID" 2>/dev/null || true
  start || { echo "run $run: FAILED to restart"; exit 1; }
  ic=$(sqlite3 "$T/tt.db" "PRAGMA integrity_check")
  n=$(count)
  if [ "$ic" != ok ] || { [ "$n" != 0 ] && [ "$n" != "$RECORDS" ]; }; then
    echo "run $run: FAILED integrity=$ic winners=$n of $RECORDS"
    exit 1
  fi
  [ "$n" = 0 ] && none=$((none + 1)) || whole=$((whole + 1))
  ok=$((ok + 1))
  kill "$DPID"; wait "$DPID" || true
  DPID=
  sqlite3 "$T/tt.db" "DELETE FROM best WHERE gpu = '$IMPGPU'"
done
echo "kill9 runs=$RUNS restarted_intact=$ok import_whole=$whole import_none=$none records=$RECORDS" \
  "(none: killed before the import committed)"
