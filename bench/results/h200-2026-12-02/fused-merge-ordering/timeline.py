"""The fused merge's timeline from variants.py's traced sources.

    TILETUNE_KERNEL_SOURCE=trace.cu python3 timeline.py --run > timeline.txt
    python3 timeline.py timeline.txt ...

--run calls batch-1 decode (GQA 32/8, d128, bf16; 4k then 32k keys) six
times each, one input, synchronizing after each call; every CTA of the split
grid prints a line (printf). The analysis groups the lines by call and
prints, per call, the spread of the main loops' ends and, for the CTAs that
merged (the last of each unit), the time from the loop's end to the
counter (partial out, ordering, atomic) and from there to the merge's end,
in ns. "M" lines (twice.cu) are the merge's first and second run."""
import statistics as st
import sys


def run():
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "inference"))
    import torch
    import decode
    for B, Lk in ((1, 4096), (1, 32768)):
        f = decode.tt_fn(None, *decode.make_inputs(B, 1, Lk, 1)[0])
        for _ in range(6):
            f()
            torch.cuda.synchronize()


def analyse(fn):
    rows = [l.split() for l in open(fn) if l.startswith("T ")]
    # x y z sm last entry loop_end counter end
    rows = sorted((tuple(int(v) for v in r[1:10]) for r in rows), key=lambda r: r[5])
    calls, cur = [], []
    for r in rows:
        if cur and r[5] - cur[-1][5] > 200000:
            calls.append(cur)
            cur = []
        cur.append(r)
    if cur:
        calls.append(cur)
    print(fn)
    for c in calls:
        a0 = min(r[5] for r in c)
        ends = sorted(r[6] - a0 for r in c)
        last = [r for r in c if r[4] == 1]
        out = st.median(r[7] - r[6] for r in last)
        merge = st.median(r[8] - r[7] for r in last)
        print(f"  {len(c)} CTAs: loop end min/median/max {ends[0]}/{ends[len(ends) // 2]}/{ends[-1]}; "
              f"merging CTAs: out+counter {out:.0f}, merge {merge:.0f}; last end {max(r[8] - a0 for r in c)}")
    m = [tuple(int(v) for v in l.split()[1:3]) for l in open(fn) if l.startswith("M ")]
    if m:
        print(f"  merge run twice: first {st.median(x[0] for x in m):.0f}, second {st.median(x[1] for x in m):.0f}"
              f" (medians of {len(m)})")


if __name__ == "__main__":
    if sys.argv[1:] == ["--run"]:
        run()
    else:
        for f in sys.argv[1:]:
            analyse(f)
