#!/usr/bin/env bash
# The ws family on a GPU machine in one command, from the repository root, with cubins
# built beforehand on the CPU machine by bench/dev/ws_dev.py build:
#   .wsdev_fam  (--family)  the family's whole space: checked against
#               PyTorch, then timed on the peers grid beside cuDNN and FA2;
#   .wsdev      the curated SPACE (ablations) at seqlen 2048 and 8192;
#   .wsdev_s1   (optional) the d128 loop with the straight wait order;
# SASS facts of the d128 main variant; the C GPU test of the family (strides
# the copy engine cannot take, persistent and ping-pong configs) through
# libtiletune, built here meanwhile (DEVICE_SETUP: the deps' setup script).
set -uo pipefail
out=${OUT:-/tmp/ws-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
main=ws_d128_t1_c0_n128_c2_s2_p1_o1_r0.cubin
bash bench/dev/ws_sass_check.sh .wsdev/$main $(ls .wsdev_s1/$main 2>/dev/null) 2>&1 | tee "$out/sass.txt"
( [ -n "${DEVICE_SETUP:-}" ] && source "$DEVICE_SETUP"
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
  timeout 100 nice ninja -C build-gpu test_sdpa_gpu ) >"$out/build.log" 2>&1 &
bpid=$!
timeout "${WS_FAM_S:-85}" python3 bench/dev/ws_dev.py run --cubins .wsdev_fam --family --family-time \
  --dtypes 0 1 --rep 20 --out "$out/ws.csv" >"$out/run.txt" 2>&1
echo "family run rc=$?"
grep -E "^BEST|WRONG|ERROR|correctness|Traceback|Error" "$out/run.txt"
timeout 15 python3 bench/dev/ws_dev.py run --cubins .wsdev --only d128 --no-check --seqlens 8192 --causals 0 \
  --rep 30 --out "$out/ablate.csv" 2>&1 | grep -v "^BEST" | tee "$out/ablate.txt"
[ -d .wsdev_s1 ] && timeout 12 python3 bench/dev/ws_dev.py run --cubins .wsdev_s1 --only d128 --first 2 \
  --no-check --seqlens 8192 --causals 0 --rep 30 2>&1 | grep -v "^BEST" | sed 's#^#sched1 #' | tee "$out/sched1.txt"
wait $bpid
echo "build rc=$?"; tail -3 "$out/build.log"
timeout 25 build-gpu/tests/gpu/test_sdpa_gpu ws_strides_and_fallback 2>&1 | tail -8 | tee "$out/gpu-test.txt"
