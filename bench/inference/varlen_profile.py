"""bench/inference/decode.py's mixed varlen batch run a few times through
tiletune.flash_attn_varlen_func, for a profiler to wrap (ncu: one line a
kernel launch, e.g. each row class's launch and its merge):

    ncu --metrics gpu__time_duration.sum -k regex:tt_ python3 bench/inference/varlen_profile.py

SEQS=7 (indices into the batch, comma-separated) profiles those sequences
alone as the varlen batch."""

import itertools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import torch  # noqa: E402

import tiletune  # noqa: E402

LQ = [1, 1, 1, 1, 8, 16, 128, 512]
LK = [4096, 16384, 32768, 1024, 8192, 32768, 8192, 8192]


def main():
    dev, dt, hq, hkv, d = torch.device("cuda:0"), torch.bfloat16, 32, 8, 128
    idx = [int(i) for i in os.environ.get("SEQS", ",".join(map(str, range(len(LQ))))).split(",")]
    lq, lk = [LQ[i] for i in idx], [LK[i] for i in idx]
    cu_q = torch.tensor([0] + list(itertools.accumulate(lq)), dtype=torch.int32, device=dev)
    cu_k = torch.tensor([0] + list(itertools.accumulate(lk)), dtype=torch.int32, device=dev)
    q = torch.randn(sum(lq), hq, d, device=dev, dtype=dt)
    k = torch.randn(sum(lk), hkv, d, device=dev, dtype=dt)
    v = torch.randn_like(k)
    for _ in range(int(os.environ.get("CALLS", "2"))):
        tiletune.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=True)
    torch.cuda.synchronize()
    print("varlen batch: seqlen_q", lq, "seqlen_k", lk)


if __name__ == "__main__":
    main()
