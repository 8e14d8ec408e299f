"""Two builds of libtiletune on the decode shapes, alternating in one
process pair, to A/B a device-code change (the kernel revision differs, so
each build compiles its own cubins):

    TILETUNE_LIB=A.so python3 bench/inference/compare.py --tag A > a.txt
    TILETUNE_LIB=B.so python3 bench/inference/compare.py --tag B > b.txt

Each prints, per decode shape of bench/inference/decode.py, the built-in
default's and the listed configs' CUDA-graph median (ms, L2 cold)."""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import decode  # noqa: E402

CONFIGS = [None,
           "family=splitkv,block_m=16,block_n=64,warps=4,stages=2,layout=pad,q_in_regs=1,split_ctas=0",
           "family=splitkv,block_m=16,block_n=128,warps=8,stages=3,layout=pad,q_in_regs=1,split_ctas=0"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    for (kind, B, Lq, Lk) in decode.SHAPES:
        if kind != "decode":
            continue
        kvbytes = 2 * B * decode.HKV * Lk * decode.D * 2
        sets = decode.make_inputs(B, Lq, Lk, decode.copies_for(kvbytes))
        for c in CONFIGS:
            t = decode.safe(decode.graph_time, [decode.tt_fn(c, *s) for s in sets])
            print(f"{a.tag} B{B} Lk{Lk} {c or 'default'}: {t:.4f} ms {kvbytes / (t * 1e-3) / 1e12:.2f} TB/s",
                  flush=True)
        del sets


if __name__ == "__main__":
    main()
