"""bench/inference/decode.py's mixed varlen batch on the GPU's clock: its
CUDA graph (back-to-back calls on input copies, as decode.py times it)
replayed under torch.profiler, each kernel's stream, start and duration
(µs) within its call, medians over the replay's calls.

    python3 bench/inference/varlen_timeline.py

Env switches (TILETUNE_SIDE_STREAM, TILETUNE_SPLITKV_CLASS_ROWS) apply as
to any run of the library."""

import collections
import itertools
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import decode  # noqa: E402
import tiletune  # noqa: E402

LQ = [1, 1, 1, 1, 8, 16, 128, 512]
LK = [4096, 16384, 32768, 1024, 8192, 32768, 8192, 8192]


def main():
    D, HKV, HQ, DT, DEV = decode.D, decode.HKV, decode.HQ, decode.DT, decode.DEV
    n = decode.copies_for(2 * sum(LK) * HKV * D * 2)
    cu_q = torch.tensor([0] + list(itertools.accumulate(LQ)), dtype=torch.int32, device=DEV)
    cu_k = torch.tensor([0] + list(itertools.accumulate(LK)), dtype=torch.int32, device=DEV)
    sets = [(torch.randn(sum(LQ), HQ, D, device=DEV, dtype=DT), torch.randn(sum(LK), HKV, D, device=DEV, dtype=DT),
             torch.randn(sum(LK), HKV, D, device=DEV, dtype=DT)) for _ in range(n)]
    fns = [(lambda s=s: tiletune.flash_attn_varlen_func(s[0], s[1], s[2], cu_q, cu_k, max(LQ), max(LK),
                                                        causal=True)) for s in sets]
    g, calls = decode.make_graph(fns)
    for _ in range(20):
        g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        g.replay()
        torch.cuda.synchronize()
    ev = sorted(((e.start_ns(), e.duration_ns(), e.name(), e.device_resource_id())
                 for e in prof.profiler.kineto_results.events()
                 if e.device_type() == torch.autograd.DeviceType.CUDA and e.name().startswith("tt_")),
                key=lambda x: x[0])
    # the calls run one after another (each joins its side stream before
    # the next forks), so a call is its share of the kernels by start;
    # within it a kernel is named by (stream, name, its n-th on them)
    per_call = len(ev) // calls
    streams = sorted({e[3] for e in ev})
    rows = collections.defaultdict(list)
    spans = []
    for c in range(calls):
        part = ev[c * per_call:(c + 1) * per_call]
        t0 = min(p[0] for p in part)
        spans.append((max(p[0] + p[1] for p in part) - t0) / 1e3)
        seen = collections.Counter()
        for st, du, name, stream in part:
            key = (streams.index(stream), name, seen[(stream, name)])
            seen[(stream, name)] += 1
            rows[key].append(((st - t0) / 1e3, du / 1e3))
    print(f"side stream {os.environ.get('TILETUNE_SIDE_STREAM', '1')}, class rows "
          f"{os.environ.get('TILETUNE_SPLITKV_CLASS_ROWS', 'default')}: {calls} calls, {per_call} kernels a call, "
          f"call span median {statistics.median(spans):.1f} us (first kernel start to last kernel end)")
    for key in sorted(rows, key=lambda k: statistics.median(x[0] for x in rows[k])):
        r = rows[key]
        print(f"  stream {key[0]} {key[1]:28s} #{key[2]} start {statistics.median(x[0] for x in r):7.1f}"
              f" dur {statistics.median(x[1] for x in r):7.1f} (calls {len(r)})")

if __name__ == "__main__":
    main()
