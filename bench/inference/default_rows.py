#!/usr/bin/env python3
"""Candidate rows for the built-in decode defaults, side by side: each
candidate config (and the shipped default: at each batch the row
tt_sdpa_fwd runs untuned for a call that size) timed through tt_sdpa_fwd at
each key's two batches, the two the worker tunes a decode key at (its own,
and the second batch across the split line: docs/tuning.md, "Decode
across batches"), in the same process. Per key and batch every config's
time over the fastest of the set; per config its worst and geometric mean
over all of them: the row to ship is the one whose worst case holds.

Timing: CUDA graphs over copies of the inputs (256 MB a replay, L2 cold),
every config once a round, three rounds alternating (each round
starting one config later), the median of the rounds
(bench/inference/decode.py's graph_time; grid.py's calls).

    python3 bench/inference/default_rows.py --out OUT \\
        --keys 128:2:4096:8,64:1:1024:4 \\
        --configs "block_m=16,block_n=128,...;block_m=16,block_n=64,..."

A key is head_dim:seqlen_q:seqlen_k:group, bf16, 32 query heads,
bottom-right causal where seqlen_q > 1. Writes OUT/default-rows.csv and
OUT/default-rows.md.
"""
import argparse
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

ROUNDS = 3
HEADS_Q = 32
# The worker's batches for an inference key (src/tuner/worker/search.c:
# INFER_KV_BYTES, INFER_BATCH_MAX, CROSS_WAVES, CROSS_KV_BYTES, with
# tt_wcross_batch's rule); the log prints the batches it took.
KV_BYTES, BATCH_MAX, CROSS_WAVES, CROSS_KV = 256 << 20, 8, 4, 2 << 30


def batches(d, lk, g, sms):
    """(own batch, second batch or 0) the worker times a decode key at."""
    hkv = max(1, HEADS_Q // g)
    per_seq = 4 * hkv * lk * d
    own = max(1, min(BATCH_MAX, KV_BYTES // per_seq))
    if own * hkv >= sms:
        return own, (1 if own > 1 else 0)
    want = (CROSS_WAVES * sms + hkv - 1) // hkv
    b = min(want, CROSS_KV // per_seq, 65535)
    return own, (b if b > own else 0)


def parse_keys(text):
    out = []
    for k in text.split(","):
        if k:
            d, lq, lk, g = (int(x) for x in k.split(":"))
            out.append((d, lq, lk, g))
    return out


def row_of(d, lq, lk, g):
    """The key as grid.calls reads it."""
    regime = "decode" if lq <= 16 else "chunk" if 4 * lq <= lk else "prefill"
    return dict(dtype="bf16", head_dim=d, causal=2 if lq > 1 else 0, seqlen_q=lq, seqlen_k=lk, group=g,
                regime=regime)


def call_default(d, lq, lk, g, b):
    """The row tt_sdpa_fwd runs untuned for a call of batch b: the batch
    picks among the rows (a chunk filling the GPU goes dense, wide decode)."""
    import tiletune
    return tiletune.default_config(d, "bf16", row_of(d, lq, lk, g)["causal"], lq, lk, device=0, group=g, batch=b,
                                   heads=HEADS_Q)


def precompile(torch, grid, keys, cands, sms, bs=()):
    """Each (config, key) kernel compiled on threads (grid.py's
    precompile_configs), so the timing rounds find them loaded or in the
    cubin cache."""
    pairs = []
    for (d, lq, lk, g) in keys:
        r = row_of(d, lq, lk, g)
        defaults = [call_default(d, lq, lk, g, b) for b in bs or batches(d, lk, g, sms) if b]
        for c in defaults + cands:
            try:
                pairs.append((r, grid.canon(c, d, "bf16")))
            except Exception:  # noqa: BLE001 (the timing reports it)
                pass
    grid.precompile_configs(torch, pairs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--keys", required=True, help="comma list of head_dim:seqlen_q:seqlen_k:group")
    ap.add_argument("--configs", required=True, help="semicolon list of config texts (family splitkv implied)")
    ap.add_argument("--budget-s", type=float, default=400)
    ap.add_argument("--batches", default="", help="comma list: these batches for every key, not its tune batches")
    args = ap.parse_args()
    import torch
    import decode  # noqa: F401 (graph_time)
    import grid
    if not torch.cuda.is_available():
        raise SystemExit("default_rows.py: no CUDA device")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    keys = parse_keys(args.keys)
    cands = [c if c.startswith("family=") else "family=splitkv," + c for c in args.configs.split(";") if c]
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    forced = [int(x) for x in args.batches.split(",") if x]
    precompile(torch, grid, keys, cands, sms, forced)
    rows = []
    for (d, lq, lk, g) in keys:
        r = row_of(d, lq, lk, g)
        # a candidate's text for this head dim; one the head dim cannot take is left out
        named = {"default": None}
        for i, c in enumerate(cands):
            try:
                named[f"c{i}"] = grid.canon(c, d, "bf16")
            except Exception as e:  # noqa: BLE001
                print(f"d{d}: c{i} left out ({type(e).__name__}: {str(e)[:100]})", flush=True)
        for b in forced or [x for x in batches(d, lk, g, sms) if x]:
            if time.time() - t0 > args.budget_s:
                print(f"budget of {args.budget_s:.0f} s reached", flush=True)
                break
            named["default"] = call_default(d, lq, lk, g, b)
            hkv = HEADS_Q // g
            copies = decode.copies_for(2 * (2 * b * HEADS_Q * lq * d + 2 * b * hkv * lk * d))
            fns = {}
            for n, c in named.items():
                try:
                    fns[n] = grid.calls(torch, r, c, b, HEADS_Q, lq, lk, copies)
                except Exception as e:  # noqa: BLE001
                    print(f"  {n}: {type(e).__name__}: {str(e)[:120]}", flush=True)
            per = {n: [] for n in fns}
            # each round starts one config later: the first timed of a
            # round read up to 7% slower than the same config later in it
            names = list(fns)
            for i in range(ROUNDS):
                for n in names[i % len(names):] + names[:i % len(names)]:
                    per[n].append(decode.safe(decode.graph_time, fns[n]))
            ms = {n: statistics.median(v) for n, v in per.items()}
            best = min(v for v in ms.values() if not math.isnan(v))
            for n, v in ms.items():
                rows.append(dict(head_dim=d, seqlen_q=lq, seqlen_k=lk, group=g, batch=b, name=n, config=named[n],
                                 ms=v, over_best=v / best))
            print(f"d{d} q{lq} k{lk} g{g} b{b}: " +
                  " ".join(f"{n} {ms[n]:.4f} ({ms[n] / best:.3f})" for n in ms), flush=True)
            del fns
            torch.cuda.empty_cache()
    with open(os.path.join(args.out, "default-rows.csv"), "w") as f:
        f.write("head_dim,seqlen_q,seqlen_k,group,batch,name,config,ms,over_best\n")
        for r in rows:
            f.write(f"{r['head_dim']},{r['seqlen_q']},{r['seqlen_k']},{r['group']},{r['batch']},{r['name']},"
                    f"\"{r['config']}\",{r['ms']:.5f},{r['over_best']:.4f}\n")
    with open(os.path.join(args.out, "default-rows.md"), "w") as f:
        f.write("| head dim | name | config | points | worst over best | at | geomean |\n"
                "|---|---|---|---|---|---|---|\n")
        for d in sorted({r["head_dim"] for r in rows}):
            for n in dict.fromkeys(r["name"] for r in rows if r["head_dim"] == d):
                pts = [r for r in rows if r["head_dim"] == d and r["name"] == n and not math.isnan(r["ms"])]
                if not pts:
                    continue
                w = max(pts, key=lambda r: r["over_best"])
                gm = math.exp(sum(math.log(r["over_best"]) for r in pts) / len(pts))
                cfgs = sorted({r["config"] for r in pts})
                f.write(f"| {d} | {n} | {'; '.join(cfgs)} | {len(pts)} | {w['over_best']:.3f} | "
                        f"q{w['seqlen_q']} k{w['seqlen_k']} g{w['group']} b{w['batch']} | {gm:.3f} |\n")
    print(open(os.path.join(args.out, "default-rows.md")).read(), flush=True)


if __name__ == "__main__":
    main()
