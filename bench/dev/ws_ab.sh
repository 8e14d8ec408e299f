#!/usr/bin/env bash
# A/B of a `ws` device-code switch on a GPU machine, from the repository
# root: two cubin folders built beforehand on the CPU machine from the same
# tree, one with an extra define, e.g.
#   python3 bench/dev/ws_dev.py build --out .wsdev_a
#   python3 bench/dev/ws_dev.py build --out .wsdev_b --define=-DTT_WS_RESCALE_LOG2=8
#   A=.wsdev_a B=.wsdev_b bash bench/dev/ws_ab.sh     (on the device; carry both)
# Each folder's variants are checked against PyTorch first (ws_dev.py run
# checks before it times); then the curated SPACE's first variants of each
# head dim are timed at seqlen 2048 and 8192, causal and not, beside cuDNN
# and FA2, A, B, A, B in separate processes (the clocks drift between
# minutes: compare the pairs, and each against cuDNN of its own run).
set -uo pipefail
out=${OUT:-/tmp/ws-ab}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
a=${A:?cubin folder A}
b=${B:?cubin folder B}
for r in 1 2; do
  for side in a b; do
    dir=$a
    [ $side = b ] && dir=$b
    check=--no-check
    [ $r = 1 ] && check=
    timeout "${AB_S:-60}" python3 bench/dev/ws_dev.py run --cubins "$dir" --first "${FIRST:-2}" $check \
      --seqlens 2048 8192 --causals 0 1 --rep "${REP:-30}" --out "$out/$side$r.csv" 2>&1 |
      sed "s#^#$side$r #" | tee -a "$out/ab.txt" | grep -E "WRONG|ERROR|Traceback|correctness" 
    echo "$side$r rc=${PIPESTATUS[0]}"
  done
done
python3 - "$out" <<'PY'
import csv, os, sys
from collections import defaultdict
out = sys.argv[1]
t = defaultdict(list)
for side in "ab":
    for r in "12":
        p = os.path.join(out, f"{side}{r}.csv")
        if not os.path.exists(p):
            continue
        for row in csv.DictReader(open(p)):
            key = (row["hdim"], row["dtype"], row["causal"], row["seqlen"], row["variant"])
            t[key].append((side, float(row["tflops"]), float(row["cudnn"])))
print("| hdim | causal | seqlen | variant | A TFLOP/s (x cuDNN) | B TFLOP/s (x cuDNN) | B / A |")
print("|---|---|---|---|---|---|---|")
for key in sorted(t):
    sa = [x for x in t[key] if x[0] == "a"]
    sb = [x for x in t[key] if x[0] == "b"]
    if not sa or not sb:
        continue
    fa = max(x[1] for x in sa)
    fb = max(x[1] for x in sb)
    ra = max(x[1] / x[2] for x in sa)
    rb = max(x[1] / x[2] for x in sb)
    print(f"| {key[0]} | {key[2]} | {key[3]} | {key[4]} | {fa:.0f} ({ra:.3f}) | {fb:.0f} ({rb:.3f}) | {fb / fa:.3f} |")
PY
