#!/usr/bin/env bash
# One device run for the ws family, from the worktree root, cubins built
# beforehand on the CPU machine (bench/dev/ws_dev.py build --out .wsdev):
#   1. SASS facts of the d128 main variant and of the schedule alternatives
#      (.wsdev_s0 / .wsdev_s2 when present);
#   2. correctness of every variant against PyTorch and timings on the peers
#      grid beside cuDNN and FlashAttention-2 (WS_RUN: extra arguments);
#   3. ncu of one d128 launch (NCU=0 skips it).
set -uo pipefail
out=${OUT:-/tmp/ws-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
main=ws_d128_t1_c0_n128_c2_s2_p1_o1_r0.cubin
bash bench/dev/ws_sass_check.sh .wsdev/$main $(ls .wsdev_s*/$main 2>/dev/null) 2>&1 | tee "$out/sass.txt"
for d in .wsdev_s0 .wsdev_s2; do
  [ -d $d ] && timeout 60 python3 bench/dev/ws_dev.py run --cubins $d --only d128 --first 2 --no-check \
    --seqlens 2048 8192 --causals 0 1 --rep 30 2>&1 | grep -v "^BEST" | sed "s#^#$d #"
done
# shellcheck disable=SC2086
timeout ${WS_RUN_S:-240} python3 bench/dev/ws_dev.py run --cubins .wsdev --out "$out/ws.csv" ${WS_RUN:-} 2>&1 | tee "$out/run.txt" | grep -E "^BEST|WRONG|ERROR|correctness|Traceback|Error"
if [ "${NCU:-1}" = 1 ]; then
  timeout 120 ncu --clock-control none -k tt_sdpa_fwd_kernel -c 1 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    python3 bench/dev/ws_dev.py run --cubins .wsdev --only d128 --first ${NCU_FIRST:-1} --no-check --prof \
    --seqlens 8192 --causals 0 --dtypes 1 >"$out/ncu.txt" 2>&1
  grep -E "Throughput|Pipe|Stall|Issue|Eligible|Active Warps|Duration|SM Frequency|Registers|Shared Memory Config|One or More|No Eligible|L2 Hit|DRAM" "$out/ncu.txt" | head -60
fi
