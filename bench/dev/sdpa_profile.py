"""One dense SDPA shape run a few times through tiletune.sdpa (or torch's
cuDNN), for a profiler to wrap:

    python3 bench/dev/sdpa_profile.py --seqlen 8192 --hdim 128 [--causal]
        [--config TEXT] [--backend tiletune|cudnn] [--calls 3]

bench/peers.py's grid point: batch * seqlen = 16k tokens, heads * head_dim
= 2048, bf16, [B, H, L, D]."""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tiletune  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--config", default=None)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--backend", default="tiletune", choices=("tiletune", "cudnn"))
    a = ap.parse_args()
    B, H = max(1, 16384 // a.seqlen), 2048 // a.hdim
    q, k, v = (torch.randn(B, H, a.seqlen, a.hdim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    for _ in range(a.calls):
        if a.backend == "cudnn":
            from torch.nn.attention import SDPBackend, sdpa_kernel
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)
        else:
            tiletune.sdpa(q, k, v, is_causal=a.causal, config=a.config)
    torch.cuda.synchronize()
    print(f"B{B} H{H} L{a.seqlen} d{a.hdim} causal={a.causal}: {a.backend} {a.config or 'default'}")


if __name__ == "__main__":
    main()
