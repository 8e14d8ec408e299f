"""A paged KV cache against the same cache contiguous, per decode tile
(stages), in one process: the A/B of a change to the paged loads.

    python3 bench/inference/paged_ab.py [--stages 2 4]

Per (batch, seqlen_k) of bench/inference/decode.py's paged shapes: the
contiguous cache with the built-in default, then pages of 16, 64 and 256
tokens (shuffled page table) with the default decode tile at each listed
stage count; CUDA-graph medians (ms) and the ratio to contiguous."""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import decode  # noqa: E402
import tiletune  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stages", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--pages", type=int, nargs="+", default=[16, 64, 256])
    a = ap.parse_args()
    D, HKV, HQ, DT, DEV = decode.D, decode.HKV, decode.HQ, decode.DT, decode.DEV
    # the device's decode default (contiguous); paged calls get it with each stage count
    base = tiletune.parse_config(tiletune.default_config(D, "bf16", False, 1, 32768, device=0, group=HQ // HKV))
    print("decode default:", tiletune.config_text(base, D, "bf16", False, 1, 32768), flush=True)
    for (B, Lk) in ((1, 32768), (16, 32768), (64, 8192)):
        n = decode.copies_for(2 * B * HKV * Lk * D * 2)
        sets = [(torch.randn(B, 1, HQ, D, device=DEV, dtype=DT), torch.randn(B, Lk, HKV, D, device=DEV, dtype=DT),
                 torch.randn(B, Lk, HKV, D, device=DEV, dtype=DT)) for _ in range(n)]
        tc = decode.safe(decode.graph_time, [(lambda s=s: tiletune.flash_attn_with_kvcache(*s)) for s in sets])
        print(f"B{B} Lk{Lk} contiguous default: {tc:.4f} ms", flush=True)
        for page in a.pages:
            fns = {st: [] for st in a.stages}
            for (q, kc, vc) in sets:
                kp, vp, table, lens = decode.paged(kc, vc, page)
                for st in a.stages:
                    cfg = tiletune.config_text(dict(base, stages=st), D, "bf16", False, 1, Lk)
                    fns[st].append(lambda q=q, kp=kp, vp=vp, t=table, lens=lens, cfg=cfg:
                                   tiletune.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=t,
                                                                    config=cfg))
            for st in a.stages:
                tp = decode.safe(decode.graph_time, fns[st])
                print(f"B{B} Lk{Lk} page {page:3d} stages {st}: {tp:.4f} ms ({tp / tc:.3f}x contiguous)", flush=True)
            del fns
        del sets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
