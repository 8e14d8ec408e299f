#!/bin/bash
# A stand-in for tiletune-worker speaking docs/worker-protocol.md, for the
# daemon's integration tests. $TT_FAKE_WORKER_MODE picks its behaviour:
#   nogpu    HELLO with gpu_count=0, then leave
#   gpu      a fake GPU; every key gets variant B measured ok
#   crash    dies (exit 3) right after TRY of variant A unless told to AVOID it
#   garbage  answers a MEASURE with a line that breaks the grammar
#   liar     answers a MEASURE with RESULTs the pipe protocol's table refuses
#            (variant A at 999 TFLOPS: an unknown field, out of range, not
#            finite, ok without tflops, an unknown status, a bad id), then
#            variant B measured ok
#   slow     every key: variant A measured, $TT_FAKE_DELAY seconds (default 1),
#            then variant B (tests/worker: cancel, resume, progress)
#   hang     goes silent after TRY of variant A unless told to AVOID it
#   slowcrash  like crash, but $TT_FAKE_DELAY seconds after the TRY (time for
#            the test to cancel the job while the key is being measured)
#   exit     exits 1 at once, before any HELLO
# $TT_FAKE_MODE_FILE, if set and present, overrides the mode with its
# contents; crash and slowcrash write $TT_FAKE_AFTER_CRASH (if set) into it
# before they die, so the restarted worker behaves differently (nogpu, exit).
# $TT_FAKE_GPU_NAME, if set, is the (percent-encoded) GPU name of HELLO.
# $TT_FAKE_GPUS: how many GPUs the node has (default 1); a worker per GPU.
# $TT_FAKE_GPU_NAMES: comma-separated names by GPU index (a node of mixed
#   models); beyond the list, $TT_FAKE_GPU_NAME or "Fake GPU".
# $TT_FAKE_GONE_GPU=I: the worker for GPU I dies on its first key as a GPU
#   that fell off the bus does, and from then on finds no GPU I (its
#   restart says HELLO without a GPU); $TT_FAKE_GONE_FILE marks it gone.
# $TT_FAKE_LOG, if set, gets the fields of every MEASURE, one line each.
# $TT_FAKE_PLAUSIBLE=1: variant B's tflops is what its time gives for the
# key (4*b*h*Lq*Lk*d / t, halved if causal), as a real worker reports, so
# its exports pass an import's plausibility check.
mode=${TT_FAKE_WORKER_MODE:-gpu}
[ -n "$TT_FAKE_MODE_FILE" ] && [ -f "$TT_FAKE_MODE_FILE" ] && mode=$(cat "$TT_FAKE_MODE_FILE")
gpu=0
while [ $# -gt 0 ]; do
    case $1 in --gpu) gpu=$2; shift ;; esac
    shift
done
if [ "$mode" = exit ]; then
    exit 1
fi
if [ "$mode" = nogpu ]; then
    echo "HELLO proto=1 rev=00c0ffee gpu_count=0"
    exit 0
fi
ngpus=${TT_FAKE_GPUS:-1}
name=${TT_FAKE_GPU_NAME:-Fake%20GPU}
if [ -n "$TT_FAKE_GPU_NAMES" ]; then
    IFS=, read -r -a names <<<"$TT_FAKE_GPU_NAMES"
    [ -n "${names[$gpu]}" ] && name=${names[$gpu]}
fi
gone=
if [ -n "$TT_FAKE_GONE_GPU" ] && [ "$TT_FAKE_GONE_GPU" = "$gpu" ]; then
    gone=1
    if [ -f "$TT_FAKE_GONE_FILE" ]; then
        echo "HELLO proto=1 rev=00c0ffee gpu_count=$ngpus"
        exit 0
    fi
fi
echo "HELLO proto=1 rev=00c0ffee gpu_count=$ngpus index=$gpu name=$name cc_major=9 cc_minor=0 sms=132 mem_bytes=1000000000 driver=1.0 cuda=13.0 nvrtc=13.0"
A=family=mma,block_m=64,block_n=32,warps=4,stages=3,layout=pad,q_in_regs=1
B=family=mma,block_m=128,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=0
while read -r verb rest; do
    [ "$verb" = MEASURE ] || continue
    id= avoid=0 sq=0 sk=0 hd=0 causal=0
    for f in $rest; do
        case $f in
        id=*) id=${f#id=} ;;
        avoid=*) avoid=${f#avoid=} ;;
        seqlen_q=*) sq=${f#seqlen_q=} ;;
        seqlen_k=*) sk=${f#seqlen_k=} ;;
        hdim=*) hd=${f#hdim=} ;;
        causal=*) causal=${f#causal=} ;;
        esac
    done
    avoided=
    for ((i = 0; i < avoid; i++)); do
        read -r line
        avoided="$avoided ${line#AVOID config=}"
    done
    [ -n "$TT_FAKE_LOG" ] && echo "$rest" >>"$TT_FAKE_LOG"
    [ -n "$TT_FAKE_GPU_LOG" ] && echo "gpu=$gpu $rest" >>"$TT_FAKE_GPU_LOG"
    if [ -n "$gone" ]; then
        echo "TRY id=$id config=$B"
        touch "$TT_FAKE_GONE_FILE"
        exit 4 # the driver's "GPU has fallen off the bus" ends the process
    fi
    if [ "$mode" = hang ] && [[ "$avoided" != *"$A"* ]]; then
        echo "TRY id=$id config=$A"
        exec sleep 3600 # killed by the daemon for silence
    fi
    if [ "$mode" = slow ]; then
        echo "TRY id=$id config=$A"
        echo "RESULT id=$id status=ok config=$A time_ms=1.0 tflops=50 batch=4 heads=16 reps=20 spread=0.01"
        sleep "${TT_FAKE_DELAY:-1}"
    fi
    if { [ "$mode" = crash ] || [ "$mode" = slowcrash ]; } && [[ "$avoided" != *"$A"* ]]; then
        echo "TRY id=$id config=$A"
        [ "$mode" = slowcrash ] && sleep "${TT_FAKE_DELAY:-1}"
        [ -n "$TT_FAKE_AFTER_CRASH" ] && echo "$TT_FAKE_AFTER_CRASH" >"$TT_FAKE_MODE_FILE"
        exit 3
    fi
    if [ "$mode" = liar ]; then
        echo "TRY id=$id config=$A"
        for lie in "bogus=1" "busy=7" "spread=inf" "spread=nan" "reps=-1" "batch=0" "regs=1e3"; do
            echo "RESULT id=$id status=ok config=$A time_ms=0.01 tflops=999 $lie"
        done
        echo "RESULT id=$id status=ok config=$A time_ms=0.01"
        echo "RESULT id=$id status=great config=$A time_ms=0.01 tflops=999"
        echo "RESULT id=$id status=ok config=family=mma,block_m=7 time_ms=0.01 tflops=999"
        echo "RESULT id=0$id status=ok config=$A time_ms=0.01 tflops=999"
        echo "DONE id=$id status=maybe"
    fi
    if [ "$mode" = garbage ]; then
        printf 'RESULT id=%s \001\n' "$id"
        continue
    fi
    echo "TRY id=$id config=$B"
    tf=$((100 + sq % 100)).5
    if [ "$TT_FAKE_PLAUSIBLE" = 1 ]; then
        tf=$(awk -v q="$sq" -v k="$sk" -v d="$hd" -v c="$causal" \
            'BEGIN { f = 4 * 4 * 16 * q * k * d; if (c) f /= 2; printf "%.6g", f / 0.5e-3 / 1e12 }')
    fi
    echo "RESULT id=$id status=ok config=$B time_ms=0.5 tflops=$tf batch=4 heads=16 reps=20 spread=0.01"
    echo "DONE id=$id status=done"
done
