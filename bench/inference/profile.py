"""One inference shape run a few times through tiletune.flash_attn_with_kvcache,
for a profiler to wrap (bench/gpu_check.sh's `profile` step runs ncu over it):

    python3 bench/inference/profile.py --batch 16 --lq 1 --lk 32768 [--config TEXT] [--calls 3] [--page 16]

GQA 32 query / 8 KV heads, d128, bf16, the cache in [B, Lk, Hkv, D]; --page:
the same cache on pages of that many tokens in a shuffled pool
(decode.paged), cache_seqlens all Lk."""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import tiletune  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--lq", type=int, default=1)
    ap.add_argument("--lk", type=int, default=32768)
    ap.add_argument("--config", default=None)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--page", type=int, default=0, help="pages of this many tokens (0: contiguous)")
    ap.add_argument("--backend", default="tiletune", choices=("tiletune", "cudnn"),
                    help="cudnn: torch's F.scaled_dot_product_attention on cuDNN, the same shape")
    a = ap.parse_args()
    dev = torch.device("cuda:0")
    q = torch.randn(a.batch, a.lq, 32, 128, device=dev, dtype=torch.bfloat16)
    k = torch.randn(a.batch, a.lk, 8, 128, device=dev, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    if a.backend == "cudnn":
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            for _ in range(a.calls):
                F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
    extra = {}
    if a.page:
        import decode
        k, v, table, lens = decode.paged(k, v, a.page)
        extra = dict(cache_seqlens=lens, block_table=table)
    for _ in range(a.calls if a.backend == "tiletune" else 0):
        tiletune.flash_attn_with_kvcache(q, k, v, config=a.config, **extra)
    torch.cuda.synchronize()
    print(f"B{a.batch} Lq{a.lq} Lk{a.lk}{f' page {a.page}' if a.page else ''}: {a.config or 'default'}")


if __name__ == "__main__":
    main()
