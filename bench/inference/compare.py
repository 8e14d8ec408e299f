"""Two builds of libtiletune on the decode shapes, alternating in one
process pair, to A/B a device-code change (the kernel revision differs, so
each build compiles its own cubins):

    TILETUNE_LIB=A.so python3 bench/inference/compare.py --tag A > a.txt
    TILETUNE_LIB=B.so python3 bench/inference/compare.py --tag B > b.txt

or one build under two settings of a launch switch (TILETUNE_SPLITKV_*),
alternating processes. Each prints, per decode shape of
bench/inference/decode.py (--kinds decode,spec,chunk picks its sets; or
--shapes B:Lk,... one query token, B:Lq:Lk,...), the built-in default's
and the listed configs' (or --configs "a;b", "default" for the built-in)
CUDA-graph median (ms, L2 cold) through the KV-cache entry point; --torch
adds torch auto's, --dense the built-in default through tiletune.sdpa
(the dense families may take the key); --dense-configs "a;b" the listed
dense-family configs through tiletune.sdpa.

--interleave R times every run of a shape in R rounds of one replay each,
the order rotated every round, after --heat seconds of replaying them all
(decode.interleaved_times says why). It prints each run's median and range and, with --torch, the median over
rounds of torch auto's time / the run's in the same round."""

import argparse
import os
import statistics
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
    ap.add_argument("--shapes", default="", help="B:Lk or B:Lq:Lk,... (default: decode.py's of --kinds)")
    ap.add_argument("--kinds", default="decode", help="decode.py's shape sets: decode,spec,chunk")
    ap.add_argument("--configs", default="", help="';'-separated configs, 'default' for the built-in")
    ap.add_argument("--torch", action="store_true", help="torch auto's time too")
    ap.add_argument("--dense", action="store_true", help="tiletune.sdpa's built-in default too")
    ap.add_argument("--interleave", type=int, default=0, help="rounds of interleaved replays (0: one run after another)")
    ap.add_argument("--heat", type=float, default=2.0, help="seconds of load before interleaved rounds")
    ap.add_argument("--dense-configs", default="", help="';'-separated configs through tiletune.sdpa")
    a = ap.parse_args()
    kinds = a.kinds.split(",")
    shapes = [(B, Lq, Lk) for (kind, B, Lq, Lk) in decode.SHAPES if kind in kinds]
    if a.shapes:
        parts = [[int(v) for v in x.split(":")] for x in a.shapes.split(",")]
        shapes = [(p[0], 1, p[1]) if len(p) == 2 else tuple(p) for p in parts]
    configs = CONFIGS
    if a.configs:
        configs = [None if c == "default" else c for c in a.configs.split(";")]
    for (B, Lq, Lk) in shapes:
        kvbytes = 2 * B * decode.HKV * Lk * decode.D * 2
        sets = decode.make_inputs(B, Lq, Lk, decode.copies_for(kvbytes))
        # one query token keeps the decode lines' old form
        name = f"B{B} Lk{Lk}" if Lq == 1 else f"B{B} Lq{Lq} Lk{Lk}"
        runs = [("torch-auto", [decode.torch_fn(None, *s) for s in sets])] if a.torch else []
        runs += [(c or "default", [decode.tt_fn(c, *s) for s in sets]) for c in configs]
        if a.dense:
            runs.append(("dense-default", [decode.tt_dense_fn(None, *s) for s in sets]))
        runs += [("dense:" + c, [decode.tt_dense_fn(c, *s) for s in sets]) for c in a.dense_configs.split(";") if c]
        if a.interleave:
            interleaved(a, name, kvbytes, runs)
        else:
            for label, fns in runs:
                t = decode.safe(decode.graph_time, fns)
                print(f"{a.tag} {name} {label}: {t:.4f} ms {kvbytes / (t * 1e-3) / 1e12:.2f} TB/s", flush=True)
        del sets


def interleaved(a, name, kvbytes, runs):
    per = decode.interleaved_times(runs, a.interleave, a.heat)
    auto = per.get("torch-auto")
    for label, ts in per.items():
        m = statistics.median(ts)
        line = (f"{a.tag} {name} {label}: {m:.4f} ms {kvbytes / (m * 1e-3) / 1e12:.2f} TB/s"
                f" (range {min(ts):.4f}-{max(ts):.4f}, {len(ts)} rounds)")
        if auto and label != "torch-auto":
            line += f" torch-auto/this {statistics.median(x / y for x, y in zip(auto, ts)):.4f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
