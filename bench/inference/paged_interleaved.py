"""A paged KV cache against the same cache contiguous, the built-in
default on both (no config), timed interleaved after a load
(decode.interleaved_times) at the inference run's paged shapes
(decode.PAGED_SHAPES), pages of 16, 64 and 256 tokens in a shuffled pool,
one query token, GQA 32/8, d128, bf16.

    python3 bench/inference/paged_interleaved.py [--rounds 15]

Prints each run's median and its ratio to the contiguous one."""

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import decode  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    for (B, Lk) in decode.PAGED_SHAPES:
        runs = decode.paged_runs(B, Lk)
        per = decode.interleaved_times([(label, fns) for label, _, fns in runs], a.rounds)
        c = statistics.median(per["contiguous"])
        for k, ts in per.items():
            m = statistics.median(ts)
            print(f"paged B{B} Lk{Lk} {k}: {m:.4f} ms, {m / c:.3f}x contiguous", flush=True)
        del runs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
