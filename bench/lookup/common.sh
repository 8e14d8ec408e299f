# Sourced by the lookup benchmark's scripts: BIN (default build-release,
# built here) and the binaries DAEMON, CLI, BENCH found in it.
BIN=${BIN:-$ROOT/build-release}
if [ "$BIN" = "$ROOT/build-release" ]; then
  [ -f "$BIN/CMakeCache.txt" ] || cmake -S "$ROOT" -B "$BIN" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C "$BIN" tiletuned tiletune_cli tt_lookup_bench >/dev/null
fi
DAEMON=$(find "$BIN" -name tiletuned -type f -perm -u+x | head -1)
CLI=$(find "$BIN" -name tiletune -type f -perm -u+x | head -1)
BENCH=$(find "$BIN" -name tt_lookup_bench -type f -perm -u+x | head -1)
