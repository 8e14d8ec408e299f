"""A paged KV cache against the same cache contiguous, per decode tile,
in one process: the A/B of a change to the paged loads or of the decode
default's tile.

    python3 bench/inference/paged_ab.py [--tiles 64:2:4 64:4:4 128:3:4]
    python3 bench/inference/paged_ab.py --default [--rounds 15] [--shapes 1:4096,1:32768]

Per (batch, seqlen_k) of bench/inference/decode.py's paged shapes: the
contiguous cache with the built-in default, then each tile (block_n:
stages:warps over the default decode config) contiguous and on pages of
16, 64 and 256 tokens (shuffled page table); CUDA-graph medians (ms) and
the ratios to the contiguous default and to the tile's own contiguous
time. --default: the built-in default alone, contiguous and on each page
size timed interleaved (decode.interleaved_times): medians and the paged /
contiguous ratios, one process per build to A/B a change to the paged
loads."""

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
    ap.add_argument("--tiles", nargs="+", default=["64:2:4", "64:4:4"], help="block_n:stages:warps")
    ap.add_argument("--pages", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--default", action="store_true", help="the default only, interleaved")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--shapes", default="", help="--default's B:Lk,... (default: decode.PAGED_SHAPES)")
    a = ap.parse_args()
    if a.default:
        shapes = [tuple(int(x) for x in s.split(":")) for s in a.shapes.split(",") if s] or decode.PAGED_SHAPES
        for (B, Lk) in shapes:
            runs = decode.paged_runs(B, Lk, a.pages)
            per = decode.interleaved_times([(label, fns) for label, _, fns in runs], a.rounds)
            med = {k: statistics.median(v) for k, v in per.items()}
            c = med.get("contiguous", float("nan"))
            print(f"B{B} Lk{Lk} contiguous {c:.4f} ms " + " ".join(
                f"{k} {v:.4f} ({v / c:.3f}x)" for k, v in med.items() if k != "contiguous"), flush=True)
            del runs, per
            torch.cuda.empty_cache()
        return
    D, HKV, HQ, DT, DEV = decode.D, decode.HKV, decode.HQ, decode.DT, decode.DEV
    # the device's decode default (contiguous); each tile is this config with its knobs
    base = tiletune.parse_config(tiletune.default_config(D, "bf16", False, 1, 32768, device=0, group=HQ // HKV))
    print("decode default:", tiletune.config_text(base, D, "bf16", False, 1, 32768), flush=True)
    for (B, Lk) in ((1, 32768), (16, 32768), (64, 8192)):
        n = decode.copies_for(2 * B * HKV * Lk * D * 2)
        sets = [(torch.randn(B, 1, HQ, D, device=DEV, dtype=DT), torch.randn(B, Lk, HKV, D, device=DEV, dtype=DT),
                 torch.randn(B, Lk, HKV, D, device=DEV, dtype=DT)) for _ in range(n)]
        tc = decode.safe(decode.graph_time, [(lambda s=s: tiletune.flash_attn_with_kvcache(*s)) for s in sets])
        print(f"B{B} Lk{Lk} contiguous default: {tc:.4f} ms", flush=True)
        tiles = {}
        for spec in a.tiles:
            bn, st, w = (int(x) for x in spec.split(":"))
            cfg = tiletune.config_text(dict(base, block_n=bn, stages=st, warps=w), D, "bf16", False, 1, Lk)
            own = decode.safe(decode.graph_time, [(lambda s=s, cfg=cfg: tiletune.flash_attn_with_kvcache(*s, config=cfg))
                                                  for s in sets])
            tiles[spec] = (cfg, own)
            print(f"B{B} Lk{Lk} tile {spec} contiguous: {own:.4f} ms ({own / tc:.3f}x the default)", flush=True)
        for page in a.pages:
            fns = {spec: [] for spec in tiles}
            for (q, kc, vc) in sets:
                kp, vp, table, lens = decode.paged(kc, vc, page)
                for spec, (cfg, _) in tiles.items():
                    fns[spec].append(lambda q=q, kp=kp, vp=vp, t=table, lens=lens, cfg=cfg:
                                     tiletune.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=t,
                                                                      config=cfg))
            for spec, (cfg, own) in tiles.items():
                tp = decode.safe(decode.graph_time, fns[spec])
                print(f"B{B} Lk{Lk} page {page:3d} tile {spec}: {tp:.4f} ms ({tp / tc:.3f}x the contiguous default, "
                      f"{tp / own:.3f}x its own contiguous)", flush=True)
            del fns
        del sets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
