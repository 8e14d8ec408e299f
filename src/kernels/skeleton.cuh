/*
 * The FlashAttention forward skeleton every family shares: knob defaults,
 * the problem's constants, copy and math primitives, tile coordinates,
 * masking, the online softmax row, the P fragment and the epilogue.
 * sdpa.cu includes it, then the family's mainloop (TT_MAINLOOP, e.g.
 * "mma/mainloop.cuh"), which defines tile_off<ROWS>() (its shared-memory
 * layout) and the entry tt_sdpa_fwd_kernel. docs/kernels.md has the recipe
 * for a new family.
 *
 * Compiled at run time by NVRTC with no system headers: 16-bit values are
 * raw bits, conversions and matrix instructions are inline PTX.
 *
 * Knobs (-D macros, see src/common/knobs.def and docs/kernels.md); which
 * ones a family reads and their legal values are in its host descriptor
 * (src/kernels/<family>/family.c):
 *   TT_FAMILY    0 mma, 1 wgmma, 2 ws
 *   TT_BLOCK_M   query rows per CTA
 *   TT_BLOCK_N   keys per K/V tile
 *   TT_WARPS     warps per CTA
 *   TT_STAGES    K/V buffers in the load pipeline
 *   TT_LAYOUT    0: rows padded by 8 elements; 1: XOR swizzle of 16 B chunks
 *   TT_Q_IN_REGS 1: Q fragments loaded once into registers
 * Problem facts: TT_HEAD_DIM (32, 64, 96, 128, 256), TT_DTYPE (0 fp16,
 * 1 bf16), TT_CAUSAL (0 none; 1 top-left, PyTorch's is_causal: query i
 * sees keys j <= i; 2 bottom-right, flash-attn's: j <= i + seqlen_k -
 * seqlen_q, so with seqlen_q > seqlen_k the first rows see no key and
 * write O = 0, LSE = -inf). Test builds: TT_FAULT_INJECT 1 writes far out of
 * bounds, 2 never finishes.
 */
#ifndef TT_KERNELS_SKELETON_CUH
#define TT_KERNELS_SKELETON_CUH

#include "sdpa_params.h"

#ifndef TT_FAULT_INJECT
#define TT_FAULT_INJECT 0
#endif
/* Not a tuning knob: 1 skips the O rescale when no row max of the warp
 * grew (measured 3-11% slower on most keys, docs/perf.md v2); kept for A/B. */
/* Not a tuning knob yet: 1 computes P = exp2(x) two at a time in the 16-bit
 * dtype (ex2.approx.f16x2 / .bf16x2, sm_90 for bf16), half the MUFU work;
 * under evaluation (docs/perf.md). */
#ifndef TT_EXP2_PACKED
#define TT_EXP2_PACKED 0
#endif
#if TT_EXP2_PACKED && TT_DTYPE == 1 && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define TT_EXP2_X2 0 /* no ex2.bf16x2 before sm_90 */
#else
#define TT_EXP2_X2 TT_EXP2_PACKED
#endif
#ifndef TT_RESCALE_SKIP
#define TT_RESCALE_SKIP 0
#endif

#if !defined(TT_BLOCK_M) || !defined(TT_BLOCK_N) || !defined(TT_WARPS) || \
    !defined(TT_STAGES) || !defined(TT_LAYOUT) || !defined(TT_Q_IN_REGS) || \
    !defined(TT_HEAD_DIM) || !defined(TT_DTYPE) || !defined(TT_CAUSAL)
#error "skeleton.cuh: every TT_ knob and problem macro must be defined"
#endif
#if TT_HEAD_DIM != 32 && TT_HEAD_DIM != 64 && TT_HEAD_DIM != 96 && \
    TT_HEAD_DIM != 128 && TT_HEAD_DIM != 256
#error "TT_HEAD_DIM must be 32, 64, 96, 128 or 256"
#endif
#if TT_DTYPE != 0 && TT_DTYPE != 1
#error "TT_DTYPE must be 0 (fp16) or 1 (bf16)"
#endif
#if TT_CAUSAL != 0 && TT_CAUSAL != 1 && TT_CAUSAL != 2
#error "TT_CAUSAL must be 0 (none), 1 (top-left) or 2 (bottom-right)"
#endif

typedef unsigned int u32;
typedef unsigned short u16;

namespace {

constexpr int D = TT_HEAD_DIM;
constexpr int BM = TT_BLOCK_M;
constexpr int BN = TT_BLOCK_N;
constexpr int NW = TT_WARPS;
constexpr int NT = NW * 32;
constexpr int ST = TT_STAGES;
constexpr int CPR = D / 8;         /* 16-byte chunks per row */

__device__ __forceinline__ u32 smem_u32(const void *p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }"
        : "=r"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ void cp_async16(u32 saddr, const void *g, bool pred) {
    /* src-size 0 zero-fills the chunk: rows past the end read nothing. */
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(saddr), "l"(g), "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N));
}

/* Two floats to one register of two 16-bit values, lo in the low half. */
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

/* The block's (m-block, head, batch). Causal: m-blocks in reverse, so the
 * blocks with the most keys start first and the last blocks dispatched
 * are short ones (no long block starting at the tail of the grid). A full
 * longest-first order over all heads needed a division whose results
 * stayed live and made causal variants spill 28-40 bytes. */
__device__ __forceinline__ void block_coords(int &m_block, int &h, int &b) {
    m_block = TT_CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    h = blockIdx.y;
    b = blockIdx.z;
}

#if TT_EXP2_X2
/* exp2 of two 16-bit values packed in one register. */
__device__ __forceinline__ u32 ex2x2(u32 x) {
    u32 y;
#if TT_DTYPE == 0
    asm("ex2.approx.f16x2 %0, %1;\n" : "=r"(y) : "r"(x));
#else
    asm("ex2.approx.ftz.bf16x2 %0, %1;\n" : "=r"(y) : "r"(x));
#endif
    return y;
}
__device__ __forceinline__ void unpack2(u32 v, float &lo, float &hi) {
#if TT_DTYPE == 0
    asm("{ .reg .b16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }\n"
        : "=f"(lo), "=f"(hi) : "r"(v));
#else
    lo = __uint_as_float(v << 16);
    hi = __uint_as_float(v & 0xffff0000u);
#endif
}
#endif

/* Byte offset of chunk c of row r in a tile of ROWS rows: the family's
 * shared-memory layout, defined by its mainloop. */
template <int ROWS> __device__ __forceinline__ u32 tile_off(int r, int c);


/* Copies ROWS rows of a tile (row stride in elements) into shared memory;
 * rows at or past `valid` are zero-filled without a read. Each thread keeps
 * one running source pointer: hoisting one 64-bit offset per chunk out of
 * the K/V loop cost up to 64 registers (d256) and spilled. */

template <int ROWS>
__device__ __forceinline__ void load_tile(u32 sbase, const u16 *g, tt_i64 stride,
                                          int valid, int tid) {
    if constexpr (NT % CPR == 0) {
        constexpr int RSTEP = NT / CPR;
        const int r0 = tid / CPR, c = tid % CPR;
        tt_i64 step = stride * RSTEP;
        /* Opaque to the optimizer, so the per-chunk offsets stay in the
         * loop instead of living in registers across it. */
        asm volatile("" : "+l"(step));
        const u16 *src = g + r0 * stride + c * 8;
#pragma unroll
        for (int i = 0; i < (ROWS + RSTEP - 1) / RSTEP; ++i) {
            const int r = r0 + i * RSTEP;
            if (ROWS % RSTEP == 0 || r < ROWS)
                cp_async16(sbase + tile_off<ROWS>(r, c), r < valid ? src : g, r < valid);
            src += step;
        }
    } else {
        constexpr int TOTAL = ROWS * CPR;
#pragma unroll
        for (int i = 0; i < (TOTAL + NT - 1) / NT; ++i) {
            const int idx = tid + i * NT;
            if (TOTAL % NT == 0 || idx < TOTAL) {
                const int r = idx / CPR, c = idx % CPR;
                const bool ok = r < valid;
                cp_async16(sbase + tile_off<ROWS>(r, c), ok ? g + r * stride + c * 8 : g, ok);
            }
        }
    }
}


/* ---- the FlashAttention skeleton both families share -------------------- */

/* This CTA's (head, batch), first query row and Q/K/V tile bases. */
__device__ __forceinline__ void cta_tiles(const tt_sdpa_params &p, int &h, int &b, int &m0,
                                          const u16 *&gQ, const u16 *&gK, const u16 *&gV) {
    int m_block;
    block_coords(m_block, h, b);
    const int hkv = h / (p.heads_q / p.heads_kv);
    m0 = m_block * BM;
    gQ = (const u16 *)p.q + b * p.q_batch_stride + h * p.q_head_stride + (tt_i64)m0 * p.q_row_stride;
    gK = (const u16 *)p.k + b * p.k_batch_stride + hkv * p.k_head_stride;
    gV = (const u16 *)p.v + b * p.v_batch_stride + hkv * p.v_head_stride;
}

/* The causal diagonal's shift: query row i sees keys j <= i + diag; 0
 * (a constant) unless bottom-right. */
__device__ __forceinline__ int causal_diag(int Lq, int Lk) {
#if TT_CAUSAL == 2
    return Lk - Lq;
#else
    (void)Lq;
    (void)Lk;
    return 0;
#endif
}

/* K/V tiles this CTA visits: causal CTAs stop at their last row's last
 * visible key; a bottom-right CTA whose rows see no key visits none. */
__device__ __forceinline__ int key_tiles(int Lq, int Lk, int m0) {
#if TT_CAUSAL == 2
    /* <= Lk: no overflow */
    const int kv_end = min(Lk, min(Lq, m0 + BM) + causal_diag(Lq, Lk));
    return kv_end > 0 ? (kv_end + BN - 1) / BN : 0;
#elif TT_CAUSAL
    const int kv_end = min(Lk, min(Lq, m0 + BM));
    return (kv_end + BN - 1) / BN;
#else
    (void)Lq;
    (void)m0;
    return (Lk + BN - 1) / BN;
#endif
}

/* Whether the tile of keys n0.. needs masking for the 16 rows from row0:
 * keys past seqlen_k, or (causal) keys past the first row's diagonal. The
 * shift is taken from the key side: row0 + diag can overflow for the
 * largest seqlen_k, n0 - diag cannot. */
__device__ __forceinline__ bool tile_needs_mask(int n0, int row0, int Lk, int diag) {
    return (n0 + BN > Lk) || (TT_CAUSAL && n0 + BN - 1 - diag > row0);
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

/* -inf for keys past seqlen_k and, causal, keys after the query's diagonal
 * (causal_diag), in a 16-row S fragment: element [n][e] is row row0 + g +
 * 8 (e >> 1), key n0 + 8 n + 2 t + (e & 1). (A rewrite comparing offsets
 * against two per-thread registers made ptxas spill d256 128x128; this
 * form does not.) */
__device__ __forceinline__ void mask_tile(float (&s)[BN / 8][4], int n0, int row0, int Lk, int diag, int g,
                                          int t) {
#pragma unroll
    for (int n = 0; n < BN / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int col = n0 + n * 8 + 2 * t + (e & 1);
            const int row = row0 + g + ((e >> 1) << 3);
            (void)row;
            if (col >= Lk || (TT_CAUSAL && col - diag > row)) s[n][e] = neg_inf();
        }
}

/* Row r (g or g + 8) of a 16-row S fragment: its max over the tile and
 * the running max m, across the quad that holds the row. */
__device__ __forceinline__ float row_max(const float (&s)[BN / 8][4], int r, float m) {
    float mx = m;
#pragma unroll
    for (int n = 0; n < BN / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    return mx;
}

/* P = exp2(S scale - ms) replaces row r of S; returns this thread's part
 * of the row's sum. */
__device__ __forceinline__ float row_exp2(float (&s)[BN / 8][4], int r, float ms, float sl2) {
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < BN / 8; ++n) {
#if TT_EXP2_X2
        /* The packed P lands in the first float slot of the pair, ready to
         * be an A fragment register. */
        const u32 pp = ex2x2(pack2(fmaf(s[n][2 * r], sl2, -ms), fmaf(s[n][2 * r + 1], sl2, -ms)));
        float p0, p1;
        unpack2(pp, p0, p1);
        s[n][2 * r] = __uint_as_float(pp);
#else
        const float p0 = ex2(fmaf(s[n][2 * r], sl2, -ms));
        const float p1 = ex2(fmaf(s[n][2 * r + 1], sl2, -ms));
        s[n][2 * r] = p0;
        s[n][2 * r + 1] = p1;
#endif
        sum += p0 + p1;
    }
    return sum;
}

/* Online softmax of row r (g or g + 8) of a 16-row S fragment, exp2 domain:
 * P replaces S, the row's max m and sum l move on; returns the factor the
 * row's O must be scaled by. */
__device__ __forceinline__ float softmax_row(float (&s)[BN / 8][4], int r, float &m, float &l, float sl2) {
    const float mx = row_max(s, r, m);
    /* A row with no visible key yet keeps max -inf: subtract 0 so exp2
     * gives 0, never NaN. */
    const float ms = (mx == neg_inf()) ? 0.f : mx * sl2;
    const float alpha = ex2(m * sl2 - ms);
    m = mx;
    l = l * alpha + row_exp2(s, r, ms, sl2);
    return alpha;
}

/* P of keys 16 kk .. 16 kk + 15 as an m16k16 A fragment: the S (C) layout
 * of two n8 tiles is the A layout, converted to 16-bit pairs in place. */
__device__ __forceinline__ void p_fragment(const float (&s)[BN / 8][4], int kk, u32 (&a)[4]) {
    a[0] = pack2(s[2 * kk][0], s[2 * kk][1]);
    a[1] = pack2(s[2 * kk][2], s[2 * kk][3]);
    a[2] = pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

/* Row r of a 16-row O fragment, finished: O / l packed to 16 bits into the
 * Q tile's row row_t (the caller's own rows), LSE = m·scale + ln l from the
 * first thread of the quad. An empty row (no visible key: bottom-right
 * causal with seqlen_q > seqlen_k) writes O = 0 and LSE = -inf, as the sum
 * of its weights is 0. q0, lq: a varlen sequence's first row and rows
 * (p's batch strides 0); the dense batch leaves them 0 and p.seqlen_q. */
__device__ __forceinline__ void finish_row(const tt_sdpa_params &p, const float (&acc)[D / 8][4], int r, float m,
                                           float l, u32 sQ, int row_t, int m0, int h, int b, int t, int q0 = 0,
                                           int lq = 0x7fffffff) {
    const float LN2 = 0.6931471805599453f;
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const bool empty = !(l > 0.f) || m == neg_inf();
    const float inv = empty ? 0.f : 1.f / l;
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
        const u32 v = pack2(acc[d][2 * r] * inv, acc[d][2 * r + 1] * inv);
        asm volatile("st.shared.u32 [%0], %1;\n" :: "r"(sQ + tile_off<BM>(row_t, d) + t * 4), "r"(v));
    }
    if (p.lse && t == 0 && m0 + row_t < min(lq, p.seqlen_q)) {
        const float lse = empty ? neg_inf() : m * p.scale + lg2(l) * LN2;
        p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + q0 + m0 + row_t] = lse;
    }
}

/* The warp's ROWS staged rows (from row wr of the Q tile) to O with 16-byte
 * coalesced stores; rows past seqlen_q (a varlen sequence's lq rows from
 * row q0) are not written. */
template <int ROWS>
__device__ __forceinline__ void store_rows(const tt_sdpa_params &p, u32 sQ, int wr, int m0, int h, int b,
                                           int lane, int q0 = 0, int lq = 0x7fffffff) {
    const int end = min(lq, p.seqlen_q);
    u16 *gO = (u16 *)p.o + b * p.o_batch_stride + h * p.o_head_stride + (tt_i64)(q0 + m0) * p.o_row_stride;
#pragma unroll
    for (int i = 0; i < (ROWS * CPR + 31) / 32; ++i) {
        const int idx = lane + i * 32;
        if ((ROWS * CPR) % 32 == 0 || idx < ROWS * CPR) {
            const int r = wr + idx / CPR, c = idx % CPR;
            if (m0 + r < end) {
                u32 v0, v1, v2, v3;
                asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(v0), "=r"(v1), "=r"(v2), "=r"(v3) : "r"(sQ + tile_off<BM>(r, c)));
                u16 *dst = gO + (tt_i64)r * p.o_row_stride + c * 8;
                asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};\n"
                             :: "l"(dst), "r"(v0), "r"(v1), "r"(v2), "r"(v3) : "memory");
            }
        }
    }
}

} // namespace

#if TT_FAULT_INJECT == 2
__device__ volatile int tt_never_set; /* zero, and nobody sets it */
#endif

/* Test builds only (the worker's isolation tests): fault or hang at entry. */
__device__ __forceinline__ void fault_inject(const tt_sdpa_params &p) {
#if TT_FAULT_INJECT == 1
    if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0)
        *(volatile int *)((char *)p.o + ((tt_i64)1 << 40)) = 1;
#elif TT_FAULT_INJECT == 2
    while (tt_never_set == 0) {
    }
#endif
    (void)p;
}
#endif
