"""A paged KV cache against the same cache contiguous, the built-in
default on both (no config), timed interleaved after a load
(decode.interleaved_times): B64 8k, B16 32k and B1 32k, pages of 16, 64
and 256 tokens in a shuffled pool, one query token, GQA 32/8, d128, bf16.

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
import tiletune  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    for (B, Lk) in ((64, 8192), (16, 32768), (1, 32768)):
        n = decode.copies_for(2 * B * decode.HKV * Lk * decode.D * 2)
        base = []
        for _ in range(n):
            q = torch.randn(B, 1, decode.HQ, decode.D, device=decode.DEV, dtype=decode.DT)
            kc = torch.randn(B, Lk, decode.HKV, decode.D, device=decode.DEV, dtype=decode.DT)
            base.append((q, kc, torch.randn_like(kc)))
        runs = [("contiguous", [(lambda s=s: tiletune.flash_attn_with_kvcache(*s)) for s in base])]
        for page in (16, 64, 256):
            fns = []
            for (q, kc, vc) in base:
                kp, vp, t, lens = decode.paged(kc, vc, page)
                fns.append(lambda q=q, kp=kp, vp=vp, t=t, lens=lens:
                           tiletune.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=t))
            runs.append((f"page{page}", fns))
        per = decode.interleaved_times(runs, a.rounds)
        c = statistics.median(per["contiguous"])
        for k, ts in per.items():
            m = statistics.median(ts)
            print(f"paged B{B} Lk{Lk} {k}: {m:.4f} ms, {m / c:.3f}x contiguous", flush=True)
        del runs, base
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
