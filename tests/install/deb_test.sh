#!/usr/bin/env bash
# deb_test.sh BUILD_DIR PREFIX SBINDIR BINDIR LIBEXECDIR SYSCONFDIR MANDIR DATADIR VERSION
#
# Builds the Debian packages of BUILD_DIR (cpack -G DEB), checks their
# names, dependencies, conffile and contents, extracts them into a clean
# root (dpkg -x) and runs the daemon from there: it must find its worker
# in the libexec directory, and the packaged CLI must talk to it.
set -euo pipefail
build=$1 prefix=$2 sbindir=$3 bindir=$4 libexecdir=$5 sysconfdir=$6 mandir=$7 datadir=$8 version=$9
fail() { echo "FAIL: $*" >&2; exit 1; }
for tool in cpack dpkg-deb dpkg-shlibdeps; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool not installed (apt-get install dpkg-dev)"; exit 77; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tt-deb.XXXXXX")
dpid=
trap '[ -n "$dpid" ] && kill -KILL "$dpid" 2>/dev/null; rm -rf "$tmp"' EXIT

echo "== cpack -G DEB"
(cd "$build" && cpack -G DEB -B "$tmp/out" >"$tmp/cpack.log" 2>&1) || { cat "$tmp/cpack.log"; fail "cpack failed"; }
arch=$(dpkg --print-architecture)
main=$tmp/out/tiletune_${version}_$arch.deb dev=$tmp/out/libtiletune-dev_${version}_$arch.deb
[[ -f $main && -f $dev ]] || { ls "$tmp/out"; fail "expected tiletune_ and libtiletune-dev_ packages"; }
[[ $(dpkg-deb -f "$main" Package) == tiletune ]] || fail "package name"
deps=$(dpkg-deb -f "$main" Depends)
echo "tiletune Depends: $deps"
for d in libuv1 libsqlite3-0 libsystemd0 libjansson4; do
    grep -q "$d" <<<"$deps" || fail "tiletune does not depend on $d"
done
[[ $(dpkg-deb -f "$dev" Depends) == "tiletune (= $version)" ]] || fail "libtiletune-dev must depend on tiletune (= $version)"
dpkg-deb -e "$main" "$tmp/control"
grep -qx "$sysconfdir/tiletune/tiletuned.conf" "$tmp/control/conffiles" || fail "tiletuned.conf is not a conffile"
for s in postinst prerm postrm; do
    [[ -x $tmp/control/$s ]] || fail "no $s"
    sh -n "$tmp/control/$s" || fail "$s does not parse"
done
grep -q systemd-sysusers "$tmp/control/postinst" || fail "postinst does not create the user"

echo "== dpkg -x into a clean root"
root=$tmp/root
dpkg -x "$main" "$root"
dpkg -x "$dev" "$root"
rel() { echo "$root$1"; }
for f in "$prefix/$sbindir/tiletuned" "$prefix/$bindir/tiletune" "$prefix/$libexecdir/tiletune/tiletune-worker" \
         "$prefix/$mandir/man1/tiletune.1" "$prefix/$mandir/man8/tiletuned.8" \
         "$prefix/$datadir/bash-completion/completions/tiletune" "$sysconfdir/tiletune/tiletuned.conf" \
         "$prefix/lib/systemd/system/tiletuned.service" "$prefix/lib/systemd/system/tiletune-metrics.timer" \
         "$prefix/include/tiletune.h"; do
    [[ -e $(rel "$f") ]] || fail "not in the packages: $f"
done
[[ ! -e $(rel "$prefix/$sbindir/tiletune-worker") ]] || fail "the worker is in sbin"
head -1 "$(rel "$prefix/$mandir/man1/tiletune.1")" | grep -q '^\.TH TILETUNE 1' || fail "tiletune.1 is not a man page"
bash -n "$(rel "$prefix/$datadir/bash-completion/completions/tiletune")" || fail "the completion does not parse"
# dpkg -L's view: nothing outside the prefix but /etc's conffile
bad=$(dpkg-deb -c "$main" | awk '$1 !~ /^d/ {print substr($6, 2)}' | grep -v "^$prefix" | grep -v "^$sysconfdir" | grep -v '^/$' || true)
[[ -z $bad ]] || fail "files outside $prefix and $sysconfdir: $bad"

echo "== the packaged daemon, from the root"
daemon=$(rel "$prefix/$sbindir/tiletuned") cli=$(rel "$prefix/$bindir/tiletune")
# the shipped configuration, with an admin group this host has
sed 's/^admin-group = .*/admin-group = root/' "$(rel "$sysconfdir/tiletune/tiletuned.conf")" >"$tmp/tiletuned.conf"
grep -q '^admin-group = root$' "$tmp/tiletuned.conf" || fail "the shipped configuration names no admin group"
sock=$tmp/run/s
mkdir -p "$tmp/run"
"$daemon" --socket "$sock" --db "$tmp/run/db" --cache-dir "$tmp/run/cache" --config "$tmp/tiletuned.conf" \
    --log-level debug 2>"$tmp/daemon.log" &
dpid=$!
for _ in $(seq 100); do
    "$cli" --socket "$sock" ping >/dev/null 2>&1 && break
    kill -0 "$dpid" 2>/dev/null || { cat "$tmp/daemon.log"; fail "the packaged tiletuned exited"; }
    sleep 0.1
done
"$cli" --socket "$sock" status || { cat "$tmp/daemon.log"; fail "the packaged CLI cannot reach the packaged daemon"; }
# the worker it started is the packaged one, found in libexec
for _ in $(seq 100); do grep -q "started worker" "$tmp/daemon.log" && break; sleep 0.1; done
grep -q "started worker $(rel "$prefix/$sbindir")/\.\./$libexecdir/tiletune/tiletune-worker for GPU 0" "$tmp/daemon.log" ||
    { cat "$tmp/daemon.log"; fail "the daemon did not start the worker from $libexecdir/tiletune"; }
out=$("$cli" --socket "$sock" lookup -s 4096 -d 128 -t fp16 --json) || fail "lookup"
grep -q '"match": "default"' <<<"$out" || fail "lookup: $out"
kill -TERM "$dpid"
wait "$dpid" || fail "the packaged daemon did not stop cleanly"
dpid=
echo "PASS"
