/*
 * Family `ws` (2): a warp-specialized FlashAttention forward (sm_90a).
 *
 * Warpgroup 0 is the producer: one thread issues bulk tensor copies (TMA)
 * of Q and, tile by tile, of K and V into a ring of TT_STAGES slots, each
 * slot guarded by mbarriers (full: the copy engine's bytes landed; empty:
 * every consumer warp is done with it); the warpgroup gives its registers
 * back (setmaxnreg.dec). Warpgroups 1..NC are consumers of 64 query rows
 * each (setmaxnreg.inc): S = Q K^T and O += P V on warpgroup MMA from the
 * 128-byte-swizzled slots, the skeleton's online softmax in registers, O
 * staged in the consumer's own rows of the Q tile and written by a TMA
 * store (rows past seqlen_q are clipped by the copy engine).
 *
 * A consumer's turns: turn 0 issues S_0; turn j (1..n-1) issues S_j = Q
 * K_j^T and O += P_{j-1} V_{j-1}, and softmax(S_j) runs while P_{j-1}
 * V_{j-1} is still on the tensor cores; turn n issues the last P V.
 *
 * Knobs, with this family's meaning (src/kernels/ws/family.c has the
 * rules, docs/kernels.md the reasons):
 *   TT_WARPS     4 (1 + NC): NC = 1..3 consumer warpgroups
 *   TT_BLOCK_M   64 NC
 *   TT_BLOCK_N   keys per K/V tile, a multiple of 16 in 64..192
 *   TT_STAGES    K/V ring slots, 2..4
 *   TT_LAYOUT    1: ping-pong (two consumers, named barriers: a consumer's
 *                turn starts after the other issued its own, so one's
 *                softmax runs under the other's GEMMs); 0: none. The layout
 *                itself is always the 128-byte swizzle.
 *   TT_Q_IN_REGS 1: a persistent grid (one CTA an SM walks the work tiles;
 *                two Q buffers, so the next tile's Q and K/V load under
 *                this tile's epilogue); 0: one CTA a tile. Q is read from
 *                shared memory either way.
 * Entry: tt_sdpa_fwd_kernel(params, tensor maps of Q, K, V, O), encoded by
 * the launcher: 4-d (head_dim, seqlen, heads, batch), 128-byte swizzle,
 * 64-column boxes of BLOCK_M (Q), BLOCK_N (K, V) and 64 (O) rows.
 */
#ifndef TT_KERNELS_WS_MAINLOOP_CUH
#define TT_KERNELS_WS_MAINLOOP_CUH

#include "skeleton.cuh"
#include "ws/sched.h"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "family ws needs sm_90a (wgmma, setmaxnreg)"
#endif
#if TT_HEAD_DIM != 64 && TT_HEAD_DIM != 128 && TT_HEAD_DIM != 256
#error "family ws: TT_HEAD_DIM must be 64, 128 or 256"
#endif
#if TT_WARPS != 8 && TT_WARPS != 12 && TT_WARPS != 16
#error "family ws: TT_WARPS must be 8, 12 or 16 (a producer and 1..3 consumer warpgroups)"
#endif
#if TT_BLOCK_M != 16 * (TT_WARPS - 4)
#error "family ws: TT_BLOCK_M must be 64 per consumer warpgroup"
#endif
#if TT_BLOCK_N % 16 != 0 || TT_BLOCK_N < 64 || TT_BLOCK_N > 192
#error "family ws: TT_BLOCK_N must be a multiple of 16 in 64..192"
#endif
#if TT_STAGES < 2 || TT_STAGES > 4
#error "family ws: TT_STAGES must be 2..4"
#endif
#if TT_LAYOUT && TT_WARPS != 12
#error "family ws: ping-pong (TT_LAYOUT 1) takes exactly two consumer warpgroups"
#endif
#if TT_EXP2_PACKED
#error "family ws: no TT_EXP2_PACKED"
#endif
/* Bottom-right causal (2) runs with seqlen_q <= seqlen_k only (the launch
 * refuses the rest): every row then sees key 0, so every work tile has at
 * least one K/V tile and no row of the consumers' online softmax is empty. */
#define TT_WS_PINGPONG TT_LAYOUT
#define TT_WS_PERSIST TT_Q_IN_REGS
/* Not knobs (docs/perf.md): 1 lets softmax(S_j) run under P_{j-1} V_{j-1}
 * (0 waits for both); the loop's schedule of that wait (see the loop). */
#ifndef TT_WS_OVERLAP
#define TT_WS_OVERLAP 1
#endif
#ifndef TT_WS_SCHED
#define TT_WS_SCHED 3
#endif
/* Not a knob either: > 0 keeps a row's running max until a tile's max
 * passes it by more than this many powers of two (FlashAttention-4's lazy
 * rescale; 0 rescales at every new max). P then is at most
 * 2^TT_WS_RESCALE_LOG2 (exact in 16 bits: fp16 holds 65504), l and O
 * carry the same stale max, so O / l and LSE = m scale + ln l are
 * unchanged; and a warp none of whose rows moved skips the O rescale, 64
 * multiplies a thread a tile at d128 (128 at d256) of the softmax's ~350
 * instructions, on a kernel whose ncu profile is issue-bound. The H200
 * A/B against 0 (docs/perf.md, ws): +1-6% at d128, +4-13% at d256. */
/* Not a knob: 1 issues K_{j+1} before V_j (FlashAttention-3's producer
 * order). In K, V order the producer reaches K_{j+1} only after V_j's
 * slot is free, which with two stages is at the top of turn j (V_{j-2}
 * released there, after the wait for K_j): K_{j+1} has one turn to land.
 * K first issues it once S_{j-1} freed its slot, a turn earlier. On at
 * d256 only: with the lazy rescale on, the H200 A/B (docs/perf.md, ws)
 * read +2-8% at d256, and -6..+5% (noise around nothing) at d64, d128. */
#ifndef TT_WS_K_FIRST
#define TT_WS_K_FIRST (TT_HEAD_DIM == 256)
#endif
#ifndef TT_WS_RESCALE_LOG2
#define TT_WS_RESCALE_LOG2 8
#endif

namespace {
template <int ROWS> __device__ __forceinline__ u32 poff(int r, int c) {
    return (u32)((c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}
/* Tiles are 64-column panels (128-byte rows) in the 128-byte swizzle the
 * copy engine writes and wgmma reads: chunk c of row r sits at chunk
 * (c % 8) ^ (r % 8) of its panel's row; panel bases are 1024-byte aligned. */
template <int ROWS> __device__ __forceinline__ u32 tile_off(int r, int c) { return poff<ROWS>(r, c); }
} // namespace

#if TT_DTYPE == 0
#define TT_WG_T "f16"
#else
#define TT_WG_T "bf16"
#endif

/* Outside the anonymous namespace: shapes a variant does not use are no
 * warning. S = Q K^T takes N = block_n, O += P V N = head_dim. */
#include "wgmma/wrappers.cuh"
#include "ws/wrappers.cuh"

typedef unsigned long long u64;

/* CUtensorMap: 128 opaque bytes, 64-byte aligned. */
struct __align__(64) tt_tmap {
    u64 w[16];
};

namespace {

constexpr int NC = TT_WARPS / 4 - 1; /* consumer warpgroups */
constexpr int PANELS = D / 64;
constexpr int QB = TT_WS_PERSIST ? 2 : 1; /* Q buffers */
constexpr u32 Q_BYTES = BM * D * 2;
constexpr u32 T_BYTES = BN * D * 2; /* one K or one V tile */
/* Register split: the producer keeps 24, consumers share the rest of the
 * 64K-register file in multiples of 8; one consumer keeps the entry cap. */
constexpr int PROD_REGS = 24;
constexpr int CONS_REGS = NC == 2 ? 240 : 160;

/* ---- mbarriers, bulk tensor copies, named barriers ---------------------- */

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    asm volatile("{\n.reg .pred p;\nWAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
__device__ __forceinline__ void tma_load(u32 dst, const tt_tmap &map, int c0, int c1, int c2, int c3,
                                         u32 bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
                 "l"((u64)&map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void tma_store(const tt_tmap &map, u32 src, int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group"
                 " [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"((u64)&map),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}
__device__ __forceinline__ void prefetch_tmap(const tt_tmap &map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"((u64)&map) : "memory");
}
__device__ __forceinline__ void nbar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void nbar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

/* ---- warpgroup MMA ------------------------------------------------------ */

/* A shared-memory matrix descriptor in the 128-byte swizzle (mode 1 in bits
 * 62-63): start, leading and stride byte offsets >> 4. K-major Q and K: 1024
 * B between groups of 8 rows. V read MN-major: 1024 B between groups of 8
 * keys, the leading offset steps to the next 64-column panel. */
__device__ __forceinline__ u64 sdesc(u32 saddr, u32 lbo, u32 sbo) {
    return (u64)((saddr & 0x3FFFFu) >> 4) | ((u64)((lbo >> 4) & 0x3FFFu) << 16) |
           ((u64)((sbo >> 4) & 0x3FFFu) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Pins registers an asynchronous MMA reads or writes: no copy, no reuse and
 * no reordering across the point. */
template <int R> __device__ __forceinline__ void reg_fence(float (&d)[R][4]) {
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}
template <int R> __device__ __forceinline__ void reg_fence(u32 (&d)[R][4]) {
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(d[i][e])::"memory");
}

template <int N>
__device__ __forceinline__ void mma_ss(float (&acc)[N / 8][4], u64 da, u64 db, int accumulate) {
    float(&d)[N / 2] = reinterpret_cast<float(&)[N / 2]>(acc);
    if constexpr (N == 64) wgmma_ss_n64(d, da, db, accumulate);
    else if constexpr (N == 80) wgmma_ss_n80(d, da, db, accumulate);
    else if constexpr (N == 96) wgmma_ss_n96(d, da, db, accumulate);
    else if constexpr (N == 112) wgmma_ss_n112(d, da, db, accumulate);
    else if constexpr (N == 128) wgmma_ss_n128(d, da, db, accumulate);
    else if constexpr (N == 144) wgmma_ss_n144(d, da, db, accumulate);
    else if constexpr (N == 160) wgmma_ss_n160(d, da, db, accumulate);
    else if constexpr (N == 176) wgmma_ss_n176(d, da, db, accumulate);
    else wgmma_ss_n192(d, da, db, accumulate);
}
template <int N>
__device__ __forceinline__ void mma_rs(float (&acc)[N / 8][4], const u32 (&a)[4], u64 db) {
    float(&d)[N / 2] = reinterpret_cast<float(&)[N / 2]>(acc);
    if constexpr (N == 64) wgmma_rs_n64(d, a, db);
    else if constexpr (N == 128) wgmma_rs_n128(d, a, db);
    else wgmma_rs_n256(d, a, db);
}

} // namespace

extern "C" __global__ void __launch_bounds__(NT, 1)
tt_sdpa_fwd_kernel(const __grid_constant__ tt_sdpa_params p, const __grid_constant__ tt_tmap tmQ,
                   const __grid_constant__ tt_tmap tmK, const __grid_constant__ tt_tmap tmV,
                   const __grid_constant__ tt_tmap tmO) {
    fault_inject(p);
    extern __shared__ __align__(1024) unsigned char smem[];
    /* The swizzle is a function of address bits 4-9: 1024-byte aligned
     * tiles (the launch asks for 1 KB of slack). */
    const u32 sQ0 = (smem_u32(smem) + 1023u) & ~1023u;
    const u32 sK = sQ0 + QB * Q_BYTES, sV = sK + ST * T_BYTES;
    const u32 bars = sV + ST * T_BYTES;
    /* Q buffer q: full (bytes landed) at bars + 8 q, empty (its O stored)
     * at bars + 16 + 8 q; ring slot s: full K, empty K, full V, empty V. */
#define TT_FULLQ(q) (bars + 8u * (u32)(q))
#define TT_EMPTYQ(q) (bars + 16u + 8u * (u32)(q))
#define TT_BAR(kind, s) (bars + 32u + 32u * (u32)(s) + 8u * (kind))

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int wg = warp >> 2;
    const int H = p.heads_q;
    int Lq = p.seqlen_q, Lk = p.seqlen_k;
    /* A varlen batch (one CTA a tile; the launch refuses it persistent):
     * this CTA's sequence is blockIdx.z, its rows start at q0 and k0 of the
     * packed tensors (whose maps have one batch), and a CTA past its
     * sequence's query blocks, or of a sequence splitkv runs, has nothing
     * to do. Whole K/V tiles are read: keys past the sequence are the next
     * one's rows (or zeros past total_k), masked like keys past seqlen_k. */
    const bool varlen = p.cu_seqlens_q != nullptr;
    int q0 = 0, k0 = 0;
#if !TT_WS_PERSIST
    if (varlen) {
        const int sb = (int)blockIdx.z;
        q0 = p.cu_seqlens_q[sb];
        k0 = p.cu_seqlens_k[sb];
        Lq = min(p.cu_seqlens_q[sb + 1] - q0, p.seqlen_q);
        Lk = min(p.cu_seqlens_k[sb + 1] - k0, p.seqlen_k);
        if (!tt_varlen_dense_takes(p.varlen_min_q, TT_CAUSAL, Lq, Lk) || (int)blockIdx.x * BM >= Lq) return;
    }
#endif
    const int diag = causal_diag(Lq, Lk); /* 0 unless bottom-right */
    const int n_mb = (Lq + BM - 1) / BM;
    /* Work tiles (m-block, head, batch), m-block fastest so CTAs running
     * together share K/V in L2; causal takes m-blocks longest first, in
     * bands across the grid, waves snaking (ws/sched.h). */
#if TT_WS_PERSIST
    const int total = n_mb * H * p.batch;
    auto tile_of = [&](int tc) { /* this CTA's tc-th work tile */
        return TT_CAUSAL ? tt_ws_wave_tile((int)gridDim.x, (int)blockIdx.x, tc)
                         : (int)blockIdx.x + tc * (int)gridDim.x;
    };
#else
    const int total = 1;
    auto tile_of = [&](int tc) { return tc; };
#endif
    auto decode = [&](int tile, int &m0, int &h, int &b) {
#if TT_WS_PERSIST
        int mb, hb;
        if (TT_CAUSAL) {
            mb = tt_ws_causal_tile(tile, n_mb, H * p.batch, &hb);
        } else {
            mb = tile % n_mb;
            hb = tile / n_mb;
        }
        h = hb % H;
        b = hb / H;
#else
        (void)tile;
        const int mb = blockIdx.x;
        h = blockIdx.y;
        b = blockIdx.z;
#endif
        m0 = (TT_CAUSAL ? n_mb - 1 - mb : mb) * BM;
        return key_tiles(Lq, Lk, m0);
    };

    if (tid == 0) {
#pragma unroll
        for (int q = 0; q < QB; ++q) {
            mbar_init(TT_FULLQ(q), 1);
            mbar_init(TT_EMPTYQ(q), NC);
        }
#pragma unroll
        for (int s = 0; s < ST; ++s) {
            mbar_init(TT_BAR(0, s), 1);
            mbar_init(TT_BAR(1, s), 4 * NC);
            mbar_init(TT_BAR(2, s), 1);
            mbar_init(TT_BAR(3, s), 4 * NC);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        /* ---- producer ---- */
        if constexpr (NC > 1) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PROD_REGS));
        if (warp == 0 && lane == 0) {
            prefetch_tmap(tmQ);
            prefetch_tmap(tmK);
            prefetch_tmap(tmV);
            prefetch_tmap(tmO);
            int it = 0; /* K/V tiles issued so far: slot it % ST */
            int tc = 0; /* work tiles so far: Q buffer tc % QB */
            for (int tile = tile_of(0); tile < total; tile = tile_of(++tc)) {
                int m0, h, b;
                const int n_tiles = decode(tile, m0, h, b);
                const int hkv = h / (H / p.heads_kv);
                const int q = tc % QB;
                const int bt = varlen ? 0 : b; /* a varlen map's one batch */
                /* a fresh barrier's previous phase counts as done */
                mbar_wait(TT_EMPTYQ(q), ((tc / QB) & 1) ^ 1);
                mbar_expect_tx(TT_FULLQ(q), Q_BYTES);
#pragma unroll
                for (int pn = 0; pn < PANELS; ++pn)
                    tma_load(sQ0 + q * Q_BYTES + pn * BM * 128, tmQ, pn * 64, q0 + m0, h, bt, TT_FULLQ(q));
#if TT_WS_K_FIRST
                /* K or V (kind 0 or 2) of key tile j into the slot of the
                 * i-th tile, once the consumers freed it */
                auto load = [&](int kind, int j, int i) {
                    const int s = i % ST;
                    mbar_wait(TT_BAR(kind + 1, s), ((i / ST) & 1) ^ 1);
                    mbar_expect_tx(TT_BAR(kind, s), T_BYTES);
                    const u32 dst = (kind ? sV : sK) + s * T_BYTES;
#pragma unroll
                    for (int pn = 0; pn < PANELS; ++pn)
                        tma_load(dst + pn * BN * 128, kind ? tmV : tmK, pn * 64, k0 + j * BN, hkv, bt,
                                 TT_BAR(kind, s));
                };
                if (n_tiles > 0) load(0, 0, it);
                for (int j = 0; j < n_tiles; ++j, ++it) {
                    if (j + 1 < n_tiles) load(0, j + 1, it + 1);
                    load(2, j, it);
                }
#else
                for (int j = 0; j < n_tiles; ++j, ++it) {
                    const int s = it % ST;
                    const u32 ph = ((it / ST) & 1) ^ 1;
                    mbar_wait(TT_BAR(1, s), ph);
                    mbar_expect_tx(TT_BAR(0, s), T_BYTES);
#pragma unroll
                    for (int pn = 0; pn < PANELS; ++pn)
                        tma_load(sK + s * T_BYTES + pn * BN * 128, tmK, pn * 64, k0 + j * BN, hkv, bt, TT_BAR(0, s));
                    mbar_wait(TT_BAR(3, s), ph);
                    mbar_expect_tx(TT_BAR(2, s), T_BYTES);
#pragma unroll
                    for (int pn = 0; pn < PANELS; ++pn)
                        tma_load(sV + s * T_BYTES + pn * BN * 128, tmV, pn * 64, k0 + j * BN, hkv, bt, TT_BAR(2, s));
                }
#endif
            }
        }
        return;
    }

    /* ---- consumers ---- */
    if constexpr (NC > 1) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONS_REGS));
    const int c = wg - 1;
    const int g = lane >> 2, t = lane & 3;
    const int wr = c * 64 + (warp & 3) * 16; /* first row of this warp in the CTA's tile */
    const float sl2 = p.scale_log2;
    const bool leader = lane == 0;
    float s[BN / 8][4];
    u32 pa[BN / 16][4];
    float o[D / 8][4];
    float row_m[2], row_l[2], alpha[2];
    bool rescale = true; /* some row of the warp moved its max: O *= alpha */
    int m0, h, b;
    u32 sQ = sQ0;

    /* Ping-pong: consumer c waits on barrier 1 + c for its turn and hands
     * the next turn to the other one; per work tile, consumer 1 opens
     * consumer 0's first turn and skips its own last hand-over, so both
     * barriers end even. */
    auto turn_begin = [&]() {
        if (TT_WS_PINGPONG) nbar_sync(1 + c, 256);
    };
    auto turn_end = [&](bool last) {
        if (TT_WS_PINGPONG && !(last && c == 1)) nbar_arrive(2 - c, 256);
    };
    auto qk = [&](u32 cK) {
        const u32 q_wg = sQ + c * 64 * 128; /* this warpgroup's rows of panel 0 */
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const u32 koff = (u32)((kk & 3) * 32);
            mma_ss<BN>(s, sdesc(q_wg + (kk >> 2) * (BM * 128) + koff, 16, 1024),
                       sdesc(cK + (kk >> 2) * (BN * 128) + koff, 16, 1024), kk > 0);
        }
        wg_commit();
    };
    auto pv = [&](u32 cV) {
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) mma_rs<D>(o, pa[kk], sdesc(cV + kk * 2048, BN * 128, 1024));
        wg_commit();
    };
    auto softmax = [&](int j) {
        const int n0 = j * BN;
        if (tile_needs_mask(n0, m0 + wr, Lk, diag)) mask_tile(s, n0, m0 + wr, Lk, diag, g, t);
#if TT_WS_RESCALE_LOG2 > 0
        bool moved = false;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float mx = row_max(s, r, row_m[r]);
            /* a first visible key always moves it (alpha 0: O and l are 0) */
            const bool up = row_m[r] == neg_inf() ? mx != neg_inf()
                                                  : (mx - row_m[r]) * sl2 > (float)TT_WS_RESCALE_LOG2;
            alpha[r] = 1.f;
            if (up) {
                alpha[r] = ex2((row_m[r] - mx) * sl2);
                row_m[r] = mx;
            }
            moved |= up;
            /* no visible key yet: max -inf, subtract 0 so exp2 gives 0 */
            const float ms = row_m[r] == neg_inf() ? 0.f : row_m[r] * sl2;
            row_l[r] = row_l[r] * alpha[r] + row_exp2(s, r, ms, sl2);
        }
        rescale = __any_sync(0xffffffffu, moved);
#else
#pragma unroll
        for (int r = 0; r < 2; ++r) alpha[r] = softmax_row(s, r, row_m[r], row_l[r], sl2);
#endif
    };
    /* P V of tile jv (global count) done: O rescaled by the latest alpha,
     * the latest P into A fragments, V slot of jv (if >= 0) freed. */
    auto finish_pv = [&](int jv) {
        wg_wait<0>();
        reg_fence(o);
        reg_fence(pa);
        if (!TT_WS_RESCALE_LOG2 || rescale) {
#pragma unroll
            for (int i = 0; i < D / 8; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e) o[i][e] *= alpha[e >> 1];
        }
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) p_fragment(s, kk, pa[kk]);
        if (jv >= 0 && leader) mbar_arrive(TT_BAR(3, jv % ST));
    };

    int it = 0; /* K/V tiles consumed so far: slot it % ST */
    int tc = 0;
    for (int tile = tile_of(0); tile < total; tile = tile_of(++tc)) {
        const int n_tiles = decode(tile, m0, h, b);
        const int q = tc % QB;
        sQ = sQ0 + q * Q_BYTES;
#pragma unroll
        for (int i = 0; i < D / 8; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[i][e] = 0.f;
        row_m[0] = row_m[1] = neg_inf();
        row_l[0] = row_l[1] = 0.f;

        mbar_wait(TT_FULLQ(q), (tc / QB) & 1);
        if (TT_WS_PINGPONG && c == 1) nbar_arrive(1, 256);
        {
            const int sl = it % ST;
            mbar_wait(TT_BAR(0, sl), (it / ST) & 1);
            turn_begin();
            reg_fence(s);
            wg_fence();
            qk(sK + sl * T_BYTES);
            turn_end(false);
            wg_wait<0>();
            reg_fence(s);
            if (leader) mbar_arrive(TT_BAR(1, sl));
        }
        softmax(0);
#if TT_WS_SCHED == 3
        /* The wait for P V and the O rescale come after the next K tile's
         * mbarrier wait, a loop of its own: ptxas hoists a wgmma wait to
         * the top of its basic block, and in the softmax's block it put the
         * wait above every exp2 (seen in SASS), losing the overlap. */
        for (int j = 1; j < n_tiles; ++j) {
            const int jk = it + j;
            mbar_wait(TT_BAR(0, jk % ST), (jk / ST) & 1);
            finish_pv(j >= 2 ? jk - 2 : -1);
            mbar_wait(TT_BAR(2, (jk - 1) % ST), ((jk - 1) / ST) & 1);
            turn_begin();
            reg_fence(s);
            reg_fence(o);
            reg_fence(pa);
            wg_fence();
            qk(sK + (jk % ST) * T_BYTES);
            pv(sV + ((jk - 1) % ST) * T_BYTES);
            turn_end(false);
#if TT_WS_OVERLAP
            wg_wait<1>();
#else
            wg_wait<0>();
#endif
            reg_fence(s);
            if (leader) mbar_arrive(TT_BAR(1, jk % ST));
            softmax(j);
            reg_fence(s);
        }
        finish_pv(n_tiles >= 2 ? it + n_tiles - 2 : -1);
#else
        /* The straight order: wait for P V right after this tile's softmax. */
        finish_pv(-1);
        for (int j = 1; j < n_tiles; ++j) {
            const int jk = it + j;
            mbar_wait(TT_BAR(0, jk % ST), (jk / ST) & 1);
            mbar_wait(TT_BAR(2, (jk - 1) % ST), ((jk - 1) / ST) & 1);
            turn_begin();
            reg_fence(s);
            reg_fence(o);
            reg_fence(pa);
            wg_fence();
            qk(sK + (jk % ST) * T_BYTES);
            pv(sV + ((jk - 1) % ST) * T_BYTES);
            turn_end(false);
#if TT_WS_OVERLAP
            wg_wait<1>();
#else
            wg_wait<0>();
#endif
            reg_fence(s);
            if (leader) mbar_arrive(TT_BAR(1, jk % ST));
            softmax(j);
            reg_fence(s);
            finish_pv(jk - 1);
        }
#endif
        it += n_tiles;
        {
            const int ls = (it - 1) % ST;
            mbar_wait(TT_BAR(2, ls), ((it - 1) / ST) & 1);
            turn_begin();
            reg_fence(o);
            reg_fence(pa);
            wg_fence();
            pv(sV + ls * T_BYTES);
            turn_end(true);
            wg_wait<0>();
            reg_fence(o);
            reg_fence(pa);
            if (leader) mbar_arrive(TT_BAR(3, ls));
        }

        /* Epilogue: O / l into this warpgroup's own rows of its Q buffer
         * (every warp of the group is past its last S = Q K^T), then one
         * thread stores them with the copy engine and frees the buffer. */
        nbar_sync(3 + c, 128);
#pragma unroll
        for (int r = 0; r < 2; ++r)
            finish_row(p, o, r, row_m[r], row_l[r], sQ, wr + g + 8 * r, m0, h, b, t, q0, Lq);
        if (varlen) {
            /* The copy engine clips rows at the packed tensor's end only:
             * the next sequence's rows are this warp's to leave alone. Its
             * own 16 staged rows, stored row by row (one tile a CTA: no
             * next tile waits for the Q buffer). */
            __syncwarp();
            store_rows<16>(p, sQ, wr, m0, h, b, lane, q0, Lq);
            continue;
        }
        /* The copy engine reads shared memory through the async proxy. */
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        nbar_sync(3 + c, 128);
        if ((warp & 3) == 0 && lane == 0) {
#pragma unroll
            for (int pn = 0; pn < PANELS; ++pn)
                tma_store(tmO, sQ + pn * BM * 128 + c * 64 * 128, pn * 64, m0 + c * 64, h, b);
            asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
            asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
            mbar_arrive(TT_EMPTYQ(q));
        }
    }
#undef TT_FULLQ
#undef TT_EMPTYQ
#undef TT_BAR
}

#endif
