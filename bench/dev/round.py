#!/usr/bin/env python3
"""One device round: correctness over the shape list, then a timing sweep of
variants next to PyTorch's flash (FA2) and cuDNN backends.

    PYTHONUNBUFFERED=1 python3 bench/dev/round.py --cubins .kbuild/r1 \
        --check-variants CHECK --sweep-space round1 --out $OUT
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check  # noqa: E402
import space  # noqa: E402
from ttk import Kernels  # noqa: E402

DT = {0: torch.float16, 1: torch.bfloat16}

# Variants used for the correctness pass: every knob value appears.
CHECK = {
    "default": [(64, 64, 4, 2, 1, 0), (128, 128, 8, 3, 1, 1), (64, 32, 4, 1, 0, 1),
                (256, 64, 8, 1, 1, 0), (128, 64, 4, 1, 1, 0), (128, 128, 4, 1, 1, 0)],
    256: [(64, 64, 4, 2, 1, 0), (128, 128, 8, 1, 1, 0), (64, 16, 4, 4, 1, 1),
          (64, 64, 4, 1, 1, 0)],
}


def check_variants(d):
    return CHECK.get(d, CHECK["default"])


def correctness(K, log, defines="", variants=None):
    fails = 0
    n = 0
    for D in (32, 64, 96, 128, 256):
        for dt in (0, 1):
            for causal in (0, 1):
                shapes = [(2, 3, 3, L, L, False) for L in (1, 17, 128, 1000, 4096)]
                shapes += [(1, 4, 4, 100, 333, False), (1, 4, 4, 333, 100, False),
                           (2, 6, 2, 257, 257, False), (2, 4, 4, 300, 300, True),
                           (1, 6, 3, 1, 65, True)]
                vs = variants(D) if variants else check_variants(D)
                for vi, var in enumerate(v for v in vs if space.legal(v, D)):
                    for (B, Hq, Hkv, Lq, Lk, blhd) in shapes:
                        if vi > 0 and Lq == 4096:
                            continue  # the long shape once per key is enough
                        ok, r = check.check_one(K, var, B, Hq, Hkv, Lq, Lk, D, DT[dt],
                                                bool(causal), blhd, defines=defines)
                        n += 1
                        rec = dict(kind="check", defines=defines, D=D, dt=dt, causal=causal, var=var,
                                   shape=(B, Hq, Hkv, Lq, Lk, blhd), ok=ok, **r)
                        log.write(json.dumps(rec) + "\n")
                        if not ok:
                            fails += 1
                            if fails <= 25:
                                print("FAIL", rec)
    print(f"correctness: {n - fails}/{n} pass")
    return fails


def flops(B, H, Lq, Lk, D, causal):
    f = 4.0 * B * H * Lq * Lk * D
    return f / 2 if causal else f


def time_fn(fn):
    return do_bench(fn, warmup=5, rep=25, return_mode="median")


def spilled(K, var, D, dt, causal):
    """Variants ptxas spilled are outside the space: skip them."""
    rep = getattr(K, "report", None)
    if rep is None:
        path = os.path.join(K.cubin_dir or "", "report.json")
        rep = K.report = json.load(open(path)) if os.path.exists(path) else {}
    r = rep.get(check.variant_name(var, D, dt, causal))
    return bool(r and (r["spill"] or r["stack"]))


def ab(K, pairs, seqlens, log, dts=(0,)):
    """A/B of an extra define (same variant, same run)."""
    for D, var, defines in pairs:
        H = 2048 // D
        for L in seqlens:
            B = 16384 // L
            for causal, dt in [(c, d) for c in (0, 1) for d in dts]:
                q, k, v = check.make(B, H, H, L, L, D, DT[dt])
                out = torch.empty_like(q)
                lse = torch.empty((B, H, L), device="cuda", dtype=torch.float32)
                fl = flops(B, H, L, L, D, causal)
                tf = []
                for d in ("", defines, "", defines):
                    ms = time_fn(lambda: K.sdpa(q, k, v, bool(causal), None, var, out=out,
                                                lse=lse, defines=d))
                    tf.append(fl / ms / 1e9)
                log.write(json.dumps(dict(kind="ab", D=D, L=L, dt=dt, causal=causal, var=var,
                                          defines=defines, tflops=tf)) + "\n")
                print(f"AB d{D} L{L} dt{dt} c{causal} {var}: base {tf[0]:.0f}/{tf[2]:.0f}  "
                      f"{defines} {tf[1]:.0f}/{tf[3]:.0f}", flush=True)


def sweep(K, vfun, hdims, seqlens, dts, causals, log, table):
    for D in hdims:
        H = 2048 // D
        for L in seqlens:
            B = 16384 // L
            for dt in dts:
                for causal in causals:
                    q, k, v = check.make(B, H, H, L, L, D, DT[dt])
                    fl = flops(B, H, L, L, D, causal)
                    res = {}
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        ref = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                        res["flash"] = time_fn(lambda: F.scaled_dot_product_attention(
                            q, k, v, is_causal=bool(causal)))
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        res["cudnn"] = time_fn(lambda: F.scaled_dot_product_attention(
                            q, k, v, is_causal=bool(causal)))
                    out = torch.empty_like(q)
                    lse = torch.empty((B, H, L), device="cuda", dtype=torch.float32)
                    best = None
                    for var in vfun(D):
                        if spilled(K, var, D, dt, causal):
                            continue
                        try:
                            K.function(var, D, dt, causal)
                        except Exception as e:  # missing cubin etc.
                            log.write(json.dumps(dict(kind="skip", var=var, err=str(e))) + "\n")
                            continue
                        out.fill_(float("nan"))
                        K.sdpa(q, k, v, bool(causal), None, var, out=out, lse=lse)
                        torch.cuda.synchronize()
                        err = check.rel(out, ref.double())
                        ms = time_fn(lambda: K.sdpa(q, k, v, bool(causal), None, var,
                                                    out=out, lse=lse))
                        tf = fl / ms / 1e9
                        rec = dict(kind="time", D=D, L=L, dt=dt, causal=causal, var=var,
                                   ms=ms, tflops=tf, err_vs_flash=err)
                        log.write(json.dumps(rec) + "\n")
                        if err < 1e-2 and (best is None or ms < best[0]):
                            best = (ms, var)
                    row = dict(D=D, L=L, dt=dt, causal=causal,
                               flash=fl / res["flash"] / 1e9, cudnn=fl / res["cudnn"] / 1e9,
                               best=fl / best[0] / 1e9 if best else 0,
                               best_var=best[1] if best else None)
                    log.write(json.dumps(dict(kind="row", **row)) + "\n")
                    table.append(row)
                    print(f"d{D} L{L} dt{dt} c{causal}: flash {row['flash']:.0f} "
                          f"cudnn {row['cudnn']:.0f} best {row['best']:.0f} {row['best_var']}",
                          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cubins", default=None)
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--ab", action="store_true")
    ap.add_argument("--packed", action="store_true", help="check + A/B of EXP2_PACKED=1")
    ap.add_argument("--sweep-space", default="round1")
    ap.add_argument("--hdims", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--seqlens", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--dtypes", type=int, nargs="+", default=[0])
    ap.add_argument("--causal", type=int, nargs="+", default=[0, 1])
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    K = Kernels(a.cubins)
    t0 = time.time()
    with open(os.path.join(a.out, "round.jsonl"), "w") as log:
        fails = 0 if a.no_check else correctness(K, log)
        if a.packed:
            pv = {256: [(64, 64, 4, 2, 1, 0), (128, 128, 8, 1, 1, 0)]}
            pfails = correctness(K, log, "EXP2_PACKED=1",
                                 lambda D: pv.get(D, [(64, 64, 4, 2, 1, 0), (128, 64, 4, 1, 1, 0)]))
            print(f"packed exp2 correctness fails={pfails}", flush=True)
            ab(K, [(128, (128, 64, 4, 1, 1, 0), "EXP2_PACKED=1"),
                   (64, (128, 128, 4, 1, 1, 0), "EXP2_PACKED=1"),
                   (256, (128, 128, 8, 1, 1, 0), "EXP2_PACKED=1")], (2048, 8192), log,
               dts=(0, 1))
        print(f"[{time.time() - t0:.0f}s] correctness done, fails={fails}", flush=True)
        if a.ab:
            ab(K, [(128, (128, 64, 4, 1, 1, 0), "RESCALE_SKIP=0"),
                   (128, (256, 64, 8, 1, 1, 0), "RESCALE_SKIP=0"),
                   (64, (128, 128, 4, 1, 1, 0), "RESCALE_SKIP=0"),
                   (256, (128, 64, 8, 1, 1, 0), "RESCALE_SKIP=0"),
                   (256, (128, 128, 8, 1, 1, 0), "RESCALE_SKIP=0")], (1024, 8192), log)
        table = []
        vfun = getattr(space, a.sweep_space, None)
        if a.sweep_space != "none":
            sweep(K, vfun, a.hdims, a.seqlens, a.dtypes, a.causal, log, table)
    print(f"[{time.time() - t0:.0f}s] done")
    print("D     L  dt c  flash cudnn  best  x_fa2  best_var")
    for r in table:
        print(f"{r['D']:3d} {r['L']:5d} {r['dt']} {r['causal']} {r['flash']:6.0f} {r['cudnn']:5.0f} "
              f"{r['best']:5.0f} {r['best'] / r['flash']:5.2f}  {r['best_var']}")


if __name__ == "__main__":
    main()
