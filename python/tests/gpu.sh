#!/usr/bin/env bash
# The binding on a GPU machine with torch, in one command: build the wheel
# (libtiletune through CMake), install it into a fresh target directory, and
# from there run the binding's tests (torch on CUDA: semantics in float64,
# torch.compile fullgraph, CUDA graphs, the switch under transformer
# blocks, TILETUNE_LOG; and the CPU ones), then the host-overhead bench.
#
#   python/tests/gpu.sh            # log and results also under $OUT if set
#   TT_GPU_PYTEST_ARGS='-k "not every_variant"' python/tests/gpu.sh   (the default)
#
# The machine's python3 is itself a virtual environment holding torch, so
# the wheel goes into a --target directory on PYTHONPATH rather than into a
# new venv (which would not see that torch).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/out}
mkdir -p "$out"
T=$(mktemp -d /tmp/tt-gpu.XXXXXX)
export PYTHONUNBUFFERED=1
status=0
step() { echo; echo "==== $*"; }
{
    step "environment"
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
    step "build the wheel"
    start=$SECONDS
    TILETUNE_CMAKE_BUILD_DIR=$root/build-wheel-gpu CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=90" \
        python3 -m pip wheel -q --no-build-isolation --no-deps --no-index -w "$T/dist" "$root" || exit 1
    python3 -m pip install -q --no-deps --no-index --target "$T/site" "$T"/dist/tiletune-*.whl || exit 1
    echo "built and installed $(basename "$T"/dist/*.whl) in $((SECONDS - start)) s"
    export PYTHONPATH=$T/site TILETUNE_TEST_INSTALLED=1 TILETUNE_SOCKET=/nonexistent/tiletune.sock
    unset TILETUNE_LIB
    cd "$T" || exit 1
    python3 -c 'import tiletune; print("tiletune", tiletune.__version__, tiletune.__file__, tiletune.library_path())'
    step "tests"
    eval "set -- ${TT_GPU_PYTEST_ARGS:--k 'not every_variant'}"
    timeout 360 python3 -m pytest -q -rs -p no:cacheprovider "$root/python/tests/test_torch_gpu.py" \
        "$root/python/tests/test_sdpa_gpu.py" "$root/python/tests/test_torch_cpu.py" \
        "$root/python/tests/test_binding.py" "$@" || status=1
    step "host overhead (bench/python_overhead.py)"
    timeout 90 python3 "$root/bench/python_overhead.py" || status=1
    step "done: $([ $status = 0 ] && echo passed || echo FAILED)"
    exit $status
} 2>&1 | tee "$out/python-gpu.log"
status=${PIPESTATUS[0]}
rm -rf "$T"
exit "$status"
