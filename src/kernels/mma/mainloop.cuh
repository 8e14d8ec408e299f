/*
 * Family `mma` (0): FlashAttention-2 style on mma.sync m16n8k16, ldmatrix
 * and 16-byte cp.async (sm_80 and later). Each warp owns BLOCK_M / WARPS
 * query rows, 16 or 32 (one or two m16 tiles); key tiles are whole k16
 * steps of P V.
 *   TT_STAGES 1: one K and one V buffer, V(j) loads under S = QK^T and
 *             K(j+1) under softmax + PV (FlashAttention-2's schedule);
 *             >= 2: a ring of STAGES K+V tiles, STAGES-1 tiles in flight
 *   TT_LAYOUT 0: rows padded by 8 elements; 1: XOR swizzle of 16 B chunks
 *   TT_Q_IN_REGS 1: Q fragments loaded once into registers; 0: re-read
 *             from shared memory on every K tile
 * The shape rules are mma/family.c's; the asserts below are what this code
 * assumes of them.
 */
#ifndef TT_KERNELS_MMA_MAINLOOP_CUH
#define TT_KERNELS_MMA_MAINLOOP_CUH

#include "skeleton.cuh"

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

namespace {

constexpr int MT = BM / (16 * NW); /* m16 tiles per warp */
constexpr int RW = MT * 16;        /* query rows per warp */
/* Elements per shared-memory row: padded rows add 8 elements (16 bytes) so
 * ldmatrix rows fall in different banks; swizzled rows need no padding. */
constexpr int ROW = D + (TT_LAYOUT == 0 ? 8 : 0);
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
template <int ROWS> __device__ __forceinline__ u32 tile_off(int r, int c) { return soff(r, c); }

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

} // namespace

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
    const int diag = causal_diag(Lq, Lk);
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
        if (tile_needs_mask(n0, m0 + wr, Lk, diag)) {
#pragma unroll
            for (int mi = 0; mi < MT; ++mi) mask_tile(s[mi], n0, m0 + wr + mi * 16, Lk, diag, g, t);
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

#endif
