/*
 * Family splitkv: attention for inference shapes (decode, speculative
 * decode, chunked prefill) on mma.sync m16n8k16, ldmatrix and 16-byte
 * cp.async (sm_80 and later).
 *
 * - Packed GQA: a CTA works on one KV head; its rows are (query position x
 *   the heads_q / heads_kv query heads sharing that KV head), so each K/V
 *   tile is read once per group. One decode token of group 4 is 4 rows of a
 *   16-row tile.
 * - Small tiles: 16 or 32 packed rows; the warps then split the K/V tile's
 *   keys (each warp an online softmax over its slice) and merge through
 *   shared memory at the end. Larger tiles split rows first (FlashAttention-2).
 * - Split-KV: blockIdx.x = query block * splits + split; a split takes a
 *   contiguous range of the CTA's key tiles. With splits > 1 it writes its
 *   normalized O (fp32) and LSE to the workspace and tt_splitkv_combine_kernel
 *   merges them; with one split it writes O and LSE itself.
 * - Paged KV (block table, power-of-two pages), per-sequence KV lengths,
 *   variable-length packed batches (cumulative lengths): runtime addressing,
 *   uniform per CTA. Paged or contiguous, and a paged cache's page size,
 *   are compiled in (TT_SKV_PAGED, TT_SKV_PAGE_SHIFT): each program holds
 *   one copy path.
 *
 * The family's device file (TT_MAINLOOP under sdpa.cu), over its own
 * contract splitkv/params.h rather than skeleton.cuh: its CTA is one KV
 * head's packed rows, its warps may split keys, and a split writes fp32
 * partial results, none of which the skeleton's tile coordinates and
 * epilogue describe. No system headers: 16-bit values are raw bits.
 */
#ifndef TT_KERNELS_SPLITKV_MAINLOOP_CUH
#define TT_KERNELS_SPLITKV_MAINLOOP_CUH

#include "splitkv/params.h"

#if !defined(TT_BLOCK_M) || !defined(TT_BLOCK_N) || !defined(TT_WARPS) || !defined(TT_STAGES) || \
    !defined(TT_HEAD_DIM) || !defined(TT_DTYPE) || !defined(TT_CAUSAL)
#error "splitkv/mainloop.cuh: every TT_ knob and problem macro must be defined"
#endif
/* The legal space; splitkv/family.c's check mirrors these rules. */
#if TT_HEAD_DIM != 32 && TT_HEAD_DIM != 64 && TT_HEAD_DIM != 128 && TT_HEAD_DIM != 256
#error "family splitkv: TT_HEAD_DIM must be 32, 64, 128 or 256"
#endif
#if TT_BLOCK_M != 16 && TT_BLOCK_M != 32 && TT_BLOCK_M != 64 && TT_BLOCK_M != 128
#error "family splitkv: TT_BLOCK_M must be 16, 32, 64 or 128"
#endif
#if TT_WARPS < 1 || TT_WARPS > 8
#error "family splitkv: TT_WARPS must be 1..8"
#endif
#if TT_STAGES < 2 || TT_STAGES > 4
#error "family splitkv: TT_STAGES must be 2..4"
#endif
#ifndef TT_Q_IN_REGS
#define TT_Q_IN_REGS 1
#endif
#if TT_Q_IN_REGS != 0 && TT_Q_IN_REGS != 1
#error "TT_Q_IN_REGS must be 0 or 1"
#endif
#if TT_CAUSAL < 0 || TT_CAUSAL > 2
#error "TT_CAUSAL must be 0, 1 (top-left) or 2 (bottom-right)"
#endif
#if TT_DTYPE != 0 && TT_DTYPE != 1
#error "TT_DTYPE must be 0 (fp16) or 1 (bf16)"
#endif
/* 1: K and V through a block table (p.block_table is set), 0: a contiguous
 * cache (it is not). One program held both copy paths, the paged one's
 * 2,200 instructions between the contiguous copy and the math of the main
 * loop: 110 KB of code for the d128 16x128 tile, and on the H200 its
 * warps stalled 1.5 cycles an instruction for instructions not yet
 * fetched (ncu, batch 16 over 1k keys), 0.2 with the contiguous path
 * alone (cuDNN's decode kernel: 0.2). The launch picks the program by the
 * call's cache (splitkv/launch.c). */
#if !defined(TT_SKV_PAGED) || (TT_SKV_PAGED != 0 && TT_SKV_PAGED != 1)
#error "TT_SKV_PAGED must be 0 (contiguous KV) or 1 (paged KV)"
#endif
/* A paged program reads pages of one size, 2^TT_SKV_PAGE_SHIFT tokens:
 * the copy takes one of three page lookups by the page's passes (below),
 * and with the size a run-time value all three were compiled in, 87-107 KB
 * of code against the contiguous program's 58-60 (the instruction fetch
 * that cost the one program for both kinds of cache, above). The launch
 * picks the program by the call's page size. */
#if TT_SKV_PAGED && (!defined(TT_SKV_PAGE_SHIFT) || TT_SKV_PAGE_SHIFT < 0 || TT_SKV_PAGE_SHIFT > 20)
#error "TT_SKV_PAGE_SHIFT must be log2 of the paged program's page size, 0..20"
#endif
#if !TT_SKV_PAGED && defined(TT_SKV_PAGE_SHIFT)
#error "TT_SKV_PAGE_SHIFT is a paged program's (TT_SKV_PAGED 1)"
#endif

typedef unsigned int u32;
typedef unsigned short u16;
typedef tt_skv_i64 i64;

namespace {

constexpr int D = TT_HEAD_DIM;
constexpr int BM = TT_BLOCK_M;
constexpr int BN = TT_BLOCK_N;
constexpr int NW = TT_WARPS;
constexpr int NT = NW * 32;
constexpr int ST = TT_STAGES;
constexpr int CPR = D / 8; /* 16-byte chunks per row */
constexpr int RW = TT_SKV_RW(BM, D);
constexpr int MT = RW / 16;
constexpr int WM = TT_SKV_WM(BM, D);
constexpr int WK = TT_SKV_WK(BM, D, NW);
constexpr int WN = BN / WK;
constexpr int ROW_BYTES = D * 2; /* unpadded: soff's chunk swizzle spreads the banks */
constexpr int OROW = D + 8;            /* fp32 merge row, floats */
constexpr u32 Q_BYTES = BM * ROW_BYTES;
constexpr u32 T_BYTES = BN * ROW_BYTES;
constexpr int RSTEP = NT / CPR; /* rows one pass of the CTA's threads copies */

static_assert(NW % WM == 0 && WK >= 1, "warps must be a multiple of the row warps");
static_assert(BN % WK == 0 && WN % 16 == 0, "each key warp needs a multiple of 16 keys");
static_assert(NT % CPR == 0 && BN % RSTEP == 0, "tile copy shape");
static_assert(MT * (WN + D) / 2 + (TT_Q_IN_REGS ? MT * D / 4 : 0) <= 160, "accumulators leave no room");

/* CTAs an SM the kernel is built for: at d128 with 16 rows, as many as
 * its shared memory fits (the SM's capacity, 1 KB reserved a CTA, a
 * margin for the static block) while each thread keeps 168 registers.
 * ptxas otherwise sizes the registers for one CTA: the 16x64 2-stage tile
 * (69,632 bytes, sized for three an SM) took 193 and ran two. Held to 168
 * it spills nothing; d64 tiles and 32-row ones spilled 200-1500 bytes
 * there, so they keep ptxas' choice. */
#if __CUDA_ARCH__ >= 900 && __CUDA_ARCH__ < 1200
constexpr int SM_SMEM = 228 * 1024;
#elif __CUDA_ARCH__ == 800 || __CUDA_ARCH__ == 870
constexpr int SM_SMEM = 164 * 1024;
#else
constexpr int SM_SMEM = 100 * 1024;
#endif
constexpr int FIT_SMEM = SM_SMEM / (TT_SPLITKV_SMEM_BYTES(BM, BN, D, ST, NW) + 1024 + 256);
constexpr int FIT_REGS = 65536 / (NT * 168);
constexpr int FIT = FIT_SMEM < FIT_REGS ? FIT_SMEM : FIT_REGS;
constexpr int MIN_CTAS = D == 128 && BM == 16 && FIT > 1 ? FIT : 1;

/* The tiles' layout (splitkv/params.h, tt_skv_soff): unpadded rows, the
 * chunk index swizzled by the row. The loops add row offsets that are
 * multiples of 16 rows, under which the swizzle repeats. */
constexpr int SW_ROWS = CPR < 8 ? 8 / CPR : 1; /* rows sharing one 128-byte line */
static_assert(Q_BYTES % 128 == 0 && T_BYTES % 128 == 0 && (ROW_BYTES % 128 == 0 || CPR == 4),
              "tile bases and rows on 128-byte lines: tt_skv_sw_step relies on it");
__device__ __forceinline__ u32 soff(int r, int c) { return tt_skv_soff(D, r, c); }
__device__ __forceinline__ u32 sw_step(u32 p, int kk) { return tt_skv_sw_step(p, kk); }

__device__ __forceinline__ u32 smem_u32(const void *p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}
__device__ __forceinline__ void cp_async16(u32 saddr, const void *g, bool pred) {
    /* src-size 0 zero-fills: rows past the end read nothing */
    /* K/V rows are streamed once: let L2 fetch whole 128-byte lines */
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(g), "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/* a copy known in bounds: no source size to compute */
__device__ __forceinline__ void cp_async16_all(u32 saddr, const void *g) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(saddr), "l"(g));
}
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
/* f(i, true) for i = 0, STEP, ... below N unrolled where `all`, else
 * f(i, false) in a rolled loop: a literal at each call, so each body's
 * other branch folds away. */
template <int N, int STEP, typename F> __device__ __forceinline__ void each_pass(bool all, F &&f) {
    if (all) {
#pragma unroll
        for (int i = 0; i < N; i += STEP) f(i, true);
    } else {
#pragma unroll 1
        for (int i = 0; i < N; i += STEP) f(i, false);
    }
}

__device__ __forceinline__ void ldsm_x4(u32 addr, u32 &r0, u32 &r1, u32 &r2, u32 &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(u32 addr, u32 &r0, u32 &r1, u32 &r2, u32 &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void mma16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if TT_DTYPE == 0
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#endif
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    u32 r;
#if TT_DTYPE == 0
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float lg2(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

/* One sequence's view of the batch: its lengths and first rows. */
struct Seq {
    int Lq, Lk, qoff, koff;
};
__device__ __forceinline__ Seq seq_of(const tt_splitkv_params &p, int b) {
    Seq s;
    s.Lq = p.seqlen_q;
    s.qoff = 0;
    if (p.cu_seqlens_q) {
        s.qoff = p.cu_seqlens_q[b];
        s.Lq = p.cu_seqlens_q[b + 1] - s.qoff;
    }
    s.Lk = p.seqlen_k;
    s.koff = 0;
    if (p.cu_seqlens_k) {
        s.koff = p.cu_seqlens_k[b];
        s.Lk = p.cu_seqlens_k[b + 1] - s.koff;
    }
    if (p.seqlens_k) s.Lk = p.seqlens_k[b];
    /* device-side lengths are trusted, but never read past the maxima */
    s.Lq = max(0, min(s.Lq, p.seqlen_q));
    s.Lk = max(0, min(s.Lk, p.seqlen_k));
    /* a sequence the dense family's launch runs has no rows here */
    if (tt_varlen_dense_takes(p.dense_min_q, TT_CAUSAL, s.Lq, s.Lk)) s.Lq = 0;
    /* nor has one of the other row class's launch */
    if (!tt_skv_class_takes(p.seq_min_q, p.seq_max_q, s.Lq)) s.Lq = 0;
    return s;
}

/* Keys query position i sees: [0, key_limit). */
__device__ __forceinline__ int key_limit(int i, int Lq, int Lk) {
#if TT_CAUSAL == 0
    (void)i;
    (void)Lq;
    return Lk;
#else
    const int off = TT_CAUSAL == 2 ? Lk - Lq : 0;
    return max(0, min(Lk, i + off + 1));
#endif
}

/* Varlen (p.split_slots > 0): the tiles a split takes, chosen once a
 * launch by one CTA of PT threads (the planner, before the main kernel)
 * from the batch's work (params.h, tt_skv_varlen_pick): every sequence's
 * query blocks x key tiles (a causal block counted whole: an upper bound),
 * then the CTAs of each candidate. Written to *p.split_tiles_out for the
 * main kernel and the combine kernel. Counted in every CTA instead, its
 * dependent loads and barriers delayed each CTA's first copy by 3-5 us on
 * the H200, and the grid's empty CTAs paid it too. */
template <int PT> __device__ __forceinline__ void varlen_plan(const tt_splitkv_params &p) {
    constexpr int NC = TT_SKV_CANDIDATES, PW = PT / 32;
    __shared__ i64 part[PW][NC];
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    i64 work = 0, units = 0, longest = 0;
    for (int b = tid; b < p.batch; b += PT) {
        const Seq s = seq_of(p, b);
        const i64 qb = ((i64)s.Lq * p.group + BM - 1) / BM, n = (s.Lk + BN - 1) / BN;
        work += qb * n;
        units += qb;
        if (qb > 0) longest = max(longest, n);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        work += __shfl_xor_sync(0xffffffffu, work, o);
        units += __shfl_xor_sync(0xffffffffu, units, o);
        longest = max(longest, __shfl_xor_sync(0xffffffffu, longest, o));
    }
    if (lane == 0) {
        part[warp][0] = work;
        part[warp][1] = units;
        part[warp][2] = longest;
    }
    __syncthreads();
    work = units = longest = 0;
#pragma unroll
    for (int w = 0; w < PW; ++w) {
        work += part[w][0];
        units += part[w][1];
        longest = max(longest, part[w][2]);
    }
    __syncthreads(); /* part is reused below */
    work *= p.heads_kv;
    units *= p.heads_kv;
    int cand[NC];
    i64 ctas[NC];
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        cand[j] = tt_skv_varlen_candidate(j, work, units, (int)longest, p.split_slots, p.split_tiles);
        ctas[j] = 0;
    }
    for (int b = tid; b < p.batch; b += PT) {
        const Seq s = seq_of(p, b);
        const i64 qb = ((i64)s.Lq * p.group + BM - 1) / BM;
        const int n = (s.Lk + BN - 1) / BN;
#pragma unroll
        for (int j = 0; j < NC; ++j) ctas[j] += qb * tt_skv_unit_splits(n, cand[j]);
    }
#pragma unroll
    for (int j = 0; j < NC; ++j) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ctas[j] += __shfl_xor_sync(0xffffffffu, ctas[j], o);
        if (lane == 0) part[warp][j] = ctas[j];
    }
    __syncthreads();
    if (tid != 0) return;
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        ctas[j] = 0;
#pragma unroll
        for (int w = 0; w < PW; ++w) ctas[j] += part[w][j];
        ctas[j] *= p.heads_kv;
    }
    *p.split_tiles_out = tt_skv_varlen_pick(ctas, cand, (int)longest, p.split_slots);
}

/* A row's max and sum over the key warps' (max, sum) pairs in shared
 * memory ([WK][BM] each), exp2 domain. */
__device__ __forceinline__ void row_stats(const float *sm_m, const float *sm_l, int row, float sl2, float &M,
                                          float &L) {
    M = neg_inf();
    L = 0.f;
#pragma unroll
    for (int w = 0; w < WK; ++w) M = fmaxf(M, sm_m[w * BM + row]);
#pragma unroll
    for (int w = 0; w < WK; ++w) {
        const float mw = sm_m[w * BM + row];
        if (mw != neg_inf()) L += sm_l[w * BM + row] * ex2((mw - M) * sl2);
    }
}

/* Loads another CTA's partial result: .cg reads L2, never a stale L1 line. */
__device__ __forceinline__ float ld_cg(const float *a) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];\n" : "=f"(v) : "l"(a));
    return v;
}

/* Merges the splits of one (token, head) row with one warp: LSE = log-sum-exp
 * of the splits' LSEs, O = sum of exp(lse_s - LSE) O_s. Every lane holds the
 * LSEs of splits lane, lane + 32, ..., so the weights need no memory round
 * trip per split. O is read as float4 columns (lane l: columns 4l..4l+3,
 * and 4l+128.. at head_dim 256) U splits at a time, all U loads issued
 * before the first is used, the first U with the LSEs: a merge of 32
 * splits is two round trips to L2 rather than one per split and column
 * (an earlier loop, a scalar load per column, unrolled 4 with a skip per
 * split, cost ~5 us per fused merge of 32 splits at batch 1). Splits that saw no key (LSE -inf)
 * weigh 0 (their partial O is 0). A row with no key at all gets O = 0 and
 * LSE = p.lse_empty, as the single-split path. */
__device__ __forceinline__ void combine_row(const tt_splitkv_params &p, i64 row, int b, int i, int h, int lane,
                                            int nsplit) {
    const float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;
    const i64 nrows = (i64)p.tokens * p.heads_q;
    constexpr int KS = (TT_SPLITKV_MAX_SPLITS + 31) / 32;
    constexpr int C4 = D / 4;           /* float4 columns of a row */
    constexpr int PER = (C4 + 31) / 32; /* float4 columns a lane */
    /* splits whose O loads are in flight together: 16 float4 a lane (64
     * registers) where a lane holds one column, 8 at head_dim 256 */
    constexpr int U = PER == 1 ? 16 : 8;
    static_assert(32 % U == 0, "a batch of splits within one w[k]");
    float4 x[U][PER];
    /* Split s's row is nrows rows past split s - 1's: one pointer stepped
     * from split to split, each address dead once its load is issued. An
     * address a split, each its own 64-bit product of a clamped index, had
     * ptxas hold all U at once: the merge was this kernel's register peak
     * (104 bytes spilled at the 168 registers of three CTAs an SM) and
     * 1,300 instructions, fetched cold by the one merging CTA of a unit.
     * Splits past the last load nothing: x 0, weight 0. */
    const i64 split_step = nrows * C4; /* float4s */
    auto issue = [&](int s0) {
        const float4 *src = (const float4 *)(p.o_part + ((i64)s0 * nrows + row) * D) + lane;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const bool ok = s0 + u < nsplit;
#pragma unroll
            for (int e = 0; e < PER; ++e) {
                x[u][e] = make_float4(0.f, 0.f, 0.f, 0.f);
                if (ok && lane + 32 * e < C4) asm volatile("ld.global.cg.v4.f32 {%0,%1,%2,%3}, [%4];\n"
                                                           : "=f"(x[u][e].x), "=f"(x[u][e].y), "=f"(x[u][e].z), "=f"(x[u][e].w)
                                                           : "l"(src + 32 * e));
            }
            src += split_step;
        }
    };
    float4 o[PER];
    float lse;
    if (nsplit <= U) {
        /* Up to U splits (batch-1 decode's 16): every lane loads every
         * split's LSE (a broadcast: one line a load), in flight with the O
         * loads, and reduces them itself. The path below's shuffles (two
         * five-step chains, then one a split) lie on the merge's critical
         * path: the batch-1 fused merge took 1.19 us there, 0.87 us here
         * (globaltimer, H200). */
        float l[U];
        const float *lp = p.lse_part + row;
#pragma unroll
        for (int u = 0; u < U; ++u, lp += nrows) l[u] = u < nsplit ? ld_cg(lp) : neg_inf();
        issue(0);
        float mx = neg_inf(), sum = 0.f;
#pragma unroll
        for (int u = 0; u < U; ++u) mx = fmaxf(mx, l[u]);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            l[u] = l[u] == neg_inf() ? 0.f : ex2((l[u] - mx) * LOG2E);
            sum += l[u];
        }
        const bool empty = mx == neg_inf() || !(sum > 0.f);
        lse = empty ? p.lse_empty : mx + lg2(sum) * LN2;
        const float inv = empty ? 0.f : 1.f / sum;
#pragma unroll
        for (int e = 0; e < PER; ++e) {
            float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (lane + 32 * e < C4) {
                    acc.x = fmaf(l[u], x[u][e].x, acc.x);
                    acc.y = fmaf(l[u], x[u][e].y, acc.y);
                    acc.z = fmaf(l[u], x[u][e].z, acc.z);
                    acc.w = fmaf(l[u], x[u][e].w, acc.w);
                }
            o[e] = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
        }
    } else {
        float w[KS];
#pragma unroll
        for (int k = 0; k < KS; ++k) {
            const int s = lane + 32 * k;
            w[k] = s < nsplit ? ld_cg(p.lse_part + s * nrows + row) : neg_inf();
        }
        /* The first U splits' O in flight with the LSEs: the weights wait for
         * the LSEs only (measured neutral on the H200 against LSEs first, then
         * eight O a trip). */
        issue(0);
        float mx = neg_inf();
#pragma unroll
        for (int k = 0; k < KS; ++k) mx = fmaxf(mx, w[k]);
#pragma unroll
        for (int sh = 16; sh > 0; sh >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, sh));
        float sum = 0.f;
#pragma unroll
        for (int k = 0; k < KS; ++k) sum += w[k] == neg_inf() ? 0.f : ex2((w[k] - mx) * LOG2E);
#pragma unroll
        for (int sh = 16; sh > 0; sh >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, sh);
        const bool empty = mx == neg_inf() || !(sum > 0.f);
        lse = empty ? p.lse_empty : mx + lg2(sum) * LN2;
#pragma unroll
        for (int k = 0; k < KS; ++k) w[k] = (empty || w[k] == neg_inf()) ? 0.f : ex2((w[k] - lse) * LOG2E);

#pragma unroll
        for (int e = 0; e < PER; ++e) o[e] = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int s0 = 0; s0 < nsplit; s0 += U) {
            if (s0 > 0) issue(s0);
            /* the weights of splits s0.. sit in lanes s0 % 32.. of w[0]: past
             * each 32 splits the array moves down one (U divides 32, so a
             * batch never straddles two; a select of w[s0 / 32] became an
             * indexed load, and w went to the stack) */
            if (s0 > 0 && (s0 & 31) == 0) {
#pragma unroll
                for (int k = 0; k + 1 < KS; ++k) w[k] = w[k + 1];
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int s = s0 + u;
                float ws = __shfl_sync(0xffffffffu, w[0], s & 31);
                if (s >= nsplit) ws = 0.f;
#pragma unroll
                for (int e = 0; e < PER; ++e)
                    if (lane + 32 * e < C4) {
                        o[e].x = fmaf(ws, x[u][e].x, o[e].x);
                        o[e].y = fmaf(ws, x[u][e].y, o[e].y);
                        o[e].z = fmaf(ws, x[u][e].z, o[e].z);
                        o[e].w = fmaf(ws, x[u][e].w, o[e].w);
                    }
            }
        }
    }
    u16 *dst = (u16 *)p.o + b * p.o_batch_stride + (i64)i * p.o_row_stride + (i64)h * p.o_head_stride;
#pragma unroll
    for (int e = 0; e < PER; ++e)
        if (lane + 32 * e < C4) {
            const u32 lo = pack2(o[e].x, o[e].y), hi = pack2(o[e].z, o[e].w);
            asm volatile("st.global.v2.u32 [%0], {%1,%2};\n" ::"l"(dst + 4 * (lane + 32 * e)), "r"(lo), "r"(hi)
                         : "memory");
        }
    if (lane == 0 && p.lse)
        p.lse[b * p.lse_batch_stride + (i64)h * p.lse_head_stride + (i64)i * p.lse_row_stride] = lse;
}

} // namespace

/* What one pass of a CTA works on: query block qb of sequence b, KV head
 * hk, as split `split` of the `nsplit` CTAs that share its keys, over key
 * tiles [a, e) when a >= 0 (the balanced grid), else the split's share of
 * the block's tiles. Kept in shared memory and read where used: held in
 * registers through the main loop, a 32x128 tile spilled (the grid's own
 * indices, which these replace, cost no register: ptxas rereads them). */
struct Unit {
    int b, hk, qb, split, nsplit, a, e;
    i64 x; /* balanced: the CTA's next tile */
};

template <typename U> __device__ __forceinline__ void run_unit(const tt_splitkv_params &p, unsigned char *smem, const U &un) {
    /* read here, not hoisted out of the balanced grid's loop with all it
     * derives (held through the body, those registers spilled tiles) */
    int tid;
    asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
    const int warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int wm = warp / WK, wk = warp % WK;
    const int G = p.group;
    const bool varlen_split = p.split_slots > 0;
    /* varlen: the planner's choice (it ran before this kernel) */
    int tps = varlen_split ? *p.split_tiles_out : p.split_tiles;
    const Seq sq = seq_of(p, un.b);
    const int rows = sq.Lq * G; /* packed rows of this sequence */
    const int pr0 = un.qb * BM;
    if (pr0 >= rows) return; /* a shorter sequence than the grid's longest */

    const int i_first = pr0 / G, i_last = min(sq.Lq - 1, (pr0 + BM - 1) / G);
    const int kv_end = key_limit(i_last, sq.Lq, sq.Lk);
    const int min_lim = key_limit(i_first, sq.Lq, sq.Lk);
    const int n_tiles = (kv_end + BN - 1) / BN;
    /* a split past a short sequence's tiles is empty: it writes LSE -inf;
     * varlen with split_slots: a unit has its own splits, the others
     * return. Its split count waits out the main loop in shared memory (in
     * a register, the 255-register 64- and 128-row programs spilled). */
    __shared__ int unit_splits;
    int t_begin, t_end;
    if (un.a >= 0) {
        t_begin = un.a;
        t_end = min(n_tiles, un.e);
    } else if (varlen_split) {
        const int ns = tt_skv_unit_splits(n_tiles, tps);
        if (un.split >= ns) return;
        if (tid == 0) unit_splits = ns;
        t_begin = tt_skv_split_start(n_tiles, ns, un.split);
        t_end = tt_skv_split_start(n_tiles, ns, un.split + 1);
    } else {
        if (tps <= 0) tps = (n_tiles + un.nsplit - 1) / un.nsplit;
        t_begin = un.split * tps;
        t_end = min(n_tiles, t_begin + tps);
    }

    const u32 sQ = smem_u32(smem);
    const u32 sKV = sQ + Q_BYTES; /* slot s: K at sKV + 2 s T, V after it */

    /* Q: BM packed rows; row r is query position (pr0 + r) / G of head
     * hk * G + (pr0 + r) % G. */
    {
        const u16 *q = (const u16 *)p.q + un.b * p.q_batch_stride;
#pragma unroll
        for (int it = 0; it < (BM * CPR + NT - 1) / NT; ++it) {
            const int idx = tid + it * NT;
            if ((BM * CPR) % NT == 0 || idx < BM * CPR) {
                const int r = idx / CPR, c = idx % CPR, pr = pr0 + r;
                const bool ok = pr < rows;
                const int i = pr / G, h = un.hk * G + pr % G;
                const u16 *src = q + (i64)(sq.qoff + i) * p.q_row_stride + (i64)h * p.q_head_stride + c * 8;
                cp_async16(sQ + soff(r, c), ok ? src : q, ok);
            }
        }
        cp_commit();
    }

    constexpr bool paged = TT_SKV_PAGED;
    const u16 *kb = (const u16 *)p.k + un.hk * p.k_head_stride;
    const u16 *vb = (const u16 *)p.v + un.hk * p.v_head_stride;
    if (!paged) {
        kb += un.b * p.k_batch_stride + (i64)sq.koff * p.k_row_stride;
        vb += un.b * p.v_batch_stride + (i64)sq.koff * p.v_row_stride;
    }
    const int *table = paged ? p.block_table + un.b * p.table_stride : 0;
#if TT_SKV_PAGED
    constexpr int PSHIFT = TT_SKV_PAGE_SHIFT;
#else
    constexpr int PSHIFT = 0;
#endif
    constexpr int PAGE = 1 << PSHIFT, pmask = PAGE - 1;
    const int Lk = sq.Lk;
    /* Tile j of keys into ring slot `slot`: each thread copies one chunk
     * column of every RSTEP-th row. The main loop's copy is unrolled whole
     * (rolled, batch 16 over 32k keys ran 1.5% slower on the H200); the
     * prologue's is a loop, and so is the prologue itself: code a CTA runs
     * once is code it fetches cold (below). */
    auto load_kv = [&](int slot, int j, bool whole) {
        const int r0 = tid / CPR, c = tid % CPR;
        const u32 dk = sKV + 2 * slot * T_BYTES, o0 = soff(r0, c);
        /* each pass's rows share the swizzle when a pass is whole 8-row groups */
        constexpr bool same_swizzle = RSTEP % (8 * SW_ROWS) == 0;
        constexpr int IT = BN / RSTEP;
        if (!paged) {
            /* Contiguous: one pointer add a row. Each row's own 64-bit
             * products, its page test and its clamp were 37 instructions a
             * row, two thirds of the 16x128 decode loop's (ncu, H200): with
             * one warp a scheduler, instructions the copy issues are time
             * the tile's math waits. A tile past the keys' end (the last,
             * and the prologue's) takes the predicated loop. */
            const int n0 = j * BN + r0;
            const u16 *kr = kb + (i64)n0 * p.k_row_stride + c * 8;
            const u16 *vr = vb + (i64)n0 * p.v_row_stride + c * 8;
            const i64 ks = (i64)RSTEP * p.k_row_stride, vs = (i64)RSTEP * p.v_row_stride;
            if (whole && j * BN + BN <= Lk) {
#pragma unroll
                for (int it = 0; it < IT; ++it) {
                    const u32 o = same_swizzle ? o0 + it * RSTEP * ROW_BYTES : soff(r0 + it * RSTEP, c);
                    cp_async16_all(dk + o, kr);
                    cp_async16_all(dk + T_BYTES + o, vr);
                    kr += ks;
                    vr += vs;
                }
            } else {
#pragma unroll 1
                for (int it = 0; it < IT; ++it) {
                    const bool ok = n0 + it * RSTEP < Lk;
                    const u32 o = soff(r0 + it * RSTEP, c);
                    cp_async16(dk + o, ok ? kr : kb, ok);
                    cp_async16(dk + T_BYTES + o, ok ? vr : vb, ok);
                    kr += ks;
                    vr += vs;
                }
            }
            return;
        }
        /* Paged. A page's rows are a row stride apart, as a contiguous
         * cache's: a thread looks a page up once for the passes (RSTEP rows
         * each) it copies on that page, and steps a pointer between them.
         * A lookup and its 64-bit products for every row ran the
         * one-CTA-an-SM 16x128 decode tile at 1.17-1.28x its contiguous
         * time on pages of 64-256 tokens, a page once 0.99-1.07x (H200,
         * B1-B64). */
        const i64 ks = (i64)RSTEP * p.k_row_stride, vs = (i64)RSTEP * p.v_row_stride;
        const int n_first = j * BN + r0;
        /* pass `it`'s copies from the rows at kr / vr */
        auto put = [&](int it, const u16 *kr, const u16 *vr, bool all) {
            const u32 o = same_swizzle ? o0 + it * RSTEP * ROW_BYTES : soff(r0 + it * RSTEP, c);
            if (all) {
                cp_async16_all(dk + o, kr);
                cp_async16_all(dk + T_BYTES + o, vr);
            } else {
                const bool ok = n_first + it * RSTEP < Lk;
                cp_async16(dk + o, ok ? kr : kb, ok);
                cp_async16(dk + T_BYTES + o, ok ? vr : vb, ok);
            }
        };
        /* kr / vr: this thread's chunk of key n's row on page pg */
        auto page_row = [&](int pg, int n, const u16 *&kr, const u16 *&vr) {
            const int pi = n & pmask;
            kr = kb + (i64)pg * p.k_batch_stride + (i64)pi * p.k_row_stride + c * 8;
            vr = vb + (i64)pg * p.v_batch_stride + (i64)pi * p.v_row_stride + c * 8;
        };
        const bool all = whole && j * BN + BN <= Lk;
        /* Pages of 4 passes or more: the page after is looked up as a
         * page's copies start. A page every two passes waits out a
         * lookup's round trip per page that way (pages of 16: 1.09x the
         * contiguous cache at B1 32k on the 16x64 tile, against 1.05x with
         * lookups in flight together, below). */
        if constexpr (PAGE >= 4 * RSTEP) {
            constexpr int ipp_mask = PAGE / RSTEP - 1;
            int pg_next = n_first < Lk ? table[n_first >> PSHIFT] : 0;
            const u16 *kr = kb, *vr = vb;
            auto step = [&](int it, bool all) {
                if ((it & ipp_mask) == 0) {
                    const int n = n_first + it * RSTEP;
                    const int pg = pg_next;
                    const int nn = n + PAGE;
                    pg_next = nn < Lk ? table[nn >> PSHIFT] : 0;
                    page_row(pg, n, kr, vr);
                } else {
                    kr += ks;
                    vr += vs;
                }
                put(it, kr, vr, all);
            };
            each_pass<IT, 1>(all, step);
            return;
        }
        /* Shorter pages: the page numbers of a few pages first
         * (independent loads in flight together), then their passes'
         * copies; a lookup per copy waited one cache round trip per row
         * (1.2-1.5x a contiguous cache on the H200). Pages of two passes
         * (16 tokens on the d128 4-warp tiles) take one lookup for both,
         * PB pages at a time (8 on 16-row tiles); not on warps of two m
         * tiles, whose 32x128 2-stage program spilled 92 bytes with it. */
        if constexpr (MT == 1 && IT % 2 == 0 && PAGE == 2 * RSTEP) {
            constexpr int NP = IT / 2 > 0 ? IT / 2 : 1;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
            constexpr int PB = 1;
#else
            constexpr int PB = NP < 4 ? NP : BM <= 16 && NP >= 8 ? 8 : 4;
#endif
            auto pairs = [&](int k0, bool all) {
                int pg[PB];
#pragma unroll
                for (int u = 0; u < PB; ++u) {
                    const int n = n_first + (k0 + u) * 2 * RSTEP;
                    pg[u] = n < Lk ? table[n >> PSHIFT] : 0;
                }
#pragma unroll
                for (int u = 0; u < PB; ++u) {
                    const int it = (k0 + u) * 2;
                    const u16 *kr, *vr;
                    page_row(pg[u], n_first + it * RSTEP, kr, vr);
                    put(it, kr, vr, all);
                    put(it + 1, kr + ks, vr + vs, all);
                }
            };
            each_pass<NP, PB>(all, pairs);
            return;
        }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
        constexpr int PG = 1;
#else
        constexpr int PG = MT > 1 ? 1 : IT > 8 ? 2 : IT < 4 ? IT : 4;
#endif
        /* A lookup a pass, PG at a time: all of a tile's at once spilled
         * the 32-row warps (two m tiles), and so did 4 (24 bytes): they
         * take one; 16-row tiles of 128 keys spilled 12 bytes with 4: 2;
         * sm_80's ptxas: 1. */
        auto rows = [&](int i0, bool all) {
            int pg[PG];
#pragma unroll
            for (int u = 0; u < PG; ++u) {
                const int n = n_first + (i0 + u) * RSTEP;
                pg[u] = n < Lk ? table[n >> PSHIFT] : 0;
            }
#pragma unroll
            for (int u = 0; u < PG; ++u) {
                const int it = i0 + u;
                const u16 *kr, *vr;
                page_row(pg[u], n_first + it * RSTEP, kr, vr);
                put(it, kr, vr, all);
            }
        };
        each_pass<IT, PG>(all, rows);
    };
    /* Where in its run the CTA starts (p.rotate). Every CTA of a
     * contiguous cache streams its own run of tiles; from their first
     * tiles all at once, the 128 runs of batch 16 x 8 KV heads over 32k
     * keys stand 8 MiB apart at every moment, and on the H200 both the copy
     * alone (bench/dev/kv_stream.cu `order`) and this kernel streamed
     * 0.3-0.9% slower that way than with run c started 37c tiles in (mod
     * its length: an odd step scatters neighbouring CTAs' starts over a
     * power-of-two run; docs/perf.md). The online softmax takes the tiles
     * in any order; masks and copies go by the tile's own index. */
    const int len = t_end - t_begin;
    int rot = 0;
    if (p.rotate && un.a < 0 && len > 1) {
        /* wraps past 2^32 CTAs: any offset serves */
        const unsigned c = ((unsigned)un.b * p.heads_kv + un.hk) * un.nsplit + un.split;
        rot = (int)(37u * c % (unsigned)len);
    }
    auto tile_at = [&](int i) {
        const int x = i + rot;
        return t_begin + (x < len ? x : x - len);
    };
    /* The prologue's tiles, a loop over one rolled copy: a decode split of
     * one or two tiles runs only this, and once. Unrolled (two copies of
     * the copy, each unrolled), the 16x128 decode program was 124 KB of
     * code, most of it run once per CTA and fetched cold; with other
     * kernels between calls (a model step) half its warps' cycles were
     * instruction-fetch stalls (ncu, B1 4k keys: 18.9 us against 12.4 with
     * these loops rolled and the merges' below). Not free: the d64 16x128
     * w4 s4 program lost 15% in steady state, 9 points of it with this
     * loop (ptxas' main loop, not the prologue's work; docs/perf.md). */
#pragma unroll 1
    for (int i = 0; i < ST - 1; ++i) {
        if (i < len) load_kv(i, tile_at(i), false);
        cp_commit(); /* empty groups keep the wait counts uniform */
    }

    /* ldmatrix lane addressing: A (Q) and V^T take row lane % 16, chunk
     * lane / 16; K takes row lane % 8 + 8 (lane / 16), chunk (lane / 8) % 2. */
    const int a_row = lane & 15, a_chk = lane >> 4;
    const int k_row = (lane & 7) + ((lane >> 4) << 3), k_chk = (lane >> 3) & 1;
    /* this lane's row and chunk in a 16-row block (row offsets the loops
     * add are multiples of 16 rows: the same swizzle) */
    const u32 a_off = soff(a_row, a_chk), k_off = soff(k_row, k_chk);
    const int wr = wm * RW; /* this warp's first row */
    const bool active = pr0 + wr < rows;

    /* Per row of this thread (m tile mi, half e / 2): its key limit. */
    int lim[MT][2];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r) lim[mi][r] = key_limit((pr0 + wr + mi * 16 + g + 8 * r) / G, sq.Lq, Lk);

    cp_wait<ST - 1>(); /* Q landed (this thread's copies) */
    __syncthreads();
#if TT_Q_IN_REGS
    u32 qf[MT][D / 16][4];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
            ldsm_x4(sw_step(sQ + a_off + (wr + mi * 16) * ROW_BYTES, kk), qf[mi][kk][0], qf[mi][kk][1],
                    qf[mi][kk][2], qf[mi][kk][3]);
#endif

    const float sl2 = p.scale_log2;
    float acc[MT][D / 8][4];
    float row_m[MT][2], row_l[MT][2];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
        for (int d = 0; d < D / 8; ++d)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mi][d][e] = 0.f;
        row_m[mi][0] = row_m[mi][1] = neg_inf();
        row_l[mi][0] = row_l[mi][1] = 0.f;
    }

    for (int jj = 0; jj < len; ++jj) {
        const int j = tile_at(jj);
        cp_wait<ST - 2>(); /* tile j landed */
        __syncthreads();   /* and every warp is done with the slot refilled next */
        if (jj + ST - 1 < len) load_kv((jj + ST - 1) % ST, tile_at(jj + ST - 1), true);
        cp_commit();
        const u32 cK = sKV + 2 * (jj % ST) * T_BYTES + wk * WN * ROW_BYTES, cV = cK + T_BYTES;
        /* Warps whose rows are all past this sequence's (a short sequence
         * in a tile sized for the batch's longest) skip the math; they
         * still copy and meet the barriers. */
        if (!active) continue;

        float s[MT][WN / 8][4];
#pragma unroll
        for (int mi = 0; mi < MT; ++mi)
#pragma unroll
            for (int n = 0; n < WN / 8; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[mi][n][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            u32 a[MT][4];
#pragma unroll
            for (int mi = 0; mi < MT; ++mi) {
#if TT_Q_IN_REGS
#pragma unroll
                for (int e = 0; e < 4; ++e) a[mi][e] = qf[mi][kk][e];
#else
                ldsm_x4(sw_step(sQ + a_off + (wr + mi * 16) * ROW_BYTES, kk), a[mi][0], a[mi][1],
                        a[mi][2], a[mi][3]);
#endif
            }
#pragma unroll
            for (int nn = 0; nn < WN / 16; ++nn) {
                u32 b0, b1, b2, b3;
                ldsm_x4(sw_step(cK + k_off + nn * 16 * ROW_BYTES, kk), b0, b1, b2, b3);
#pragma unroll
                for (int mi = 0; mi < MT; ++mi) {
                    mma16816(s[mi][2 * nn], a[mi], b0, b1);
                    mma16816(s[mi][2 * nn + 1], a[mi], b2, b3);
                }
            }
        }

        const int n0 = j * BN + wk * WN;
        if (n0 + WN > min_lim) {
#pragma unroll
            for (int mi = 0; mi < MT; ++mi)
#pragma unroll
                for (int n = 0; n < WN / 8; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        if (n0 + n * 8 + 2 * t + (e & 1) >= lim[mi][e >> 1]) s[mi][n][e] = neg_inf();
        }

        /* Online softmax (exp2 domain) per row; O rescaled. */
#pragma unroll
        for (int mi = 0; mi < MT; ++mi)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                float mx = row_m[mi][r];
#pragma unroll
                for (int n = 0; n < WN / 8; ++n) mx = fmaxf(mx, fmaxf(s[mi][n][2 * r], s[mi][n][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                /* no visible key yet: max stays -inf, subtract 0 (never NaN) */
                const float ms = mx == neg_inf() ? 0.f : mx * sl2;
                const float alpha = ex2(row_m[mi][r] * sl2 - ms);
                row_m[mi][r] = mx;
                float sum = 0.f;
#pragma unroll
                for (int n = 0; n < WN / 8; ++n) {
                    const float p0 = ex2(fmaf(s[mi][n][2 * r], sl2, -ms));
                    const float p1 = ex2(fmaf(s[mi][n][2 * r + 1], sl2, -ms));
                    s[mi][n][2 * r] = p0;
                    s[mi][n][2 * r + 1] = p1;
                    sum += p0 + p1;
                }
                row_l[mi][r] = row_l[mi][r] * alpha + sum;
#pragma unroll
                for (int d = 0; d < D / 8; ++d) {
                    acc[mi][d][2 * r] *= alpha;
                    acc[mi][d][2 * r + 1] *= alpha;
                }
            }

        /* O += P V, P straight from the S accumulators. */
#pragma unroll
        for (int kk = 0; kk < WN / 16; ++kk) {
            u32 pa[MT][4];
#pragma unroll
            for (int mi = 0; mi < MT; ++mi) {
                pa[mi][0] = pack2(s[mi][2 * kk][0], s[mi][2 * kk][1]);
                pa[mi][1] = pack2(s[mi][2 * kk][2], s[mi][2 * kk][3]);
                pa[mi][2] = pack2(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
                pa[mi][3] = pack2(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dd = 0; dd < D / 16; ++dd) {
                u32 b0, b1, b2, b3;
                /* the row offset inside the step: with it outside, ptxas
                 * kept the four XOR-ed bases across the kk loop, and the
                 * 255-register 64- and 128-row programs spilled */
                ldsm_x4_t(sw_step(cV + a_off + kk * 16 * ROW_BYTES, dd), b0, b1, b2, b3);
#pragma unroll
                for (int mi = 0; mi < MT; ++mi) {
                    mma16816(acc[mi][2 * dd], pa[mi], b0, b1);
                    mma16816(acc[mi][2 * dd + 1], pa[mi], b2, b3);
                }
            }
        }
    }
    cp_wait<0>(); /* nothing may land in shared memory after this */
    __syncthreads();

    /* Merge the key warps of each row through shared memory: row stats
     * (max, sum) per key warp, then each warp scales its O by its share;
     * in tiles of up to 32 rows each warp writes its own fp32 tile and the
     * output loop adds them as it reads them (one barrier where the warps
     * added into one tile in turn, a barrier a warp, on the path of every
     * split's end), in larger ones the warps add into one tile in turn. */
    constexpr int SLICES = TT_SKV_SLICES(BM, D, NW);
    constexpr int SLICE = BM * OROW; /* floats */
    float *sO = (float *)smem;
    float *sm_m = sO + SLICES * SLICE, *sm_l = sm_m + WK * BM;
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float l = row_l[mi][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            row_l[mi][r] = l;
            if (t == 0) {
                const int row = wr + mi * 16 + g + 8 * r;
                sm_m[wk * BM + row] = row_m[mi][r];
                sm_l[wk * BM + row] = l;
            }
        }
    __syncthreads();
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = wr + mi * 16 + g + 8 * r;
            float M, L;
            row_stats(sm_m, sm_l, row, sl2, M, L);
            const float m = row_m[mi][r];
            const float f = (m == neg_inf() || !(L > 0.f)) ? 0.f : ex2((m - M) * sl2) / L;
#pragma unroll
            for (int d = 0; d < D / 8; ++d) {
                acc[mi][d][2 * r] *= f;
                acc[mi][d][2 * r + 1] *= f;
            }
        }
    /* All stats are read before any warp overwrites the tile it shares
     * with them (sO does not overlap sm_m / sm_l, the barrier orders the
     * adds). */
    if (SLICES > 1) {
#pragma unroll
        for (int mi = 0; mi < MT; ++mi)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                float *dst = sO + wk * SLICE + (wr + mi * 16 + g + 8 * r) * OROW + 2 * t;
#pragma unroll
                for (int d = 0; d < D / 8; ++d)
                    *(float2 *)(dst + d * 8) = make_float2(acc[mi][d][2 * r], acc[mi][d][2 * r + 1]);
            }
        __syncthreads();
    }
#pragma unroll 1
    for (int w = 0; w < (SLICES > 1 ? 0 : WK); ++w) {
        if (wk == w) {
#pragma unroll
            for (int mi = 0; mi < MT; ++mi)
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    float *dst = sO + (wr + mi * 16 + g + 8 * r) * OROW + 2 * t;
#pragma unroll
                    for (int d = 0; d < D / 8; ++d) {
                        float2 v = make_float2(acc[mi][d][2 * r], acc[mi][d][2 * r + 1]);
                        if (w > 0) {
                            const float2 o = *(float2 *)(dst + d * 8);
                            v.x += o.x;
                            v.y += o.y;
                        }
                        *(float2 *)(dst + d * 8) = v;
                    }
                }
        }
        __syncthreads();
    }

    /* Out: 8 columns a thread, coalesced. splits == 1: O (16-bit) and LSE;
     * else the split's normalized O (fp32) and LSE for the combine. */
    const float LN2 = 0.6931471805599453f;
    const int nsplit = p.split_slots > 0 && un.a < 0 ? unit_splits : un.nsplit;
    const bool direct = nsplit == 1;
#pragma unroll 1
    for (int idx = tid; idx < BM * CPR; idx += NT) {
        const int r = idx / CPR, c = idx % CPR, pr = pr0 + r;
        if (pr >= rows) continue;
        const int i = pr / G, h = un.hk * G + pr % G;
        const float *src = sO + r * OROW + c * 8;
        float4 x0 = *(const float4 *)src, x1 = *(const float4 *)(src + 4);
        /* the key warps' tiles in the order the warps add in turn: the
         * same sums, bit for bit */
#pragma unroll
        for (int w = 1; w < SLICES; ++w) {
            const float4 y0 = *(const float4 *)(src + w * SLICE), y1 = *(const float4 *)(src + w * SLICE + 4);
            x0 = make_float4(x0.x + y0.x, x0.y + y0.y, x0.z + y0.z, x0.w + y0.w);
            x1 = make_float4(x1.x + y1.x, x1.y + y1.y, x1.z + y1.z, x1.w + y1.w);
        }
        float M = neg_inf(), L = 0.f;
        if (c == 0) row_stats(sm_m, sm_l, r, sl2, M, L);
        const bool empty = M == neg_inf() || !(L > 0.f);
        if (direct) {
            u16 *dst = (u16 *)p.o + un.b * p.o_batch_stride + (i64)(sq.qoff + i) * p.o_row_stride +
                       (i64)h * p.o_head_stride + c * 8;
            const u32 w0 = pack2(x0.x, x0.y), w1 = pack2(x0.z, x0.w), w2 = pack2(x1.x, x1.y), w3 = pack2(x1.z, x1.w);
            asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"l"(dst), "r"(w0), "r"(w1), "r"(w2), "r"(w3)
                         : "memory");
            if (c == 0 && p.lse)
                p.lse[un.b * p.lse_batch_stride + (i64)h * p.lse_head_stride + (i64)(sq.qoff + i) * p.lse_row_stride] =
                    empty ? p.lse_empty : M * p.scale + lg2(L) * LN2;
        } else {
            const int tok = (p.cu_seqlens_q ? sq.qoff : un.b * p.seqlen_q) + i;
            const i64 prow = ((i64)un.split * p.tokens + tok) * p.heads_q + h;
            float *dst = p.o_part + prow * D + c * 8;
            *(float4 *)dst = x0;
            *(float4 *)(dst + 4) = x1;
            if (c == 0) p.lse_part[prow] = empty ? neg_inf() : M * p.scale + lg2(L) * LN2;
        }
    }
#if TT_BLOCK_M <= TT_SPLITKV_FUSED_MAX_BM
    if (direct || !p.counters) return;
    /* Fused merge: the last split of this (query block, KV head, sequence)
     * to finish merges all of them, so no second kernel is launched. Every
     * split that reaches here wrote its partial rows (an empty split writes
     * LSE -inf); the counter goes back to 0 for the next launch.
     * Ordering: the barrier puts every thread's partial stores before
     * thread 0's counter update, whose release publishes them at GPU scope
     * and whose acquire (in the last split) puts the other splits' stores
     * before the barrier its merge waits on: the pattern of CUTLASS's
     * semaphore. A fence.sc in every thread on both sides, as before, kept
     * the last split 0.25 us longer (globaltimer trace, H200). */
    __shared__ int last;
    __syncthreads();
    if (tid == 0) {
        int *ctr = p.counters + ((i64)un.b * p.heads_kv + un.hk) * p.qblocks + un.qb;
        int old;
        asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], 1;\n" : "=r"(old) : "l"(ctr) : "memory");
        last = old == nsplit - 1;
        if (last) *ctr = 0;
    }
    __syncthreads();
    if (!last) return;
    for (int r = warp; r < BM; r += NW) {
        const int pr = pr0 + r;
        if (pr >= rows) break;
        const int i = pr / G, h = un.hk * G + pr % G;
        const int tok = (p.cu_seqlens_q ? sq.qoff : un.b * p.seqlen_q) + i;
        combine_row(p, (i64)tok * p.heads_q + h, un.b, sq.qoff + i, h, lane, nsplit);
    }
#endif
}

/* The one unit of the grid of query blocks x splits. Varlen: the last
 * sequence first. Servers put decode sequences at the front of a packed
 * batch and prefill chunks at the end (vLLM's decode-first reorder), and a
 * chunk's CTAs are the long ones: issued last, they ran as a tail after
 * everything else (1.26x the sum of the dense runs on the H200). */
template <typename U> __device__ __forceinline__ void grid_unit(const tt_splitkv_params &p, U &un) {
    un.nsplit = p.splits;
    un.split = (int)(blockIdx.x % (unsigned)p.splits);
    un.qb = (int)(blockIdx.x / (unsigned)p.splits);
    un.hk = (int)blockIdx.y;
    un.b = p.cu_seqlens_q ? (int)(gridDim.z - 1 - blockIdx.z) : (int)blockIdx.z;
    un.a = -1;
    un.e = 0;
}

extern "C" __global__ void __launch_bounds__(NT, MIN_CTAS) tt_sdpa_fwd_kernel(tt_splitkv_params p) {
    extern __shared__ __align__(128) unsigned char smem[];
#if TT_BLOCK_M <= TT_SPLITKV_BAL_MAX_BM
    /* The balanced grid walks its tiles' units in turn (params.h); the
     * other grid is one unit a CTA. One call site, so the body is inlined
     * once, and no register lives across it (a 16x128 tile spilled the
     * 8 bytes of a tile index held there): the loop's state is `un`. */
    const bool bal = p.bal_ctas > 0;
    __shared__ Unit un;
    if (threadIdx.x == 0)
        un.x = bal ? tt_skv_bal_start((i64)p.batch * p.heads_kv * p.bal_tiles, p.bal_ctas, (int)blockIdx.x) : 0;
    for (;;) {
        const i64 n = (i64)p.batch * p.heads_kv * p.bal_tiles;
        const i64 x1 = bal ? tt_skv_bal_start(n, p.bal_ctas, (int)blockIdx.x + 1) : 1;
        if (threadIdx.x == 0) {
            const i64 x = un.x;
            if (bal) {
                const i64 u = x / p.bal_tiles;
                int first;
                un.nsplit = tt_skv_bal_span(n, p.bal_ctas, p.bal_tiles, u, &first);
                un.split = (int)blockIdx.x - first;
                un.b = (int)(u / p.heads_kv);
                un.hk = (int)(u % p.heads_kv);
                un.qb = 0;
                un.a = (int)(x - u * p.bal_tiles);
                un.e = (int)(min(x1, (u + 1) * p.bal_tiles) - u * p.bal_tiles);
            } else {
                grid_unit(p, un);
            }
        }
        __syncthreads();
        if (un.x >= x1) break; /* every thread reads it after the barrier */
        run_unit<volatile Unit>(p, smem, un);
        if (!bal) break;
        __syncthreads(); /* the next unit reuses shared memory and `un` */
        if (threadIdx.x == 0) un.x = (un.x / p.bal_tiles + 1) * p.bal_tiles; /* the next unit's first tile */
    }
#else
    Unit un;
    grid_unit(p, un);
    run_unit(p, smem, un);
#endif
}

/* The standalone merge, when the launcher runs it as a second kernel
 * (rows past the fused merge's, or TILETUNE_SPLITKV_FUSED=0): one warp per
 * (token, head) row. With p.plan, the varlen planner instead. */
extern "C" __global__ void __launch_bounds__(128) tt_splitkv_combine_kernel(tt_splitkv_params p) {
    if (p.plan) {
        /* launched as the varlen planner: one CTA, before the main kernel */
        varlen_plan<128>(p);
        return;
    }
    const int lane = threadIdx.x & 31;
    const i64 row = (i64)blockIdx.x * 4 + (threadIdx.x >> 5);
    const i64 nrows = (i64)p.tokens * p.heads_q;
    if (row >= nrows) return;
    const int tok = (int)(row / p.heads_q), h = (int)(row % p.heads_q);
    /* varlen rows past the last sequence belong to none: no split wrote
     * their partial results, so merging them would write what the
     * workspace last held into the caller's padding */
    if (p.cu_seqlens_q && tok >= p.cu_seqlens_q[p.batch]) return;
    /* dense: token = b * seqlen_q + i; varlen: the packed row itself */
    const int b = p.cu_seqlens_q ? 0 : tok / p.seqlen_q;
    const int i = p.cu_seqlens_q ? tok : tok % p.seqlen_q;
    int nsplit = p.splits;
    if (p.split_slots > 0 || p.dense_min_q > 0 || p.seq_min_q > 0 || p.seq_max_q > 0) {
        /* the token's sequence: the last whose first token is at or before
         * it (empty sequences share their first token with the next) */
        int lo = 0, hi = p.batch - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (p.cu_seqlens_q[mid] <= tok) lo = mid;
            else hi = mid - 1;
        }
        const Seq s = seq_of(p, lo);
        /* past the maxima, or a sequence of the dense family's launch or
         * the other row class's: no CTA of this one ran it */
        if (tok - s.qoff >= s.Lq) return;
        if (p.split_slots > 0) {
            const int pr = (tok - s.qoff) * p.group + h % p.group, qb = pr / BM;
            const int i_last = min(s.Lq - 1, (qb * BM + BM - 1) / p.group);
            const int n_tiles = (key_limit(i_last, s.Lq, s.Lk) + BN - 1) / BN;
            nsplit = tt_skv_unit_splits(n_tiles, *p.split_tiles_out);
            if (nsplit == 1) return; /* its one CTA wrote O */
        }
    }
    if (p.bal_ctas > 0) {
        /* a unit one CTA held is written already */
        const i64 n = (i64)p.batch * p.heads_kv * p.bal_tiles;
        int first;
        nsplit = tt_skv_bal_span(n, p.bal_ctas, p.bal_tiles, (i64)b * p.heads_kv + h / p.group, &first);
        if (nsplit == 1) return;
    }
    combine_row(p, row, b, i, h, lane, nsplit);
}

#endif
