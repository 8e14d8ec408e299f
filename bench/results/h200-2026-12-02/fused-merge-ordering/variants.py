"""Edited splitkv sources for the fused merge's A/B runs and traces, each
used as $TILETUNE_KERNEL_SOURCE (python3 THIS OUTDIR, from the root).

On the source before the change (the parent of the commit that added this
folder, src/kernels checked out from it), it writes:
  nomerge.cu   every split returns after writing its partial: no counter,
               no merge (the merge's whole cost; wrong output)
  rel.cu       thread 0's atom.acq_rel after the barrier, no fence.sc
  rel0.cu      thread 0's fence.sc, atomicAdd, fence.sc after the barrier
  trace.cu, trace-rel.cu, trace-rel0.cu
               the product and the two above with one printf per CTA of a
               split grid: globaltimer at entry, loop end, after the
               counter, after the merge (timeline.py reads them)
  twice.cu     rel.cu with the last split's merge run twice, each timed
On the source after it: twice-after.cu, the product's merge run twice.
"""
import os
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(ROOT, "..", "..", "..", "dev"))
import trace_ctas as t  # noqa: E402

GT = 'asm volatile("mov.u64 %0, %%globaltimer;" : "=l"'


def ed(s, old, new):
    assert s.count(old) == 1, old
    return s.replace(old, new)


def trace_of(src):
    entry = '    asm volatile("mov.u32 %0, %%tid.x;\\n" : "=r"(tid));\n'
    stamp = lambda v: f"    unsigned long long {v}; " + GT + f"({v}));\n"  # noqa: E731
    line = ('if (tid == 0) printf("T %d %d %d %u {last} %llu %llu %llu %llu\\n", (int)blockIdx.x, '
            '(int)blockIdx.y, (int)blockIdx.z, tt_sm, tt_a, tt_b, tt_c, {end});')
    tr = ed(src, entry, entry + stamp("tt_a"))
    out = "    /* Out: 8 columns a thread, coalesced."
    tr = ed(tr, out, stamp("tt_b") + out)
    tr = ed(tr, "    if (!last) return;\n",
            stamp("tt_c") + '    unsigned tt_sm; asm volatile("mov.u32 %0, %%smid;" : "=r"(tt_sm));\n'
            "    if (!last) { " + line.format(last=0, end="tt_c") + " return; }\n")
    merged = "        combine_row(p, (i64)tok * p.heads_q + h, un.b, sq.qoff + i, h, lane, nsplit);\n    }\n"
    tr = ed(tr, merged + "#endif\n",
            merged + "    __syncthreads();\n" + stamp("tt_d") + "    " + line.format(last=1, end="tt_d") + "\n#endif\n")
    return tr


OLD = """    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        int *ctr = p.counters + ((i64)un.b * p.heads_kv + un.hk) * p.qblocks + un.qb;
        last = atomicAdd(ctr, 1) == nsplit - 1;
        if (last) *ctr = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
"""

# thread 0's counter update after the barrier, in two forms; both from OLD
ATOM = """        int old;
        asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], 1;\\n" : "=r"(old) : "l"(ctr) : "memory");
        last = old == nsplit - 1;
"""
ADD = "        last = atomicAdd(ctr, 1) == nsplit - 1;\n"
FENCE = "    __threadfence();\n"
NO_FENCES = OLD.replace(FENCE, "")
REL = NO_FENCES.replace(ADD, ATOM)
REL0 = NO_FENCES.replace(ADD, "    " + FENCE + ADD).replace("        if (last) *ctr = 0;\n",
                                                          "        if (last) *ctr = 0;\n    " + FENCE)


def twice(src):
    """The last split's merge loop (from the source itself) run twice, each timed."""
    at = src.index("    if (!last) return;\n")
    a = src.index("    for (int r = warp; r < BM; r += NW) {\n", at)
    b = src.index("#endif\n", a)
    body = src[a:b]
    new = ("    unsigned long long tt_m[3];\n#pragma unroll 1\n    for (int pass = 0; pass < 2; ++pass) {\n"
           "    " + GT + "(tt_m[pass]));\n" + body + "    __syncthreads();\n    }\n"
           "    " + GT + "(tt_m[2]));\n"
           '    if (tid == 0) printf("M %llu %llu\\n", tt_m[1] - tt_m[0], tt_m[2] - tt_m[1]);\n')
    return src[:a] + new + src[b:]



def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    base = t.edited_source(trace=False)

    def write(name, text):
        with open(os.path.join(out, name), "w") as f:
            f.write(text)

    if OLD not in base:
        write("twice-after.cu", twice(base))
        return
    write("nomerge.cu", ed(base, "    if (direct || !p.counters) return;\n", "    return;\n"))
    write("trace.cu", trace_of(base))
    for name, new in (("rel", REL), ("rel0", REL0)):
        write(f"{name}.cu", ed(base, OLD, new))
        write(f"trace-{name}.cu", trace_of(ed(base, OLD, new)))
    write("twice.cu", twice(ed(base, OLD, REL)))


if __name__ == "__main__":
    main()
