"""Host time per call of tiletune.sdpa against F.scaled_dot_product_attention
on a decode problem, where the kernel takes ~10 us and the host side sets
the speed: query 1x32x1x128, key/value 1x8x512x128 (grouped-query), bf16.

    python3 bench/python_overhead.py [--calls 50] [--rounds 400]

Each round synchronizes, then times `calls` back-to-back calls on the host
clock (short enough that the launch queue never fills, so the GPU never
holds the host up) and keeps the time per call; the figure is the median
over rounds. The GPU time per call (CUDA events over the same rounds) is
printed beside it: while it is below the host time, the host is the limit.
Prints one key=value line per contender and a Markdown table."""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.environ.get("TILETUNE_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(ROOT, "python"))
import tiletune  # noqa: E402


def measure(fn, calls, rounds):
    for _ in range(20):  # warm up: compile, load, plan
        fn()
    torch.cuda.synchronize()
    host, dev = [], []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(rounds):
        torch.cuda.synchronize()
        start.record()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        end.record()
        end.synchronize()
        host.append((t1 - t0) / calls * 1e6)
        dev.append(start.elapsed_time(end) / calls * 1e3)
    return statistics.median(host), statistics.median(dev)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=400)
    args = ap.parse_args()
    torch.manual_seed(0)
    q = torch.randn(1, 32, 1, 128, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(1, 8, 512, 128, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(1, 8, 512, 128, dtype=torch.bfloat16, device="cuda")
    ref = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    got = tiletune.sdpa(q, k, v, enable_gqa=True)
    err = ((got.double() - ref.double()).norm() / ref.double().norm()).item()
    assert err < 2e-2, f"tiletune.sdpa disagrees with torch: relative error {err:.3g}"

    sdpa_switched = None

    def switched():
        return sdpa_switched(q, k, v, enable_gqa=True)

    contenders = [
        ("F.scaled_dot_product_attention", lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)),
        ("tiletune.sdpa", lambda: tiletune.sdpa(q, k, v, enable_gqa=True)),
        ("torch.ops.tiletune.sdpa", lambda: torch.ops.tiletune.sdpa(q, k, v, False, None, True)),
        ("F.sdpa under tiletune.attention()", switched),
    ]
    rows = []
    with torch.inference_mode():
        for name, fn in contenders:
            if fn is switched:
                with tiletune.attention():
                    sdpa_switched = F.scaled_dot_product_attention
                    host, dev = measure(fn, args.calls, args.rounds)
            else:
                host, dev = measure(fn, args.calls, args.rounds)
            rows.append((name, host, dev))
            print(f"overhead name={name.replace(' ', '_')} host_us={host:.2f} gpu_us={dev:.2f}")
    gpu = torch.cuda.get_device_name()
    print(f"\nMeasured {time.strftime('%Y-%m-%d')} by `bench/python_overhead.py` on {gpu}, torch "
          f"{torch.__version__}, tiletune {tiletune.__version__}; decode problem q 1x32x1x128, "
          f"k/v 1x8x512x128 bf16, enable_gqa; median of {args.rounds} rounds of {args.calls} calls.\n")
    print("| call | host µs per call | GPU µs per call |")
    print("|---|--:|--:|")
    for name, host, dev in rows:
        print(f"| {name} | {host:.1f} | {dev:.1f} |")
    base = rows[0][1]
    print(f"\ntiletune.sdpa host time <= F.scaled_dot_product_attention's: "
          f"**{'met' if rows[1][1] <= base else 'missed'}** ({rows[1][1]:.1f} vs {base:.1f} µs)")
    print(tiletune.stats())


if __name__ == "__main__":
    main()
