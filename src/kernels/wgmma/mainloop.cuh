/*
 * Family `wgmma` (1): Hopper warpgroup MMA (sm_90a). Each warpgroup owns 64
 * query rows (TT_BLOCK_M = 16 * TT_WARPS, 4, 8 or 12 warps); S = Q K^T
 * reads Q and K from shared memory by descriptor, O += P V takes P from
 * registers (the S accumulators, converted in place) and V from shared
 * memory; K/V tiles arrive by cp.async into a ring of TT_STAGES (>= 2)
 * slots laid out in wgmma's 128-byte swizzle. TT_LAYOUT and TT_Q_IN_REGS
 * are not read (pinned by wgmma/family.c, which holds the shape rules; the
 * checks below are what this code assumes of them).
 */
#ifndef TT_KERNELS_WGMMA_MAINLOOP_CUH
#define TT_KERNELS_WGMMA_MAINLOOP_CUH

#include "skeleton.cuh"

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

namespace {

/* wgmma: tiles are 64-column panels (128-byte rows) in the 128-byte swizzle
 * wgmma's descriptors read: chunk c of row r sits at chunk (c % 8) ^ (r % 8)
 * of its panel's row; panel bases are 1024-byte aligned. */
template <int ROWS> __device__ __forceinline__ u32 poff(int r, int c) {
    return (u32)((c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}
template <int ROWS> __device__ __forceinline__ u32 tile_off(int r, int c) { return poff<ROWS>(r, c); }

} // namespace

#if TT_DTYPE == 0
#define TT_WG_T "f16"
#else
#define TT_WG_T "bf16"
#endif

/* Outside the anonymous namespace: shapes a variant does not use are no
 * warning. */
#include "wgmma/wrappers.cuh"

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
    const int diag = causal_diag(Lq, Lk);

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

        if (tile_needs_mask(n0, m0 + wr, Lk, diag)) mask_tile(s, n0, m0 + wr, Lk, diag, g, t);
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
