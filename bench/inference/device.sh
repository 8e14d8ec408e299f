#!/usr/bin/env bash
# bench/inference/device.sh: the inference kernels on a GPU machine in one command, from
# the repository root (carry [".device"]): build libtiletune, check family
# splitkv against torch in float64 (tests/gpu/test_inference_gpu.py), then
# time it against torch's backends (bench/inference/decode.py).
#   TEST_S=seconds BENCH_S=seconds QUICK=1 bash bench/inference/device.sh
set -uo pipefail
source .device/setup.sh
out=${OUT:-/tmp/tt-out}
mkdir -p "$out"
t0=$SECONDS
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
 ninja -C build-gpu libtiletune) >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
echo "build: $((SECONDS - t0)) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
export TILETUNE_LIB=$PWD/build-gpu/src/client/libtiletune.so TILETUNE_SOCKET=/nonexistent/tiletune.sock
export TILETUNE_CACHE_DIR=$PWD/build-gpu/cubins PYTHONUNBUFFERED=1
if [ "${TEST_S:-150}" != 0 ]; then
  TT_QUICK=${QUICK:-1} timeout "${TEST_S:-150}" python3 tests/gpu/test_inference_gpu.py >"$out/test.log" 2>&1
  echo "test rc=$? ($((SECONDS - t0)) s)"; tail -12 "$out/test.log"
  # the separate combine kernel (TILETUNE_SPLITKV_FUSED=0) on varlen and dense
  TILETUNE_SPLITKV_FUSED=0 TT_QUICK=2 timeout "${UNFUSED_S:-60}" python3 tests/gpu/test_inference_gpu.py >"$out/test-unfused.log" 2>&1
  echo "test (combine kernel) rc=$? ($((SECONDS - t0)) s)"; tail -5 "$out/test-unfused.log"
fi
if [ "${BENCH_S:-0}" != 0 ]; then
  timeout "$BENCH_S" python3 bench/inference/decode.py --out "$out/bench" --budget "$((BENCH_S * 2 / 3))" \
    2>&1 | tee "$out/bench.log" | tail -40
  echo "bench rc=$? ($((SECONDS - t0)) s)"
fi
