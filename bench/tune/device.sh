#!/usr/bin/env bash
# bench/tune/device.sh: the tuning pipeline on a GPU machine in one command, from the repository root
# (carry [".device"]): build the release preset's flags with fault injection,
# run the end-to-end GPU test, then the tuning benchmark on GRID (default:
# the 108-key default grid, or e.g. "seqlen=512,2048;hdim=128;dtype=fp16;causal=both").
#   GRID=... CAP=seconds-per-mode [BENCH_S=total] [E2E=0] bash bench/tune/device.sh
set -uo pipefail
source .device/setup.sh
out=${OUT:-/tmp/tt-out}
mkdir -p "$out"
t0=$SECONDS
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTT_FAULT_INJECTION=ON \
   -DCMAKE_CUDA_ARCHITECTURES=90 &&
 ninja -C build-gpu tiletuned tiletune_worker tiletune_cli libtiletune tt_lookup_bench test_tune_gpu \
   test_sdpa_gpu) \
  >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
echo "build: $((SECONDS - t0)) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
if [ "${E2E:-1}" = 1 ]; then # E2E=0: the benchmark alone, where the call's 10 minutes are short
  TT_TEST_TIMEOUT=80 timeout 90 build-gpu/tests/worker/test_tune_gpu >"$out/e2e.log" 2>&1
  echo "e2e rc=$? ($((SECONDS - t0)) s)"; tail -15 "$out/e2e.log"
  for d in /tmp/ttd-*; do [ -d "$d" ] && cat "$d"/*.log 2>/dev/null | tail -40 >"$out/e2e-daemon.log"; done
fi
timeout "${BENCH_S:-260}" bench/tune/run.sh build-gpu "$out/grid" \
  "${GRID:-default}" "fast exhaustive" "${CAP:-120}" 2>&1 | tail -40
if [ -n "${DEFAULT_FAST_S:-}" ]; then # the 108-key default grid, fast mode, capped
  timeout "$((DEFAULT_FAST_S + 15))" bench/tune/run.sh build-gpu "$out/default" default fast "$DEFAULT_FAST_S" 2>&1 |
    grep -vE '^\| (fp16|bf16) ' | tail -14
fi
if [ -n "${KERNEL_TESTS:-}" ]; then
  (cd build-gpu && timeout "${KERNEL_TESTS}" ctest -L gpu -E test_tune_gpu --output-on-failure >"$out/gpu-tests.log" 2>&1)
  echo "kernel GPU tests rc=$?"; grep -E "tests passed|Passed|Failed|passed|failed" "$out/gpu-tests.log" | tail -6
fi
echo "total: $((SECONDS - t0)) s"
# the device tool returns at most 8 files: pack everything into one
(cd "$out" && tar czf /tmp/tt-device-out.tgz . && find . -mindepth 1 -delete && mv /tmp/tt-device-out.tgz .)
