#!/usr/bin/env bash
# bench/dev/kernels_device.sh: the kernels on a GPU machine in one command, from
# the repository root (carry [".device"]): release build for sm_90, then
#   1. bench/peers.py with the tiletune backend (every variant of the space,
#      both families, checked against FlashAttention-2's output before it is
#      timed; the built-in default as tt_sdpa_fwd runs it on this device),
#   2. ctest -L gpu (the C correctness test over every head_dim x dtype x
#      causal x seqlen, Lq != Lk, GQA, [B, L, H, D], every variant of the
#      space; and the binding's pytest against torch).
#   PEERS="--hdims 128 ..." PEERS_S=seconds TESTS_S=seconds bash bench/dev/kernels_device.sh
set -uo pipefail
source .device/setup.sh
out=${OUT:-/tmp/tt-out}
mkdir -p "$out"
t0=$SECONDS
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
 ninja -C build-gpu libtiletune test_sdpa_gpu) >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
echo "build: $((SECONDS - t0)) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
export TILETUNE_LIB=$PWD/build-gpu/src/client/libtiletune.so TILETUNE_SOCKET=/nonexistent/tiletune.sock
export TILETUNE_CACHE_DIR=/tmp/tt-cubins
if [ "${PEERS_S:-300}" -gt 0 ]; then
  # shellcheck disable=SC2086
  timeout "${PEERS_S:-300}" python3 bench/peers.py --backend tiletune --out "$out/peers" ${PEERS:-} 2>&1 |
    grep -vE '^\s*$' | tail -${PEERS_TAIL:-90}
  echo "peers: $((SECONDS - t0)) s"
fi
if [ "${TESTS_S:-240}" -gt 0 ]; then
  (cd build-gpu && timeout "${TESTS_S:-240}" ctest -L gpu -E test_tune_gpu --output-on-failure >"$out/gpu-tests.log" 2>&1)
  echo "ctest -L gpu rc=$? ($((SECONDS - t0)) s)"
  grep -E "tests passed|Passed|Failed|passed|failed|FAIL|variants checked" "$out/gpu-tests.log" | tail -20
fi
echo "total: $((SECONDS - t0)) s"
(cd "$out" && tar czf /tmp/tt-kernels-out.tgz . && find . -mindepth 1 -delete && mv /tmp/tt-kernels-out.tgz .)
