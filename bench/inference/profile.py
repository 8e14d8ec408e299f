"""One inference shape run a few times through tiletune.flash_attn_with_kvcache,
for a profiler to wrap (bench/gpu_check.sh's `profile` step runs ncu over it):

    python3 bench/inference/profile.py --batch 16 --lq 1 --lk 32768 [--config TEXT] [--calls 3]

GQA 32 query / 8 KV heads, d128, bf16, the cache in [B, Lk, Hkv, D]."""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import torch  # noqa: E402

import tiletune  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--lq", type=int, default=1)
    ap.add_argument("--lk", type=int, default=32768)
    ap.add_argument("--config", default=None)
    ap.add_argument("--calls", type=int, default=3)
    a = ap.parse_args()
    dev = torch.device("cuda:0")
    q = torch.randn(a.batch, a.lq, 32, 128, device=dev, dtype=torch.bfloat16)
    k = torch.randn(a.batch, a.lk, 8, 128, device=dev, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    for _ in range(a.calls):
        tiletune.flash_attn_with_kvcache(q, k, v, config=a.config)
    torch.cuda.synchronize()
    print(f"B{a.batch} Lq{a.lq} Lk{a.lk}: {a.config or 'default'}")


if __name__ == "__main__":
    main()
