#!/bin/bash
# tiletune-metrics.service's command, as the timer runs it, against a real
# daemon: the textfile collector's file appears whole, in the exposition
# format, and a failed run (daemon gone) leaves the last file in place.
# usage: textfile.sh BUILD_SYSTEMD_DIR TILETUNED
set -u
dir=$1 daemon=$2
unit=$dir/verify/tiletune-metrics.service
[ -f "$unit" ] || { echo "SKIP: $unit not generated (no CLI target)"; exit 77; }
tmp=$(mktemp -d)
trap 'kill $dpid 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cmd=$(sed -n 's/^ExecStart=//p' "$unit")
[ -n "$cmd" ] || fail "no ExecStart= in $unit"
target=${cmd##* }
# the same command line, writing into the scratch directory
cmd="${cmd% *} $tmp/$(basename "$target")"
"$daemon" --socket "$tmp/s" --db "$tmp/db" --worker "" --config /dev/null 2>"$tmp/log" &
dpid=$!
for _ in $(seq 200); do [ -S "$tmp/s" ] && break; sleep 0.05; done
export TILETUNE_SOCKET=$tmp/s
# shellcheck disable=SC2086
$cmd || fail "'$cmd' failed"
prom=$tmp/tiletune.prom
[ -f "$prom" ] || fail "no $prom"
grep -q '^tiletune_build_info{version="[^"]*",rev="[0-9a-f]*"} 1$' "$prom" || fail "no build_info in $prom"
grep -q '^process_start_time_seconds [0-9]*$' "$prom" || fail "no process_start_time_seconds"
# the exposition format: comments, or name{labels} value
bad=$(grep -vE '^(# (HELP|TYPE) [a-z_]+ .*|[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [-+0-9.eInf]+)$' "$prom")
[ -z "$bad" ] || fail "not exposition format: $bad"
[ "$(stat -c %a "$prom")" = 644 ] || fail "mode $(stat -c %a "$prom"), want 644 (UMask=0022)"
ls "$tmp" | grep -q 'tmp-' && fail "a temporary file was left behind"
before=$(md5sum <"$prom")
kill "$dpid"; wait "$dpid" 2>/dev/null
# shellcheck disable=SC2086
if $cmd 2>/dev/null; then fail "the command succeeded with the daemon gone"; fi
[ "$(md5sum <"$prom")" = "$before" ] || fail "a failed run changed the file"
echo "ok: tiletune-metrics writes $(wc -l <"$prom") lines atomically"
