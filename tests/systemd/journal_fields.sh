#!/bin/bash
# The daemon's events reach the journal with the fields JOB=, KEY= and GPU=.
# A private mount namespace puts a stand-in journald (a datagram socket)
# at /run/systemd/journal/socket; the daemon runs with a fake worker, a
# job is queued, and the datagrams must carry the fields.
# usage: journal_fields.sh TILETUNED FAKE_WORKER
set -u
daemon=$1 worker=$2
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null || ! command -v python3 >/dev/null; then
    echo "SKIP: needs root, unshare and python3 (a private /run for a stand-in journald)"
    exit 77
fi
if [ "${TT_IN_NS:-}" != 1 ]; then
    TT_IN_NS=1 exec unshare -m --propagation private bash "$0" "$@"
fi
mount -t tmpfs tmpfs /run/systemd 2>/dev/null || mount -t tmpfs tmpfs /run || { echo "SKIP: cannot mount a tmpfs"; exit 77; }
mkdir -p /run/systemd/journal
dir=$(mktemp -d)
trap 'kill $dpid $jpid 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
python3 - "$dir/journal" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("/run/systemd/journal/socket")
s.settimeout(30)
with open(sys.argv[1], "ab", buffering=0) as f:
    while True:
        try:
            f.write(s.recv(65536) + b"\n--\n")
        except socket.timeout:
            break
PY
jpid=$!
for _ in $(seq 100); do [ -S /run/systemd/journal/socket ] && break; sleep 0.05; done
JOURNAL_STREAM=1:1 TT_FAKE_WORKER_MODE=gpu "$daemon" --socket "$dir/s" --db "$dir/db" --worker "$worker" \
    --cache-dir "$dir" 2>"$dir/stderr" &
dpid=$!
for _ in $(seq 200); do [ -S "$dir/s" ] && break; sleep 0.05; done
python3 - "$dir/s" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"TUNE dtype=fp16 hdim=64 causal=0 seqlen=256\n")
print(s.makefile().readline().strip())
PY
fail=0
for _ in $(seq 200); do grep -q "MESSAGE=GPU 0: measuring" "$dir/journal" 2>/dev/null && break; sleep 0.05; done
for want in "JOB=1" "GPU=0" "KEY=dtype=fp16 hdim=64 causal=0 seqlen_q=256" "SYSLOG_IDENTIFIER=tiletuned" \
            "MESSAGE=worker for GPU 0 ready"; do
    if ! grep -qF "$want" "$dir/journal"; then
        echo "FAIL: no '$want' in the journal's datagrams"
        fail=1
    fi
done
# the measuring event carries all three fields in one entry
if ! awk 'BEGIN{RS="\n--\n"} /MESSAGE=GPU 0: measuring/ && /JOB=1/ && /GPU=0/ && /KEY=dtype=fp16/ {ok=1} END{exit !ok}' "$dir/journal"; then
    echo "FAIL: the measuring entry lacks JOB=, GPU= or KEY="
    fail=1
fi
if [ $fail != 0 ]; then
    echo "--- datagrams"; cat "$dir/journal"; echo "--- stderr"; cat "$dir/stderr"
    exit 1
fi
echo "ok: JOB=, KEY= and GPU= reach the journal"
