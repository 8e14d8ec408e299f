/*
 * The contract between family splitkv's device file (splitkv/mainloop.cuh,
 * compiled by NVRTC as C++ under sdpa.cu) and its host launcher
 * (splitkv/launch.c). Plain C: an NVRTC named header like the others, so
 * the one kernel revision covers it.
 *
 * Knobs (-D macros from src/common/knobs.def; family = splitkv):
 *   TT_BLOCK_M  packed rows per CTA (query positions x the query heads of
 *               one KV group): 16, 32, 64, 128
 *   TT_BLOCK_N  keys per K/V tile, a multiple of 16 * (warps along keys)
 *   TT_WARPS    1..8; warps split the tile's rows (32 rows each, 16 at
 *               head_dim 256) and then its keys
 *   TT_STAGES   2..4: a ring of K+V tiles, STAGES-1 in flight
 *   split_ctas  host only, no macro: the split target (docs/kernels.md)
 * Problem facts: TT_HEAD_DIM (32, 64, 128, 256), TT_DTYPE, TT_CAUSAL
 * (0 none, 1 top-left, 2 bottom-right: query i sees keys j <= i + Lk - Lq).
 *
 * Entries: tt_sdpa_fwd_kernel (grid: query blocks * splits, heads_kv,
 * batch, or bal_ctas, 1, 1 when balanced; TT_WARPS * 32 threads;
 * TT_SPLITKV_SMEM_BYTES dynamic shared memory)
 * and tt_splitkv_combine_kernel (grid: ceil(tokens * heads_q / 4); 128
 * threads), run only when splits > 1.
 */
#ifndef TT_SPLITKV_PARAMS_H
#define TT_SPLITKV_PARAMS_H

#ifdef __CUDACC_RTC__
typedef long long tt_skv_i64;
#else
#include <stdint.h>
typedef int64_t tt_skv_i64;
#endif

/* The fused merge (the last split merges) is compiled into programs of
 * tiles up to this many rows only: it serves a few rows a CTA (decode),
 * and in a 128-row, 8-warp program its registers made ptxas spill. */
#define TT_SPLITKV_FUSED_MAX_BM 32

/* Most splits of one (query block, KV head, sequence). */
#define TT_SPLITKV_MAX_SPLITS 256

typedef struct tt_splitkv_params {
    const void *q, *k, *v;
    void *o;
    float *lse;         /* may be NULL */
    float *o_part;      /* splits > 1: [splits][tokens][heads_q][head_dim] fp32 */
    float *lse_part;    /* splits > 1: [splits][tokens][heads_q] */
    const int *block_table;  /* paged: [batch][table_stride] page numbers; NULL: contiguous */
    const int *seqlens_k;    /* [batch] keys per sequence; NULL: cu_seqlens_k or seqlen_k */
    const int *cu_seqlens_q; /* [batch + 1] varlen; NULL: dense (seqlen_q each) */
    const int *cu_seqlens_k; /* [batch + 1] varlen; NULL: dense */
    int *counters;           /* splits > 1, fused merge: [batch][heads_kv][qblocks],
                                zero before the launch and left zero after it;
                                NULL: the launcher runs the combine kernel */
    /* Strides in elements. q/o: a token's row is (cu_seqlens_q[b] or 0) + i;
     * varlen passes batch stride 0. k/v: paged, the batch stride steps one
     * page; varlen, rows start at cu_seqlens_k[b]. */
    tt_skv_i64 q_batch_stride, q_head_stride, q_row_stride;
    tt_skv_i64 k_batch_stride, k_head_stride, k_row_stride;
    tt_skv_i64 v_batch_stride, v_head_stride, v_row_stride;
    tt_skv_i64 o_batch_stride, o_head_stride, o_row_stride;
    tt_skv_i64 lse_batch_stride, lse_head_stride, lse_row_stride;
    tt_skv_i64 table_stride;
    int batch, heads_q, heads_kv, group; /* group = heads_q / heads_kv */
    int seqlen_q, seqlen_k;  /* dense sizes (varlen: the maxima) */
    int page_shift;          /* log2(page size) when paged; the program has it
                                compiled in (TT_SKV_PAGE_SHIFT), the launch
                                checks the two agree */
    int splits;              /* CTAs per (query block, kv head, batch) along keys */
    int tokens;              /* query tokens: batch * seqlen_q, or total_q */
    int qblocks;             /* query blocks of the longest sequence */
    int split_tiles;         /* > 0: key tiles a split takes, the same for every
                                sequence (varlen: splits follow each sequence's
                                length); 0: each CTA's tiles over `splits` */
    int split_slots;         /* varlen with sequences of several query blocks,
                                splits > 1: the CTA slots of one wave. The
                                host knows the batch's maxima, not each
                                sequence's lengths; a planner CTA (the combine
                                kernel's entry with `plan`) counts the batch's
                                work before the main kernel and picks the
                                tiles a split takes (tt_skv_varlen_pick),
                                never under split_tiles. 0: split_tiles as
                                given */
    int *split_tiles_out;    /* split_slots > 0: the planner's choice, read by
                                the main and combine kernels */
    int plan;                /* 1 in the planner's launch only */
    int bal_ctas;            /* > 0: the balanced grid (see below) of this many
                                CTAs; `splits` is then the most CTAs one unit
                                spans; 0: the grid of query blocks x splits */
    int bal_tiles;           /* balanced: key tiles of every unit */
    int rotate;              /* 1: a contiguous cache's CTA c starts its run of
                                tiles 37c mod (the run's length) tiles in and
                                wraps, c = (b * heads_kv + hk) * splits +
                                split (mainloop.cuh) */
    int dense_min_q;         /* varlen: a dense family's launch runs the
                                sequences tt_varlen_dense_takes gives it
                                (sdpa_params.h) at this many query rows;
                                here they are empty. 0: none */
    int seq_min_q, seq_max_q; /* varlen: this launch's row class, the
                                sequences of seq_min_q..seq_max_q query
                                rows (tt_skv_class_takes); the others, run
                                by the other class's launch, are empty
                                here. 0: no bound */
    float scale, scale_log2;
    float lse_empty;         /* LSE of a row that sees no key: +inf for the
                                KV-cache and varlen entry points (flash-attn's),
                                -inf for tt_sdpa_fwd (the dense families') */
} tt_splitkv_params;

/*
 * The balanced grid (one query block a sequence, no varlen): the units
 * (sequence, KV head), u = b * heads_kv + hk, each of bal_tiles key tiles,
 * laid end to end: N = units x bal_tiles tiles, and CTA c of C = bal_ctas
 * takes tiles [c N / C, (c + 1) N / C), crossing unit boundaries. Every
 * CTA gets the same work within a tile, so the grid is one full wave of
 * what fits the SMs, where splits of whole units leave SMs idle (batch 16
 * x 8 KV heads = 128 units on 132 SMs) or a last wave part-full. A unit
 * held by one CTA is written directly; a unit spread over several is
 * merged from their partial results, the CTA's index among the unit's
 * CTAs being its split. Host and device share this arithmetic.
 */
/* Tiles of up to this many rows hold the balanced grid's loop: in larger
 * ones the loop's state pushed ptxas into spills (64 and 128 rows at 255
 * registers). Decode's tiles are 16 and 32 rows. */
#define TT_SPLITKV_BAL_MAX_BM 32
#ifdef __CUDACC_RTC__
#define TT_SKV_FN __device__ __forceinline__
#define TT_SKV_UNROLL _Pragma("unroll")
#else
#define TT_SKV_FN static inline
#define TT_SKV_UNROLL
#endif
/* The first tile of CTA c. */
TT_SKV_FN tt_skv_i64 tt_skv_bal_start(tt_skv_i64 n, int ctas, int c) { return n * c / ctas; }
/* The CTA whose range holds tile x: the largest c with start(c) <= x. */
TT_SKV_FN int tt_skv_bal_cta(tt_skv_i64 n, int ctas, tt_skv_i64 x) { return (int)(((x + 1) * ctas - 1) / n); }
/* Unit u's first CTA (*first) and how many CTAs hold its tiles. */
TT_SKV_FN int tt_skv_bal_span(tt_skv_i64 n, int ctas, int tiles, tt_skv_i64 u, int *first) {
    const int f = tt_skv_bal_cta(n, ctas, u * tiles);
    *first = f;
    return tt_skv_bal_cta(n, ctas, (u + 1) * tiles - 1) - f + 1;
}

/* Varlen: the key tiles a split takes, from the batch's own work. The
 * device counts `work` (query blocks x key tiles over every sequence and
 * KV head), `units` (query blocks x KV heads) and `longest` (the most key
 * tiles of a unit), then the CTAs each candidate tiles-per-split makes,
 * and keeps the candidate of least estimated time (tt_skv_varlen_pick).
 * Candidate 0 keeps every CTA in one wave where the units leave half the
 * wave's `slots` free (a unit of n tiles runs as ceil(n / tiles) CTAs, at
 * most work / tiles + units in all), else takes a wave's share of the
 * work; candidate j > 0 splits the longest unit j ways. None under the
 * host's `floor`, which sized the grid's splits. Host (tests) and device
 * share this arithmetic. */
#define TT_SKV_CANDIDATES 17
TT_SKV_FN int tt_skv_varlen_candidate(int j, tt_skv_i64 work, tt_skv_i64 units, int longest, int slots,
                                      int floor) {
    tt_skv_i64 t;
    if (j == 0) {
        const tt_skv_i64 room = 2 * units <= slots ? slots - units : slots;
        t = room > 0 ? (work + room - 1) / room : work;
    } else {
        t = (longest + j - 1) / j;
    }
    if (t < floor) t = floor;
    if (t < 1) t = 1;
    return t > 0x7fffffff ? 0x7fffffff : (int)t;
}
/* The estimated time, in key tiles x slots, of `ctas` CTAs of at most
 * `tiles` tiles on `slots` slots: whole waves of the longest CTA (exact
 * for units of one length, pessimistic for mixed ones) plus a fixed cost
 * a CTA (its Q load, pipeline fill and partial results: about two tiles,
 * TT_SKV_CTA_TILES), so that a finer split must buy more than it costs. */
#define TT_SKV_CTA_TILES 2
TT_SKV_FN tt_skv_i64 tt_skv_varlen_cost(tt_skv_i64 ctas, int tiles, int longest, int slots) {
    const tt_skv_i64 waves = (ctas + slots - 1) / slots;
    const int cta = tiles < longest ? tiles : longest;
    return waves * cta * slots + TT_SKV_CTA_TILES * ctas;
}
/* The tiles of the candidate of least cost (ties: the fewer CTAs); no
 * index by a run-time value, so the device keeps all of it in registers. */
TT_SKV_FN int tt_skv_varlen_pick(const tt_skv_i64 *ctas, const int *tiles, int longest, int slots) {
    int best = tiles[0];
    tt_skv_i64 best_cost = tt_skv_varlen_cost(ctas[0], tiles[0], longest, slots), best_ctas = ctas[0];
    TT_SKV_UNROLL
    for (int j = 1; j < TT_SKV_CANDIDATES; ++j) {
        const tt_skv_i64 c = tt_skv_varlen_cost(ctas[j], tiles[j], longest, slots);
        if (c < best_cost || (c == best_cost && ctas[j] < best_ctas)) {
            best = tiles[j];
            best_cost = c;
            best_ctas = ctas[j];
        }
    }
    return best;
}
/* Whether a launch of row class [min_q, max_q] (0: no bound) runs a
 * sequence of lq query rows: a varlen batch's short sequences run on a
 * tile of their own, in a launch of their own (sdpa.c). */
TT_SKV_FN int tt_skv_class_takes(int min_q, int max_q, int lq) {
    return lq >= min_q && (max_q <= 0 || lq <= max_q);
}
/* Splits of a unit of n key tiles at `tiles` a split (at least one: a
 * unit with no key writes its empty rows), and where split s starts: the
 * unit's tiles spread evenly over its splits. */
TT_SKV_FN int tt_skv_unit_splits(int n, int tiles) { return n > tiles ? (n + tiles - 1) / tiles : 1; }
TT_SKV_FN int tt_skv_split_start(int n, int splits, int s) {
    return (int)((tt_skv_i64)n * s / splits);
}

/* The shared-memory layout of a Q, K or V tile of head_dim d (16-bit
 * elements): the byte offset of 16-byte chunk c of row r. Rows are not
 * padded; the chunk index is XOR-ed by the row's place among the 8 rows
 * (pairs of 64-byte rows at d32) that share a set of banks, so the 8 rows
 * an ldmatrix phase reads at one chunk fall in 8 distinct bank groups, and
 * a row's 128-byte global lines land whole in 128-byte shared segments.
 * Rows padded to d + 8 elements spread the banks too, but a warp's
 * cp.async into them asked L2 for 1.5x the sectors it copied (ncu on the
 * H200, docs/perf.md: the decode kernel's L2 at 95% of peak with DRAM at
 * 88%). */
TT_SKV_FN unsigned tt_skv_soff(int d, int r, int c) {
    const int cpr = d / 8, span = cpr < 8 ? cpr : 8, rows = cpr < 8 ? 8 / cpr : 1;
    return (unsigned)(r * 2 * d + ((c ^ ((r / rows) % span)) << 4));
}
/* From p, the address of chunk k (0 or 1) of a row in a 128-byte aligned
 * tile, the address of its chunk 2 kk + k, as ldmatrix walks the row: the
 * low three chunk bits are swizzled, so within a 128-byte line a step is
 * an XOR of address bits 5 and 6, and every fourth step a line further. */
TT_SKV_FN unsigned tt_skv_sw_step(unsigned p, int kk) {
    return (p ^ (unsigned)((kk & 3) << 5)) + (unsigned)((kk >> 2) << 7);
}

/* Rows per warp (two m16 tiles, one at head_dim 256 where O would spill),
 * warps along rows and along keys. */
#define TT_SKV_RW(bm, d) ((bm) < 32 ? (bm) : ((d) >= 256 ? 16 : 32))
#define TT_SKV_WM(bm, d) ((bm) / TT_SKV_RW(bm, d))
#define TT_SKV_WK(bm, d, warps) ((warps) / TT_SKV_WM(bm, d))
/* The fp32 tiles the key warps' O meet in: one a key warp in tiles of up
 * to 32 rows (all written at once, summed as they are read out), one that
 * the warps add into in turn in larger ones, where as many would outgrow
 * the ring. */
#define TT_SKV_SLICES(bm, d, warps) ((bm) <= 32 ? TT_SKV_WK(bm, d, warps) : 1)
/* Q, K and V rows unpadded (the kernel swizzles their chunks); fp32
 * merge rows are padded by 8 floats against bank conflicts. */
#define TT_SKV_MAIN_BYTES(bm, bn, d, st) (2 * (d) * ((bm) + 2 * (st) * (bn)))
#define TT_SKV_MERGE_BYTES(bm, d, warps) \
    (4 * (bm) * ((d) + 8) * TT_SKV_SLICES(bm, d, warps) + 8 * (bm) * TT_SKV_WK(bm, d, warps))
#define TT_SPLITKV_SMEM_BYTES(bm, bn, d, st, warps) \
    (TT_SKV_MAIN_BYTES(bm, bn, d, st) > TT_SKV_MERGE_BYTES(bm, d, warps) \
         ? TT_SKV_MAIN_BYTES(bm, bn, d, st) : TT_SKV_MERGE_BYTES(bm, d, warps))

#endif
