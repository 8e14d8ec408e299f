#!/usr/bin/env bash
# The GPU checks and benchmarks of one revision, in one command, on a CUDA
# machine with torch (the H200 here), from the repository root:
#
#   PART=core bash bench/gpu_check.sh        # kernels, pipeline, the torch op
#   PART=inference bash bench/gpu_check.sh   # splitkv tests + bench, grid tune
#   STEPS="ctests torch inference bench tune" bash bench/gpu_check.sh
#   PART=grid GRID_S=270 GRID_ARGS="--dtype bf16 --shard 1/2" bash bench/gpu_check.sh
#   STEPS="inference balance" bash bench/gpu_check.sh   # the balanced grid: tests, A/B
#   STEPS=stream bash bench/gpu_check.sh   # the KV copy paths' ceiling (bench/dev/kv_stream.cu)
#   STEPS=tail bash bench/gpu_check.sh     # a stream's last CTAs: fixed runs against a tile counter
#   STEPS=tail TAIL_MODE=tail-units bash bench/gpu_check.sh   # every SM busy, each CTA within one unit
#   STEPS=tail TAIL_MODE=hints bash bench/gpu_check.sh        # the copy's L2 qualifiers, two CTAs an SM
#   STEPS=tail TAIL_MODE=order bash bench/gpu_check.sh        # the order each CTA walks its run in
#   STEPS=l2 bash bench/gpu_check.sh       # ncu: L2 sectors the decode kernel asks for, against cuDNN's
#   STEPS=instep bash bench/gpu_check.sh   # decode after a 64 MB projection (code and weights cold)
#   STEPS=trim bash bench/gpu_check.sh     # short splits' shared memory trimmed to their tiles, A/B
#   STEPS=rotate bash bench/gpu_check.sh   # runs from their first tile against started 37c tiles in, A/B
#   STEPS=cross bash bench/gpu_check.sh    # decode keys tuned at batch 1 and 64, each winner at both
#   STEPS=rows ROWS_KEYS=128:2:4096:8 ROWS_CONFIGS="block_m=16,..." bash bench/gpu_check.sh  # default rows
#
# core:      build (fault injection on, for the pipeline test); the C kernel
#            tests but the every-variant one; the pipeline end to end
#            (daemon + worker, faulting and hanging variants isolated); the
#            binding's torch tests (torch.compile fullgraph, CUDA graphs,
#            the switch under transformer blocks, float64 semantics); the
#            host time per call against F.scaled_dot_product_attention.
# inference: family splitkv against torch in float64 (dense, paged,
#            varlen, graph capture), decode/speculative/chunked timings
#            against torch's backends, then the default grid tuned in fast
#            mode (TUNE_S seconds at most).
# grid:      the built-in default against the tuned winner over the
#            inference grid (bench/inference/grid.py): exhaustive tune,
#            capped at GRID_S seconds, GRID_ARGS narrows it (--dtype,
#            --shard, --mode, --bench-s); its cap + ~4 minutes at most.
# Logs under $OUT (default ./out). Each step has a time limit so the whole
# stays inside one 10-minute call.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
out=${OUT:-$root/out}
mkdir -p "$out"
part=${PART:-core}
case $part in
  core) steps=${STEPS:-"ctests e2e torch overhead"} ;;
  inference) steps=${STEPS:-"inference bench tune"} ;;
  grid) steps=${STEPS:-"grid"} ;;
  *) steps=${STEPS:-"ctests e2e torch overhead inference bench tune"} ;;
esac
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
t0=$SECONDS
build=$root/build-gpu
export PYTHONUNBUFFERED=1 TILETUNE_SOCKET=/nonexistent/tiletune.sock
say() { echo "==== $* ($((SECONDS - t0)) s)"; }

(cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTT_FAULT_INJECTION=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 &&
  ninja -C "$build" tiletuned tiletune_worker tiletune_cli libtiletune tt_lookup_bench tt_host_bench test_tune_gpu \
    test_sdpa_gpu) \
  >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
say build
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
export TILETUNE_LIB=$build/src/client/libtiletune.so TILETUNE_CACHE_DIR=$build/cubins
export PYTHONPATH=$root/python

if has ctests; then
  for t in ${C_TESTS:-bottom_right_causal seqlen_q_differs_from_seqlen_k gqa_and_blhd_layout ws_strides_and_fallback \
      reference_kernel_against_float64 device_limits_and_variants_api variants_follow_the_gqa_group \
      bad_pointers_on_a_gpu}; do
    # the first test compiles the programs the others share (NVRTC, a cold
    # kernel cache: ws programs take seconds each); CTest allows 1100 s
    TT_TEST_TIMEOUT=200 timeout 210 "$build/tests/gpu/test_sdpa_gpu" "$t" >>"$out/c-gpu.log" 2>&1
    echo "C GPU $t: rc=$?"
  done
  say "C GPU tests"
fi
if has e2e; then
  # E2E_TESTS: names of test_tune_gpu's tests (default: all); a test that
  # tunes compiles its key's space on an empty cache
  TT_TEST_TIMEOUT=300 timeout "${E2E_S:-420}" "$build/tests/worker/test_tune_gpu" ${E2E_TESTS:-} >"$out/e2e.log" 2>&1
  echo "pipeline end to end: rc=$?"; tail -6 "$out/e2e.log"
  say pipeline
fi
if has torch; then
  timeout "${TORCH_S:-240}" python3 -m pytest -q -rs -p no:cacheprovider python/tests/test_torch_gpu.py \
    >"$out/torch.log" 2>&1
  echo "torch tests: rc=$?"; tail -25 "$out/torch.log"
  say "torch tests"
fi
if has overhead; then
  timeout 90 python3 bench/python_overhead.py >"$out/overhead.log" 2>&1
  echo "overhead: rc=$?"; tail -12 "$out/overhead.log"
  say overhead
fi

if has inference; then
  # on an empty kernel cache it compiles ~240 programs first: 148 s in all
  # on an H100 host (the part's other steps fit the rest of the call)
  TT_QUICK=${QUICK:-1} timeout "${TEST_S:-200}" python3 tests/gpu/test_inference_gpu.py >"$out/inference-test.log" 2>&1
  echo "inference tests: rc=$?"; tail -8 "$out/inference-test.log"
  say "inference tests"
fi
if has bench; then
  timeout "${BENCH_S:-150}" python3 bench/inference/decode.py --out "$out/inference" \
    --budget "$(( ${BENCH_S:-150} * 2 / 3 ))" >"$out/inference-bench.log" 2>&1
  echo "inference bench: rc=$?"; tail -40 "$out/inference-bench.log"
  say "inference bench"
fi
if has cross; then
  # decode keys tuned at batch 1 and at batch 64 by the real daemon, each
  # winner timed at both (bench/inference/cross_batch.py)
  timeout "${CROSS_S:-400}" python3 bench/inference/cross_batch.py --build "$build" --out "$out/cross" \
    --cap-s "$(( ${CROSS_S:-400} / 3 ))" ${CROSS_ARGS:-} >"$out/cross-batch.log" 2>&1
  echo "cross batch: rc=$?"; tail -14 "$out/cross-batch.log"
  grep -h "decode key at batch" "$out"/cross/tuned-*.log | cut -c1-220
  say "decode across batches"
fi
if has rows; then
  # candidate rows for the built-in decode defaults, each at its keys' two
  # tune batches, or ROWS_BATCHES (bench/inference/default_rows.py;
  # ROWS_KEYS, ROWS_CONFIGS)
  timeout "${ROWS_S:-240}" python3 bench/inference/default_rows.py --out "$out/default-rows" \
    --budget-s "$(( ${ROWS_S:-240} - 40 ))" --keys "$ROWS_KEYS" --configs "$ROWS_CONFIGS" \
    --batches "${ROWS_BATCHES:-}" >"$out/default-rows.log" 2>&1
  echo "default rows: rc=$?"; tail -20 "$out/default-rows.log"
  say "default rows"
fi
# A launch switch's A/B: compare.py --torch with VAR=0 and VAR=1 in
# alternating processes of the same build, ROUNDS rounds over
# bench/inference's decode shapes (SHAPES, B:Lk,...; empty: its own), the
# configs (';'-separated) and torch auto each, into $out/FILE
switch_ab() {
  local var=$1 tag=$2 file=$3 shapes=$4 cfgs=$5 rounds=$6
  for r in $(seq "$rounds"); do
    for m in 0 1; do
      env "$var=$m" timeout 120 python3 bench/inference/compare.py --tag "$tag=$m" --torch \
        --shapes "$shapes" --configs "$cfgs" >>"$out/$file" 2>&1
    done
  done
  sort -s -k2,3 "$out/$file" | cut -c1-160
}
if has balance; then
  # the balanced grid (TILETUNE_SPLITKV_BALANCE=1) against splits of whole
  # units (BAL_SHAPES, BAL_CONFIGS, BAL_ROUNDS)
  switch_ab TILETUNE_SPLITKV_BALANCE bal balance-ab.txt "${BAL_SHAPES:-}" "${BAL_CONFIGS:-default}" "${BAL_ROUNDS:-2}"
  say "balanced grid A/B"
fi
if has rotate; then
  # each CTA of a contiguous cache walking its run from its first tile
  # (TILETUNE_SPLITKV_ROTATE=0; the H100's default) against starting it
  # 37c tiles in (=1; the default on a 6144-bit bus, the H200's)
  # (ROT_SHAPES, ROT_CONFIGS, ROT_ROUNDS)
  switch_ab TILETUNE_SPLITKV_ROTATE rot rotate-ab.txt "${ROT_SHAPES:-}" "${ROT_CONFIGS:-default}" "${ROT_ROUNDS:-3}"
  say "run order A/B"
fi
if has trim; then
  # launches with the ring's slots a split fills (TILETUNE_SPLITKV_TRIM)
  # against every stage's shared memory, the same build, alternating
  # processes, on short caches where a split is one or two tiles
  shapes=${TRIM_SHAPES:-1:1024,1:2048,1:4096,1:8192,4:4096}
  cfgs=${TRIM_CONFIGS:-"default;family=splitkv,block_m=16,block_n=128,warps=4,stages=3,layout=pad,q_in_regs=1,split_ctas=16;family=splitkv,block_m=16,block_n=128,warps=4,stages=3,layout=pad,q_in_regs=1,split_ctas=8;family=splitkv,block_m=16,block_n=64,warps=4,stages=3,layout=pad,q_in_regs=1,split_ctas=16"}
  for r in 1 2; do
    TILETUNE_SPLITKV_TRIM=0 timeout 90 python3 bench/inference/compare.py --tag full --torch --shapes "$shapes" \
      --configs "$cfgs" >>"$out/trim-ab.txt" 2>&1
    TILETUNE_SPLITKV_TRIM=1 timeout 90 python3 bench/inference/compare.py --tag trim --torch --shapes "$shapes" \
      --configs "$cfgs" >>"$out/trim-ab.txt" 2>&1
  done
  sort -s -k2,3 "$out/trim-ab.txt" | cut -c1-170
  say "ring trim A/B"
fi
if has instep; then
  # decode inside a model step: each call after a projection that streams
  # 64 MB of weights through L2 (bench/inference/in_step.py)
  timeout "${INSTEP_S:-150}" python3 bench/inference/in_step.py ${INSTEP_ARGS:-} >"$out/in-step.txt" 2>&1
  echo "in-step: rc=$?"; cat "$out/in-step.txt"
  say "decode in a model step"
fi
# bench/dev/kv_stream.cu, built once for the steps that run it (and again
# when the source is newer than the build folder's binary)
kv_stream() {
  [ "$build/kv_stream" -nt bench/dev/kv_stream.cu ] ||
    nvcc -O3 -std=c++17 -arch=sm_90a -o "$build/kv_stream" bench/dev/kv_stream.cu >"$out/kv-stream-build.log" 2>&1
}
if has stream; then
  # the copy paths' own ceiling on a decode-sized KV cache (no math):
  # cp.async as splitkv copies, one bulk copy a tile, tensor-map boxes
  kv_stream && timeout 120 "$build/kv_stream" >"$out/kv-stream.txt" 2>&1
  echo "kv stream: rc=$?"; cat "$out/kv-stream.txt"
  say "kv stream"
fi
if has tail; then
  # the end of a stream: fixed runs against chunks from a counter, 64 MB
  # to 2 GiB, and how far the CTAs' ends trail the median's
  kv_stream && timeout 120 "$build/kv_stream" ${TAIL_MODE:-tail} >"$out/kv-stream-${TAIL_MODE:-tail}.txt" 2>&1
  echo "kv stream tail: rc=$?"; cat "$out/kv-stream-${TAIL_MODE:-tail}.txt"
  say "kv stream tail"
fi
if has l2; then
  # what L2 serves the decode kernel against what it needs (the KV cache's
  # sectors): tiletune's decode and cuDNN's at B16 x 32k, and kv_stream's
  # cp.async into plain, padded (272-byte) and swizzled rows
  m=dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,lts__t_requests_srcunit_tex_op_read.sum,gpu__time_duration.sum
  for be in tiletune cudnn; do
    kern=tt_sdpa_fwd_kernel
    [ "$be" = cudnn ] && kern=cudnn
    timeout 120 ncu --clock-control none -k "regex:$kern" -s 2 -c 1 --metrics "$m" \
      python3 bench/inference/profile.py --batch 16 --lq 1 --lk 32768 --calls 3 --backend "$be" \
      >"$out/ncu-l2-$be.txt" 2>&1
    echo "ncu L2 $be: rc=$?"; grep -E "^ +(dram|lts|gpu)__" "$out/ncu-l2-$be.txt"
  done
  kv_stream && timeout 120 ncu --clock-control none -k regex:k_cpasync -c 63 --metrics "$m" "$build/kv_stream" \
      >"$out/ncu-l2-kvstream.txt" 2>&1
  echo "ncu L2 kv_stream: rc=$?"
  # the first launch of each of the first three cp.async kernels (plain, pad272, xor)
  awk '/k_cpasync</ { k = $0; sub(/^ +/, "", k); sub(/\(const.*/, "", k); n = seen[k]++ }
       /^ +(dram|lts|gpu)__/ && n == 0 { print k ": " $1 " " $(NF) }' "$out/ncu-l2-kvstream.txt"
  say "L2 traffic"
fi
if has host; then
  # tt_sdpa_fwd's host time and its pieces, with an empty module cache and
  # with 24 other kernels loaded
  for n in 0 24; do
    timeout 120 "$build/bench/host/tt_host_bench" "$n" >"$out/host-$n.log" 2>&1
    echo "host cost ($n other kernels): rc=$?"; cat "$out/host-$n.log"
  done
  say host
fi
if has profile; then
  # ncu over the decode kernel (the main one; the merge is fused) at a
  # bandwidth-bound and a latency-bound shape
  for shape in ${PROFILE_SHAPES:-"16 1 32768 tiletune" "1 1 4096 tiletune" "1 1 131072 tiletune"}; do
    set -- $shape
    kern=tt_sdpa_fwd_kernel
    [ "$4" = cudnn ] && kern=.
    timeout 120 ncu --clock-control none -k "regex:$kern" -s 2 -c 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
      --section SchedulerStats --section LaunchStats \
      python3 bench/inference/profile.py --batch "$1" --lq "$2" --lk "$3" --calls 3 --backend "$4" \
      >"$out/ncu-decode-$4-B$1-Lk$3.txt" 2>&1
    echo "ncu $4 B$1 Lk$3: rc=$?"
    grep -E "Duration|DRAM Throughput|L2 Cache Throughput|L2 Hit|Achieved Occupancy|No Eligible|Registers Per|Grid Size|Block Size" \
      "$out/ncu-decode-$4-B$1-Lk$3.txt" | head -12
  done
  say profile
fi
if has peers; then
  # the training/prefill grid against FA2 and cuDNN: tuned (best of the
  # key's space), the built-in default, per point (PEERS_ARGS narrows it)
  timeout "${PEERS_S:-300}" python3 bench/peers.py --backend tiletune --out "$out/peers" ${PEERS_ARGS:-} \
    >"$out/peers.log" 2>&1
  echo "peers: rc=$?"; grep -iE "geomean|geometric|worst|interrupted" "$out/peers.log" | tail -12
  say peers
fi
if has tune; then
  timeout "$((${TUNE_S:-150} + 20))" bench/tune/run.sh "$build" "$out/grid" default fast "${TUNE_S:-150}" 2>&1 |
    grep -vE '^\| (fp16|bf16) ' | tail -16
  say "default grid, fast"
fi
if has grid; then
  # after the cap: the key in flight (<= 60 s), the daemon's stop, the
  # defaults the tune did not time (--bench-s, 60 s by default), the summary
  timeout "$((${GRID_S:-300} + 240))" python3 bench/inference/grid.py --build "$build" --out "$out/grid-defaults" \
    --cap-s "${GRID_S:-300}" ${GRID_ARGS:-} >"$out/grid-defaults.log" 2>&1
  echo "inference grid: rc=$?"
  grep -E "^job |^tuned |^bench:|^\| (decode|chunk|prefill|all|measured|not in the space|dropped|failed|busy) |^Keys|^Ratio" \
    "$out/grid-defaults.log" | tail -24
  grep -A6 "^The worst 10" "$out/grid-defaults.log" | tail -4 | cut -c1-400
  say "inference grid, default against tuned"
fi
# the device returns at most 8 files: one archive
(cd "$out" && tar czf /tmp/gpu-check.tgz . && find . -mindepth 1 -delete && mv /tmp/gpu-check.tgz .)
say done
