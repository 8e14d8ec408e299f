"""Decode attention as it runs inside a model step, not back to back.

bench/inference/decode.py times attention calls replayed back to back: the
kernel's code stays in the L2 cache and in the SMs' instruction caches
from one call to the next. In a server every layer's attention sits
between projections that stream their weights through L2 (a 4096 x 8192
bf16 projection is 64 MB, more than the H200's 50 MB L2) and run their
own code on every SM, so attention starts with its code cold, as under a
profiler that flushes the caches between kernels.

Here each attention call follows such a projection (x [B, 4096] @ W
[4096, 8192], one weight copy of 64 MB a call, so the weights are cold
too), in one CUDA graph; the attention's time is the step's median minus
the projection's alone, for torch auto (cuDNN), tiletune's built-in
default and the listed configs, in the same process:

    python3 bench/inference/in_step.py [--shapes B:Lk,...] [--configs "a;b"] [--rounds 3]

Prints one line a shape and backend (ms; the step, the projection, their
difference) and, per shape, torch auto / tiletune default (above 1:
tiletune faster)."""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import decode  # noqa: E402

HIDDEN, PROJ = 4096, 8192  # one projection's weights: 64 MB in bf16


def step_fns(attn_fns, xs, ws):
    """One callable a copy: the projection, then (if any) the attention."""
    out = []
    for i in range(len(xs)):
        x, w = xs[i], ws[i % len(ws)]
        a = attn_fns[i % len(attn_fns)] if attn_fns else None

        def f(x=x, w=w, a=a):
            torch.matmul(x, w)
            if a is not None:
                a()
        out.append(f)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1:1024,1:4096,1:32768,16:32768", help="B:Lk,...")
    ap.add_argument("--configs", default="", help="';'-separated splitkv configs besides the default")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; the median of each")
    a = ap.parse_args()
    shapes = [(int(s.split(":")[0]), int(s.split(":")[1])) for s in a.shapes.split(",")]
    extra = [c for c in a.configs.split(";") if c]
    n = 8  # projections and attention inputs a graph rotates through
    ws = [torch.randn(HIDDEN, PROJ, device=decode.DEV, dtype=decode.DT) for _ in range(n)]
    print(f"in-step decode on {torch.cuda.get_device_name()}: Hq {decode.HQ}, Hkv {decode.HKV}, d {decode.D}, "
          f"bf16; each call after a {HIDDEN}x{PROJ} projection", flush=True)
    for (B, Lk) in shapes:
        xs = [torch.randn(B, HIDDEN, device=decode.DEV, dtype=decode.DT) for _ in range(n)]
        sets = decode.make_inputs(B, 1, Lk, n)
        backends = [("torch-auto", [decode.torch_fn(None, *s) for s in sets]),
                    ("tt-default", [decode.tt_fn(None, *s) for s in sets])]
        backends += [(c, [decode.tt_fn(c, *s) for s in sets]) for c in extra]
        res = {name: [] for name, _ in backends}
        for _ in range(a.rounds):
            base = decode.graph_time(step_fns(None, xs, ws), reps=7, min_calls=32)
            for name, fns in backends:
                t = decode.safe(decode.graph_time, step_fns(fns, xs, ws), 7, 32)
                res[name].append((t, base))
        attn = {}
        for name, _ in backends:
            attn[name] = sorted(t - b for t, b in res[name])[a.rounds // 2]
            t, b = sorted(res[name])[a.rounds // 2]
            print(f"B{B} Lk{Lk} {name}: step {t:.4f} projection {b:.4f} attention {attn[name]:.4f} ms", flush=True)
        print(f"B{B} Lk{Lk}: torch auto / tiletune default in a step "
              f"{attn['torch-auto'] / attn['tt-default']:.3f}x (above 1: tiletune faster)", flush=True)
        del sets, xs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
