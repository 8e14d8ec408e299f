"""When each split of a batch-1 decode call ends its loop, writes its
partial and, for the merging split, starts and ends its merge, on the
global timer: the one-wave merge against the counter's (run from the root
with TILETUNE_SPLITKV_LL=1 or 0). Writes an edited root source (the
splitkv mainloop inlined, one printf a CTA) and runs the decode through it
($TILETUNE_KERNEL_SOURCE), then reads the lines back:

    python3 THIS SOURCE.cu               # write the edited source
    TILETUNE_KERNEL_SOURCE=SOURCE.cu python3 THIS --run LK CALLS

A development tool: its output is not a timing claim."""
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..")
SRC = os.path.join(ROOT, "src", "kernels")
GT = 'asm volatile("mov.u64 %0, %%globaltimer;" : "=l"'


def ed(s, old, new):
    assert s.count(old) == 1, old
    return s.replace(old, new)


def source():
    main = open(os.path.join(SRC, "splitkv", "mainloop.cuh")).read()
    tid = '    asm volatile("mov.u32 %0, %%tid.x;\\n" : "=r"(tid));\n'
    main = ed(main, tid, tid + "    unsigned long long ta, tb, tc, td, te; " + GT + "(ta));\n")
    main = ed(main, "    cp_wait<0>(); /* nothing may land in shared memory after this */\n    __syncthreads();\n",
              "    cp_wait<0>(); /* nothing may land in shared memory after this */\n    __syncthreads();\n    "
              + GT + "(tb));\n")
    line = ('if (tid == 0) printf("T %d %d %d {m} %llu %llu %llu %llu %llu\\n", (int)blockIdx.x, (int)blockIdx.y, '
            'un.split, ta, tb, tc, {d}, {e});')
    main = ed(main, "#if TT_BLOCK_M <= TT_SPLITKV_FUSED_MAX_BM\n    if (direct || !p.counters) return;\n",
              "    " + GT + "(tc));\n#if TT_BLOCK_M <= TT_SPLITKV_FUSED_MAX_BM\n    if (direct || !p.counters) return;\n")
    main = ed(main, "        if (un.split != nsplit - 1) return;\n",
              "        if (un.split != nsplit - 1) { " + line.format(m=0, d="tc", e="tc") + " return; }\n")
    main = ed(main, "        __syncthreads();\n        if (!last) return;\n    }\n",
              "        __syncthreads();\n        if (!last) { " + line.format(m=0, d="tc", e="tc") + " return; }\n    }\n    "
              + GT + "(td));\n")
    merged = "                    own_lse);\n    }\n#endif\n"
    main = ed(main, merged, "                    own_lse);\n    }\n    __syncthreads();\n    " + GT + "(te));\n    "
              + line.format(m=1, d="td", e="te") + "\n#endif\n")
    root = open(os.path.join(SRC, "sdpa.cu")).read()
    return root.replace("#include TT_MAINLOOP", main)


def run(lk, calls):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import torch
    import tiletune
    q = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, lk, 8, 128, device="cuda", dtype=torch.bfloat16)
    for _ in range(3 + calls):
        tiletune.flash_attn_with_kvcache(q, k, k)
        torch.cuda.synchronize()
        print("CALL", flush=True)


def summarize(text):
    calls, cur = [], []
    for ln in text.splitlines():
        if ln.startswith("CALL"):
            calls.append(cur)
            cur = []
        elif ln.startswith("T "):
            f = ln.split()
            cur.append((int(f[1]), int(f[2]), int(f[3]), int(f[4])) + tuple(int(x) for x in f[5:10]))
    rows = []
    for c in calls[3:]:
        t0 = min(r[4] for r in c)
        units = {}
        for r in c:
            units.setdefault(r[1], []).append(r)
        for u, rs in units.items():
            m = [r for r in rs if r[3] == 1][0]
            loop_last = max(r[5] for r in rs) - t0
            part_last = max(r[6] for r in rs) - t0
            rows.append((loop_last, part_last, m[5] - t0, m[7] - t0, m[8] - t0, max(r[5] for r in rs) - m[5]))
    if not rows:
        return "no trace lines"
    med = lambda i: statistics.median(r[i] for r in rows) / 1000  # noqa: E731
    return (f"{len(rows)} units: median us from the first CTA's start: last loop end {med(0):.2f}, last "
            f"partial issued {med(1):.2f}, merger's loop end {med(2):.2f}, merge start {med(3):.2f}, merge end "
            f"{med(4):.2f}; merger's loop end before the last {med(5):.2f}")


if __name__ == "__main__":
    if sys.argv[1] == "--run":
        run(int(sys.argv[2]), int(sys.argv[3]))
    elif sys.argv[1] == "--summary":
        print(summarize(open(sys.argv[2]).read()))
    else:
        open(sys.argv[1], "w").write(source())
