"""The built-in default of tiletune.sdpa against cuDNN on a few points of
bench/peers.py's grid (batch * seqlen = 16k tokens, heads * head_dim = 2048,
bf16), to A/B a device-code change between two builds, one process each:

    TILETUNE_LIB=A.so python3 bench/dev/ab_dense.py --tag A
    TILETUNE_LIB=B.so python3 bench/dev/ab_dense.py --tag B

Prints per point the default's TFLOP/s, cuDNN's (same process) and their
ratio (triton do_bench medians); the ratio is the number to compare across
the two processes."""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import tiletune  # noqa: E402

POINTS = [(128, 2048, 0), (128, 4096, 0), (128, 8192, 0), (128, 16384, 0), (128, 2048, 1), (128, 8192, 1),
          (64, 4096, 0), (64, 1024, 1), (256, 4096, 0), (256, 8192, 0), (256, 2048, 1)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tag", default="")
    ap.add_argument("--rep", type=int, default=40)
    a = ap.parse_args()
    ratios = []
    for (d, L, causal) in POINTS:
        B, H = max(1, 16384 // L), 2048 // d
        q, k, v = (torch.randn(B, H, L, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flop = 4 * B * H * L * L * d / (2 if causal else 1)
        tt = do_bench(lambda: tiletune.sdpa(q, k, v, is_causal=bool(causal)), rep=a.rep)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            cu = do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)), rep=a.rep)
        ratios.append(cu / tt)
        print(f"{a.tag} d{d} L{L} causal{causal}: tiletune {flop / tt / 1e9:.0f} cuDNN {flop / cu / 1e9:.0f} "
              f"TFLOP/s, x cuDNN {cu / tt:.3f}  ({tiletune.default_config(d, 'bf16', bool(causal), L, L, device=0)})",
              flush=True)
    g = 1.0
    for r in ratios:
        g *= r
    print(f"{a.tag} geomean x cuDNN {g ** (1 / len(ratios)):.3f}", flush=True)


if __name__ == "__main__":
    main()
