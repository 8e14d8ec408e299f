#!/usr/bin/env python3
"""A decode key tuned at one batch and run at another (a key has no
batch): each key is tuned by the real daemon and worker at batch 1 and at
batch 64 (fresh databases, `tiletune tune --batch N`, fast mode), and both
winners are timed at both batches in the same process (CUDA graphs over
copies of the inputs, L2 cold, median; bench/inference/decode.py's
timing; each distinct config once a round, three rounds alternating, the
median of the rounds). Per key and batch B: the time of the key tuned at B, of the key
tuned at the other batch, and their ratio, the target's measure (within
10%, both ways); also the built-in default's time there.

The worker decides across batches itself (docs/tuning.md, "Decode across
batches"); TILETUNE_WORKER_ARGS is not needed. Its log lines ("decode key
at batch ...") are in OUT/tuned-<batch>.log.

    python3 bench/inference/cross_batch.py --build BUILD --out OUT [--keys 1:8192,8:8192]

Writes OUT/cross-batch.csv and OUT/cross-batch.md.
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import decode  # noqa: E402
from tune import Daemon, fresh_db, key_args  # noqa: E402

BATCHES = (1, 64)
ROUNDS = 3
DEFAULT_KEYS = "1:4096,1:8192,1:32768,8:8192"


def key_of(lq, lk):
    """The key's arguments to `tiletune tune` and `lookup`: bf16, d128, GQA
    32/8, bottom-right causal with more than one query token."""
    causal = ["--causal=bottom-right"] if lq > 1 else []
    return key_args((lq, lk, decode.HQ // decode.HKV, decode.D, "bf16", 0)) + causal


def tune(build, out, run, batch, keys, cap_s):
    """{(lq, lk): winner config text} of the keys tuned at `batch`."""
    db = fresh_db(os.path.join(out, f"tuned-{batch}.db"))
    d = Daemon(build, run, db, os.path.join(out, f"tuned-{batch}.log"),
               cache=os.environ.get("TILETUNE_CACHE_DIR"))
    won = {}
    try:
        if not d.wait_gpu():
            raise SystemExit("the daemon's worker found no GPU")
        t0 = time.time()
        for lq, lk in keys:
            d.call("tune", *key_of(lq, lk), "--mode", "fast", "--batch", str(batch))
        d.wait_idle(cap_s, t0)
        print(f"tuned at batch {batch}: {len(keys)} keys in {time.time() - t0:.0f} s", flush=True)
        for lq, lk in keys:
            r = json.loads(d.call("lookup", *key_of(lq, lk), "--json").stdout)
            won[(lq, lk)] = r["config_text"] if r["match"] == "exact" else None
    finally:
        d.stop()
    return won


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--keys", default=DEFAULT_KEYS, help="comma list of seqlen_q:seqlen_k")
    ap.add_argument("--cap-s", type=float, default=240, help="tuning time per batch")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    os.makedirs(args.out, exist_ok=True)
    keys = [tuple(int(x) for x in k.split(":")) for k in args.keys.split(",") if k]
    run = tempfile.mkdtemp(prefix="tt-cross.")
    try:
        os.makedirs(os.path.join(run, "cache"))
        won = {b: tune(args.build, args.out, run, b, keys, args.cap_s) for b in BATCHES}
    finally:
        shutil.rmtree(run, ignore_errors=True)
    rows = []
    for lq, lk in keys:
        cfgs = {b: won[b][(lq, lk)] for b in BATCHES}
        for b in BATCHES:
            other = BATCHES[1] if b == BATCHES[0] else BATCHES[0]
            sets = decode.make_inputs(b, lq, lk, decode.copies_for(2 * b * decode.HKV * lk * decode.D * 2))
            # each distinct config once a round, rounds alternating, the
            # median of the rounds: the boost clock drifts by a few percent
            # over seconds, and one config timed twice in a row read 6% apart
            names = {"own": cfgs[b], "other": cfgs[other], "default": None}
            uniq = list(dict.fromkeys(c for n, c in names.items() if c is not None or n == "default"))
            per = {c: [] for c in uniq}
            for _ in range(ROUNDS):
                for c in uniq:
                    per[c].append(decode.safe(decode.graph_time,
                                              [decode.tt_fn(c, *s, causal=lq > 1) for s in sets[:8]]))
            t = {n: (statistics.median(per[c]) if c is not None or n == "default" else float("nan"))
                 for n, c in names.items()}
            del sets
            row = dict(seqlen_q=lq, seqlen_k=lk, batch=b, tuned_here=cfgs[b], tuned_at_other=cfgs[other],
                       own_ms=t["own"], other_ms=t["other"], default_ms=t["default"],
                       other_over_own=t["other"] / t["own"], default_over_own=t["default"] / t["own"])
            rows.append(row)
            print(f"Lq {lq} Lk {lk} batch {b}: tuned here {t['own']:.4f} ms, tuned at batch {other} "
                  f"{t['other']:.4f} ms ({row['other_over_own']:.3f}x), default {t['default']:.4f} ms", flush=True)
    with open(os.path.join(args.out, "cross-batch.csv"), "w") as f:
        f.write(",".join(rows[0]) + "\n")
        for r in rows:
            f.write(",".join(f"{v:.5f}" if isinstance(v, float) else f'"{v}"' if isinstance(v, str) else str(v)
                             for v in r.values()) + "\n")
    with open(os.path.join(args.out, "cross-batch.md"), "w") as f:
        f.write("| Lq | Lk | run at batch | tuned here ms | tuned at the other batch ms | ratio | default ms |"
                " same config |\n|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write(f"| {r['seqlen_q']} | {r['seqlen_k']} | {r['batch']} | {r['own_ms']:.4f} | {r['other_ms']:.4f} "
                    f"| {r['other_over_own']:.3f} | {r['default_ms']:.4f} | "
                    f"{'yes' if r['tuned_here'] == r['tuned_at_other'] else 'no'} |\n")
        f.write("\nWinners:\n\n")
        for lq, lk in keys:
            for b in BATCHES:
                f.write(f"- Lq {lq} Lk {lk} tuned at batch {b}: `{won[b][(lq, lk)]}`\n")
    worst = max(r["other_over_own"] for r in rows)
    print(f"worst tuned-elsewhere / tuned-here: {worst:.3f}x (target: within 1.10)", flush=True)


if __name__ == "__main__":
    main()
