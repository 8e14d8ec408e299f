"""Two builds of libtiletune on the decode shapes, alternating in one
process pair, to A/B a device-code change (the kernel revision differs, so
each build compiles its own cubins):

    TILETUNE_LIB=A.so python3 bench/inference/compare.py --tag A > a.txt
    TILETUNE_LIB=B.so python3 bench/inference/compare.py --tag B > b.txt

or one build under two settings of a launch switch (TILETUNE_SPLITKV_*),
alternating processes. Each prints, per decode shape of
bench/inference/decode.py (or --shapes B:Lk,...), the built-in default's
and the listed configs' (or --configs "a;b", "default" for the built-in)
CUDA-graph median (ms, L2 cold); --torch adds torch auto's."""

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
    ap.add_argument("--shapes", default="", help="B:Lk,... decode shapes (default: decode.py's)")
    ap.add_argument("--configs", default="", help="';'-separated configs, 'default' for the built-in")
    ap.add_argument("--torch", action="store_true", help="torch auto's time too")
    a = ap.parse_args()
    shapes = [(B, Lq, Lk) for (kind, B, Lq, Lk) in decode.SHAPES if kind == "decode"]
    if a.shapes:
        shapes = [(int(x.split(":")[0]), 1, int(x.split(":")[1])) for x in a.shapes.split(",")]
    configs = CONFIGS
    if a.configs:
        configs = [None if c == "default" else c for c in a.configs.split(";")]
    for (B, Lq, Lk) in shapes:
        kvbytes = 2 * B * decode.HKV * Lk * decode.D * 2
        sets = decode.make_inputs(B, Lq, Lk, decode.copies_for(kvbytes))
        if a.torch:
            t = decode.safe(decode.graph_time, [decode.torch_fn(None, *s) for s in sets])
            print(f"{a.tag} B{B} Lk{Lk} torch-auto: {t:.4f} ms {kvbytes / (t * 1e-3) / 1e12:.2f} TB/s", flush=True)
        for c in configs:
            t = decode.safe(decode.graph_time, [decode.tt_fn(c, *s) for s in sets])
            print(f"{a.tag} B{B} Lk{Lk} {c or 'default'}: {t:.4f} ms {kvbytes / (t * 1e-3) / 1e12:.2f} TB/s",
                  flush=True)
        del sets


if __name__ == "__main__":
    main()
