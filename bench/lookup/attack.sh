#!/usr/bin/env bash
# Lookups under attack: tiletuned serving the lookup benchmark's mix while
# an unprivileged local user (uid 65534, through setpriv) tries what
# bench/lookup/attacker.py does. For each attack it prints the lookup
# latency (tt_lookup_bench socket, CLIENTS connections), and what the
# attack got. Needs root (setpriv), python3.
#
#   bench/lookup/attack.sh                      # release build in build-release/
#   BIN=/path/to/build bench/lookup/attack.sh   # another build's binaries
#   LABEL=before RECORDS=55000 bench/lookup/attack.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SEEDER=${SEEDER:-}
LABEL=${LABEL:-$(git -C "$ROOT" rev-parse --short HEAD)}
RECORDS=${RECORDS:-55000}
CLIENTS=${CLIENTS:-8}
REQUESTS=${REQUESTS:-20000}
RUNS=${RUNS:-3} # bench runs per attack; the line with the median p99 is printed
ATTACKS=${ATTACKS:-"idle hold-export loop-export slots refuse-flood garbage"}

[ "$(id -u)" = 0 ] || { echo "attack.sh: run as root (attackers run as uid 65534)" >&2; exit 1; }
# shellcheck source=bench/lookup/common.sh
source "$ROOT/bench/lookup/common.sh"
SEEDER=${SEEDER:-$BENCH}

T=$(mktemp -d /tmp/tt-attack.XXXXXX)
chmod 755 "$T"
DPID= APID=
cleanup() {
  [ -n "$APID" ] && kill "$APID" 2>/dev/null && wait "$APID" 2>/dev/null || true
  [ -n "$DPID" ] && kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null || true
  rm -rf "$T"
}
trap cleanup EXIT

"$SEEDER" seed "$T/tt.db" "$RECORDS" >/dev/null
start_daemon() {
  "$DAEMON" --socket "$T/tt.sock" --db "$T/tt.db" --worker "" --log-level info 2>>"$T/daemon.log" &
  DPID=$!
  for _ in $(seq 100); do "$CLI" --socket "$T/tt.sock" --timeout 200 ping >/dev/null 2>&1 && break; sleep 0.1; done
  chmod 666 "$T/tt.sock"
}
rss() { awk '/VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$DPID/status"; }
PY=${PY:-/usr/bin/python3}
# exec: backgrounded, $! is then the attacker itself, which reports its
# counts on SIGTERM
as_nobody() { exec setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

# each attack against a fresh daemon: what one leaves behind (a loop
# still busy, memory held) is not counted against the next
for attack in $ATTACKS; do
  start_daemon
  APID=
  before_refused=$(grep -c "refused" "$T/daemon.log" || true)
  case $attack in
    idle) ;;
    hold-export) as_nobody "$PY" "$ROOT/bench/lookup/attacker.py" "$T/tt.sock" hold-export 40 >"$T/att" & APID=$! ;;
    loop-export) as_nobody "$PY" "$ROOT/bench/lookup/attacker.py" "$T/tt.sock" loop-export >"$T/att" & APID=$! ;;
    slots) as_nobody "$PY" "$ROOT/bench/lookup/attacker.py" "$T/tt.sock" slots 1100 >"$T/att" & APID=$! ;;
    refuse-flood) as_nobody "$PY" "$ROOT/bench/lookup/attacker.py" "$T/tt.sock" refuse-flood 200000 >"$T/att" & APID=$! ;;
    garbage) as_nobody "$PY" "$ROOT/bench/lookup/attacker.py" "$T/tt.sock" garbage 200000 >"$T/att" & APID=$! ;;
  esac
  SECONDS=0
  sleep 3
  extra=""
  if [ "$attack" = slots ]; then
    # an admin's own request while the attacker holds what it got
    if out=$("$CLI" --socket "$T/tt.sock" --timeout 2000 ping 2>&1); then extra="root_ping=ok"; else extra="root_ping=refused"; fi
  fi
  : >"$T/runs"
  for _ in $(seq "$RUNS"); do
    if l=$(timeout 300 "$BENCH" socket "$T/tt.sock" "$CLIENTS" "$REQUESTS" 2>&1); then
      echo "$l" >>"$T/runs"
    else
      echo "p99_us=inf lookups_failed rc=$? ${l//$'\n'/ }" >>"$T/runs"
    fi
  done
  line=$(awk '{for (i = 1; i <= NF; i++) if ($i ~ /^p99_us=/) {split($i, a, "="); print a[2] "\t" $0}}' "$T/runs" |
    sort -g | awk -F'\t' -v n="$RUNS" 'NR == int((n + 1) / 2) {print $2}')
  extra="$extra rss_mb=$(rss)"
  if [ -n "$APID" ]; then
    kill "$APID" 2>/dev/null || true
    wait "$APID" 2>/dev/null || true
    APID=
    extra="$extra attacker: $(tr '\n' ' ' <"$T/att")"
  fi
  extra="$extra log_refused_lines=$(($(grep -c "refused" "$T/daemon.log" || true) - before_refused))"
  echo "label=$LABEL attack=$attack $line $extra took_s=$SECONDS"
  kill -9 "$DPID" 2>/dev/null || true
  wait "$DPID" 2>/dev/null || true
  DPID=
  rm -f "$T/tt.sock"
  sleep 1
done
