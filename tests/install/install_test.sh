#!/usr/bin/env bash
# install_test.sh BUILD_DIR SRC_DIR CC LIBDIR SOVERSION EXPECT SANFLAGS BINDIR SBINDIR
#
# Installs the build tree BUILD_DIR into a temporary prefix, checks the
# files are there, then builds tests/install/consumer.c against that prefix
# twice -- CMake find_package(tiletune) and pkg-config -- runs both,
# checks the library's ELF exports and soname, and runs the installed
# daemon and CLI against each other.
set -euo pipefail

build=$1 src=$2 cc=$3 libdir=$4 soversion=$5 expect=$6 san=$7 bindir=$8 sbindir=$9
cmake=${CMAKE:-cmake}
pkgconfig=${PKG_CONFIG:-pkg-config}
nm=${NM:-nm}
objdump=${OBJDUMP:-objdump}

fail() { echo "FAIL: $*" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tt-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

echo "== cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" ||
    { cat "$tmp/install.log"; fail "cmake --install failed"; }

IFS=: read -r -a files <<<"$expect"
for f in "${files[@]}"; do
    [[ -e $prefix/$f ]] || fail "not installed: $f"
done
echo "installed: ${#files[@]} expected files present"

lib=$prefix/$libdir/libtiletune.so
[[ -L $lib ]] || fail "$lib is not the development symlink"

echo "== soname"
soname=$("$objdump" -p "$lib" | awk '$1 == "SONAME" { print $2 }')
echo "SONAME $soname"
[[ $soname == "libtiletune.so.$soversion" ]] || fail "soname is '$soname', want libtiletune.so.$soversion"

echo "== exports"
# Type A entries are the version nodes of the version script (TILETUNE_x.y).
bad=$("$nm" -D --defined-only "$lib" |
      awk '$2 == "A" && $3 ~ /^TILETUNE_/ { next }
           { sub(/@.*/, "", $3); if ($3 !~ /^tt_[a-z]/) print $3 }')
[[ -z $bad ]] || fail "exports outside the tt_ API: $bad"
n=$("$nm" -D --defined-only "$lib" | grep -c ' T tt_') || true
(( n > 0 )) || fail "no tt_ functions exported"
echo "$n tt_ functions exported, nothing else"

# The socket does not exist: the lookups must fall back.
nosock=$tmp/no-such-dir/tiletune.sock

check_output() { # name file
    local out=$2
    cat "$out"
    grep -qx "version=[0-9]*\.[0-9]*\.[0-9]*" "$out" || fail "$1: no version line"
    grep -qx "default=family=[a-z]*,block_m=[0-9]*,.*" "$out" || fail "$1: no default config"
    grep -qx "lookup=fallback match=default" "$out" || fail "$1: lookup did not fall back"
    grep -qx "strerror=..*" "$out" || fail "$1: no strerror text"
}

echo "== CMake: find_package(tiletune) -> tiletune::tiletune"
gen=()
[[ -n ${GENERATOR:-} ]] && gen=(-G "$GENERATOR")
[[ -n ${MAKE_PROGRAM:-} ]] && gen+=(-DCMAKE_MAKE_PROGRAM="$MAKE_PROGRAM")
"$cmake" -S "$src/consumer" -B "$tmp/cmake-build" "${gen[@]}" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
    -DCMAKE_C_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" >"$tmp/cmake.log" 2>&1 ||
    { cat "$tmp/cmake.log"; fail "configuring the find_package consumer failed"; }
found=$(sed -n 's/^tiletune_DIR:PATH=//p' "$tmp/cmake-build/CMakeCache.txt")
[[ $found == "$prefix/"* ]] || fail "find_package found '$found', not the temporary prefix"
"$cmake" --build "$tmp/cmake-build" >"$tmp/build.log" 2>&1 ||
    { cat "$tmp/build.log"; fail "building the find_package consumer failed"; }
# CMake's build RPATH points at the imported library: check it is ours.
# (Into a variable first: grep -q would close the pipe on ldd, and
# pipefail would turn its SIGPIPE into a failure.)
libs=$(ldd "$tmp/cmake-build/consumer")
grep -qF "$prefix/$libdir/libtiletune.so.$soversion" <<<"$libs" ||
    { echo "$libs"; fail "find_package consumer does not load the installed library"; }
"$tmp/cmake-build/consumer" "$nosock" >"$tmp/out-cmake" || fail "find_package consumer exited $?"
check_output cmake "$tmp/out-cmake"

echo "== pkg-config --cflags --libs tiletune"
export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
export PKG_CONFIG_LIBDIR=$PKG_CONFIG_PATH # only ours, never a system copy
"$pkgconfig" --modversion tiletune
flags=$("$pkgconfig" --cflags --libs tiletune) || fail "pkg-config does not know tiletune"
echo "flags: $flags"
# shellcheck disable=SC2086 # the flags are words
"$cc" $san -o "$tmp/consumer-pc" "$src/consumer.c" $flags || fail "building the pkg-config consumer failed"
LD_LIBRARY_PATH=$prefix/$libdir "$tmp/consumer-pc" "$nosock" >"$tmp/out-pc" ||
    fail "pkg-config consumer exited $?"
check_output pkg-config "$tmp/out-pc"
cmp -s "$tmp/out-cmake" "$tmp/out-pc" || fail "the two consumers disagree"

# The README's C example builds against the installed package and runs
# (it opens and closes a client; the kernel call is commented out there).
readme=$src/../../README.md
if [[ -f $readme ]]; then
    echo "== README.md's C example"
    awk '/^```c$/ { f = 1; next } /^```$/ { f = 0 } f' "$readme" >"$tmp/readme.c"
    [[ -s $tmp/readme.c ]] || fail "README.md has no \`\`\`c example"
    # shellcheck disable=SC2086 # the flags are words
    "$cc" -std=c11 -Wall -Wextra -Werror $san -o "$tmp/readme" "$tmp/readme.c" $flags ||
        fail "README.md's C example does not build against the installed package"
    TILETUNE_SOCKET=$nosock LD_LIBRARY_PATH=$prefix/$libdir "$tmp/readme" ||
        fail "README.md's C example exited $?"
    echo "builds with -Wall -Wextra -Werror and runs"
fi

# The installed Python package loads the installed library (python3 cannot
# load an ASan-instrumented one).
pkg=$prefix/share/tiletune/python
if [[ -f $pkg/tiletune/__init__.py && -z $san ]] && command -v python3 >/dev/null; then
    echo "== installed Python package"
    out=$(PYTHONPATH=$pkg TILETUNE_LIB=$prefix/$libdir/libtiletune.so.$soversion python3 -c '
import tiletune
print(tiletune.library_path())
print(tiletune.default_config(head_dim=128, dtype="fp16", causal=True, seqlen_q=4096))') ||
        fail "the installed Python package does not load"
    echo "$out"
    [[ $(sed -n 2p <<<"$out") == "$(sed -n 's/^default=//p' "$tmp/out-pc")" ]] ||
        fail "Python's default config differs from C's"
fi

# The installed daemon and CLI run from the prefix (no build-tree RPATH
# left behind) and talk to each other.
daemon=$prefix/$sbindir/tiletuned cli=$prefix/$bindir/tiletune
if [[ -x $daemon && -x $cli ]]; then
    echo "== installed tiletuned + tiletune"
    "$daemon" --version || fail "installed tiletuned --version failed"
    "$cli" --version || fail "installed tiletune --version failed"
    sock=$tmp/run/tiletune.sock
    mkdir -p "$tmp/run"
    "$daemon" --socket "$sock" --db "$tmp/run/tiletune.db" --cache-dir "$tmp/run/cache" \
        --worker "" --log-level warn 2>"$tmp/daemon.log" &
    dpid=$!
    trap 'kill -KILL "$dpid" 2>/dev/null || true; rm -rf "$tmp"' EXIT
    for _ in $(seq 100); do
        "$cli" --socket "$sock" ping >/dev/null 2>&1 && break
        kill -0 "$dpid" 2>/dev/null || { cat "$tmp/daemon.log"; fail "installed tiletuned exited"; }
        sleep 0.1
    done
    "$cli" --socket "$sock" ping || { cat "$tmp/daemon.log"; fail "installed tiletune cannot ping it"; }
    "$cli" --socket "$sock" lookup --dtype fp16 --hdim 128 --seqlen 4096 --causal --json >"$tmp/lookup.json" ||
        fail "installed tiletune lookup failed"
    cat "$tmp/lookup.json"
    grep -q '"match": *"default"' "$tmp/lookup.json" || fail "lookup from an empty database is not match=default"
    kill -TERM "$dpid"
    wait "$dpid" || true
fi
echo "PASS"
