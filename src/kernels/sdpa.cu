/*
 * SDPA forward: the kernel source of both families, one revision.
 *
 * Family 0, `mma`: FlashAttention-2 style on mma.sync m16n8k16, ldmatrix
 * and 16-byte cp.async (sm_80 and later).
 * Family 1, `wgmma`: Hopper warpgroup MMA (sm_90a): each warpgroup owns 64
 * query rows; S = Q K^T reads Q and K from shared memory by descriptor,
 * O += P V takes P from registers (the S accumulators, converted in place)
 * and V from shared memory; K/V tiles arrive by cp.async into a ring of
 * STAGES slots laid out in wgmma's 128-byte swizzle.
 *
 * Compiled at run time by NVRTC with no system headers: 16-bit values are
 * raw bits, conversions and matrix instructions are inline PTX.
 *
 * Knobs (-D macros, see sdpa_params.h and docs/kernels.md):
 *   TT_FAMILY    0 mma, 1 wgmma
 *   TT_BLOCK_M   query rows per CTA. mma: each warp owns BLOCK_M / WARPS
 *                rows, 16 or 32 (one or two m16 tiles); wgmma: 16 * WARPS
 *                (64 rows per warpgroup)
 *   TT_BLOCK_N   keys per K/V tile: mma a multiple of 16, wgmma of 64
 *   TT_WARPS     warps per CTA (wgmma: 4, 8 or 12, one to three warpgroups)
 *   TT_STAGES    mma 1: one K and one V buffer, V(j) loads under S = QK^T
 *                and K(j+1) under softmax + PV (FlashAttention-2's
 *                schedule); >= 2 (wgmma always): a ring of STAGES K+V
 *                tiles, STAGES-1 tiles in flight
 *   TT_LAYOUT    0: rows padded by 8 elements; 1: XOR swizzle of 16 B
 *                chunks (wgmma: 1 only, its 128-byte swizzle)
 *   TT_Q_IN_REGS 1 (mma only): Q fragments loaded once into registers;
 *                0: re-read from shared memory on every K tile
 * Problem facts: TT_HEAD_DIM (32, 64, 96, 128, 256; wgmma 64, 128, 256),
 * TT_DTYPE (0 fp16, 1 bf16), TT_CAUSAL. Test builds: TT_FAULT_INJECT 1
 * writes far out of bounds, 2 never finishes.
 */
#include "sdpa_params.h"

#ifndef TT_FAULT_INJECT
#define TT_FAULT_INJECT 0
#endif
#ifndef TT_FAMILY
#define TT_FAMILY 0
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
#error "sdpa.cu: every TT_ knob and problem macro must be defined"
#endif

/* The legal knob space; the variant enumeration (src/kernels) mirrors these
 * rules, docs/kernels.md explains them. */
#if TT_FAMILY != 0 && TT_FAMILY != 1
#error "TT_FAMILY must be 0 (mma) or 1 (wgmma)"
#endif
#if TT_FAMILY == 1
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "family wgmma needs sm_90a (wgmma.mma_async)"
#endif
#if TT_HEAD_DIM % 64 != 0
#error "family wgmma: TT_HEAD_DIM must be 64, 128 or 256 (whole 64-column panels)"
#endif
#if TT_WARPS != 4 && TT_WARPS != 8 && TT_WARPS != 12
#error "family wgmma: TT_WARPS must be 4, 8 or 12 (one to three warpgroups)"
#endif
#if TT_BLOCK_M != 16 * TT_WARPS
#error "family wgmma: TT_BLOCK_M must be 16 * TT_WARPS (64 rows per warpgroup)"
#endif
#if TT_BLOCK_N % 64 != 0 || TT_BLOCK_N > 256
#error "family wgmma: TT_BLOCK_N must be 64, 128, 192 or 256"
#endif
#if TT_STAGES < 2 || TT_LAYOUT != 1 || TT_Q_IN_REGS != 0
#error "family wgmma: TT_STAGES >= 2, TT_LAYOUT 1 (swizzle), TT_Q_IN_REGS 0"
#endif
#if TT_EXP2_PACKED
#error "family wgmma: TT_EXP2_PACKED is an mma-only experiment"
#endif
#endif
#if TT_HEAD_DIM != 32 && TT_HEAD_DIM != 64 && TT_HEAD_DIM != 96 && \
    TT_HEAD_DIM != 128 && TT_HEAD_DIM != 256
#error "TT_HEAD_DIM must be 32, 64, 96, 128 or 256"
#endif
#if TT_WARPS < 1 || TT_WARPS > 16
#error "TT_WARPS must be 1..16"
#endif
#if TT_BLOCK_M % (16 * TT_WARPS) != 0 || \
    (TT_BLOCK_M / (16 * TT_WARPS) != 1 && TT_BLOCK_M / (16 * TT_WARPS) != 2)
#error "TT_BLOCK_M must be 16*TT_WARPS or 32*TT_WARPS (16 or 32 rows per warp)"
#endif
#if TT_BLOCK_N % 16 != 0 || TT_BLOCK_N < 16 || TT_BLOCK_N > 256
#error "TT_BLOCK_N must be a multiple of 16 in 16..256"
#endif
#if TT_STAGES < 1 || TT_STAGES > 4
#error "TT_STAGES must be 1..4"
#endif
#if TT_LAYOUT != 0 && TT_LAYOUT != 1
#error "TT_LAYOUT must be 0 (pad) or 1 (swizzle)"
#endif
#if TT_Q_IN_REGS != 0 && TT_Q_IN_REGS != 1
#error "TT_Q_IN_REGS must be 0 or 1"
#endif
#if TT_DTYPE != 0 && TT_DTYPE != 1
#error "TT_DTYPE must be 0 (fp16) or 1 (bf16)"
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
#if TT_FAMILY == 0
constexpr int MT = BM / (16 * NW); /* m16 tiles per warp */
constexpr int RW = MT * 16;        /* query rows per warp */
constexpr int ROW = TT_SDPA_SMEM_ROW(D, TT_LAYOUT);
constexpr int ROW_BYTES = ROW * 2;

/* Fragment registers per thread: S and O accumulators (+ Q fragments). Over
 * 256 fp32 registers is a guaranteed spill, so such variants are illegal;
 * below that ptxas' report decides. */
static_assert(MT * (BN + D) / 2 + (TT_Q_IN_REGS ? MT * D / 4 : 0) <= 256,
              "accumulators alone exceed the 255-register limit");

/* Byte offset of 16-byte chunk c of row r inside a tile. Swizzle XORs the
 * chunk with bits of the row so the 8 row addresses of one ldmatrix phase
 * hit 8 different 16-byte bank groups. With 8k chunks per row (d 64, 128,
 * 256) the row stride is a multiple of 128 B: chunk ^= row % 8. With 8k+4
 * chunks (d 32, 96) odd rows are already shifted by 64 B, so XOR the low two
 * bits with (row / 2) % 4; the chunk stays inside its aligned group of 4 and
 * so inside the row. */
__device__ __forceinline__ u32 soff(int r, int c) {
#if TT_LAYOUT == 0
    return (u32)(r * ROW_BYTES + c * 16);
#else
    int pc = (CPR % 8 == 0) ? (c ^ (r & 7)) : (c ^ ((r >> 1) & 3));
    return (u32)(r * ROW_BYTES + pc * 16);
#endif
}

#else
/* wgmma: tiles are 64-column panels (128-byte rows) in the 128-byte swizzle
 * wgmma's descriptors read: chunk c of row r sits at chunk (c % 8) ^ (r % 8)
 * of its panel's row; panel bases are 1024-byte aligned. */
template <int ROWS> __device__ __forceinline__ u32 poff(int r, int c) {
    return (u32)((c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}
#endif

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

#if TT_FAMILY == 0
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

#endif

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

/* Byte offset of chunk c of row r in a tile of ROWS rows, either family. */
template <int ROWS> __device__ __forceinline__ u32 tile_off(int r, int c) {
#if TT_FAMILY == 0
    return soff(r, c);
#else
    return poff<ROWS>(r, c);
#endif
}

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

/* K/V tiles this CTA visits: causal CTAs stop at their last row's key. */
__device__ __forceinline__ int key_tiles(int Lq, int Lk, int m0) {
#if TT_CAUSAL
    const int kv_end = min(Lk, min(Lq, m0 + BM));
#else
    (void)Lq;
    (void)m0;
    const int kv_end = Lk;
#endif
    return (kv_end + BN - 1) / BN;
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

/* -inf for keys past seqlen_k and, causal, keys after the query, in a 16-row
 * S fragment: element [n][e] is row row0 + g + 8 (e >> 1), key n0 + 8 n +
 * 2 t + (e & 1). (A rewrite comparing offsets against two per-thread
 * registers made ptxas spill d256 128x128; this form does not.) */
__device__ __forceinline__ void mask_tile(float (&s)[BN / 8][4], int n0, int row0, int Lk, int g, int t) {
#pragma unroll
    for (int n = 0; n < BN / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int col = n0 + n * 8 + 2 * t + (e & 1);
            const int row = row0 + g + ((e >> 1) << 3);
            (void)row;
            if (col >= Lk || (TT_CAUSAL && col > row)) s[n][e] = neg_inf();
        }
}

/* Online softmax of row r (g or g + 8) of a 16-row S fragment, exp2 domain:
 * P replaces S, the row's max m and sum l move on; returns the factor the
 * row's O must be scaled by. */
__device__ __forceinline__ float softmax_row(float (&s)[BN / 8][4], int r, float &m, float &l, float sl2) {
    float mx = m;
#pragma unroll
    for (int n = 0; n < BN / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    /* A row with no visible key yet keeps max -inf: subtract 0 so exp2
     * gives 0, never NaN. */
    const float ms = (mx == neg_inf()) ? 0.f : mx * sl2;
    const float alpha = ex2(m * sl2 - ms);
    m = mx;
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
    l = l * alpha + sum;
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
 * first thread of the quad. An empty row writes O = 0 and LSE = +inf. */
__device__ __forceinline__ void finish_row(const tt_sdpa_params &p, const float (&acc)[D / 8][4], int r, float m,
                                           float l, u32 sQ, int row_t, int m0, int h, int b, int t) {
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
    if (p.lse && t == 0 && m0 + row_t < p.seqlen_q) {
        const float lse = empty ? __int_as_float(0x7f800000) : m * p.scale + lg2(l) * LN2;
        p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + m0 + row_t] = lse;
    }
}

/* The warp's ROWS staged rows (from row wr of the Q tile) to O with 16-byte
 * coalesced stores; rows past seqlen_q are not written. */
template <int ROWS>
__device__ __forceinline__ void store_rows(const tt_sdpa_params &p, u32 sQ, int wr, int m0, int h, int b,
                                           int lane) {
    u16 *gO = (u16 *)p.o + b * p.o_batch_stride + h * p.o_head_stride + (tt_i64)m0 * p.o_row_stride;
#pragma unroll
    for (int i = 0; i < (ROWS * CPR + 31) / 32; ++i) {
        const int idx = lane + i * 32;
        if ((ROWS * CPR) % 32 == 0 || idx < ROWS * CPR) {
            const int r = wr + idx / CPR, c = idx % CPR;
            if (m0 + r < p.seqlen_q) {
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

#if TT_FAMILY == 0
/* Offset of the ldmatrix address for row block r_add (a multiple of 16) and
 * k step kk (chunks 2kk, 2kk+1), given base = soff(lane row, lane chunk).
 * With a power-of-two row the swizzled offset is base ^ (32 * kk): one LOP,
 * and the row block folds into the instruction's immediate. */
__device__ __forceinline__ u32 frag_off(u32 base, int r_lane, int c_lane, int r_add, int kk) {
#if TT_LAYOUT == 0
    (void)r_lane; (void)c_lane;
    return base + r_add * ROW_BYTES + kk * 32;
#else
    if constexpr (CPR % 8 == 0) {
        (void)r_lane; (void)c_lane;
        return (base ^ (u32)(kk * 32)) + r_add * ROW_BYTES;
    } else {
        (void)base;
        return soff(r_lane + r_add, c_lane + 2 * kk);
    }
#endif
}

#endif

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

#if TT_FAMILY == 0
extern "C" __global__ void __launch_bounds__(NT)
tt_sdpa_fwd_kernel(tt_sdpa_params p) {
    fault_inject(p);
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;

    int h, b, m0;
    const u16 *gQ, *gK, *gV;
    cta_tiles(p, h, b, m0, gQ, gK, gV);
    const int Lq = p.seqlen_q, Lk = p.seqlen_k;

    const u32 sQ = smem_u32(smem);
    const u32 sK = sQ + BM * ROW_BYTES;
    const u32 sV = sK + ST * BN * ROW_BYTES;
    constexpr u32 KV_TILE = BN * ROW_BYTES;
    (void)KV_TILE;

    const int n_tiles = key_tiles(Lq, Lk, m0);
    const int wr = warp * RW; /* first row of this warp in the tile */

    /* Prologue: Q, then the first K (stages 1) or STAGES-1 K+V tiles. */
    load_tile<BM>(sQ, gQ, p.q_row_stride, Lq - m0, tid);
    cp_commit();
#if TT_STAGES == 1
    load_tile<BN>(sK, gK, p.k_row_stride, Lk, tid);
    cp_commit();
#else
#pragma unroll
    for (int i = 0; i < ST - 1; ++i) {
        if (i < n_tiles) {
            const tt_i64 n0 = (tt_i64)i * BN;
            load_tile<BN>(sK + i * KV_TILE, gK + n0 * p.k_row_stride, p.k_row_stride,
                          Lk - (int)n0, tid);
            load_tile<BN>(sV + i * KV_TILE, gV + n0 * p.v_row_stride, p.v_row_stride,
                          Lk - (int)n0, tid);
        }
        cp_commit(); /* empty groups keep the wait counts uniform */
    }
#endif

    /* ldmatrix lane addressing: A (Q) and V^T fragments take row lane % 16,
     * chunk lane / 16; K fragments take row lane % 8 + 8 * (lane / 16),
     * chunk (lane / 8) % 2. */
    const int a_row = lane & 15, a_chk = lane >> 4;
    const int k_row = (lane & 7) + ((lane >> 4) << 3), k_chk = (lane >> 3) & 1;
    const u32 a_base = soff(a_row, a_chk), k_base = soff(k_row, k_chk);

#if TT_Q_IN_REGS
    u32 qf[MT][D / 16][4];
    cp_wait<(ST == 1 ? 1 : ST - 1)>();
    __syncthreads();
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
            ldsm_x4(sQ + frag_off(a_base, a_row, a_chk, wr + mi * 16, kk), qf[mi][kk][0],
                    qf[mi][kk][1], qf[mi][kk][2], qf[mi][kk][3]);
#endif

    const float NEG_INF = __int_as_float(0xff800000);
    const float sl2 = p.scale_log2;
    float acc_o[MT][D / 8][4];
    float row_m[MT][2], row_l[MT][2];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
        for (int d = 0; d < D / 8; ++d)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[mi][d][e] = 0.f;
        row_m[mi][0] = row_m[mi][1] = NEG_INF;
        row_l[mi][0] = row_l[mi][1] = 0.f;
    }

    for (int j = 0; j < n_tiles; ++j) {
        const int n0 = j * BN;
#if TT_STAGES == 1
        cp_wait<0>(); /* K(j) landed */
        __syncthreads(); /* and every warp is done with V(j-1) */
        load_tile<BN>(sV, gV + (tt_i64)n0 * p.v_row_stride, p.v_row_stride, Lk - n0, tid);
        cp_commit();
        const u32 cK = sK, cV = sV;
#else
        cp_wait<ST - 2>(); /* tile j landed */
        __syncthreads();   /* and every warp is done with tile j-1's slot */
        {
            const int nt = j + ST - 1;
            if (nt < n_tiles) {
                const int slot = nt % ST;
                const tt_i64 nn0 = (tt_i64)nt * BN;
                load_tile<BN>(sK + slot * KV_TILE, gK + nn0 * p.k_row_stride,
                              p.k_row_stride, Lk - (int)nn0, tid);
                load_tile<BN>(sV + slot * KV_TILE, gV + nn0 * p.v_row_stride,
                              p.v_row_stride, Lk - (int)nn0, tid);
            }
            cp_commit();
        }
        const u32 cK = sK + (j % ST) * KV_TILE, cV = sV + (j % ST) * KV_TILE;
#endif

        /* S = Q K^T */
        float s[MT][BN / 8][4];
#pragma unroll
        for (int mi = 0; mi < MT; ++mi)
#pragma unroll
            for (int n = 0; n < BN / 8; ++n)
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
                ldsm_x4(sQ + frag_off(a_base, a_row, a_chk, wr + mi * 16, kk), a[mi][0],
                        a[mi][1], a[mi][2], a[mi][3]);
#endif
            }
#pragma unroll
            for (int nn = 0; nn < BN / 16; ++nn) {
                u32 b0, b1, b2, b3;
                ldsm_x4(cK + frag_off(k_base, k_row, k_chk, nn * 16, kk), b0, b1, b2, b3);
#pragma unroll
                for (int mi = 0; mi < MT; ++mi) {
                    mma16816(s[mi][2 * nn], a[mi], b0, b1);
                    mma16816(s[mi][2 * nn + 1], a[mi], b2, b3);
                }
            }
        }

#if TT_STAGES == 1
        cp_wait<0>(); /* V(j) landed */
        __syncthreads(); /* and every warp is done reading K(j) */
        if (j + 1 < n_tiles) {
            load_tile<BN>(sK, gK + (tt_i64)(n0 + BN) * p.k_row_stride, p.k_row_stride,
                          Lk - n0 - BN, tid);
        }
        cp_commit();
#endif

        /* Masking: only the last tile (keys past seqlen_k) and, causal, the
         * tiles that cross the diagonal pay for it. */
        const bool need_mask = (n0 + BN > Lk) || (TT_CAUSAL && n0 + BN - 1 > m0 + wr);
        if (need_mask) {
#pragma unroll
            for (int mi = 0; mi < MT; ++mi) mask_tile(s[mi], n0, m0 + wr + mi * 16, Lk, g, t);
        }

        /* Online softmax in the exp2 domain, rows g and g+8 of each m tile. */
        float alphas[MT][2];
        bool grew = false;
#pragma unroll
        for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float alpha = softmax_row(s[mi], r, row_m[mi][r], row_l[mi][r], sl2);
                alphas[mi][r] = alpha;
                grew |= alpha != 1.f;
            }
        }
        /* TT_RESCALE_SKIP: when no row max of the warp grew, alpha is
         * exactly 1 and the MT*D/2 multiplies could be skipped; the vote and
         * branch cost more than they save (docs/perf.md v2). */
        if (!TT_RESCALE_SKIP || __any_sync(0xffffffffu, grew)) {
#pragma unroll
            for (int mi = 0; mi < MT; ++mi)
#pragma unroll
                for (int d = 0; d < D / 8; ++d)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc_o[mi][d][e] *= alphas[mi][e >> 1];
        }

        /* O += P V: P goes from the S accumulators straight into A
         * fragments (the m16n8 C layout of two n tiles is the m16k16 A
         * layout), no shared-memory round trip. */
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            u32 pa[MT][4];
#pragma unroll
            for (int mi = 0; mi < MT; ++mi) {
#if TT_EXP2_X2
                pa[mi][0] = __float_as_uint(s[mi][2 * kk][0]);
                pa[mi][1] = __float_as_uint(s[mi][2 * kk][2]);
                pa[mi][2] = __float_as_uint(s[mi][2 * kk + 1][0]);
                pa[mi][3] = __float_as_uint(s[mi][2 * kk + 1][2]);
#else
                p_fragment(s[mi], kk, pa[mi]);
#endif
            }
#pragma unroll
            for (int dd = 0; dd < D / 16; ++dd) {
                u32 b0, b1, b2, b3;
                ldsm_x4_t(cV + frag_off(a_base, a_row, a_chk, kk * 16, dd), b0, b1, b2, b3);
#pragma unroll
                for (int mi = 0; mi < MT; ++mi) {
                    mma16816(acc_o[mi][2 * dd], pa[mi], b0, b1);
                    mma16816(acc_o[mi][2 * dd + 1], pa[mi], b2, b3);
                }
            }
        }
    }
    cp_wait<0>(); /* nothing may land in shared memory after the kernel */

    /* Epilogue: O / l staged through this warp's own rows of the Q tile
     * (no other warp reads them), then 16-byte coalesced stores; LSE from
     * the first thread of each quad. */
    __syncwarp();
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r)
            finish_row(p, acc_o[mi], r, row_m[mi][r], row_l[mi][r], sQ, wr + mi * 16 + g + r * 8, m0, h, b, t);
    __syncwarp();
    store_rows<RW>(p, sQ, wr, m0, h, b, lane);
}
#else /* TT_FAMILY == 1 */
#if TT_DTYPE == 0
#define TT_WG_T "f16"
#else
#define TT_WG_T "bf16"
#endif

/* Outside the anonymous namespace: shapes a variant does not use are no
 * warning. */

/* GENERATED by bench/dev/gen_wgmma.py: begin */
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], unsigned long long da,
                                             unsigned long long db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TT_WG_T "." TT_WG_T " "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(acc));
}

__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const u32 (&a)[4],
                                             unsigned long long db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TT_WG_T "." TT_WG_T " "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], unsigned long long da,
                                             unsigned long long db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TT_WG_T "." TT_WG_T " "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(acc));
}

__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const u32 (&a)[4],
                                             unsigned long long db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TT_WG_T "." TT_WG_T " "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

__device__ __forceinline__ void wgmma_ss_n192(float (&d)[96], unsigned long long da,
                                             unsigned long long db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n192k16.f32." TT_WG_T "." TT_WG_T " "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
                 : "l"(da), "l"(db), "r"(acc));
}

__device__ __forceinline__ void wgmma_rs_n192(float (&d)[96], const u32 (&a)[4],
                                             unsigned long long db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n192k16.f32." TT_WG_T "." TT_WG_T " "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, {%96, %97, %98, %99}, %100, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

__device__ __forceinline__ void wgmma_ss_n256(float (&d)[128], unsigned long long da,
                                             unsigned long long db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." TT_WG_T "." TT_WG_T " "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(da), "l"(db), "r"(acc));
}

__device__ __forceinline__ void wgmma_rs_n256(float (&d)[128], const u32 (&a)[4],
                                             unsigned long long db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." TT_WG_T "." TT_WG_T " "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

/* GENERATED by bench/dev/gen_wgmma.py: end */

namespace {

typedef unsigned long long u64;

/* A shared-memory matrix descriptor in the 128-byte swizzle: start address,
 * leading and stride byte offsets (all >> 4), swizzle mode 1 in bits 62-63.
 * K-major operands (Q, K): the stride is 1024 B between groups of 8 rows
 * and the leading offset is unused. V, read MN-major (transposed): 1024 B
 * between groups of 8 keys, the leading offset steps to the next 64-column
 * panel of head_dim. */
__device__ __forceinline__ u64 sdesc(u32 saddr, u32 lbo, u32 sbo) {
    return (u64)((saddr & 0x3FFFFu) >> 4) | ((u64)((lbo >> 4) & 0x3FFFu) << 16) |
           ((u64)((sbo >> 4) & 0x3FFFu) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}
/* cp.async writes shared memory through the generic proxy, wgmma reads it
 * through the async proxy: a proxy fence orders them. */
__device__ __forceinline__ void fence_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* Keeps the compiler from touching accumulator registers across the
 * asynchronous MMA: reads only after wg_wait, writes only before. */
template <int R> __device__ __forceinline__ void reg_fence(float (&d)[R][4]) {
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}

/* The accumulators as the skeleton's [N / 8][4] fragments (element [i][e]:
 * row g + 8 (e >> 1), column 8 i + 2 t + (e & 1)); the instruction takes
 * them as one flat list. */
template <int N>
__device__ __forceinline__ void mma_ss(float (&acc)[N / 8][4], u64 da, u64 db, int accumulate) {
    float(&d)[N / 2] = reinterpret_cast<float(&)[N / 2]>(acc);
    if constexpr (N == 64) wgmma_ss_n64(d, da, db, accumulate);
    else if constexpr (N == 128) wgmma_ss_n128(d, da, db, accumulate);
    else if constexpr (N == 192) wgmma_ss_n192(d, da, db, accumulate);
    else wgmma_ss_n256(d, da, db, accumulate);
}
template <int N>
__device__ __forceinline__ void mma_rs(float (&acc)[N / 8][4], const u32 (&a)[4], u64 db) {
    float(&d)[N / 2] = reinterpret_cast<float(&)[N / 2]>(acc);
    if constexpr (N == 64) wgmma_rs_n64(d, a, db);
    else if constexpr (N == 128) wgmma_rs_n128(d, a, db);
    else if constexpr (N == 192) wgmma_rs_n192(d, a, db);
    else wgmma_rs_n256(d, a, db);
}

constexpr u32 Q_BYTES = BM * D * 2;
constexpr u32 T_BYTES = BN * D * 2; /* one K or one V tile */

} // namespace

extern "C" __global__ void __launch_bounds__(NT, 1)
tt_sdpa_fwd_kernel(tt_sdpa_params p) {
    fault_inject(p);
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int wg = warp >> 2;             /* warpgroup: rows 64 wg .. 64 wg + 63 */
    const int wr = wg * 64 + (warp & 3) * 16; /* first row of this warp */

    int h, b, m0;
    const u16 *gQ, *gK, *gV;
    cta_tiles(p, h, b, m0, gQ, gK, gV);
    const int Lq = p.seqlen_q, Lk = p.seqlen_k;

    /* The swizzle is a function of address bits 4-9: 1024-byte aligned
     * tiles (the launch asks for 1 KB of slack). */
    const u32 sQ = (smem_u32(smem) + 1023u) & ~1023u;
    const u32 sKV = sQ + Q_BYTES; /* slot s: K at sKV + 2 s T, V after it */

    const int n_tiles = key_tiles(Lq, Lk, m0);

    load_tile<BM>(sQ, gQ, p.q_row_stride, Lq - m0, tid);
    cp_commit();
#pragma unroll
    for (int i = 0; i < ST - 1; ++i) {
        if (i < n_tiles) {
            const tt_i64 n0 = (tt_i64)i * BN;
            load_tile<BN>(sKV + 2 * i * T_BYTES, gK + n0 * p.k_row_stride, p.k_row_stride,
                          Lk - (int)n0, tid);
            load_tile<BN>(sKV + (2 * i + 1) * T_BYTES, gV + n0 * p.v_row_stride, p.v_row_stride,
                          Lk - (int)n0, tid);
        }
        cp_commit(); /* empty groups keep the wait counts uniform */
    }

    const float sl2 = p.scale_log2;
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[i][e] = 0.f;
    float row_m[2] = {neg_inf(), neg_inf()}, row_l[2] = {0.f, 0.f};
    const u32 q_wg = sQ + wg * 64 * 128; /* this warpgroup's 64 rows in panel 0 */

    for (int j = 0; j < n_tiles; ++j) {
        const int n0 = j * BN;
        cp_wait<ST - 2>(); /* tile j (and Q) landed, for this thread's copies */
        fence_async_smem();
        __syncthreads(); /* everyone's copies; every warpgroup is done with tile j-1 */
        {
            const int nt = j + ST - 1;
            if (nt < n_tiles) {
                const int slot = nt % ST;
                const tt_i64 nn0 = (tt_i64)nt * BN;
                load_tile<BN>(sKV + 2 * slot * T_BYTES, gK + nn0 * p.k_row_stride, p.k_row_stride,
                              Lk - (int)nn0, tid);
                load_tile<BN>(sKV + (2 * slot + 1) * T_BYTES, gV + nn0 * p.v_row_stride,
                              p.v_row_stride, Lk - (int)nn0, tid);
            }
            cp_commit();
        }
        const u32 cK = sKV + 2 * (j % ST) * T_BYTES, cV = cK + T_BYTES;

        /* S = Q K^T: k steps of 16 columns, 4 per 64-column panel (32 bytes
         * apart inside the swizzled row). */
        float s[BN / 8][4];
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const u32 koff = (u32)((kk & 3) * 32);
            mma_ss<BN>(s, sdesc(q_wg + (kk >> 2) * (BM * 128) + koff, 16, 1024),
                       sdesc(cK + (kk >> 2) * (BN * 128) + koff, 16, 1024), kk > 0);
        }
        wg_commit();
        wg_wait<0>();
        reg_fence(s);

        if ((n0 + BN > Lk) || (TT_CAUSAL && n0 + BN - 1 > m0 + wr)) mask_tile(s, n0, m0 + wr, Lk, g, t);
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) alpha[r] = softmax_row(s, r, row_m[r], row_l[r], sl2);
#pragma unroll
        for (int i = 0; i < D / 8; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[i][e] *= alpha[e >> 1];

        /* O += P V. V's k step kk is 16 keys: 2048 bytes into each panel. */
        u32 pa[BN / 16][4];
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) p_fragment(s, kk, pa[kk]);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
            mma_rs<D>(o, pa[kk], sdesc(cV + kk * 2048, BN * 128, 1024));
        wg_commit();
        wg_wait<0>();
        reg_fence(o);
    }
    cp_wait<0>(); /* nothing may land in shared memory after the kernel */
    __syncthreads(); /* every warpgroup's last S = Q K^T is done with Q */

    /* Epilogue: O / l staged through this warp's own rows of the Q tile,
     * then 16-byte coalesced stores; LSE from the first thread of each quad. */
#pragma unroll
    for (int r = 0; r < 2; ++r) finish_row(p, o, r, row_m[r], row_l[r], sQ, wr + g + r * 8, m0, h, b, t);
    __syncwarp();
    store_rows<16>(p, sQ, wr, m0, h, b, lane);
}
#endif
