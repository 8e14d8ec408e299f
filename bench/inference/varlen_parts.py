"""Where bench/inference/decode.py's mixed varlen batch spends its time:
the whole batch in one launch (the library's choice and fixed tiles),
each sequence alone through the same entry point (its own default, and
the tile the whole batch gets), and the batch's decode, speculative and
chunk sequences as three varlen calls. CUDA-graph medians (ms), L2 cold.

    python3 bench/inference/varlen_parts.py [--fixed]
    python3 bench/inference/varlen_parts.py --against-dense [--rounds 11]

--fixed adds the whole batch under fixed tiles and each sequence under
the tile the whole batch gets. TILETUNE_SPLITKV_VARLEN=host (env) gives
the splits counted on the host alone, for an A/B; TILETUNE_SPLITKV_CLASS_ROWS
the packed rows of the short row class (0: one splitkv launch for all).

--against-dense: the whole batch and each sequence's dense run (through
tt_sdpa_fwd_kvcache, on inputs of its own, L2 cold as decode.py's) timed
interleaved: medians, the sum of the dense runs and the ratio."""

import argparse
import itertools
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import decode  # noqa: E402
import tiletune  # noqa: E402

LQ = [1, 1, 1, 1, 8, 16, 128, 512]
LK = [4096, 16384, 32768, 1024, 8192, 32768, 8192, 8192]
FIXED = {
    "16x64 w4 s4": decode.cfg_text(16, 64, 4, 4, 1, 0),
    "16x128 w4 s3": decode.cfg_text(16, 128, 4, 3, 1, 0),
    "64x64 w4 s2": decode.cfg_text(64, 64, 4, 2, 0, 0),
    "128x64 w8 s2": decode.cfg_text(128, 64, 8, 2, 0, 0),
    "128x64 w8 s4": decode.cfg_text(128, 64, 8, 4, 0, 0),
}


def batch(idx, sets):
    """The sequences idx of every input copy as one varlen call each."""
    lq, lk = [LQ[i] for i in idx], [LK[i] for i in idx]
    cu_q = torch.tensor([0] + list(itertools.accumulate(lq)), dtype=torch.int32, device=decode.DEV)
    cu_k = torch.tensor([0] + list(itertools.accumulate(lk)), dtype=torch.int32, device=decode.DEV)
    oq = [0] + list(itertools.accumulate(LQ))
    ok = [0] + list(itertools.accumulate(LK))
    out = []
    for q, k, v in sets:
        qs = torch.cat([q[oq[i]:oq[i + 1]] for i in idx])
        ks = torch.cat([k[ok[i]:ok[i + 1]] for i in idx])
        vs = torch.cat([v[ok[i]:ok[i + 1]] for i in idx])
        out.append((qs, ks, vs))
    return out, cu_q, cu_k, max(lq), max(lk)


def timed(idx, sets, cfg):
    parts, cu_q, cu_k, mq, mk = batch(idx, sets)
    return decode.safe(decode.graph_time, [
        (lambda s=s: tiletune.flash_attn_varlen_func(s[0], s[1], s[2], cu_q, cu_k, mq, mk, causal=True, config=cfg))
        for s in parts])


def against_dense(rounds):
    D, HKV, HQ, DT, DEV = decode.D, decode.HKV, decode.HQ, decode.DT, decode.DEV
    n = decode.copies_for(2 * sum(LK) * HKV * D * 2)
    sets = [(torch.randn(sum(LQ), HQ, D, device=DEV, dtype=DT), torch.randn(sum(LK), HKV, D, device=DEV, dtype=DT),
             torch.randn(sum(LK), HKV, D, device=DEV, dtype=DT)) for _ in range(n)]
    parts, cu_q, cu_k, mq, mk = batch(list(range(len(LQ))), sets)
    runs = [("varlen", [(lambda s=s: tiletune.flash_attn_varlen_func(s[0], s[1], s[2], cu_q, cu_k, mq, mk,
                                                                     causal=True)) for s in parts])]
    for b in range(len(LQ)):
        fns = []
        for _ in range(decode.copies_for(2 * LK[b] * HKV * D * 2 + 2 * LQ[b] * HQ * D * 2)):
            qd = torch.randn(1, LQ[b], HQ, D, device=DEV, dtype=DT)
            kd = torch.randn(1, LK[b], HKV, D, device=DEV, dtype=DT)
            fns.append(lambda qd=qd, kd=kd, vd=torch.randn_like(kd): tiletune.flash_attn_with_kvcache(
                qd, kd, vd, causal=True))
        runs.append((f"dense{b}", fns))
    per = decode.interleaved_times(runs, rounds)
    med = {k: statistics.median(v) for k, v in per.items()}
    dense = sum(v for k, v in med.items() if k != "varlen")
    print("class rows:", os.environ.get("TILETUNE_SPLITKV_CLASS_ROWS", "default"), flush=True)
    print("dense runs: " + " ".join(f"{LQ[b]}x{LK[b]} {med[f'dense{b}']:.4f}" for b in range(len(LQ))))
    print(f"varlen {med['varlen']:.4f} ms, sum of dense {dense:.4f} ({med['varlen'] / dense:.3f}x)", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--against-dense", action="store_true")
    ap.add_argument("--rounds", type=int, default=11)
    a = ap.parse_args()
    fixed = a.fixed
    if a.against_dense:
        return against_dense(a.rounds)
    D, HKV, HQ, DT, DEV = decode.D, decode.HKV, decode.HQ, decode.DT, decode.DEV
    print("splits counted on the", os.environ.get("TILETUNE_SPLITKV_VARLEN", "device"), flush=True)
    n = decode.copies_for(2 * sum(LK) * HKV * D * 2)
    sets = [(torch.randn(sum(LQ), HQ, D, device=DEV, dtype=DT), torch.randn(sum(LK), HKV, D, device=DEV, dtype=DT),
             torch.randn(sum(LK), HKV, D, device=DEV, dtype=DT)) for _ in range(n)]
    if fixed:
        decode.precompile(list(FIXED.values()), (True,))
    everything = list(range(len(LQ)))
    print("whole batch, one launch:", flush=True)
    print(f"  library's choice {timed(everything, sets, None):.4f}", flush=True)
    for name, cfg in FIXED.items() if fixed else ():
        print(f"  {name:14s} {timed(everything, sets, cfg):.4f}", flush=True)
    print("each sequence alone (Lq, Lk): own default | 128x64 w8 s2 | 16x64 w4 s4", flush=True)
    own = big = 0.0
    nan = float("nan")
    for i in everything:
        a = timed([i], sets, None)
        b = timed([i], sets, FIXED["128x64 w8 s2"]) if fixed else nan
        c = timed([i], sets, FIXED["16x64 w4 s4"]) if fixed and LQ[i] * HQ // HKV <= 16 else nan
        print(f"  {LQ[i]:4d} {LK[i]:6d}: {a:.4f} | {b:.4f} | {c:.4f}", flush=True)
        own, big = own + a, big + b
    print(f"  sum: own defaults {own:.4f}, all 128x64 {big:.4f}", flush=True)
    groups = {"decode": [0, 1, 2, 3], "spec": [4, 5], "chunks": [6, 7]}
    tot = 0.0
    for name, idx in groups.items():
        t = timed(idx, sets, None)
        tot += t
        print(f"{name} sequences as one varlen call: {t:.4f}", flush=True)
    print(f"three calls: {tot:.4f}", flush=True)


if __name__ == "__main__":
    main()
