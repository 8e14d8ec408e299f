#!/usr/bin/env python3
"""When each CTA of a splitkv decode call starts and ends, and on which SM.

PM sampling on the H200 showed splitkv's B16 x 32k decode losing DRAM
throughput through the second half of its run and ending over seven
samples where cuDNN's kernel of the same grid ends over three
(docs/perf.md): its CTAs drift apart. This runs the decode through an
edited copy of the kernel source ($TILETUNE_KERNEL_SOURCE; the product's
source is untouched) whose CTAs, after their own work, write their start
and end on the global timer and their SM into the log-sum-exp slots of
their own rows (a KV head's group of 4 query heads holds the 4 words), so
only unsplit grids (split_ctas=0 at batch 16 or 64) are traced.

    python3 bench/dev/trace_ctas.py [--batch 16 --lk 32768] [--calls 20] [--config TEXT ...]
        [--refill top|after-s|after-softmax] [--define NAME=VAL ...]
    python3 bench/dev/trace_ctas.py --write-source FILE [--no-trace] [--refill ...] [--define ...]

--refill moves the main loop's refill of the ring (the copy of tile
j + ST - 1, issued at the top of iteration j) after the S = QK^T tile or
after the softmax: fewer bytes in flight while a tile's math runs, more
while its P V runs, a copy depth between ST - 1 and ST - 2 tiles.
--define puts a macro atop the source, for a compile-time switch an
edited mainloop reads (#ifndef NAME, as kv-apart.diff's TT_KV_APART in
bench/results/h200-2026-12-02/kv-apart-work-queue/): one build, one
source a variant, no knob.
--write-source writes the edited source and stops (for
$TILETUNE_KERNEL_SOURCE in bench/inference/compare.py and the float64
tests, to A/B the refill against the product's source).

Prints per config: the spread of starts, the median CTA's time, how far
the ends trail the median end (p90, last), and the SMs whose CTAs run
longest on average over the calls, with how well the first half of the
calls predicts the second (a slow SM or chance). A development tool: not
part of the product, its output not a timing claim.
"""
import argparse
import os
import re
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "src", "kernels")

HEAD = """extern "C" __global__ void __launch_bounds__(NT) tt_sdpa_fwd_kernel(tt_splitkv_params p) {
    extern __shared__ __align__(128) unsigned char smem[];
"""
TRACE = """    __syncthreads();
    if (threadIdx.x == 0 && p.lse && p.splits == 1 && p.bal_ctas == 0 && p.group >= 4) {
        unsigned long long t1;
        unsigned sm;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        unsigned *l = (unsigned *)(p.lse + (i64)un.b * p.lse_batch_stride + (i64)un.hk * p.group * p.lse_head_stride);
        const unsigned w[4] = {(unsigned)tt_t0, (unsigned)t1, sm, (unsigned)(tt_t0 >> 32)};
        for (int g = 0; g < 4; ++g) l[(i64)g * p.lse_head_stride] = w[g];
    }
}
"""


REFILL_TOP = """        if (j + ST - 1 < t_end) load_kv((jj + ST - 1) % ST, j + ST - 1, true);
        cp_commit();
"""
INACTIVE = "        if (!active) continue;\n"
REFILL_AT = {
    "after-s": "        const int n0 = j * BN + wk * WN;\n",
    "after-softmax": "        /* O += P V, P straight from the S accumulators. */\n",
}


def edit(text, old, new, what):
    if text.count(old) != 1:
        sys.exit(f"trace_ctas: {what} is not where this tool expects it in splitkv/mainloop.cuh")
    return text.replace(old, new)


def edited_source(trace=True, refill="top", defines=()):
    root = "".join(f"#define {d.replace('=', ' ', 1)}\n" for d in defines)
    root += open(os.path.join(SRC, "sdpa.cu")).read()
    main = open(os.path.join(SRC, "splitkv", "mainloop.cuh")).read()
    if trace:
        main = edit(main, HEAD, HEAD + "    unsigned long long tt_t0;\n"
                    "    asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(tt_t0));\n", "the kernel's entry")
        # the entry's closing brace: the first line that is exactly "}" after it
        at = main.index(HEAD)
        end = re.compile(r"^}\n", re.M).search(main, at)
        main = main[:end.start()] + TRACE + main[end.end():]
    if refill != "top":
        # every thread copies its share, so warps that skip the math copy
        # before they leave the iteration
        main = edit(main, REFILL_TOP, "", "the ring's refill")
        main = edit(main, INACTIVE, "        if (!active) {\n    " + REFILL_TOP.replace("\n        ", "\n            ")
                    + "            continue;\n        }\n", "the inactive warps' exit")
        main = edit(main, REFILL_AT[refill], REFILL_TOP + REFILL_AT[refill], "the refill's new place")
    if "#include TT_MAINLOOP" not in root:
        sys.exit("trace_ctas: sdpa.cu no longer includes TT_MAINLOOP")
    return root.replace("#include TT_MAINLOOP", main)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lk", type=int, default=32768)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--refill", default="top", choices=("top", "after-s", "after-softmax"))
    ap.add_argument("--define", action="append", default=[],
                    help="NAME=VAL atop the source (a compile-time switch A/B-ed without a knob)")
    ap.add_argument("--write-source", default=None)
    ap.add_argument("--no-trace", action="store_true")
    a = ap.parse_args()
    if a.write_source:
        with open(a.write_source, "w") as f:
            f.write(edited_source(trace=not a.no_trace, refill=a.refill, defines=a.define))
        return
    configs = a.config or [
        "family=splitkv,block_m=16,block_n=128,warps=4,stages=3,layout=pad,q_in_regs=1,split_ctas=0",
        "family=splitkv,block_m=16,block_n=128,warps=8,stages=3,layout=pad,q_in_regs=1,split_ctas=0",
        "family=splitkv,block_m=16,block_n=64,warps=4,stages=2,layout=pad,q_in_regs=1,split_ctas=0",
    ]
    src = tempfile.NamedTemporaryFile("w", suffix=".cu", delete=False)
    src.write(edited_source(refill=a.refill, defines=a.define))
    src.close()
    os.environ["TILETUNE_KERNEL_SOURCE"] = src.name
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import torch
    import tiletune

    B, Lk, HQ, HKV, D = a.batch, a.lk, 32, 8, 128
    dev = torch.device("cuda:0")
    q = torch.randn(B, 1, HQ, D, device=dev, dtype=torch.bfloat16)
    k = torch.randn(B, Lk, HKV, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(B, Lk, HKV, D, device=dev, dtype=torch.bfloat16)
    print(f"B{B} Lk{Lk}, GQA {HQ}/{HKV}, d{D} bf16, cache [B, Lk, Hkv, D]; {a.calls} calls each; "
          f"refill {a.refill}" + "".join(f", {d}" for d in a.define))
    for cfg in configs:
        calls = []
        for c in range(a.calls + 2):
            _, lse = tiletune.flash_attn_with_kvcache(q, k, v, return_softmax_lse=True, config=cfg)
            torch.cuda.synchronize()
            w = lse.contiguous().view(torch.int32).reshape(B, HKV, 4).cpu().to(torch.int64) & 0xFFFFFFFF
            t0 = (w[..., 3] << 32) | w[..., 0]
            t1 = (t0 & ~0xFFFFFFFF) | w[..., 1]
            t1 = torch.where(t1 < t0, t1 + (1 << 32), t1)
            if c >= 2:  # the first two compile and warm up
                calls.append((t0.flatten().tolist(), t1.flatten().tolist(), w[..., 2].flatten().tolist()))
        if any(x < 0 or x > 4096 for x in calls[0][2]):
            print(f"\n{cfg}\n  not traced: this call splits its units (the LSE slots hold the merge's values)")
            continue
        spread, med, p90, last, dur_by_sm = [], [], [], [], {}
        halves = ({}, {})
        for n, (t0, t1, sm) in enumerate(calls):
            s0 = min(t0)
            ends = sorted(e - s0 for e in t1)
            me = statistics.median(ends)
            spread.append((max(t0) - s0) / 1e3)
            med.append(me / 1e3)
            p90.append((ends[int(0.9 * (len(ends) - 1))] - me) / 1e3)
            last.append((ends[-1] - me) / 1e3)
            durs = [e - s for s, e in zip(t0, t1)]
            md = statistics.median(durs)
            for s, d in zip(sm, durs):
                dur_by_sm.setdefault(s, []).append(d / md)
                halves[0 if n < len(calls) // 2 else 1].setdefault(s, []).append(d / md)
        print(f"\n{cfg}")
        print(f"  CTAs {len(calls[0][0])}; medians over calls: starts spread {statistics.median(spread):.2f} us, "
              f"median end {statistics.median(med):.1f} us after the first start, ends after the median: "
              f"p90 {statistics.median(p90):.2f} us, last {statistics.median(last):.2f} us")
        mean = {s: statistics.mean(x) for s, x in dur_by_sm.items()}
        slow = sorted(mean, key=mean.get, reverse=True)
        print("  slowest SMs (mean CTA time / the call's median): " +
              ", ".join(f"{s}:{mean[s]:.3f}" for s in slow[:12]))
        print("  fastest SMs: " + ", ".join(f"{s}:{mean[s]:.3f}" for s in slow[-6:]))
        idle = sorted(set(range(max(mean) + 1)) - set(mean))
        print(f"  SMs that ran no CTA: {idle}")
        print("  every SM by id (mean CTA time / median): " +
              " ".join(f"{s}:{mean[s]:.3f}" for s in sorted(mean)))
        both = [s for s in halves[0] if s in halves[1]]
        if len(both) > 2:
            x = [statistics.mean(halves[0][s]) for s in both]
            y = [statistics.mean(halves[1][s]) for s in both]
            mx, my = statistics.mean(x), statistics.mean(y)
            cov = sum((i - mx) * (j - my) for i, j in zip(x, y))
            sx = sum((i - mx) ** 2 for i in x) ** 0.5
            sy = sum((j - my) ** 2 for j in y) ** 0.5
            print(f"  an SM's slowness, first half of the calls against the second: r = {cov / (sx * sy):.2f} "
                  f"over {len(both)} SMs")
    os.unlink(src.name)


if __name__ == "__main__":
    main()
