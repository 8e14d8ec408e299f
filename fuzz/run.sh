#!/bin/sh
# Builds a fuzzer (clang + libFuzzer + ASan/UBSan, a build of its own) and
# runs it on fuzz/corpus/TARGET for SECONDS (default 60). TARGET: importer
# (default), proto (the daemon's request path), pipe (the worker pipe's
# tables), reply (the client's parser).
#   fuzz/run.sh 30                brief run (what ctest does)
#   fuzz/run.sh 3600 proto        a longer run by hand
# New inputs go to a scratch directory, never into the repository's corpus;
# a crash leaves crash-* in the current directory. Exit 77: no clang or no
# libFuzzer here (ctest reports the test as skipped).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-60}
target=${2:-importer}
case $target in importer | proto | pipe | reply) ;; *) echo "fuzz/run.sh: unknown target $target" >&2; exit 2 ;; esac
build=${TT_FUZZ_BUILD:-$root/build-fuzz}
cc=${TT_FUZZ_CC:-clang}

if ! command -v "$cc" >/dev/null 2>&1; then
    echo "SKIP: $cc not found; the fuzzer needs clang with libFuzzer" >&2
    exit 77
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
    >"$probe/p.c"
if ! "$cc" -fsanitize=fuzzer,address "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then
    echo "SKIP: $cc cannot link -fsanitize=fuzzer (libFuzzer missing)" >&2
    exit 77
fi

cmake -S "$root/fuzz" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target "fuzz_$target" -- -j"$(nproc)" >/dev/null
mkdir -p "$probe/corpus"
# ASan: leaks are findings too; the fuzzer stops at the first one.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
    "$build/fuzz_$target" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 \
    -print_final_stats=1 "$probe/corpus" "$root/fuzz/corpus/$target"
