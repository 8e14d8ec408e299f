/* Family splitkv without a GPU: the shape rules (its mainloop's #errors,
 * mirrored), the built-in defaults, the variant space, the split count's
 * derivation, and every variant of the space compiled by NVRTC for sm_80
 * and sm_90 without register spills. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/key.h"
#include "kernels/jit.h"
#include "kernels/launch.h"
#include "kernels/sdpa_params.h"
#include "kernels/source.h"
#include "kernels/family.h"
#include "kernels/splitkv/params.h"
#include "kernels/splitkv/splitkv.h"
#include "tt_test.h"
#include "kernels/variants.h"

static tt_config skv(int bm, int bn, int w, int st, int qr, int split) {
    tt_config c;
    memset(&c, 0, sizeof c);
    c.family = TT_FAMILY_SPLITKV;
    c.block_m = bm;
    c.block_n = bn;
    c.warps = w;
    c.stages = st;
    c.layout = TT_LAYOUT_PAD;
    c.q_in_regs = qr;
    c.split_ctas = split;
    return c;
}

TEST(shape_rules) {
    char err[256];
    tt_config c = skv(16, 128, 4, 3, 1, 0);
    /* tt__variant_check sends the family to its descriptor's rules */
    ASSERT_OK(tt__variant_check(&c, 128, NULL, err, sizeof err));
    ASSERT_EQ(tt__variant_check(&c, 96, NULL, err, sizeof err), TT_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(err, "head_dim 96");
    c = skv(24, 128, 4, 3, 1, 0);
    ASSERT_EQ(tt__variant_check(&c, 128, NULL, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "block_m 24");
    c = skv(16, 48, 4, 2, 1, 0); /* 4 key warps need 64-key multiples */
    ASSERT_EQ(tt__variant_check(&c, 128, NULL, err, sizeof err), TT_ERR_INVAL);
    c = skv(128, 64, 2, 2, 0, 0); /* 4 row warps */
    ASSERT_EQ(tt__variant_check(&c, 128, NULL, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "row warps");
    c = skv(32, 128, 4, 2, 1, 0); /* 2 m tiles: O + S + Q fragments = 224 */
    ASSERT_EQ(tt__variant_check(&c, 128, NULL, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "registers");
    c = skv(16, 128, 4, 1, 1, 0);
    ASSERT_EQ(tt__variant_check(&c, 128, NULL, err, sizeof err), TT_ERR_INVAL);
    c = skv(16, 128, 4, 3, 1, 0);
    c.layout = TT_LAYOUT_SWIZZLE;
    ASSERT_EQ(tt__variant_check(&c, 128, NULL, err, sizeof err), TT_ERR_INVAL);
    c = skv(16, 128, 4, 3, 1, 65); /* over the knob's range */
    ASSERT_EQ(tt__variant_check(&c, 128, NULL, err, sizeof err), TT_ERR_INVAL);
    tt__device_limits d86;
    ASSERT_OK(tt__device_limits_nominal(86, &d86));
    c = skv(16, 128, 4, 3, 1, 0); /* 196 KB */
    ASSERT_EQ(tt__variant_check(&c, 128, &d86, err, sizeof err), TT_ERR_RANGE);
    ASSERT_CONTAINS(err, "shared memory");
    /* no family 4 in this build */
    c.family = 4;
    ASSERT_EQ(tt__variant_check(&c, 128, NULL, err, sizeof err), TT_ERR_INVAL);
}

TEST(shared_memory_is_the_larger_of_tiles_and_merge) {
    tt_config c = skv(16, 128, 4, 3, 1, 0); /* unpadded 256-byte rows */
    ASSERT_EQ(tt__config_smem_bytes(&c, 128), 2LL * 128 * (16 + 6 * 128));
    c = skv(128, 16, 8, 2, 0, 0); /* the fp32 merge tile is larger */
    ASSERT_EQ(tt__config_smem_bytes(&c, 128), 4LL * 128 * 136 + 8LL * 128 * 2);
}

/* A split of fewer tiles than the ring's stages never fills the other
 * slots, so its launch asks for those it fills: the 4k-key decode split
 * 32 ways fits three CTAs an SM instead of one. */
TEST(a_short_split_launches_with_the_slots_it_fills) {
    tt_config c = skv(16, 128, 4, 3, 1, 16);
    ASSERT_EQ(tt__splitkv_ring_smem(&c, 128, 1), 2LL * 128 * (16 + 2 * 128));
    ASSERT_EQ(tt__splitkv_ring_smem(&c, 128, 2), 2LL * 128 * (16 + 4 * 128));
    ASSERT_EQ(tt__splitkv_ring_smem(&c, 128, 3), tt__config_smem_bytes(&c, 128));
    ASSERT_EQ(tt__splitkv_ring_smem(&c, 128, 40), tt__config_smem_bytes(&c, 128));
    /* unknown (0): every stage */
    ASSERT_EQ(tt__splitkv_ring_smem(&c, 128, 0), tt__config_smem_bytes(&c, 128));
    /* never under the fp32 merge tile the CTA ends with */
    c = skv(64, 32, 4, 3, 0, 8); /* one tile: 32 KB of rows, 35 KB of merge */
    ASSERT_EQ(tt__splitkv_ring_smem(&c, 128, 1), 4LL * 64 * 136 + 8LL * 64 * 2);
}

/* The tiles' layout: every chunk of a row once, inside the row; the 8
 * rows an ldmatrix phase reads at one chunk in 8 distinct bank groups; a
 * row's 128-byte global lines whole in 128-byte shared segments (what the
 * padded rows broke for cp.async); and tt_skv_sw_step walking a row as
 * the kernel's ldmatrix loops do, from any 16-row block. */
TEST(tile_swizzle_spreads_banks_and_keeps_lines_whole) {
    const int dims[4] = {32, 64, 128, 256};
    for (int i = 0; i < 4; i++) {
        const int d = dims[i], cpr = d / 8, row = 2 * d;
        for (int r = 0; r < 64; r++) {
            int seen[32] = {0};
            for (int c = 0; c < cpr; c++) {
                const unsigned o = tt_skv_soff(d, r, c);
                ASSERT_EQ(o % 16, 0u);
                ASSERT(o >= (unsigned)(r * row) && o < (unsigned)((r + 1) * row));
                seen[(o - (unsigned)(r * row)) / 16]++;
                ASSERT_EQ(o / 128, (unsigned)((r * row + c * 16) / 128));
            }
            for (int c = 0; c < cpr; c++) ASSERT_EQ(seen[c], 1);
        }
        for (int r0 = 0; r0 < 64; r0 += 8)
            for (int c = 0; c < cpr; c++) {
                int group[8] = {0};
                for (int k = 0; k < 8; k++) group[(tt_skv_soff(d, r0 + k, c) / 16) % 8]++;
                for (int g = 0; g < 8; g++) ASSERT_EQ(group[g], 1);
            }
        for (int base = 0; base < 128; base += 16)
            for (int r = 0; r < 16; r++)
                for (int k = 0; k < 2; k++)
                    for (int kk = 0; kk < d / 16; kk++)
                        ASSERT_EQ(tt_skv_sw_step(tt_skv_soff(d, r, k), kk) + (unsigned)(base * row),
                                  tt_skv_soff(d, base + r, 2 * kk + k));
    }
}

TEST(defaults_are_legal_everywhere) {
    const int arch[3] = {80, 86, 90};
    const int dims[4] = {32, 64, 128, 256};
    const int64_t rows[7] = {1, 4, 8, 16, 32, 64, 2048};
    for (int a = 0; a < 3; a++) {
        tt__device_limits d;
        ASSERT_OK(tt__device_limits_nominal(arch[a], &d));
        /* over 4096 keys, then 1024 (the few-keys rows); a call of unknown
         * size, then one of more units than a wave (the wide rows); a
         * contiguous cache, then a paged one */
        for (int i = 0; i < 32; i++)
            for (int r = 0; r < 7; r++) {
                tt_config c;
                ASSERT_OK(tt__splitkv_default(rows[r], i % 8 < 4 ? 4096 : 1024, dims[i % 4], &d,
                                              i % 16 < 8 ? 0 : 1000, i >= 16, &c));
                char err[256];
                if (tt__variant_check(&c, dims[i % 4], &d, err, sizeof err) < 0)
                    TT_FAIL_AT("sm_%d d%d rows %lld: %s", arch[a], dims[i % 4], (long long)rows[r], err);
                /* a decode tile holds the rows without a 4x larger one */
                if (rows[r] <= 64 && c.block_m > 16 && c.block_m >= 2 * rows[r] && c.block_m != 16)
                    TT_FAIL_AT("rows %lld got block_m %d", (long long)rows[r], (int)c.block_m);
                /* a paged cache's default is as legal, and never deeper,
                 * on short pages and long ones */
                const int64_t pages[2] = {TT_SPLITKV_LONG_PAGE / 2, TT_SPLITKV_LONG_PAGE};
                for (int g = 0; g < 2; g++) {
                    tt_config pc = c;
                    tt__splitkv_default_paged(&pc, dims[i % 4], pages[g], TT_SPLITKV_LONG_PAGE);
                    if (tt__variant_check(&pc, dims[i % 4], &d, err, sizeof err) < 0)
                        TT_FAIL_AT("sm_%d d%d rows %lld pages of %lld: %s", arch[a], dims[i % 4],
                                   (long long)rows[r], (long long)pages[g], err);
                    ASSERT(pc.stages <= c.stages && pc.block_m == c.block_m && pc.block_n <= c.block_n);
                    /* d128: the 64-key tile on short pages (128 keys, a
                     * lookup a row, ran them 1.2-1.4x slower), the
                     * contiguous tile on long ones (a lookup a page), 3
                     * stages; other head dims 2 */
                    if (c.block_m == 16 && c.warps == 4 && dims[i % 4] == 128) {
                        ASSERT_EQ(pc.block_n, g == 0 && c.block_n > 64 ? 64 : c.block_n);
                        ASSERT_EQ(pc.stages, c.stages < 3 ? c.stages : 3);
                    } else if (c.block_m == 16) {
                        ASSERT_EQ(pc.stages, 2);
                    }
                }
            }
    }
}

/* The device's choice of tiles a split for a varlen batch (mainloop.cuh,
 * varlen_plan): sequences of qb[i] query blocks over n[i] key tiles, on
 * `heads` KV heads. */
static int varlen_choice(const int *qb, const int *n, int count, int heads, int slots, int floor,
                         int64_t *ctas_out) {
    int64_t work = 0, units = 0;
    int longest = 0;
    for (int i = 0; i < count; i++) {
        work += (int64_t)qb[i] * n[i];
        units += qb[i];
        if (qb[i] > 0 && n[i] > longest) longest = n[i];
    }
    work *= heads;
    units *= heads;
    int cand[TT_SKV_CANDIDATES];
    int64_t ctas[TT_SKV_CANDIDATES];
    for (int j = 0; j < TT_SKV_CANDIDATES; j++) {
        cand[j] = tt_skv_varlen_candidate(j, work, units, longest, slots, floor);
        ctas[j] = 0;
        for (int i = 0; i < count; i++) ctas[j] += (int64_t)qb[i] * tt_skv_unit_splits(n[i], cand[j]);
        ctas[j] *= heads;
    }
    const int t = tt_skv_varlen_pick(ctas, cand, longest, slots);
    int64_t c = 0;
    for (int i = 0; i < count; i++) c += (int64_t)qb[i] * tt_skv_unit_splits(n[i], t);
    *ctas_out = c * heads;
    /* the least estimated time of all candidates */
    for (int j = 0; j < TT_SKV_CANDIDATES; j++)
        if (tt_skv_varlen_cost(ctas[j], cand[j], longest, slots) <
            tt_skv_varlen_cost(*ctas_out, t, longest, slots))
            return -1;
    return t;
}

/* Varlen splits from the work the device counts: whole waves of even
 * CTAs, every unit's tiles covered once, never under the host's floor
 * (which sized the grid). */
TEST(varlen_splits_follow_each_sequence) {
    int64_t ctas;
    uint64_t x = 88172645463325252ull;
    /* a 512-token chunk of group 4 alone, 128-row tiles of 64 keys, 8 KV
     * heads: 16 query blocks x 8 heads of 128 tiles. One CTA an SM (132
     * slots): no split, one wave, as the dense entry point runs it (the
     * host's count alone gave 16 splits of 8 tiles) */
    const int qb1[1] = {16}, n1[1] = {128};
    ASSERT_EQ(varlen_choice(qb1, n1, 1, 8, 132, 8, &ctas), 128);
    ASSERT_EQ(ctas, 128);
    /* two an SM (264 slots): 2 splits, 256 CTAs, one wave */
    const int t2 = varlen_choice(qb1, n1, 1, 8, 264, 8, &ctas);
    ASSERT_EQ(tt_skv_unit_splits(128, t2), 2);
    ASSERT_EQ(ctas, 256);
    /* chunks of 128 and 512 tokens over 8k keys: 160 units of 128 tiles on
     * 132 slots; unsplit is two waves, the second a fifth full: 4 splits
     * (640 CTAs of 32 tiles, five waves, 160 tiles a slot) */
    const int qb3[2] = {4, 16}, n3[2] = {128, 128};
    ASSERT_EQ(varlen_choice(qb3, n3, 2, 8, 132, 8, &ctas), 32);
    /* one-token sequences over 4k-32k keys (128-key tiles): one wave, no
     * CTA over twice a slot's share of the work */
    const int qb4[4] = {1, 1, 1, 1}, n4[4] = {32, 128, 256, 8};
    const int t4 = varlen_choice(qb4, n4, 4, 8, 132, 2, &ctas);
    ASSERT(t4 > 0 && ctas <= 132 && t4 <= 2 * ((32 + 128 + 256 + 8) * 8 + 131) / 132);
    /* the floor holds */
    ASSERT_EQ(varlen_choice(qb1, n1, 1, 8, 264, 200, &ctas), 200);
    /* one query block a sequence: the host's own rule, the fewest tiles
     * a split in one wave. Four decode sequences of 4k, 16k, 32k and 1k
     * keys, 128-key tiles, 8 KV heads, one CTA an SM on 132 SMs: 33 tiles
     * a split, 8 splits in the grid, 8 x (1 + 4 + 8 + 1) = 112 CTAs (a
     * wave's share, 26, made 144) */
    tt_config c = skv(16, 128, 4, 3, 1, 0);
    int splits;
    ASSERT_EQ(tt__splitkv_varlen_tiles(&c, 132, 1, 4096 + 16384 + 32768 + 1024, 4, 8, 256, &splits), 33);
    ASSERT_EQ(splits, 8);
    /* one sequence of 4k keys: 2 tiles a split, 8 x 16 = 128 CTAs */
    ASSERT_EQ(tt__splitkv_varlen_tiles(&c, 132, 1, 4096, 1, 8, 32, &splits), 2);
    ASSERT_EQ(splits, 16);
    for (int trial = 0; trial < 500; trial++) {
        int lk[16];
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const int count = 1 + (int)((x >> 11) % 16), heads = 1 + (int)((x >> 40) % 8);
        int64_t total = 0, max_tiles = 1;
        for (int i = 0; i < count; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            lk[i] = (int)((x >> 20) % 200000);
            total += lk[i];
            if ((lk[i] + 127) / 128 > max_tiles) max_tiles = (lk[i] + 127) / 128;
        }
        const int sms = 8 + (int)(x % 140);
        const int t = tt__splitkv_varlen_tiles(&c, sms, 1, total, count, heads, max_tiles, &splits);
        int64_t n = 0;
        for (int i = 0; i < count; i++) n += heads * (t > 0 ? tt_skv_unit_splits((lk[i] + 127) / 128, t) : 1);
        ASSERT(t == 0 ? splits == 1 : splits == (max_tiles + t - 1) / t);
        /* units that leave room: one wave, unless the most splits cap it */
        if ((count + 1) * heads <= sms && splits < TT_SPLITKV_MAX_SPLITS) ASSERT(n <= sms);
    }
    /* a unit with no key, or fewer tiles than a split takes: one split */
    ASSERT_EQ(tt_skv_unit_splits(0, 7), 1);
    ASSERT_EQ(tt_skv_unit_splits(7, 7), 1);
    ASSERT_EQ(tt_skv_unit_splits(8, 7), 2);
    for (int trial = 0; trial < 2000; trial++) {
        int qb[16], n[16];
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const int count = 1 + (int)((x >> 11) % 16), heads = 1 + (int)((x >> 40) % 8);
        int longest = 1;
        for (int i = 0; i < count; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            qb[i] = (x >> 5) % 4 == 0 ? 1 + (int)((x >> 20) % 32) : (int)((x >> 20) % 2);
            n[i] = (int)((x >> 33) % 3000);
            if (n[i] > longest) longest = n[i];
        }
        const int slots = 1 + (int)(x % 600);
        const int floor = 1 + (int)((x >> 50) % 8);
        const int t = varlen_choice(qb, n, count, heads, slots, floor, &ctas);
        ASSERT(t >= floor); /* and of least cost: varlen_choice checks */
        for (int i = 0; i < count; i++) {
            const int ns = tt_skv_unit_splits(n[i], t);
            /* within the grid the floor sized */
            ASSERT(ns <= (longest + floor - 1) / floor);
            /* the splits cover the unit's tiles once, none over `t` */
            ASSERT_EQ(tt_skv_split_start(n[i], ns, 0), 0);
            ASSERT_EQ(tt_skv_split_start(n[i], ns, ns), n[i]);
            for (int s2 = 0; s2 < ns; s2++) {
                const int a = tt_skv_split_start(n[i], ns, s2), e = tt_skv_split_start(n[i], ns, s2 + 1);
                ASSERT(a <= e && e - a <= t);
            }
        }
    }
}

TEST(split_count_follows_the_batch) {
    tt_config c = skv(16, 128, 4, 3, 1, 2);
    /* 132 SMs, 2 CTAs of the variant fit, target 2 each = 264; 8 KV heads
     * x 1 sequence = 8 CTAs: 33 splits wanted, 8 of the 256 tiles each
     * -> 32 */
    ASSERT_EQ(tt__splitkv_splits(&c, 132, 2, 8, 256), 32);
    /* batch 64: 512 CTAs already fill the target (1.94 waves): no split */
    ASSERT_EQ(tt__splitkv_splits(&c, 132, 2, 512, 64), 1);
    /* batch 16: 128 CTAs, 2 splits -> 256 CTAs, one wave (3 would spill
     * 120 CTAs into a second one) */
    ASSERT_EQ(tt__splitkv_splits(&c, 132, 2, 128, 256), 2);
    /* never past the wave: 100 CTAs, 264 slots -> 2 splits, not 3 */
    ASSERT_EQ(tt__splitkv_splits(&c, 132, 2, 100, 256), 2);
    /* never more splits than key tiles, and none empty: 33 wanted, 5 tiles */
    ASSERT_EQ(tt__splitkv_splits(&c, 132, 2, 8, 5), 5);
    /* 10 tiles in 4 splits would leave 3, 3, 3, 1; 6 wanted -> 2 a split, 5 splits */
    ASSERT_EQ(tt__splitkv_splits(&c, 132, 2, 38, 10), 5);
    /* a target over what fits is what fits: 4 an SM where 1 fits is 132
     * slots (16 splits of 8 CTAs), not 528 (a batch-64 choice run at batch 1
     * as 64 one-tile splits) */
    c.split_ctas = 4;
    ASSERT_EQ(tt__splitkv_splits(&c, 132, 1, 8, 64), 16);
    /* 0: one full wave of what fits */
    c.split_ctas = 0;
    ASSERT_EQ(tt__splitkv_splits(&c, 100, 2, 10, 1000), 20);
    ASSERT_EQ(tt__splitkv_splits(&c, 132, 1, 8, 1), 1);
    /* more CTAs than a wave: batch 64 x 8 KV heads at 3 an SM are 1.29
     * waves, the second mostly empty; 2 splits make 2.59 waves of 3 (86%
     * full) */
    ASSERT_EQ(tt__splitkv_splits(&c, 132, 3, 512, 64), 2);
    /* 512 at 1 an SM are 3.88 waves: whole */
    ASSERT_EQ(tt__splitkv_splits(&c, 132, 1, 512, 64), 1);
    /* never more splits than tiles */
    ASSERT_EQ(tt__splitkv_splits(&c, 132, 3, 512, 1), 1);
}

/* Walks the balanced grid as the kernel does (the same params.h
 * arithmetic): every tile of every unit is taken by exactly one CTA, every
 * CTA's tiles are within one of n / C, a unit's CTAs are consecutive and
 * number what tt_skv_bal_span says, at most `splits` (the workspace's). */
static void check_balanced_walk(int64_t units, int tiles, int ctas, int splits) {
    const int64_t n = units * tiles;
    int *seen = calloc((size_t)n, sizeof *seen);
    int *segs = calloc((size_t)units, sizeof *segs);
    ASSERT(seen && segs);
    for (int c = 0; c < ctas; c++) {
        const int64_t x0 = tt_skv_bal_start(n, ctas, c), x1 = tt_skv_bal_start(n, ctas, c + 1);
        ASSERT(x1 - x0 == n / ctas || x1 - x0 == n / ctas + 1);
        for (int64_t x = x0; x < x1; x = (x / tiles + 1) * tiles) {
            const int64_t u = x / tiles, end = x1 < (u + 1) * tiles ? x1 : (u + 1) * tiles;
            int first;
            const int nseg = tt_skv_bal_span(n, ctas, tiles, u, &first);
            ASSERT(nseg >= 1 && nseg <= splits);
            ASSERT(c - first >= 0 && c - first < nseg);
            ASSERT_EQ(c - first, segs[u]); /* the unit's CTAs in order: split = its index */
            segs[u]++;
            for (int64_t y = x; y < end; y++) seen[y]++;
        }
    }
    for (int64_t y = 0; y < n; y++) ASSERT_EQ(seen[y], 1);
    for (int64_t u = 0; u < units; u++) {
        int first;
        ASSERT_EQ(segs[u], tt_skv_bal_span(n, ctas, tiles, u, &first));
    }
    free(seen);
    free(segs);
}

/* Decode's units (sequence, KV head) spread evenly over one wave: batch 16
 * x 8 KV heads = 128 units left 4 of 132 SMs idle as whole-unit splits. */
TEST(balanced_grid_fills_one_wave) {
    tt_config c = skv(16, 64, 4, 4, 1, 0);
    int ctas = 0;
    const struct {
        int sms, fit;
        int64_t units;
        int tiles, ctas;
    } cases[] = {
        {132, 1, 128, 512, 132}, /* batch 16 x 8 KV heads, 32k keys in 64-key tiles, one CTA an SM */
        {132, 1, 8, 2048, 132},  /* batch 1 x 8 KV heads, 128k keys: about 124 tiles a CTA */
        {132, 1, 512, 128, 132}, /* batch 64 x 8 heads, 8k keys: 512 units, no part-full wave */
        {132, 3, 128, 512, 396}, /* three CTAs an SM where they fit */
        {132, 1, 8, 4, 32},      /* fewer tiles than slots: a tile a CTA */
        {7, 2, 5, 13, 14},       /* odd sizes */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int s =
            tt__splitkv_balance(&c, cases[i].sms, cases[i].fit, cases[i].units, cases[i].tiles, &ctas);
        ASSERT_EQ(ctas, cases[i].ctas);
        ASSERT(s >= 2 && s <= TT_SPLITKV_MAX_SPLITS);
        check_balanced_walk(cases[i].units, cases[i].tiles, ctas, s);
    }
    /* one KV head, many tiles, many CTAs: a unit over at most the merge's
     * most splits */
    const int s = tt__splitkv_balance(&c, 132, 4, 1, 100000, &ctas);
    ASSERT(ctas > 0 && ctas <= TT_SPLITKV_MAX_SPLITS && s <= TT_SPLITKV_MAX_SPLITS);
    check_balanced_walk(1, 100000, ctas, s);
}

/* Where the split count's grid serves as well, the balanced one is not
 * used: one tile a unit, or whole units a CTA. */
TEST(balanced_grid_only_where_it_balances) {
    tt_config c = skv(16, 64, 4, 4, 1, 0);
    int ctas = 7;
    ASSERT_EQ(tt__splitkv_balance(&c, 132, 1, 128, 1, &ctas), 0);
    ASSERT_EQ(ctas, 0);
    ASSERT_EQ(tt__splitkv_balance(&c, 132, 1, 264, 64, &ctas), 0);
    ASSERT_EQ(tt__splitkv_balance(&c, 132, 1, 0, 64, &ctas), 0);
    ASSERT_EQ(tt__splitkv_balance(&c, 0, 1, 8, 64, &ctas), 0);
    /* the config's target: 2 CTAs an SM of the 3 that fit */
    c.split_ctas = 2;
    ASSERT(tt__splitkv_balance(&c, 132, 3, 128, 512, &ctas) > 0);
    ASSERT_EQ(ctas, 264);
}

/* Varlen: one tiles-per-split for the batch, from its keys, so a sequence's
 * splits follow its length. */
TEST(varlen_split_tiles_follow_the_batch_keys) {
    tt_config c = skv(128, 64, 8, 2, 0, 0);
    int splits = 0;
    /* 8 KV heads x (1744 tiles + 8) = 14016 tile units over 264 slots:
     * 54 tiles a split; the longest sequence's 512 tiles in 10 */
    ASSERT_EQ(tt__splitkv_split_tiles(&c, 132, 2, 14016, 512, &splits), 54);
    ASSERT_EQ(splits, 10);
    /* less work than slots: a split a tile */
    ASSERT_EQ(tt__splitkv_split_tiles(&c, 132, 2, 100, 8, &splits), 1);
    ASSERT_EQ(splits, 8);
    /* one tile: no split */
    ASSERT_EQ(tt__splitkv_split_tiles(&c, 132, 2, 100, 1, &splits), 0);
    ASSERT_EQ(splits, 1);
    /* never more than the most splits the merge takes */
    ASSERT(tt__splitkv_split_tiles(&c, 132, 2, 1000, 100000, &splits) >= 100000 / TT_SPLITKV_MAX_SPLITS);
    ASSERT(splits <= TT_SPLITKV_MAX_SPLITS);
}

/* The splitkv part of a key's space: rows = seqlen_q (one query head a
 * KV head, as the tuner measures). */
static tt__space_entry *splitkv_space(int64_t rows, int arch, size_t *n) {
    tt__device_limits d;
    tt__device_limits_nominal(arch, &d);
    tt_key k;
    memset(&k, 0, sizeof k);
    k.head_dim = 128;
    k.dtype = TT_DTYPE_BF16;
    k.causal = 2;
    k.seqlen_q = rows;
    k.seqlen_k = rows * 4 > 4096 ? rows * 4 : 4096; /* a chunk key at most: splitkv's regimes */
    tt__space_entry *e = NULL;
    size_t m = 0, kept = 0;
    if (tt__space_enumerate(&k, &d, 0, NULL, 1, &e, &m, NULL, 0) < 0) return NULL;
    for (size_t i = 0; i < m; i++)
        if (e[i].variant.config.family == TT_FAMILY_SPLITKV) e[kept++] = e[i];
    *n = kept;
    return e;
}

/* Square training and prefill keys leave splitkv out (the default grid's
 * fast tune times the families that can win them); decode and chunked
 * prefill keys have it. */
/* A varlen batch gives ws the sequences tt_sdpa_fwd's default would run
 * there: on sm_90, more than 1024 packed rows of a chunk (257 tokens of
 * group 4 and not 256), each with a key for every row; the rest stays on
 * splitkv, which sees them as empty. */
TEST(varlen_long_sequences_go_where_the_dense_default_does) {
    ASSERT_EQ(tt__config_chunk_splitkv_rows(90), 1024);
    ASSERT_EQ(tt__config_chunk_splitkv_rows(80), INT64_MAX);
    for (int lq = 255; lq <= 258; lq++) {
        tt_key_v2 k;
        memset(&k, 0, sizeof k);
        k.head_dim = 128;
        k.dtype = TT_DTYPE_BF16;
        k.causal = TT_CAUSAL_BOTTOM_RIGHT;
        k.seqlen_q = lq;
        k.seqlen_k = 8192;
        k.group = 4;
        tt_config c;
        ASSERT_OK(tt__config_default_sm90(&k, &c));
        const int min_q = (int)(tt__config_chunk_splitkv_rows(90) / 4 + 1);
        ASSERT_EQ(c.family == TT_FAMILY_WS, tt_varlen_dense_takes(min_q, 2, lq, 8192));
    }
    ASSERT(tt_varlen_dense_takes(257, 0, 300, 1));
    ASSERT(!tt_varlen_dense_takes(257, 0, 300, 0));   /* no key: rows of O = 0 */
    ASSERT(!tt_varlen_dense_takes(257, 2, 300, 299)); /* bottom-right: a row sees no key */
    ASSERT(tt_varlen_dense_takes(257, 2, 300, 300));
    ASSERT(tt_varlen_dense_takes(257, 1, 300, 10)); /* top-left: row 0 sees key 0 */
    ASSERT(!tt_varlen_dense_takes(0, 0, 300, 300)); /* no dense launch */
}

/* A varlen batch's sequences of at most 16 packed rows (the decode tile's)
 * run in a launch of their own where the batch reaches past them: 4
 * tokens at group 4, 16 at group 1, one token at group 16, none at group
 * 32; on sm_90 their tile is smaller than the one the chunks' rows get. */
TEST(varlen_short_sequences_are_a_row_class_of_their_own) {
    ASSERT_EQ(TT_SPLITKV_CLASS_ROWS, 16);
    ASSERT_EQ(tt__splitkv_class_q(4, 256, 16), 4);
    ASSERT_EQ(tt__splitkv_class_q(4, 5, 16), 4);
    ASSERT_EQ(tt__splitkv_class_q(4, 4, 16), 0); /* every sequence is short: one launch */
    ASSERT_EQ(tt__splitkv_class_q(1, 512, 16), 16);
    ASSERT_EQ(tt__splitkv_class_q(16, 2, 16), 1);
    ASSERT_EQ(tt__splitkv_class_q(32, 2, 16), 0); /* one token is past the class */
    ASSERT_EQ(tt__splitkv_class_q(4, 256, 0), 0); /* switched off */
    /* each sequence in exactly one class's launch */
    for (int lq = 0; lq <= 40; lq++)
        ASSERT_EQ(tt_skv_class_takes(0, 4, lq) + tt_skv_class_takes(5, 0, lq), 1);
    ASSERT(tt_skv_class_takes(0, 0, 5000));
    tt__device_limits d;
    ASSERT_OK(tt__device_limits_nominal(90, &d));
    tt_config small, big;
    ASSERT_OK(tt__splitkv_default(tt__splitkv_rows(4, 4), 8192, 128, &d, 0, 0, &small));
    ASSERT_OK(tt__splitkv_default(tt__splitkv_rows(256, 4), 8192, 128, &d, 0, 0, &big));
    ASSERT(small.block_m < big.block_m);
}

TEST(prefill_keys_leave_splitkv_out) {
    tt__device_limits d;
    ASSERT_OK(tt__device_limits_nominal(90, &d));
    const int64_t qk[4][2] = {{4096, 4096}, {512, 1024}, {1, 4096}, {512, 8192}};
    for (int i = 0; i < 4; i++) {
        tt_key k;
        memset(&k, 0, sizeof k);
        k.head_dim = 128;
        k.dtype = TT_DTYPE_BF16;
        k.seqlen_q = qk[i][0];
        k.seqlen_k = qk[i][1];
        tt__space_entry *e = NULL;
        size_t n = 0, split = 0;
        ASSERT_OK(tt__space_enumerate(&k, &d, 0, NULL, 1, &e, &n, NULL, 0));
        for (size_t j = 0; j < n; j++) split += e[j].variant.config.family == TT_FAMILY_SPLITKV;
        free(e);
        if (i < 2) ASSERT_EQ(split, 0);
        else ASSERT(split > 0);
    }
}

/* The packed rows are seqlen_q x the GQA group: speculative decode of 4
 * tokens at group 8 is 32 rows, so its tiles are 32 and 16 rows. */
TEST(space_tiles_follow_the_packed_rows) {
    tt__device_limits d;
    ASSERT_OK(tt__device_limits_nominal(90, &d));
    tt_key k;
    memset(&k, 0, sizeof k);
    k.head_dim = 128;
    k.dtype = TT_DTYPE_BF16;
    k.seqlen_q = 4;
    k.seqlen_k = 4096;
    tt__space_entry *e = NULL;
    size_t n = 0;
    int seen[129] = {0};
    ASSERT_OK(tt__space_enumerate_group(&k, 8, &d, 0, NULL, 1, &e, &n, NULL, 0));
    for (size_t i = 0; i < n; i++)
        if (e[i].variant.config.family == TT_FAMILY_SPLITKV) seen[e[i].variant.config.block_m]++;
    free(e);
    ASSERT(seen[32] > 0 && seen[16] > 0);
    ASSERT_EQ(seen[64] + seen[128], 0);
    /* group 1: 4 rows, the 16-row tile only */
    memset(seen, 0, sizeof seen);
    ASSERT_OK(tt__space_enumerate_group(&k, 1, &d, 0, NULL, 1, &e, &n, NULL, 0));
    for (size_t i = 0; i < n; i++)
        if (e[i].variant.config.family == TT_FAMILY_SPLITKV) seen[e[i].variant.config.block_m]++;
    free(e);
    ASSERT(seen[16] > 0);
    ASSERT_EQ(seen[32] + seen[64] + seen[128], 0);
}

/* The tuner times the built-in default: on sm_90 the default of every key
 * of the inference grid is one of its space's candidates (a default outside
 * the space is a schedule no tune ever compares against its winner; head
 * dims 32 and 64 past 16 rows took Q from shared memory where the space
 * holds Q in registers only). */
TEST(every_inference_grid_default_is_in_its_space) {
    tt__device_limits d;
    ASSERT_OK(tt__device_limits_nominal(90, &d));
    static tt_key_v2 keys[1024];
    const size_t nk = tt__inference_grid(keys, 1024);
    ASSERT(nk > 400 && nk < 1024);
    int missing = 0;
    char err[256];
    /* the key's own default, and a call that fills the GPU (a chunk's
     * dense default) */
    for (size_t x = 0; x < 2 * nk; x++) {
        tt_config def;
        const size_t i = x % nk;
        const int64_t batch = x < nk ? 0 : 8;
        ASSERT_OK(tt__sdpa_device_default_at(&keys[i], &d, batch, 32, &def, err, sizeof err));
        tt_key k1;
        tt__key_to_v1(&keys[i], &k1);
        tt__space_entry *e = NULL;
        size_t n = 0;
        ASSERT_OK(tt__space_enumerate_group(&k1, keys[i].group, &d, 0, NULL, 1, &e, &n, err, sizeof err));
        int found = 0;
        for (size_t j = 0; j < n && !found; j++) {
            const tt_config *c = &e[j].variant.config;
            found = c->family == def.family && c->block_m == def.block_m && c->block_n == def.block_n &&
                    c->warps == def.warps && c->stages == def.stages && c->layout == def.layout &&
                    c->q_in_regs == def.q_in_regs && c->split_ctas == def.split_ctas;
        }
        free(e);
        if (!found) {
            char text[TT_CONFIG_TEXT_MAX];
            tt_config_format(&def, text, sizeof text);
            if (missing++ < 8)
                printf("not in the space: d%d Lq %lld Lk %lld group %d batch %lld: %s\n",
                       (int)keys[i].head_dim, (long long)keys[i].seqlen_q, (long long)keys[i].seqlen_k,
                       (int)keys[i].group, (long long)batch, text);
        }
    }
    ASSERT_EQ(missing, 0);
}

static tt_config default_at(int arch, int32_t d, int64_t lq, int64_t lk, int32_t group, int64_t batch,
                            int64_t heads_q) {
    tt__device_limits lim;
    tt_key_v2 k;
    tt_config c;
    memset(&k, 0, sizeof k);
    memset(&c, 0, sizeof c);
    k.head_dim = d;
    k.dtype = TT_DTYPE_BF16;
    k.causal = TT_CAUSAL_BOTTOM_RIGHT;
    k.seqlen_q = lq;
    k.seqlen_k = lk;
    k.group = group;
    if (tt__device_limits_nominal(arch, &lim) < 0 ||
        tt__sdpa_device_default_at(&k, &lim, batch, heads_q, &c, NULL, 0) < 0)
        c.family = -1;
    return c;
}

/* A chunk's default follows the call's batch: splitkv while one query
 * head's 64-row blocks leave SMs idle, the dense chunk rows once they fill
 * the GPU (132 SMs); decode and other archs keep splitkv. */
TEST(chunk_default_follows_the_batch) {
    tt_config c = default_at(90, 128, 64, 4096, 4, 1, 32); /* 32 CTAs */
    ASSERT_EQ(c.family, TT_FAMILY_SPLITKV);
    c = default_at(90, 128, 64, 4096, 4, 2, 32); /* 64 */
    ASSERT_EQ(c.family, TT_FAMILY_SPLITKV);
    c = default_at(90, 128, 64, 4096, 4, 4, 32); /* 128: three SMs in four and more */
    ASSERT_EQ(c.family, TT_FAMILY_WGMMA);
    c = default_at(90, 128, 64, 4096, 4, 8, 32); /* 256 */
    ASSERT_EQ(c.family, TT_FAMILY_WGMMA);
    ASSERT(c.block_m == 64 && c.block_n == 64);
    c = default_at(90, 64, 64, 4096, 8, 8, 32);
    ASSERT_EQ(c.family, TT_FAMILY_WGMMA);
    ASSERT(c.block_m == 64 && c.block_n == 128);
    /* d128 chunks in one wave (at most a CTA an SM) take longer K/V
     * steps; a second wave's worth of CTAs keeps the two-an-SM tile */
    c = default_at(90, 128, 64, 16384, 4, 4, 32); /* 128 CTAs */
    ASSERT(c.family == TT_FAMILY_WGMMA && c.block_m == 64 && c.block_n == 192);
    c = default_at(90, 128, 64, 4096, 4, 4, 32);
    ASSERT(c.family == TT_FAMILY_WGMMA && c.block_m == 64 && c.block_n == 128);
    c = default_at(90, 128, 64, 16384, 8, 8, 32); /* 256 CTAs */
    ASSERT(c.family == TT_FAMILY_WGMMA && c.block_m == 64 && c.block_n == 64);
    c = default_at(90, 128, 64, 32768, 8, 4, 32); /* the long-cache row either way */
    ASSERT(c.family == TT_FAMILY_WGMMA && c.block_n == 192);
    c = default_at(90, 128, 64, 4096, 4, 0, 0); /* unknown: the key's default */
    ASSERT_EQ(c.family, TT_FAMILY_SPLITKV);
    /* d64 in one wave: the dense rows up to 16k keys, past them splitkv's
     * 128-row tile (a K/V read once a group); two waves stay dense */
    c = default_at(90, 64, 64, 32768, 4, 4, 32); /* 128 CTAs */
    ASSERT(c.family == TT_FAMILY_SPLITKV && c.block_m == 128 && c.block_n == 64 && c.warps == 4 &&
           c.stages == 2 && c.q_in_regs == 1);
    c = default_at(90, 64, 64, 16384, 4, 4, 32);
    ASSERT(c.family == TT_FAMILY_WGMMA && c.block_m == 64 && c.block_n == 192);
    c = default_at(90, 64, 64, 4096, 4, 4, 32);
    ASSERT(c.family == TT_FAMILY_WGMMA && c.block_m == 64 && c.block_n == 128);
    c = default_at(90, 64, 64, 32768, 4, 8, 32); /* 256 CTAs */
    ASSERT(c.family == TT_FAMILY_WGMMA && c.block_m == 64 && c.block_n == 192);
    c = default_at(90, 128, 512, 32768, 1, 1, 32); /* 8 blocks x 32 heads */
    ASSERT_EQ(c.family, TT_FAMILY_WS);
    c = default_at(90, 64, 512, 16384, 1, 2, 32); /* d64: the persistent 128x176 */
    ASSERT(c.family == TT_FAMILY_WS && c.block_m == 128 && c.block_n == 176);
    c = default_at(90, 64, 512, 131072, 8, 0, 0); /* past splitkv's rows, whatever the batch */
    ASSERT(c.family == TT_FAMILY_WS && c.block_m == 128 && c.block_n == 176);
    c = default_at(90, 128, 1, 32768, 4, 64, 32); /* decode */
    ASSERT_EQ(c.family, TT_FAMILY_SPLITKV);
    /* one token a row over 1024 keys: nothing to split, no group to pack */
    c = default_at(90, 128, 4, 1024, 1, 8, 32);
    ASSERT_EQ(c.family, TT_FAMILY_WGMMA);
    c = default_at(90, 128, 4, 4096, 1, 8, 32);
    ASSERT_EQ(c.family, TT_FAMILY_SPLITKV);
    c = default_at(90, 128, 4, 1024, 4, 8, 32);
    ASSERT_EQ(c.family, TT_FAMILY_SPLITKV);
    c = default_at(80, 128, 64, 4096, 4, 8, 32);
    ASSERT_EQ(c.family, TT_FAMILY_SPLITKV);
}

/* Decode over few keys (the inference grid's winners at 1024 keys): the
 * 32-row class takes the 16-row tile with 8 warps, in tt_sdpa_fwd and in
 * the KV-cache default alike; 16 tokens of a group go dense once the call
 * fills the GPU. Past 1024 keys the rows by packed rows stay. */
TEST(decode_over_few_keys) {
    tt_config c = default_at(90, 128, 8, 1024, 4, 8, 32); /* 32 rows */
    ASSERT(c.family == TT_FAMILY_SPLITKV && c.block_m == 16 && c.block_n == 128 && c.warps == 8);
    c = default_at(90, 64, 4, 1024, 8, 1, 32);
    ASSERT(c.family == TT_FAMILY_SPLITKV && c.block_m == 16 && c.block_n == 128 && c.warps == 8);
    c = default_at(90, 128, 8, 4096, 4, 1, 32); /* past the few keys (batch 8: by units, below) */
    ASSERT(c.family == TT_FAMILY_SPLITKV && c.block_m == 32);
    c = default_at(80, 128, 8, 1024, 4, 8, 32); /* sm_90's rows only */
    ASSERT(c.family == TT_FAMILY_SPLITKV && c.block_m == 32);
    tt_config k;
    ASSERT_OK(tt__splitkv_default(32, 1024, 128, NULL, 0, 0, &k));
    ASSERT(k.block_m == 16 && k.warps == 8);
    ASSERT_OK(tt__splitkv_default(32, 4096, 128, NULL, 0, 0, &k));
    ASSERT_EQ(k.block_m, 32);
    /* the d128 16-row class (one token of group 16) keeps 64-key tiles
     * over few keys, 128-key ones with 8 warps past them; d64's has no
     * short row and keeps its own */
    ASSERT_OK(tt__splitkv_default(16, 1024, 128, NULL, 0, 0, &k));
    ASSERT(k.block_m == 16 && k.block_n == 64 && k.warps == 4);
    ASSERT_OK(tt__splitkv_default(16, 4096, 128, NULL, 0, 0, &k));
    ASSERT(k.block_m == 16 && k.block_n == 128 && k.warps == 8);
    ASSERT_OK(tt__splitkv_default(12, 1024, 64, NULL, 0, 0, &k));
    ASSERT(k.block_m == 16 && k.block_n == 128 && k.warps == 4 && k.stages == 3);
    c = default_at(90, 128, 2, 1024, 8, 8, 32);
    ASSERT(c.family == TT_FAMILY_SPLITKV && c.block_n == 64 && c.warps == 4);
    /* 16 tokens of group 4: 512 CTAs fill the GPU, 32 do not; at batch 8
     * (64 units, under half a wave) the 32-row tile by units */
    c = default_at(90, 128, 16, 1024, 4, 16, 32);
    ASSERT(c.family == TT_FAMILY_WGMMA && c.block_m == 64 && c.block_n == 64);
    c = default_at(90, 128, 16, 1024, 4, 8, 32);
    ASSERT(c.family == TT_FAMILY_SPLITKV && c.block_m == 32 && c.block_n == 128);
    c = default_at(90, 64, 16, 1024, 4, 8, 32);
    ASSERT(c.family == TT_FAMILY_SPLITKV && c.block_m == 32 && c.block_n == 128 && c.stages == 4);
    c = default_at(90, 64, 16, 1024, 8, 8, 32);
    ASSERT(c.family == TT_FAMILY_WGMMA && c.block_n == 128);
    c = default_at(90, 128, 16, 1024, 4, 1, 32);
    ASSERT_EQ(c.family, TT_FAMILY_SPLITKV);
    c = default_at(90, 128, 16, 4096, 4, 8, 32);
    ASSERT_EQ(c.family, TT_FAMILY_SPLITKV);
    c = default_at(90, 128, 8, 1024, 4, 8, 32); /* 8 tokens of a group stay on splitkv */
    ASSERT_EQ(c.family, TT_FAMILY_SPLITKV);
}

/* Decode of the 16-row class on sm_90 by the call's (batch, K/V head)
 * units: with more than the 132 SMs the tile that fits several CTAs an SM
 * runs (d64 3 stages; d128 64-key tiles with 2 stages, three CTAs an SM,
 * at 1.1-1.85 waves, 146-244 units; elsewhere and over a paged cache 3
 * stages, two an SM); with fewer the
 * one-CTA rows (9-16 packed rows at d128 with 8 warps). tt_sdpa_fwd's
 * default and the KV-cache one alike. */
TEST(decode_default_follows_the_units) {
#define IS(c, bn, st)                                                                                       \
    ASSERT((c).family == TT_FAMILY_SPLITKV && (c).block_m == 16 && (c).block_n == (bn) && (c).warps == 4 && \
           (c).stages == (st) && (c).split_ctas == 0)
    IS(default_at(90, 128, 1, 4096, 4, 8, 32), 128, 3);  /* 64 units */
    IS(default_at(90, 128, 1, 4096, 4, 66, 32), 64, 3);  /* 528 */
    IS(default_at(90, 128, 1, 4096, 8, 33, 32), 128, 3); /* 132: one wave exactly */
    IS(default_at(90, 128, 1, 4096, 8, 34, 32), 64, 3);  /* 136 */
    IS(default_at(90, 128, 1, 4096, 1, 145, 1), 64, 3);  /* 145: under 1.1 waves */
    IS(default_at(90, 128, 1, 4096, 1, 146, 1), 64, 2);  /* 146 */
    IS(default_at(90, 128, 1, 4096, 4, 20, 32), 64, 2);  /* 160 */
    IS(default_at(90, 128, 1, 4096, 4, 24, 32), 64, 2);  /* 192 */
    IS(default_at(90, 128, 1, 4096, 4, 28, 32), 64, 2);  /* 224 */
    IS(default_at(90, 128, 1, 4096, 4, 30, 32), 64, 2);  /* 240 */
    IS(default_at(90, 128, 1, 4096, 1, 244, 1), 64, 2);  /* 244: 1.85 waves */
    IS(default_at(90, 128, 1, 4096, 1, 245, 1), 64, 3);  /* 245 */
    IS(default_at(90, 128, 1, 4096, 4, 32, 32), 64, 3);  /* 256 */
    IS(default_at(90, 128, 1, 4096, 4, 33, 32), 64, 3);  /* 264: two waves exactly */
    IS(default_at(90, 128, 1, 4096, 4, 64, 32), 64, 3);  /* 512 */
    IS(default_at(90, 128, 1, 4096, 4, 0, 0), 128, 3);   /* unknown: the key's row */
    /* A quarter wave of units or less (33 on 132 SMs), one token of
     * group 4, over 1024 keys or more and at most 1024 a split (2048 up
     * to 16 units): the 64-key tile, a split a CTA an SM */
#define FEW(c)                                                                                            \
    ASSERT((c).family == TT_FAMILY_SPLITKV && (c).block_m == 16 && (c).block_n == 64 && (c).warps == 4 && \
           (c).stages == 3 && (c).split_ctas == 1)
    FEW(default_at(90, 128, 1, 2048, 4, 1, 32));         /* 8 units */
    FEW(default_at(90, 128, 1, 32768, 4, 1, 32));        /* 1986 keys a split */
    FEW(default_at(90, 128, 1, 16384, 4, 2, 32));        /* 16 units, 1986 keys a split */
    FEW(default_at(90, 128, 1, 4096, 4, 4, 32));         /* 32 units, 993 keys a split */
    FEW(default_at(90, 128, 1, 4096, 4, 4, 33));         /* 33 units: a quarter of 132 SMs */
    IS(default_at(90, 128, 1, 65536, 4, 1, 32), 128, 3); /* 3972 keys a split */
    IS(default_at(90, 128, 1, 8192, 4, 4, 32), 128, 3);  /* 32 units, 1986 keys a split */
    IS(default_at(90, 128, 1, 32768, 4, 2, 32), 128, 3); /* 16 units, 3972 keys a split */
    IS(default_at(90, 128, 1, 4096, 4, 5, 32), 128, 3);  /* 40 units */
    FEW(default_at(90, 128, 1, 1024, 4, 1, 32));
    IS(default_at(90, 128, 1, 1023, 4, 1, 32), 128, 3); /* under 1024 keys: not timed, the row */
    IS(default_at(90, 128, 2, 4096, 4, 1, 32), 128, 3); /* 8 packed rows: not timed */
    IS(default_at(90, 64, 1, 4096, 4, 1, 32), 128, 3);  /* d64 */
    /* d32 and d64: the 128-key tile, 3 stages, at any batch */
    IS(default_at(90, 32, 1, 32768, 4, 8, 32), 128, 3);
    IS(default_at(90, 32, 1, 32768, 4, 64, 32), 128, 3);
    IS(default_at(90, 64, 1, 4096, 4, 8, 32), 128, 3);
    IS(default_at(90, 64, 1, 4096, 4, 66, 32), 128, 3);
    /* 9-16 packed rows at d128: the 128-key tile with 8 warps up to a
     * wave, the wide row past it; 8 rows keep 4 warps */
    const int64_t rows16[][4] = {/* seqlen_q, seqlen_k, group, batch */
                                 {2, 4096, 8, 1},
                                 {16, 16384, 1, 1},
                                 {16, 4096, 1, 3},
                                 {16, 4096, 1, 4},
                                 {4, 4096, 4, 16}};
    for (size_t i = 0; i < sizeof rows16 / sizeof rows16[0]; i++) {
        const tt_config w = default_at(90, 128, rows16[i][0], rows16[i][1], rows16[i][2], rows16[i][3], 32);
        ASSERT(w.family == TT_FAMILY_SPLITKV && w.block_m == 16 && w.block_n == 128 && w.warps == 8 &&
               w.stages == 3 && w.split_ctas == 0);
    }
    IS(default_at(90, 128, 16, 4096, 1, 5, 32), 64, 2); /* 160 units */
    IS(default_at(90, 128, 8, 4096, 1, 1, 32), 128, 3);
    IS(default_at(90, 64, 2, 4096, 8, 1, 32), 128, 3);
    /* 17-64 packed rows over more than 1024 keys of a contiguous cache,
     * fewer units than half a wave (66 on 132 SMs): the tile a size down,
     * two query blocks a unit. d128 32 rows: 16x128 with 4 warps at a
     * quarter to half a wave (34-66 units), 8 warps at an eighth to a
     * quarter (17-33); d64 32 rows: 16x128 with 8 warps and 4 stages at a
     * sixteenth to half a wave (9-66); 64 rows at a quarter to half a
     * wave: d128 32x128, and over at most 1024 keys d64 32x128 with 4
     * stages. Elsewhere the row by packed rows. */
#define SPEC(c, bm, w, st, q)                                                              \
    ASSERT((c).family == TT_FAMILY_SPLITKV && (c).block_m == (bm) && (c).block_n == 128 && \
           (c).warps == (w) && (c).stages == (st) && (c).q_in_regs == (q) && (c).split_ctas == 0)
    SPEC(default_at(90, 128, 8, 4096, 4, 8, 32), 16, 4, 3, 1);   /* 8 tokens of group 4, 64 units */
    SPEC(default_at(90, 128, 4, 32768, 8, 16, 32), 16, 4, 3, 1); /* 4 of group 8, 64 units */
    SPEC(default_at(90, 128, 8, 8192, 4, 5, 32), 16, 4, 3, 1);   /* 40 units */
    SPEC(default_at(90, 128, 8, 1025, 4, 8, 32), 16, 4, 3, 1);
    SPEC(default_at(90, 128, 8, 4096, 4, 33, 8), 16, 4, 3, 1);   /* 66 units: half a wave */
    SPEC(default_at(90, 128, 4, 4096, 8, 8, 32), 16, 8, 3, 1);   /* 4 of group 8 at batch 8: 32 units */
    SPEC(default_at(90, 128, 8, 4096, 4, 4, 32), 16, 8, 3, 1);   /* 32 units */
    SPEC(default_at(90, 128, 8, 4096, 4, 33, 4), 16, 8, 3, 1);   /* 33: a quarter wave */
    SPEC(default_at(90, 128, 8, 4096, 4, 17, 4), 16, 8, 3, 1);   /* 17: past an eighth */
    SPEC(default_at(90, 64, 8, 4096, 4, 8, 32), 16, 8, 4, 1);    /* d64, 64 units */
    SPEC(default_at(90, 64, 4, 32768, 8, 8, 32), 16, 8, 4, 1);   /* d64, 32 units */
    SPEC(default_at(90, 64, 8, 4096, 4, 9, 4), 16, 8, 4, 1);     /* d64, 9 units: past a sixteenth */
    SPEC(default_at(90, 128, 16, 4096, 4, 8, 32), 32, 4, 3, 0);  /* 16 tokens of group 4, 64 units */
    SPEC(default_at(90, 128, 8, 16384, 8, 10, 32), 32, 4, 3, 0); /* 8 of group 8, 40 units */
    tt_config c = default_at(90, 128, 8, 4096, 4, 66, 32);       /* 528 units */
    ASSERT_EQ(c.block_m, 32);
    ASSERT_EQ(default_at(90, 128, 8, 4096, 4, 9, 32).block_m, 32);  /* 72: past half a wave */
    ASSERT_EQ(default_at(90, 128, 8, 4096, 4, 2, 32).block_m, 32);  /* 16: an eighth or less */
    ASSERT_EQ(default_at(90, 128, 8, 1024, 4, 8, 32).warps, 8);     /* 1024 keys: the short cache's row */
    ASSERT_EQ(default_at(90, 64, 8, 4096, 4, 1, 32).block_m, 32);   /* d64, 8 units */
    ASSERT_EQ(default_at(90, 64, 8, 4096, 4, 9, 32).block_m, 32);   /* d64, 72 units */
    ASSERT_EQ(default_at(90, 128, 16, 4096, 4, 4, 32).block_m, 64); /* 64 rows, 32 units */
    ASSERT_EQ(default_at(90, 128, 16, 4096, 4, 9, 32).block_m, 64); /* 64 rows, 72 units */
    SPEC(default_at(90, 128, 16, 1024, 4, 8, 32), 32, 4, 3, 0);     /* over few keys too */
    SPEC(default_at(90, 64, 16, 1024, 4, 8, 32), 32, 4, 4, 1);      /* d64 64 rows over few keys */
    ASSERT_EQ(default_at(90, 64, 16, 4096, 4, 8, 32).block_m, 64);  /* d64 64 rows past them: not timed */
    ASSERT_EQ(default_at(90, 128, 64, 4096, 4, 8, 32).family, TT_FAMILY_WGMMA); /* 256 rows: dense */
    ASSERT_OK(tt__splitkv_default(32, 4096, 128, NULL, 64, 0, &c));
    SPEC(c, 16, 4, 3, 1);
    ASSERT_OK(tt__splitkv_default(32, 4096, 128, NULL, 64, 1, &c)); /* paged: not timed, the row */
    ASSERT_EQ(c.block_m, 32);
    ASSERT_OK(tt__splitkv_default(64, 4096, 128, NULL, 64, 0, &c));
    SPEC(c, 32, 4, 3, 0);
#undef SPEC
    /* other archs keep their rows */
    c = default_at(80, 128, 1, 4096, 4, 66, 32);
    ASSERT(c.family == TT_FAMILY_SPLITKV && c.block_n == 64 && c.stages == 2 && c.split_ctas == 2);
    /* the KV-cache and varlen default: units are batch x K/V heads */
    tt_config k;
    ASSERT_OK(tt__splitkv_default(4, 4096, 128, NULL, 64, 0, &k));
    IS(k, 128, 3);
    ASSERT_OK(tt__splitkv_default(4, 4096, 128, NULL, 528, 0, &k));
    IS(k, 64, 3);
    ASSERT_OK(tt__splitkv_default(4, 4096, 128, NULL, 192, 0, &k));
    IS(k, 64, 2);
    ASSERT_OK(tt__splitkv_default(4, 4096, 128, NULL, 528, 1, &k)); /* paged */
    IS(k, 64, 3);
    ASSERT_OK(tt__splitkv_default(4, 4096, 128, NULL, 256, 0, &k));
    IS(k, 64, 3);
    ASSERT_OK(tt__splitkv_default(4, 4096, 64, NULL, 528, 0, &k));
    IS(k, 128, 3);
    ASSERT_OK(tt__splitkv_default(4, 4096, 128, NULL, 8, 0, &k));
    FEW(k);
    ASSERT_OK(tt__splitkv_default(4, 4096, 128, NULL, 8, 1, &k)); /* paged: not timed, the row */
    IS(k, 128, 3);
    tt__device_limits a80;
    ASSERT_OK(tt__device_limits_nominal(80, &a80));
    ASSERT_OK(tt__splitkv_default(4, 4096, 128, &a80, 528, 0, &k));
    ASSERT(k.block_n == 64 && k.stages == 2 && k.split_ctas == 2);
#undef FEW
#undef IS
}

/* A 64-token chunk that fills the GPU over a long cache takes 192-key
 * tiles (the inference grid's winners: d64 from 16k keys, d128 at 32k),
 * shorter caches the 128- (d64) and 64-key (d128) tiles. */
TEST(long_cache_chunk_takes_longer_key_tiles) {
    const struct {
        int d, lk, bn;
    } rows[] = {{64, 1024, 128}, {64, 4096, 128},  {64, 16384, 192},  {64, 131072, 192},
                {128, 4096, 64}, {128, 16384, 64}, {128, 32768, 192}, {128, 131072, 192}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const tt_config c = default_at(90, rows[i].d, 64, rows[i].lk, 8, 8, 32);
        ASSERT_EQ(c.family, TT_FAMILY_WGMMA);
        ASSERT_EQ(c.block_m, 64);
        ASSERT_EQ(c.block_n, rows[i].bn);
    }
}

TEST(space_is_legal_and_sized) {
    tt__device_limits d;
    ASSERT_OK(tt__device_limits_nominal(90, &d));
    size_t n = 0;
    tt__space_entry *e = splitkv_space(4, 90, &n);
    ASSERT(e);
    ASSERT(n >= 12 && n <= 72);
    for (size_t i = 0; i < n; i++) {
        ASSERT_OK(tt__variant_check(&e[i].variant.config, 128, &d, NULL, 0));
        ASSERT_EQ(e[i].variant.config.block_m, 16);
    }
    free(e);
    const int64_t rows[4] = {4, 32, 64, 2048};
    for (int i = 0; i < 4; i++) {
        e = splitkv_space(rows[i], 90, &n);
        ASSERT(e && n > 0);
        printf("d128 rows %lld: %zu variants on sm_90\n", (long long)rows[i], n);
        free(e);
    }
}

/* Every variant of the spaces of decode, speculative and chunked-prefill
 * rows compiles for sm_90 (and decode's for sm_80) with no spill and no
 * stack, as the program for a contiguous KV cache and for paged ones of
 * the smallest and the largest of the usual page sizes (16 tokens: one or
 * two copy passes a page, the page lookups batched; 256: a lookup a page
 * ahead): the one kernel source, the family's mainloop by TT_MAINLOOP. */
TEST(every_space_variant_compiles_clean) {
    char err[2048];
    const int arch[2] = {80, 90};
    const int64_t rows[3] = {4, 32, 2048};
    int compiled = 0;
    for (int a = 0; a < 2; a++) {
        for (int r = 0; r < 3; r++) {
            if (arch[a] == 80 && r > 0) break;
            size_t n = 0;
            tt__space_entry *e = splitkv_space(rows[r], arch[a], &n);
            ASSERT(e);
            for (size_t i = 0; i < n; i++) {
                const tt_config *c = &e[i].variant.config;
                if (c->split_ctas != 0) continue; /* host-only knob: same program */
                static const int32_t pages[3] = {0, 16, 256};
                for (int pi = 0; pi < 3; pi++) {
                    const int32_t page = pages[pi];
                    tt__variant v = e[i].variant;
                    v.page_size = page;
                    tt__cubin *cb = NULL;
                    if (tt__jit_compile(NULL, &v, &cb, err, sizeof err) < 0) TT_FAIL_AT("compile: %s", err);
                    if (!tt__report_clean(&cb->report))
                        TT_FAIL_AT("sm_%d bm %d bn %d w %d st %d page %d: %d B spilled, %d B stack", arch[a],
                                   (int)c->block_m, (int)c->block_n, (int)c->warps, (int)c->stages, (int)page,
                                   (int)cb->report.spill_stores, (int)cb->report.stack_frame);
                    tt__cubin_free(cb);
                    compiled++;
                }
            }
            free(e);
        }
    }
    ASSERT(compiled > 10);
}

/* Registers a thread of the d128 16x64 4-warp tile with `stages` takes on
 * sm_90 under mask `causal`, in the program for a paged KV cache of
 * `page`-token pages or (0) a contiguous one; *clean: no spill, no stack. */
static int d128_16x64_registers(int stages, int32_t causal, int32_t page, int *clean) {
    char err[2048];
    tt__variant v;
    memset(&v, 0, sizeof v);
    v.config = skv(16, 64, 4, stages, 1, 0);
    v.head_dim = 128;
    v.dtype = TT_DTYPE_BF16;
    v.causal = causal;
    v.arch = 90;
    v.page_size = page;
    tt__cubin *cb = NULL;
    if (tt__jit_compile(NULL, &v, &cb, err, sizeof err) < 0) {
        fprintf(stderr, "compile: %s\n", err);
        return -1;
    }
    const int regs = cb->report.registers;
    *clean = tt__report_clean(&cb->report);
    tt__cubin_free(cb);
    return regs;
}

/* The d128 16-row 2-stage tile (69,632 bytes) is built for the three CTAs
 * an SM its shared memory fits on sm_90: at most 168 registers a thread,
 * no spill (ptxas alone gave it 193, two an SM), in the programs for both
 * kinds of KV cache and each way of looking pages up. Its 3-stage form,
 * two an SM by shared memory, is not held to that. */
TEST(d128_two_stage_tile_fits_three_ctas_an_sm) {
    int clean = 0;
    /* contiguous; pages of one row (a lookup a pass), 16 (two passes a
     * page, lookups batched), 256 (a lookup a page ahead) */
    static const int32_t pages[4] = {0, 1, 16, 256};
    for (int pi = 0; pi < 4; pi++)
        for (int32_t causal = 0; causal <= 2; causal++) {
            const int regs = d128_16x64_registers(2, causal, pages[pi], &clean);
            if (regs < 0 || regs > 168 || !clean)
                TT_FAIL_AT("causal %d page %d: %d registers, clean %d", (int)causal, (int)pages[pi], regs,
                           clean);
            /* three CTAs of 128 threads at 168 (granules of 8) fill the 64 K */
            ASSERT(3 * 128 * ((regs + 7) / 8 * 8) <= 65536);
        }
    /* the 3-stage form (two an SM by shared memory) is not held to it,
     * and needs no more than ptxas gives it */
    ASSERT(d128_16x64_registers(3, 0, 0, &clean) > 0 && clean);
}

/* The sm_90 variant of the decode default, one token of group 4 over 4k keys. */
static tt__variant decode_variant(void) {
    tt__variant v;
    memset(&v, 0, sizeof v);
    tt__splitkv_default(4, 4096, 128, NULL, 0, 0, &v.config);
    v.head_dim = 128;
    v.arch = 90;
    return v;
}

/* The split target is read by the launch only: the JIT passes no macro for
 * it, so the three values are one program (one cubin cache entry). */
TEST(split_target_is_not_compiled_in) {
    tt__variant v = decode_variant();
    char a[512], b[512];
    ASSERT(tt__jit_macros(&v, a, sizeof a) > 0);
    ASSERT(strstr(a, "TT_SPLIT_CTAS") == NULL);
    ASSERT_CONTAINS(a, "TT_MAINLOOP=\"splitkv/mainloop.cuh\"");
    v.config.split_ctas = 4;
    ASSERT(tt__jit_macros(&v, b, sizeof b) > 0);
    ASSERT_STREQ(a, b);
    /* another family still gets every knob it has */
    v.config.family = TT_FAMILY_MMA;
    v.config.split_ctas = 0;
    ASSERT(tt__jit_macros(&v, a, sizeof a) > 0);
    ASSERT_CONTAINS(a, "TT_SPLIT_CTAS=0");
}

/* Runs start scattered only on the memory bus they were measured faster
 * on (the H200's six stacks); the H100's five and an unknown bus walk from
 * the start, and the A/B switch overrides the device either way. */
TEST(run_order_follows_the_memory_bus) {
    tt__device_limits h200 = {90, 227 * 1024, 132, 6144}, h100 = {90, 227 * 1024, 132, 5120};
    tt__device_limits unknown = {90, 227 * 1024, 132, 0};
    ASSERT(tt__splitkv_rotates(&h200, -1) == 1);
    ASSERT(tt__splitkv_rotates(&h100, -1) == 0);
    ASSERT(tt__splitkv_rotates(&unknown, -1) == 0);
    ASSERT(tt__splitkv_rotates(NULL, -1) == 0);
    ASSERT(tt__splitkv_rotates(&h200, 0) == 0);
    ASSERT(tt__splitkv_rotates(&h100, 1) == 1);
    /* the nominal limits (no device) know no bus: no scattered starts */
    tt__device_limits nominal;
    ASSERT(tt__device_limits_nominal(90, &nominal) == 0);
    ASSERT(nominal.mem_bus_bits == 0 && tt__splitkv_rotates(&nominal, -1) == 0);
}

/* A contiguous KV cache and each page size of a paged one are programs of
 * their own (their own cubins), the page size compiled in; only family
 * splitkv has paged programs, and a page size that is not a power of two
 * in 1..2^20 has none. */
TEST(each_page_size_is_its_own_program) {
    tt__variant v = decode_variant();
    char a[512], b[512], c[512], err[256];
    ASSERT(tt__jit_macros(&v, a, sizeof a) > 0);
    ASSERT_CONTAINS(a, "-DTT_SKV_PAGED=0");
    ASSERT(strstr(a, "TT_SKV_PAGE_SHIFT") == NULL);
    v.page_size = 16;
    ASSERT(tt__jit_macros(&v, b, sizeof b) > 0);
    ASSERT_CONTAINS(b, "-DTT_SKV_PAGED=1 -DTT_SKV_PAGE_SHIFT=4");
    v.page_size = 1 << 20;
    ASSERT(tt__jit_macros(&v, c, sizeof c) > 0);
    ASSERT_CONTAINS(c, "-DTT_SKV_PAGE_SHIFT=20");
    v.page_size = 1;
    ASSERT(tt__jit_macros(&v, c, sizeof c) > 0);
    ASSERT_CONTAINS(c, "-DTT_SKV_PAGE_SHIFT=0");
    static const int32_t bad[4] = {24, -16, 1 << 21, 3};
    for (int i = 0; i < 4; i++) {
        v.page_size = bad[i];
        tt__cubin *cb = NULL;
        ASSERT_EQ(tt__jit_compile(NULL, &v, &cb, err, sizeof err), TT_ERR_INVAL);
        ASSERT_CONTAINS(err, "is not 0 (contiguous) or a power of two");
        ASSERT(cb == NULL);
    }
    v.page_size = 16;
    v.config.family = TT_FAMILY_MMA;
    tt__cubin *cb = NULL;
    ASSERT_EQ(tt__jit_compile(NULL, &v, &cb, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "only family splitkv");
    ASSERT(cb == NULL);
    /* the dense families' flags do not change */
    v.page_size = 0;
    ASSERT(tt__jit_macros(&v, a, sizeof a) > 0);
    ASSERT(strstr(a, "TT_SKV_PAGED") == NULL);
}

/* ---- the entry points' argument checks, before any GPU call ---------------- */

/* A paged cache at fake aligned addresses: [2, 1, 8, 128] q, pages of 16
 * of [16, 2, 128], a [2, 4] block table. */
static tt_sdpa_kvcache_args kv_good(void) {
    tt_sdpa_kvcache_args a;
    memset(&a, 0, sizeof a);
    a.q = (const void *)(uintptr_t)0x100000;
    a.k_cache = (const void *)(uintptr_t)0x200000;
    a.v_cache = (const void *)(uintptr_t)0x300000;
    a.o = (void *)(uintptr_t)0x400000;
    a.block_table = (const int32_t *)(uintptr_t)0x500000;
    a.batch = 2, a.heads_q = 8, a.heads_kv = 2, a.seqlen_q = 1, a.seqlen_k = 64, a.head_dim = 128;
    a.page_size = 16, a.num_pages = 8, a.max_pages = 4;
    const int64_t q[3] = {8 * 128, 128, 8 * 128}, kv[3] = {16 * 2 * 128, 128, 2 * 128};
    memcpy(a.q_stride, q, sizeof q);
    memcpy(a.o_stride, q, sizeof q);
    memcpy(a.k_stride, kv, sizeof kv);
    memcpy(a.v_stride, kv, sizeof kv);
    a.dtype = TT_DTYPE_BF16;
    a.causal = 2;
    return a;
}

static void kv_expect(const tt_sdpa_kvcache_args *a, int code, const char *needle) {
    char err[512] = "";
    int rc = tt_sdpa_fwd_kvcache(a, err, sizeof err);
    if (rc != code) TT_FAIL_AT("expected %d (%s), got %d: %s", code, needle, rc, err);
    ASSERT_CONTAINS(err, needle);
}

TEST(kvcache_refuses_bad_arguments) {
    kv_expect(NULL, TT_ERR_INVAL, "no arguments");
    tt_sdpa_kvcache_args a = kv_good();
    a.reserved[3] = 1;
    kv_expect(&a, TT_ERR_INVAL, "reserved");
    a = kv_good();
    a.head_dim = 96;
    kv_expect(&a, TT_ERR_UNSUPPORTED, "head_dim 96");
    a = kv_good();
    a.causal = 3;
    kv_expect(&a, TT_ERR_INVAL, "bottom-right");
    a = kv_good();
    a.page_size = 24;
    kv_expect(&a, TT_ERR_INVAL, "power of two");
    a = kv_good();
    a.seqlen_k = 65; /* 4 pages of 16 */
    kv_expect(&a, TT_ERR_INVAL, "max_pages x page_size");
    a = kv_good();
    a.block_table_stride = 3;
    kv_expect(&a, TT_ERR_INVAL, "block_table_stride");
    a = kv_good();
    a.block_table = NULL; /* page fields without a table */
    kv_expect(&a, TT_ERR_INVAL, "need a block_table");
    a = kv_good();
    a.heads_kv = 3;
    kv_expect(&a, TT_ERR_INVAL, "multiple");
    a = kv_good();
    a.k_stride[2] = 100;
    kv_expect(&a, TT_ERR_INVAL, "multiple of 8");
    a = kv_good();
    a.o_stride[1] = 0;
    kv_expect(&a, TT_ERR_INVAL, "overlap");
    a = kv_good();
    a.cache_seqlens = (const int32_t *)(uintptr_t)0x600002;
    kv_expect(&a, TT_ERR_INVAL, "cache_seqlens is not 4-byte aligned");
    a = kv_good();
    a.batch = 70000;
    kv_expect(&a, TT_ERR_RANGE, "batch");
    a = kv_good();
    a.scale = -1.f;
    kv_expect(&a, TT_ERR_INVAL, "scale");
}

TEST(varlen_refuses_bad_arguments) {
    tt_sdpa_varlen_args a;
    memset(&a, 0, sizeof a);
    a.q = (const void *)(uintptr_t)0x100000;
    a.k = (const void *)(uintptr_t)0x200000;
    a.v = (const void *)(uintptr_t)0x300000;
    a.o = (void *)(uintptr_t)0x400000;
    a.cu_seqlens_k = (const int32_t *)(uintptr_t)0x600000;
    a.batch = 3, a.heads_q = 8, a.heads_kv = 2, a.total_q = 10, a.total_k = 100;
    a.max_seqlen_q = 5, a.max_seqlen_k = 60, a.head_dim = 64;
    const int64_t q[2] = {64, 8 * 64}, kv[2] = {64, 2 * 64};
    memcpy(a.q_stride, q, sizeof q);
    memcpy(a.o_stride, q, sizeof q);
    memcpy(a.k_stride, kv, sizeof kv);
    memcpy(a.v_stride, kv, sizeof kv);
    a.dtype = TT_DTYPE_FP16;
    char err[512] = "";
    ASSERT_EQ(tt_sdpa_fwd_varlen(&a, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "cu_seqlens_q is NULL");
    a.cu_seqlens_q = (const int32_t *)(uintptr_t)0x500000;
    a.max_seqlen_q = 11;
    ASSERT_EQ(tt_sdpa_fwd_varlen(&a, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "more than total");
    a.max_seqlen_q = 5;
    a.lse = (float *)(uintptr_t)0x700000;
    a.lse_stride[0] = 10, a.lse_stride[1] = 0; /* rows of a head on one float */
    ASSERT_EQ(tt_sdpa_fwd_varlen(&a, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "overlap");
    size_t bytes = 0;
    a.lse_stride[1] = 1;
    a.head_dim = 256 + 8;
    ASSERT_EQ(tt_sdpa_fwd_varlen_workspace(&a, &bytes, err, sizeof err), TT_ERR_UNSUPPORTED);
}

TT_TEST_MAIN()
