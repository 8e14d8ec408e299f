#!/usr/bin/env bash
# The package as a user installs it: build the wheel from a copy of the
# source tree with pip, offline (--no-build-isolation: the interpreter's own
# setuptools and wheel, as Debian ships them), install it into a fresh
# virtual environment, and run the binding's tests from there against the
# installed package and its bundled libtiletune.so (no TILETUNE_LIB).
#
#   python/tests/wheel_test.sh SOURCE_DIR [PYTHON]
#
# Exit 77 (skipped) when no interpreter has venv, pip, setuptools and wheel,
# except under CI (CI=true), where that is a failure: .ci/run installs them.
set -euo pipefail
src=$(cd "$1" && pwd)
py=""
for cand in ${2:-} /usr/bin/python3 python3; do
    if [ -z "$cand" ] || ! command -v "$cand" >/dev/null; then
        continue
    fi
    if "$cand" -c 'import setuptools, wheel, venv, ensurepip, pip' 2>/dev/null; then
        py=$cand
        break
    fi
done
if [ -z "$py" ]; then
    echo "wheel_test: no python3 with venv, ensurepip, pip, setuptools and wheel" \
         "(Debian: apt-get install python3-venv python3-pip python3-setuptools python3-wheel)"
    [ "${CI:-}" = true ] && exit 1
    exit 77
fi
T=$(mktemp -d /tmp/tt-wheel.XXXXXX)
trap 'rm -rf "$T"' EXIT
echo "wheel_test: $py ($("$py" --version 2>&1)), in $T"

# A copy of the tree without build outputs: what a checkout has.
mkdir "$T/src"
tar -C "$src" --exclude=./.git --exclude='./build' --exclude='./build-*' --exclude='*.egg-info' \
    --exclude=__pycache__ -cf - . | tar -C "$T/src" -xf -

start=$SECONDS
"$py" -m venv --system-site-packages "$T/venv"
export TILETUNE_CMAKE_BUILD_DIR=$T/cmake PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
"$T/venv/bin/python" -m pip wheel -q --no-build-isolation --no-deps -w "$T/dist" "$T/src"
wheel=$(ls "$T"/dist/tiletune-*.whl)
echo "wheel_test: built $(basename "$wheel") ($((SECONDS - start)) s)"
# The listing is read whole first: grep -q closing the pipe early made the
# lister die of a broken pipe under pipefail (a failure only under load).
listing=$("$T/venv/bin/python" -m zipfile -l "$wheel")
grep -q 'tiletune/libtiletune.so' <<<"$listing" ||
    { echo "wheel_test: the wheel has no libtiletune.so"; exit 1; }
"$T/venv/bin/python" -m pip install -q --no-deps "$wheel"

# From elsewhere than the source tree, with nothing pointing at a build.
cd "$T"
unset TILETUNE_LIB PYTHONPATH
export TILETUNE_TEST_INSTALLED=1
"$T/venv/bin/python" -c 'import tiletune, sys; print("wheel_test: tiletune", tiletune.__version__, "from", tiletune.__file__, "library", tiletune.library_path())'
"$T/venv/bin/python" "$src/python/tests/test_binding.py"
rc=0
"$T/venv/bin/python" "$src/python/tests/test_torch_cpu.py" || rc=$?
[ $rc = 0 ] || [ $rc = 77 ] || exit $rc  # 77: no torch in this environment
