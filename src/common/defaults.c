/* The built-in default config per key: what a lookup answers when nothing
 * is tuned, and what libtiletune runs without a daemon. The portable table
 * must be valid on every sm_80+ device (shared memory <= 99 KB, the
 * sm_86/89 opt-in limit; no register spill for sm_80, sm_86 or sm_90). An
 * arch may have its own rows (sm_90: the wgmma family, far faster there);
 * tt_sdpa_fwd runs those on that arch. Every row must be within reach of
 * the tuned best (the target: within 15%); docs/perf.md records the
 * measurements behind each row. */
#include "common/key.h"

#include <string.h>

/* One row per (head_dim, causal); bench/peers.py reads this table to run
 * exactly the shipped default, so keep one brace row per line. */
/* clang-format off */
static const struct default_row {
    int32_t head_dim, causal;
    int32_t block_m, block_n, warps, stages, layout, q_in_regs;
} defaults[] = {
    /* d, c, bm, bn, w, st, layout, q_in_regs */
    {32, 0, 128, 128, 4, 1, 1, 0},
    {32, 1, 128, 128, 4, 1, 1, 0},
    /* d64: the H200's best, 128x128 w4 s1, spills 16 B on sm_80/86;
     * 128x64 w4 s2 is spill-free everywhere, 0.94x of the tuned best on
     * the H200 grid (worst 0.91), still >= 1.02x FA2. */
    {64, 0, 128, 64, 4, 2, 1, 0},
    {64, 1, 128, 64, 4, 2, 1, 0},
    /* d96: 128x64 spills 80-96 B (the 12-chunk swizzle needs more address
     * registers); 128x32 keeps two m tiles a warp and is spill-free.
     * Not measured on the grid (d96 is not in it). */
    {96, 0, 128, 32, 4, 1, 1, 0},
    {96, 1, 128, 32, 4, 1, 1, 0},
    {128, 0, 128, 64, 4, 1, 1, 0},
    {128, 1, 128, 64, 4, 1, 1, 0},
    /* d256: 64x64 needs 96 KB; the faster 128-row tiles need 128-192 KB. */
    {256, 0, 64, 64, 4, 1, 1, 0},
    {256, 1, 64, 64, 4, 1, 1, 0},
};

/* sm_90 (H100/H200), family wgmma, one brace row per line, as above. Each
 * row is the config with the best worst case over the H200 grid (seqlen
 * 512..16384, fp16 and bf16; docs/perf.md, wgmma v1): of the tuned best,
 * d64 0.90/0.94 (non-causal/causal), d128 0.985/0.92, d256 1.0. Today it
 * serves sm_90's bottom-right keys with seqlen_q > seqlen_k (rows that see
 * no key, which ws's loop does not take) and calls whose strides ws's copy
 * engine cannot map. */
static const struct default_row defaults_sm90_wgmma[] = {
    /* d, c, bm, bn, w, st, layout, q_in_regs */
    {64, 0, 64, 64, 4, 2, 1, 0},
    {64, 1, 64, 64, 4, 2, 1, 0},
    {128, 0, 192, 128, 12, 2, 1, 0},
    {128, 1, 64, 64, 4, 2, 1, 0},
    {256, 0, 128, 64, 8, 2, 1, 0},
    {256, 1, 128, 64, 8, 2, 1, 0},
};

/* sm_90 prefill, family ws (layout: 1 ping-pong; q_in_regs: 1 persistent
 * grid): per head dim and mask the winner over most lengths of the H200's
 * exhaustive tunes (docs/perf.md: ws v3, and the tuning pipeline of
 * 2026-12-01 with the lazy rescale and the causal order), the short rows
 * below taking the lengths where another config wins by more than 2%. On
 * that bf16 tune (54 keys, 128-32k) the worst default/winner: d64 1.02,
 * d128 1.00, d256 1.035. */
static const struct default_row defaults_sm90[] = {
    /* d, c, bm, bn, w, st, layout, q_in_regs */
    {64, 0, 192, 128, 16, 2, 0, 1},
    {64, 1, 192, 128, 16, 2, 0, 0},
    /* d128 past 16k keys: three consumers, 80-key tiles (the winner at 32k
     * non-causal in three tunes and causal in the one with the causal
     * order; 128x128 1.05-1.08x slower); a short row takes 128x128 up to
     * 16k. Both persistent: with the causal order (ws/sched.h) the
     * persistent grid won causal 256-16k, 1.04-1.21x faster than one CTA
     * a tile. */
    {128, 0, 192, 80, 16, 2, 0, 1},
    {128, 1, 192, 80, 16, 2, 0, 1},
    {256, 0, 128, 80, 12, 2, 0, 0},
    {256, 1, 128, 80, 12, 2, 0, 0},
};

/* Rows a regime tries before its family rows (the first that holds the
 * key), each for keys of at most seqlen_q_max queries and seqlen_k_max
 * keys. sm_90 prefill, from exhaustive tunes on the H200 (docs/perf.md,
 * defaults per regime and the tuning pipeline):
 * - d64 non-causal at 128 and 256: 128-row tiles (192 rows pad 128
 *   queries to 192 and 256 to 384: 1.21-1.26x slower);
 * - d64 causal up to 1024: wgmma 64x64 (246 / 303 TFLOP/s at 512 / 1024
 *   against ws 192x128's 174 / 239); up to 8k the persistent grid (one CTA
 *   a tile 1.02-1.07x slower), past it one CTA a tile;
 * - d128 up to 16k: 128x128 (the d128 rows' 192x80 is for longer keys). */
static const struct short_row {
    int32_t seqlen_q_max, seqlen_k_max, family;
    struct default_row row;
} short_sm90[] = {
    /* seqlen_q_max, seqlen_k_max, family, {d, c, bm, bn, w, st, layout, q_in_regs} */
    {256, 256, TT_FAMILY_WS, {64, 0, 128, 128, 12, 2, 0, 1}},
    {1024, 1024, TT_FAMILY_WGMMA, {64, 1, 64, 64, 4, 2, 1, 0}},
    {8192, 8192, TT_FAMILY_WS, {64, 1, 192, 128, 16, 2, 0, 1}},
    {16384, 16384, TT_FAMILY_WS, {128, 0, 128, 128, 12, 2, 0, 1}},
    {16384, 16384, TT_FAMILY_WS, {128, 1, 128, 128, 12, 2, 0, 1}},
};

/* Family splitkv (decode, speculative decode, chunks of a few rows): by
 * the packed rows a KV head's query block holds (seqlen_q x GQA group;
 * the first row whose `rows` is at least that, else the last), one brace
 * row per line. split_ctas is the split target in CTAs an SM (0: as many
 * as fit), so the split count follows batch x heads at run time. From the
 * H200 sweeps (docs/perf.md, inference), each the config with the best
 * worst case over the decode shapes (batch 1-64, 4k-128k keys): 16 rows
 * (one token, group <= 16) at d128 128-key tiles, 3 stages, Q in
 * registers, one wave of what fits (within 1.2% of the best at every
 * shape since the tiles are swizzled; the 64-key 4-stage row it replaces
 * ran 1.05-1.10x; a paged cache takes its own tile,
 * tt__splitkv_default_paged); 32 rows 128-key tiles, 3 stages (1%; at
 * d128 64-key tiles since the swizzle: 1.007x the best at 8 tokens of
 * group 4, the 128-key row 1.14x); 64 rows 64-key tiles, 2 stages (3%;
 * at d128 3 stages since the swizzle: 1.003x, 2 stages 1.02x); 128 rows 8
 * warps. At head dim 64
 * the 16-row tile takes 128 keys (half the bytes of a d128 row: the
 * inference grid's d64 decode winners, the 64-key tile up to 1.19x
 * slower), and the 128-row one 4 warps (one key warp: 1.15-1.22x faster
 * there than 8). Q sits in registers wherever it fits without a spill on
 * sm_90 (head dims 32 and 64 past 16 rows too: the space holds only that
 * choice there, so a default without it was a config the tuner never
 * timed).
 * The portable rows fit 99 KB (sm_86/89) with no spill: a smaller tile
 * of the same shape where the sm_90 row does not. */
struct splitkv_row {
    int32_t rows, head_dim;
    int32_t block_m, block_n, warps, stages, q_in_regs, split_ctas;
};
static const struct splitkv_row splitkv_portable[] = {
    /* rows, d, bm, bn, w, st, q_in_regs, split_ctas */
    {16, 32, 16, 64, 4, 2, 1, 2},
    {16, 64, 16, 64, 4, 2, 1, 2},
    {16, 128, 16, 64, 4, 2, 1, 2},
    {16, 256, 16, 32, 2, 2, 0, 2},
    {32, 32, 32, 64, 4, 2, 0, 0},
    {32, 64, 32, 64, 4, 2, 0, 0},
    {32, 128, 32, 64, 4, 2, 0, 0},
    {32, 256, 32, 32, 4, 2, 0, 0},
    {64, 32, 64, 64, 4, 2, 0, 0},
    {64, 64, 64, 64, 4, 2, 0, 0},
    {64, 128, 64, 64, 4, 2, 0, 0},
    {64, 256, 64, 32, 4, 2, 0, 0},
    {128, 32, 128, 64, 8, 2, 0, 0},
    {128, 64, 128, 64, 8, 2, 0, 0},
    {128, 128, 128, 32, 8, 2, 0, 0},
    {128, 256, 64, 32, 4, 2, 0, 0},
};
static const struct splitkv_row splitkv_sm90[] = {
    /* rows, d, bm, bn, w, st, q_in_regs, split_ctas */
    /* d32 as d64: the 128-key 3-stage tile was the fastest of four at
     * one token of group 4 over 32k keys at batches 8 and 64, before and
     * after the rolled prologue; the 64-key 4-stage row ran 1.01-1.05x
     * (docs/perf.md, the code a CTA runs once). */
    {16, 32, 16, 128, 4, 3, 1, 0},
    /* d64: 3 stages at any batch, as the wide table's row. With 4 (one
     * CTA an SM) the row ran 1.14-1.27x the best over 32k keys at the
     * tune's small batches (18 keys, geomean 1.20; 3 stages: worst 1.031)
     * and up to 1.28x over 1k-16k keys (3 stages: 1.089; docs/perf.md,
     * decode defaults by the call's units and the code a CTA runs once). */
    {16, 64, 16, 128, 4, 3, 1, 0},
    /* d128: the 128-key row holds up to 8 packed rows; 9-16 (2 tokens of
     * group 8, 4 of group 4, 16 of group 1) take the same tile with 8
     * warps (the measured choice; why 9-16 rows want more warps than 1-8
     * was not profiled). On the H200 it was within 1.031x of the best at
     * every such key past 1024 keys, 4-128 units (the inference grid's
     * timings and tt_sdpa_fwd's), where the 64-key 4-warp row it replaces
     * ran up to 1.16x (at 96-128 units) and the 128-key 4-warp one 1.27x
     * (96 units). Over at most 1024 keys the short-cache row keeps 64-key
     * tiles (docs/perf.md, the d128 16-row row). */
    {8, 128, 16, 128, 4, 3, 1, 0},
    {16, 128, 16, 128, 8, 3, 1, 0},
    {16, 256, 16, 64, 4, 2, 0, 0},
    {32, 32, 32, 128, 4, 3, 1, 0},
    {32, 64, 32, 128, 4, 3, 1, 0},
    {32, 128, 32, 64, 4, 3, 0, 0},
    {32, 256, 32, 64, 4, 2, 0, 0},
    {64, 32, 64, 64, 4, 2, 1, 0},
    {64, 64, 64, 64, 4, 2, 1, 0},
    {64, 128, 64, 64, 4, 3, 0, 0},
    {64, 256, 64, 32, 4, 2, 0, 0},
    {128, 32, 128, 64, 8, 2, 1, 0},
    {128, 64, 128, 64, 4, 2, 1, 0},
    {128, 128, 128, 64, 8, 2, 0, 0},
    {128, 256, 128, 32, 8, 2, 0, 0},
};
/* sm_90 decode over few keys (at most SHORT_KEYS_MAX), by class (a row
 * serves the packed rows above half its own): the 32-row class (8 tokens
 * of group 4, 4 of group 8) takes the 16-row tile with 8 warps, half the
 * rows a CTA and twice the CTAs where 1024 keys leave little to split.
 * The inference grid's winner at three of its four such keys; the 32x128
 * row was 1.21-1.23x slower at 8 tokens of group 4, 1.03-1.04x at 4 of
 * group 8. The d128 16-row class keeps 64-key tiles there: 1.02-1.03x the
 * best at 2 tokens of group 8 and 4 of group 4 over 1024 keys (32 and 64
 * units), where its 8-warp 128-key row ran 1.03-1.11x (docs/perf.md, the d128
 * 16-row row). */
static const struct splitkv_row splitkv_sm90_short_keys[] = {
    /* rows, d, bm, bn, w, st, q_in_regs, split_ctas */
    {16, 128, 16, 64, 4, 3, 1, 0},
    {32, 64, 16, 128, 8, 4, 1, 0},
    {32, 128, 16, 128, 8, 3, 1, 0},
};
#define SHORT_KEYS_MAX 1024

/* sm_90 decode of more (batch, K/V head) units than SMs: a wave of one
 * CTA an SM is full already, and a tile that fits two or more CTAs an SM
 * wins, one hiding another's latency: d64 the 128-key tile with 3 stages
 * (98 KB; 4 stages, 130 KB, ran 1.07-1.28x the best there), d128 64-key
 * tiles (the 128-key row, 196 KB, ran 1.03-1.14x). With fewer units the
 * one-CTA rows above keep more of a split's bytes in flight (d128's
 * 64-key tiles ran 1.14-1.19x at batch 1, 4k-32k keys). From the H200's
 * sweep of the inference grid's short caches at the tune's two batches
 * (docs/perf.md, decode defaults by the call's units); the 16-row class
 * only (the others were not swept). d128 on a contiguous cache takes 2
 * stages (68 KB) at 1.1-1.85 waves of units
 * (tt__config_default_splitkv_units): held to 168 registers it runs three
 * CTAs an SM (splitkv/mainloop.cuh; at 193 it ran two), and timed
 * interleaved with torch auto on the H200 it ran 2.2% faster than 3
 * stages (100 KB, two an SM) at 160 units, 5% at 192, 3% at 224, 1.8%
 * at 240; 3 stages ran 0.7% faster at 136, 0.9% at 256 and 0.9-1.3% at
 * 512 (docs/perf.md, decode past a wave on three CTAs an SM). A paged
 * cache keeps 3 stages (tt__splitkv_default_paged). */
/* sm_90 decode of few units over a short cache: at most a quarter wave
 * of (batch, K/V head) units (33 on 132 SMs), at least 1024 keys, each
 * split one CTA an SM (split_ctas 1: the splits of the 128-key row) and
 * of at most 1024 keys (2048 up to an eighth of a wave: 16 units). The
 * 64-key 3-stage tile (98 KB) runs a split's keys in twice the tiles of
 * half the bytes, a ring of three in flight where the 128-key row's ring,
 * trimmed to the split's tiles, held two. Timed interleaved with torch
 * auto on the H200 at one token of group 4, four machines (docs/perf.md,
 * decode: few units over short caches), against the 128-key row: batch 1
 * ahead by 6% at 1k keys, 6-7% at 2k, 3-4% at 4k and 8k, 1-1.5% at 16k,
 * 0.6% at 32k (1986 keys a split), 0-0.5% behind at 128k; batch 2 ahead by
 * 8.5% at 1k, 3% at 4k, 1% at 8k, tied at 16k; batch 4 ahead by 4% at 2k,
 * 0-1.4% at 4k, 0-0.4% behind at 8k (1986 keys a split, 32 units); batch 8
 * (64 units) 1.2% behind at 8k. Other row counts and caches under 1024
 * keys were not timed: they keep their rows. */
static const struct splitkv_row splitkv_sm90_few_units = {16, 128, 16, 64, 4, 3, 1, 1};
#define FEW_UNITS_ROWS_MAX 4
#define FEW_UNITS_KEYS_MIN 1024
/* sm_90 speculative decode (17-64 packed rows) of a contiguous cache by
 * the call's (batch, K/V head) units: where the units fill less than half
 * a wave (66 on 132 SMs), the tile a size down, two query blocks a unit,
 * doubles the CTAs without a split's merge (the second block reads its
 * K/V from L2). A row serves units in (sm/lo, sm/hi] over seqlen_k in
 * (keys_min, keys_max]. Measured on the inference grid's keys at the
 * tune's batches (docs/perf.md, the inference grid on the H100, and
 * speculative decode by units: with these rows 169 of 169 keys of the
 * H100's grid within 1.15; not yet timed on the H200):
 * - d128, 32 rows (8 tokens of group 4, 4 of group 8), a quarter to half
 *   a wave: 16x128 4 warps, the H100 grid's winner over 4k keys (the
 *   32x64 row 1.21x) and the H200's over 8k (1.087x);
 * - d128, 32 rows, an eighth to a quarter wave: the same tile with 8
 *   warps, the H100's winner at 4 tokens of group 8 over 4k keys, 32
 *   units (4 warps 1.084x, the row 1.232x), 1.037x over 16k (the row
 *   1.043x);
 * - d64, 32 rows, a sixteenth to half a wave: 16x128 with 8 warps and 4
 *   stages (the short cache's row), within 1.045x of the H100's winners
 *   at 8-64 units over 1k-32k keys (the 32x128 row up to 1.32x; 4 warps
 *   won there, within 1.010x, but ran the H200's one-token decode 1.15-
 *   1.2x its best where 8 warps held 1.09x);
 * - d128, 64 rows (16 tokens of group 4, 8 of group 8), a quarter to half
 *   a wave: 32x128, the H100's winner over 1k and 4k keys (the 64x64 row
 *   1.227x over 4k; over 1k the dense wgmma row 1.184x), 1.08x the H200's
 *   best over 8k (the row 1.04x); d64 over 1k keys 32x128 with 4 stages,
 *   the H100's winner (wgmma 1.201x; on the H200 before the decode
 *   kernel's rework the 32-row tile and wgmma were within 0.1%).
 * With fewer units the splits fill the wave and the row by packed rows
 * wins (the 32-row tiles 1.004-1.04x the best at 8-16 units over 16k-128k
 * keys, the 16-row ones 1.02-1.21x); with more, the query blocks do. */
static const struct spec_units_row {
    int32_t rows_min, rows_max, head_dim, lo, hi;
    int64_t keys_min, keys_max;
    struct splitkv_row row;
} splitkv_sm90_spec_units[] = {
    /* rows_min, rows_max, d, lo, hi, keys_min, keys_max, {rows, d, bm, bn, w, st, q_in_regs, split_ctas} */
    {17, 32, 128, 4, 2, SHORT_KEYS_MAX, TT_SEQLEN_MAX, {32, 128, 16, 128, 4, 3, 1, 0}},
    {17, 32, 128, 8, 4, SHORT_KEYS_MAX, TT_SEQLEN_MAX, {32, 128, 16, 128, 8, 3, 1, 0}},
    {17, 32, 64, 16, 2, SHORT_KEYS_MAX, TT_SEQLEN_MAX, {32, 64, 16, 128, 8, 4, 1, 0}},
    {33, 64, 128, 4, 2, 0, TT_SEQLEN_MAX, {64, 128, 32, 128, 4, 3, 0, 0}},
    {33, 64, 64, 4, 2, 0, SHORT_KEYS_MAX, {64, 64, 32, 128, 4, 4, 1, 0}},
};

static const struct splitkv_row splitkv_sm90_wide[] = {
    /* rows, d, bm, bn, w, st, q_in_regs, split_ctas */
    {16, 64, 16, 128, 4, 3, 1, 0},
    {16, 128, 16, 64, 4, 3, 1, 0},
};

/* sm_90 chunks' dense rows: past splitkv's rows, and where the call's
 * dense tiles fill the GPU (tt__sdpa_device_default_at: batch x query
 * heads x 64-row blocks >= 3/4 of the SMs; so does a group-1 decode over
 * few keys). On the H200's inference grid (docs/perf.md) splitkv's 128-row
 * mma.sync tile ran such chunks 1.5-2.5x slower than the dense winners:
 * wgmma 64x64 (d128) and 64x128 (d64) at 64 tokens, ws 128x128 (d128) and
 * 128x176 persistent (d64; the prefill row 192x128 was 1.05-1.43x slower)
 * at 512; with fewer CTAs (batch 1-2, 64 tokens: 32-64 CTAs) splitkv's
 * split keys won. Decode of group 1 over 1024 keys: wgmma 1.15-1.20x
 * faster (nothing to split, no group to pack). Over long caches the
 * 64-token winners take 192-key tiles (fewer, longer K/V steps): d64 at
 * 16k and 32k keys (64x128 won at 1k and 4k), d128 at 32k (1.21x faster
 * than 64x64, which won at 1k, 4k and 16k). */
static const struct short_row chunk_dense_sm90[] = {
    /* seqlen_q_max, seqlen_k_max, family, {d, c, bm, bn, w, st, layout, q_in_regs} */
    {64, 4096, TT_FAMILY_WGMMA, {64, 0, 64, 128, 4, 2, 1, 0}},
    {64, 4096, TT_FAMILY_WGMMA, {64, 1, 64, 128, 4, 2, 1, 0}},
    {64, TT_SEQLEN_MAX, TT_FAMILY_WGMMA, {64, 0, 64, 192, 4, 2, 1, 0}},
    {64, TT_SEQLEN_MAX, TT_FAMILY_WGMMA, {64, 1, 64, 192, 4, 2, 1, 0}},
    {64, 16384, TT_FAMILY_WGMMA, {128, 0, 64, 64, 4, 2, 1, 0}},
    {64, 16384, TT_FAMILY_WGMMA, {128, 1, 64, 64, 4, 2, 1, 0}},
    {64, TT_SEQLEN_MAX, TT_FAMILY_WGMMA, {128, 0, 64, 192, 4, 2, 1, 0}},
    {64, TT_SEQLEN_MAX, TT_FAMILY_WGMMA, {128, 1, 64, 192, 4, 2, 1, 0}},
    {TT_SEQLEN_MAX, TT_SEQLEN_MAX, TT_FAMILY_WS, {64, 0, 128, 176, 12, 2, 0, 1}},
    {TT_SEQLEN_MAX, TT_SEQLEN_MAX, TT_FAMILY_WS, {64, 1, 128, 176, 12, 2, 0, 1}},
    /* 512-token chunks over 8k and 32k keys: ping-pong, 1.04 and 1.16x
     * faster than the single schedule of the prefill rows (whose d128
     * rows past 16k keys, 192x80, were never timed on chunks). A causal
     * chunk is bottom-right, every row seeing nearly every key: it takes
     * the same row (not timed apart). */
    {TT_SEQLEN_MAX, TT_SEQLEN_MAX, TT_FAMILY_WS, {128, 0, 128, 128, 12, 2, 1, 1}},
    {TT_SEQLEN_MAX, TT_SEQLEN_MAX, TT_FAMILY_WS, {128, 1, 128, 128, 12, 2, 1, 1}},
};
/* The same chunks when their grid is at most one wave of SMs (tt__sdpa_
 * device_default_at: batch x query heads x 64-row blocks <= the SMs): the
 * d128 64x64 tile above fits two CTAs an SM, which only a second wave
 * needs; with one CTA an SM longer K/V steps win. On the H200's inference
 * grid, 128 CTAs (batch 4 x 32 heads): 64x192 ran 1.21x faster than 64x64
 * over 16k keys (0.187 against 0.226 ms, bf16 and fp16 alike) and won over
 * 32k; 64x128 won over 4k keys. At 256 CTAs (batch 8) 64x64 stays the
 * winner over 1k, 4k and 16k keys (16k: 0.291 ms against 0.373 for
 * 64x192, which takes two waves). d64 over more than 16k keys keeps
 * splitkv's 128-row tile, each K/V read once a group (wgmma reads it once
 * a query head): at 64 tokens of group 4 over 32k keys, batch 4 (128
 * CTAs), wgmma 64x192 ran 1.165x splitkv 128x64 w4 s2 on the H100 grid and
 * 1.05x the H200's winner (splitkv 128x64 w4 s3; s2 1.025x); over 16k keys
 * at batch 8 64x192 won (splitkv 1.18x), d64 over 16k keys at one wave
 * was not timed (the dense rows stay). */
static const struct short_row chunk_one_wave_sm90[] = {
    /* seqlen_q_max, seqlen_k_max, family, {d, c, bm, bn, w, st, layout, q_in_regs} */
    {64, 4096, TT_FAMILY_WGMMA, {64, 0, 64, 128, 4, 2, 1, 0}},
    {64, 4096, TT_FAMILY_WGMMA, {64, 1, 64, 128, 4, 2, 1, 0}},
    {64, 16384, TT_FAMILY_WGMMA, {64, 0, 64, 192, 4, 2, 1, 0}},
    {64, 16384, TT_FAMILY_WGMMA, {64, 1, 64, 192, 4, 2, 1, 0}},
    {64, TT_SEQLEN_MAX, TT_FAMILY_SPLITKV, {64, 0, 128, 64, 4, 2, 0, 1}},
    {64, TT_SEQLEN_MAX, TT_FAMILY_SPLITKV, {64, 1, 128, 64, 4, 2, 0, 1}},
    {64, 4096, TT_FAMILY_WGMMA, {128, 0, 64, 128, 4, 2, 1, 0}},
    {64, 4096, TT_FAMILY_WGMMA, {128, 1, 64, 128, 4, 2, 1, 0}},
    {64, TT_SEQLEN_MAX, TT_FAMILY_WGMMA, {128, 0, 64, 192, 4, 2, 1, 0}},
    {64, TT_SEQLEN_MAX, TT_FAMILY_WGMMA, {128, 1, 64, 192, 4, 2, 1, 0}},
};
/* the most keys a decode key may have to run the rows above: one token a
 * row of group 1, or 16 tokens of any group (the inference grid's winners
 * at 16 tokens of groups 4 and 8 over 1024 keys: wgmma 64x64 at d128, 1.10-
 * 1.17x faster than splitkv's 64- and 128-row tiles, and 64x128 at d64
 * with group 8, 1.25x) */
#define DECODE_DENSE_SEQLEN_K_MAX 1024
#define DECODE_DENSE_GROUPED_SEQLEN_Q 16

/* clang-format on */

/* What a regime runs on an arch: a splitkv table for keys whose packed
 * rows fit its largest tile (`skv_rows_max`; 0: none), else the first of
 * `shorts` that holds the key, else the dense rows of `family`, with `alt`
 * (family `alt_family`) for the masks or strides that family does not
 * take. */
typedef struct regime_table {
    const struct default_row *rows;
    size_t n;
    int32_t family;
    const struct default_row *alt;
    size_t n_alt;
    int32_t alt_family;
    const struct splitkv_row *skv;
    size_t n_skv;
    int64_t skv_rows_max;
    const struct short_row *shorts;
    size_t n_shorts;
    const struct splitkv_row *skv_short; /* rows by class over few keys, or NULL */
    size_t n_skv_short;
} regime_table;
#define ROWS(r) r, sizeof r / sizeof r[0]
#define NO_ALT NULL, 0, 0
#define NO_SKV NULL, 0, 0
#define NO_SHORTS NULL, 0
#define NO_SKV_SHORT NULL, 0
/* Decode (seqlen_q <= 16) always runs splitkv: no dense tile fits one
 * token. On sm_90 chunks run it up to 1024 packed rows (256 tokens of
 * group 4) and ws past that: on the H200 (docs/perf.md, inference) a
 * 64-token chunk of group 4 ran 1.7x faster in splitkv (ws had one 128-row
 * CTA a query head: 32 CTAs for 132 SMs), a 512-token one 2.6x faster in
 * ws (splitkv's mma.sync is the slower tensor path once the query blocks
 * fill the GPU). Elsewhere splitkv has no faster dense family beside it. */
static const regime_table portable[] = {
    [TT_REGIME_DECODE] = {ROWS(defaults), TT_FAMILY_MMA, NO_ALT, ROWS(splitkv_portable), INT64_MAX, NO_SHORTS,
                          NO_SKV_SHORT},
    [TT_REGIME_CHUNK] = {ROWS(defaults), TT_FAMILY_MMA, NO_ALT, ROWS(splitkv_portable), INT64_MAX, NO_SHORTS,
                         NO_SKV_SHORT},
    [TT_REGIME_PREFILL] = {ROWS(defaults), TT_FAMILY_MMA, NO_ALT, NO_SKV, NO_SHORTS, NO_SKV_SHORT},
};
static const regime_table sm90[] = {
    [TT_REGIME_DECODE] = {ROWS(defaults_sm90), TT_FAMILY_WS, ROWS(defaults_sm90_wgmma), TT_FAMILY_WGMMA,
                          ROWS(splitkv_sm90), INT64_MAX, NO_SHORTS, ROWS(splitkv_sm90_short_keys)},
    [TT_REGIME_CHUNK] = {ROWS(defaults_sm90), TT_FAMILY_WS, ROWS(defaults_sm90_wgmma), TT_FAMILY_WGMMA,
                         ROWS(splitkv_sm90), 1024, ROWS(chunk_dense_sm90), ROWS(splitkv_sm90_short_keys)},
    [TT_REGIME_PREFILL] = {ROWS(defaults_sm90), TT_FAMILY_WS, ROWS(defaults_sm90_wgmma), TT_FAMILY_WGMMA,
                           NO_SKV, ROWS(short_sm90), NO_SKV_SHORT},
};
#undef ROWS
#undef NO_ALT
#undef NO_SKV
#undef NO_SHORTS
#undef NO_SKV_SHORT

static int dense_row(const struct default_row *rows, size_t n, int32_t family, const tt_key_v2 *key,
                     tt_config *out) {
    for (size_t i = 0; i < n; i++) {
        const struct default_row *r = &rows[i];
        /* Both causal alignments take the causal row: they differ only
         * where seqlen_q != seqlen_k, by an offset of the diagonal. */
        if (r->head_dim != key->head_dim || r->causal != (key->causal ? 1 : 0)) continue;
        tt_config c;
        memset(&c, 0, sizeof c);
        c.family = family;
        c.block_m = r->block_m;
        c.block_n = r->block_n;
        c.warps = r->warps;
        c.stages = r->stages;
        c.layout = r->layout;
        c.q_in_regs = r->q_in_regs;
        *out = c;
        return 0;
    }
    return TT_ERR_UNSUPPORTED;
}

static int splitkv_row(const struct splitkv_row *rows, size_t n, int64_t packed, int32_t head_dim,
                       tt_config *out) {
    const struct splitkv_row *hit = NULL;
    for (size_t i = 0; i < n; i++) {
        if (rows[i].head_dim != head_dim) continue;
        hit = &rows[i];
        if (rows[i].rows >= packed) break;
    }
    if (!hit) return TT_ERR_UNSUPPORTED;
    tt_config c;
    memset(&c, 0, sizeof c);
    c.family = TT_FAMILY_SPLITKV;
    c.block_m = hit->block_m;
    c.block_n = hit->block_n;
    c.warps = hit->warps;
    c.stages = hit->stages;
    c.layout = TT_LAYOUT_PAD;
    c.q_in_regs = hit->q_in_regs;
    c.split_ctas = hit->split_ctas;
    *out = c;
    return 0;
}

#define ROWS_OF(r) r, sizeof r / sizeof r[0]
/* The first of `rows` at head_dim that holds `packed` rows (`by_class`:
 * and no more than twice them), with no fallback: 0, else
 * TT_ERR_UNSUPPORTED. */
static int splitkv_row_holding(const struct splitkv_row *rows, size_t n, int64_t packed, int32_t head_dim,
                               int by_class, tt_config *out) {
    for (size_t i = 0; i < n; i++)
        if (rows[i].head_dim == head_dim && rows[i].rows >= packed &&
            (!by_class || rows[i].rows / 2 < packed))
            return splitkv_row(&rows[i], 1, packed, head_dim, out);
    return TT_ERR_UNSUPPORTED;
}

/* The table's splitkv row for `packed` rows over `seqlen_k` keys: its
 * few-keys row of the packed rows' class, else its rows by packed rows. */
static int splitkv_row_keys(const regime_table *t, int64_t packed, int64_t seqlen_k, int32_t head_dim,
                            tt_config *out) {
    if (t->skv_short && seqlen_k > 0 && seqlen_k <= SHORT_KEYS_MAX &&
        splitkv_row_holding(t->skv_short, t->n_skv_short, packed, head_dim, 1, out) == 0)
        return 0;
    return splitkv_row(t->skv, t->n_skv, packed, head_dim, out);
}

/* The first of `rows` that holds the key: 0 with it in *out, else
 * TT_ERR_UNSUPPORTED. */
static int short_row_find(const struct short_row *rows, size_t n, const tt_key_v2 *key, tt_config *out) {
    for (size_t i = 0; i < n; i++) {
        const struct short_row *r = &rows[i];
        if (key->seqlen_q <= r->seqlen_q_max && key->seqlen_k <= r->seqlen_k_max &&
            dense_row(&r->row, 1, r->family, key, out) == 0)
            return 0;
    }
    return TT_ERR_UNSUPPORTED;
}

static int from_table(const regime_table *t, const tt_key_v2 *key, tt_config *out) {
    const int64_t packed = key->seqlen_q * (int64_t)(key->group > 1 ? key->group : 1);
    /* head dims splitkv does not serve (96) take the dense rows */
    if (t->skv && packed <= t->skv_rows_max &&
        splitkv_row_keys(t, packed, key->seqlen_k, key->head_dim, out) == 0)
        return 0;
    /* ws's bottom-right mask takes seqlen_q <= seqlen_k only */
    if (t->alt && key->causal == TT_CAUSAL_BOTTOM_RIGHT && key->seqlen_q > key->seqlen_k &&
        t->family == TT_FAMILY_WS)
        return dense_row(t->alt, t->n_alt, t->alt_family, key, out);
    if (short_row_find(t->shorts, t->n_shorts, key, out) == 0) return 0;
    return dense_row(t->rows, t->n, t->family, key, out);
}

int tt_config_default_v2(const tt_key_v2 *key, tt_config *out) {
    if (!key || !out) return TT_ERR_INVAL;
    if (!tt__head_dim_supported(key->head_dim)) return TT_ERR_UNSUPPORTED;
    return from_table(&portable[tt__key_regime(key)], key, out);
}

int tt_config_default(const tt_key *key, tt_config *out) {
    if (!key || !out) return TT_ERR_INVAL;
    tt_key_v2 k;
    tt__key_from_v1(key, &k);
    return tt_config_default_v2(&k, out);
}

int tt__config_default_sm90(const tt_key_v2 *key, tt_config *out) {
    if (!key || !out) return TT_ERR_INVAL;
    return from_table(&sm90[tt__key_regime(key)], key, out);
}

int tt__config_default_other(const tt_key_v2 *key, int32_t arch, int32_t not_family, tt_config *out) {
    if (!key || !out) return TT_ERR_INVAL;
    if (arch == 90) {
        const regime_table *t = &sm90[tt__key_regime(key)];
        if (t->family != not_family && dense_row(t->rows, t->n, t->family, key, out) == 0) return 0;
        if (t->alt && t->alt_family != not_family &&
            dense_row(t->alt, t->n_alt, t->alt_family, key, out) == 0)
            return 0;
    }
    tt_config c;
    int rc = tt_config_default_v2(key, &c);
    if (rc < 0) return rc;
    if (c.family == not_family) return TT_ERR_UNSUPPORTED;
    *out = c;
    return 0;
}

int64_t tt__config_chunk_splitkv_rows(int32_t arch) {
    return arch == 90 ? sm90[TT_REGIME_CHUNK].skv_rows_max : portable[TT_REGIME_CHUNK].skv_rows_max;
}

int tt__config_default_splitkv(int32_t arch, int64_t packed_rows, int64_t seqlen_k, int32_t head_dim,
                               tt_config *out) {
    if (!out) return TT_ERR_INVAL;
    if (arch == 90) return splitkv_row_keys(&sm90[TT_REGIME_DECODE], packed_rows, seqlen_k, head_dim, out);
    return splitkv_row(ROWS_OF(splitkv_portable), packed_rows, head_dim, out);
}

int tt__config_default_splitkv_units(int32_t arch, int64_t packed_rows, int64_t seqlen_k, int32_t head_dim,
                                     int64_t units, int sm_count, int paged, tt_config *out) {
    if (!out) return TT_ERR_INVAL;
    if (arch != 90 || sm_count <= 0 || units <= 0 || packed_rows < 1 || packed_rows > 64)
        return TT_ERR_UNSUPPORTED;
    if (packed_rows > 16) {
        if (paged) return TT_ERR_UNSUPPORTED;
        for (size_t i = 0; i < sizeof splitkv_sm90_spec_units / sizeof splitkv_sm90_spec_units[0]; i++) {
            const struct spec_units_row *r = &splitkv_sm90_spec_units[i];
            if (r->head_dim == head_dim && packed_rows >= r->rows_min && packed_rows <= r->rows_max &&
                r->lo * units > sm_count && r->hi * units <= sm_count && seqlen_k > r->keys_min &&
                seqlen_k <= r->keys_max)
                return splitkv_row(&r->row, 1, packed_rows, head_dim, out);
        }
        return TT_ERR_UNSUPPORTED;
    }
    if (units <= sm_count) {
        /* d128, one token of group 4 (4 packed rows), a quarter wave of
         * units or less, 1024 keys or more but few a split (a split a CTA
         * an SM): the 64-key tile with one split a CTA an SM */
        const int64_t split_keys = 8 * units <= sm_count ? 2048 : 1024;
        if (head_dim != 128 || paged || packed_rows > FEW_UNITS_ROWS_MAX || 4 * units > sm_count ||
            seqlen_k < FEW_UNITS_KEYS_MIN || seqlen_k * units > split_keys * sm_count)
            return TT_ERR_UNSUPPORTED;
        return splitkv_row(&splitkv_sm90_few_units, 1, packed_rows, head_dim, out);
    }
    const int rc = splitkv_row_holding(ROWS_OF(splitkv_sm90_wide), packed_rows, head_dim, 0, out);
    /* d128 contiguous: 2 stages (three CTAs an SM) at 1.1-1.85 waves of
     * units; elsewhere 3 stages (two CTAs an SM), within 1% at 1.0-1.1
     * waves and ahead by 0.9% at 1.94 (256 units), 0.9-1.3% at 3.9 */
    const int64_t sms = sm_count;
    const int three = 10 * units >= 11 * sms && 20 * units <= 37 * sms;
    if (rc == 0 && head_dim == 128 && !paged && three) out->stages = 2;
    return rc;
}

int tt__config_default_dense_filled(const tt_key_v2 *key, int32_t arch, int one_wave, tt_config *out) {
    if (!key || !out) return TT_ERR_INVAL;
    const tt__regime rg = tt__key_regime(key);
    const int decode_dense = rg == TT_REGIME_DECODE && key->seqlen_k <= DECODE_DENSE_SEQLEN_K_MAX &&
                             (key->group <= 1 || key->seqlen_q >= DECODE_DENSE_GROUPED_SEQLEN_Q);
    if (arch != 90 || (rg != TT_REGIME_CHUNK && !decode_dense)) return TT_ERR_UNSUPPORTED;
    if (one_wave && rg == TT_REGIME_CHUNK &&
        short_row_find(chunk_one_wave_sm90, sizeof chunk_one_wave_sm90 / sizeof chunk_one_wave_sm90[0], key,
                       out) == 0)
        return 0;
    /* the chunk table without its splitkv rows */
    regime_table t = sm90[TT_REGIME_CHUNK];
    t.skv = NULL;
    return from_table(&t, key, out);
}
