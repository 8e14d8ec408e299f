/*
 * Family `splitkv` (sm_80+): inference shapes. Its device file is
 * splitkv/mainloop.cuh over its own contract splitkv/params.h; its launch
 * (splitkv/launch.c) is its own: the kernel takes its own parameters, the
 * split count comes from the SM count at launch and the partial results
 * are merged by the last split or by a second kernel. Here: the rules of
 * the mainloop's #errors mirrored, its registers and shared memory, the
 * built-in default, the space and the split count. No driver calls.
 */
#include <string.h>

#include "common/fail.h"
#include "common/key.h"
#include "kernels/family.h"
#include "kernels/splitkv/splitkv.h"

extern const char tt_splitkv_mainloop_source[];
extern const unsigned long tt_splitkv_mainloop_source_len;
extern const char tt_splitkv_params_header[];
extern const unsigned long tt_splitkv_params_header_len;

int tt__splitkv_head_dim_ok(int64_t d) { return d == 32 || d == 64 || d == 128 || d == 256; }

int64_t tt__splitkv_ring_smem(const tt_config *c, int32_t d, int64_t tiles_per_split) {
    const int64_t st = tiles_per_split >= 1 && tiles_per_split < c->stages ? tiles_per_split : c->stages;
    return TT_SPLITKV_SMEM_BYTES((int64_t)c->block_m, (int64_t)c->block_n, (int64_t)d, st, (int64_t)c->warps);
}

/* every stage's: the variant's own size */
static int64_t smem_bytes(const tt_config *c, int32_t d) { return tt__splitkv_ring_smem(c, d, 0); }

static int check(const tt_config *c, int32_t d, char *err, size_t errlen) {
    if (!tt__splitkv_head_dim_ok(d))
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen,
                        "family splitkv: head_dim %d is not 32, 64, 128 or 256", (int)d);
#define BAD(...) return tt__fail(TT_ERR_INVAL, err, errlen, "family splitkv: " __VA_ARGS__)
    const int bm = c->block_m, bn = c->block_n, w = c->warps;
    if (bm != 16 && bm != 32 && bm != 64 && bm != 128) BAD("block_m %d is not 16, 32, 64 or 128", bm);
    if (w < 1 || w > 8) BAD("warps %d is not 1..8", w);
    if (c->stages < 2 || c->stages > 4) BAD("stages %d is not 2..4", (int)c->stages);
    const int rw = TT_SKV_RW(bm, d), wm = bm / rw;
    if (w % wm != 0) BAD("warps %d is not a multiple of the %d row warps of block_m %d", w, wm, bm);
    const int wk = w / wm;
    if (bn % (16 * wk) != 0) BAD("block_n %d is not a multiple of 16 x %d key warps", bn, wk);
    const int nt = 32 * w, cpr = d / 8;
    if (nt % cpr != 0 || bn % (nt / cpr) != 0)
        BAD("block_n %d does not split into the %d threads' copies", bn, nt);
#undef BAD
    return 0;
}

/* S, O and Q fragments per thread (m tiles of a warp's rows, its share of
 * the keys). */
static int32_t registers(const tt_config *c, int32_t d) {
    const int rw = TT_SKV_RW(c->block_m, d), mt = rw / 16, wk = TT_SKV_WK(c->block_m, d, c->warps);
    const int wn = wk > 0 ? c->block_n / wk : c->block_n;
    return mt * (wn + d) / 2 + (c->q_in_regs ? mt * d / 4 : 0);
}

/* Over 160 fragment floats ptxas spills (seen: 2 m tiles x (64 + 128) / 2
 * = 192 spilled 52 bytes at 255 registers). */
static int32_t register_budget(const tt_config *c) {
    (void)c;
    return 160;
}

static int32_t threads(const tt_config *c) { return c->warps * 32; }

int64_t tt__splitkv_rows(int64_t seqlen_q, int64_t group) { return seqlen_q * group; }

int64_t tt__splitkv_class_q(int64_t group, int64_t keep_q, int64_t class_rows) {
    const int64_t q = group >= 1 && class_rows > 0 ? class_rows / group : 0;
    return q >= 1 && keep_q > q ? q : 0;
}

static void make(tt_config *c, int bm, int bn, int warps, int stages, int q_in_regs, int split_ctas) {
    memset(c, 0, sizeof *c);
    c->family = TT_FAMILY_SPLITKV;
    c->block_m = bm;
    c->block_n = bn;
    c->warps = warps;
    c->stages = stages;
    c->layout = TT_LAYOUT_PAD;
    c->q_in_regs = q_in_regs;
    c->split_ctas = split_ctas;
}

/* The smallest tile that holds `rows` packed rows, at most 128. */
static int tile_rows(int64_t rows) { return rows <= 16 ? 16 : rows <= 32 ? 32 : rows <= 64 ? 64 : 128; }

int tt__splitkv_default(int64_t rows, int64_t seqlen_k, int32_t d, const tt__device_limits *dev,
                        int64_t units, int paged, tt_config *out) {
    tt__device_limits nominal;
    if (!dev) {
        tt__device_limits_nominal(90, &nominal);
        dev = &nominal;
    }
    /* this arch's row for a call of more units than a wave, its row by
     * packed rows (src/common/defaults.c), else the portable one, else a
     * tile that fits any sm_80+ at every head dim */
    tt_config cand[4], row;
    size_t n = 0;
    if (tt__config_default_splitkv(dev->arch, rows, seqlen_k, d, &row) == 0) {
        if (tt__config_default_splitkv_units(dev->arch, rows, seqlen_k, d, units, dev->sm_count, paged,
                                             &cand[n]) == 0)
            n++;
        cand[n++] = row;
    }
    if (tt__config_default_splitkv(0, rows, seqlen_k, d, &cand[n]) == 0) n++;
    make(&cand[n++], 16, 32, 2, 2, 0, 0);
    for (size_t i = 0; i < n; i++)
        if (tt__variant_check(&cand[i], d, dev, NULL, 0) == 0) {
            *out = cand[i];
            return 0;
        }
    return TT_ERR_UNSUPPORTED;
}

void tt__splitkv_default_paged(tt_config *c, int32_t head_dim, int64_t page_size, int64_t long_page) {
    /* One CTA an SM (4 stages) runs a paged cache 1.25-1.46x slower than a
     * contiguous one on the H200, three (2 stages) 0.98-1.02x (with the
     * split filling the last wave). Not for want of the page numbers: read
     * a tile ahead into shared memory they changed neither (docs/perf.md,
     * the inference grid section). At d128 the contiguous row's 128-key
     * 4-warp tile ran pages 1.19-1.41x its contiguous time with a lookup
     * a row; since its copy looks a page up once for the page's rows
     * (mainloop.cuh) it runs pages of 16-256 tokens at 0.99-1.07x the
     * contiguous default, where the 64-key tile ran B1 32k at 1.05-1.08x
     * (H200, docs/perf.md): pages of long_page tokens and more keep the
     * contiguous tile, shorter ones (a lookup a row) take 64 keys (with
     * the one key warp of 4; 8 warps split 128 keys 8 ways), 3 stages
     * (two CTAs an SM), where 2 stages ran 1.00-1.14x. */
    if (c->family != TT_FAMILY_SPLITKV || c->block_m > 16) return;
    const int deep = head_dim >= 128 && c->warps <= 4 ? 3 : 2;
    if (c->stages > deep) c->stages = deep;
    if (head_dim >= 128 && c->block_n > 64 && c->warps <= 4 && page_size < long_page) c->block_n = 64;
}

/* Tiles no larger than the packed rows (seqlen_q x group) need, and one
 * size down (more query blocks); Q in registers wherever it fits (its
 * fragments are reused every tile), else from shared memory. */
static int useful(const tt_config *c, const tt_key *key, int32_t group) {
    if (key->seqlen_q > 0) {
        /* Square training and prefill keys are the other families' (split-KV
         * buys nothing where the query blocks fill the GPU, and mma.sync
         * tiles lose to wgmma there): leaving them out keeps the default
         * grid's fast tune to the families that can win it. */
        tt_key_v2 k2;
        memset(&k2, 0, sizeof k2);
        k2.seqlen_q = key->seqlen_q;
        k2.seqlen_k = key->seqlen_k > 0 ? key->seqlen_k : key->seqlen_q;
        k2.group = group > 1 ? group : 1;
        if (tt__key_regime(&k2) == TT_REGIME_PREFILL) return 0;
        const int top = tile_rows(tt__splitkv_rows(key->seqlen_q, group > 1 ? group : 1));
        if (c->block_m != top && !(top > 16 && c->block_m == top / 2)) return 0;
    }
    if (!c->q_in_regs) {
        tt_config r = *c;
        r.q_in_regs = 1;
        if (tt__variant_check(&r, key->head_dim, NULL, NULL, 0) == 0) return 0;
    }
    return 1;
}

/* CTAs an SM the split fills: the config's split_ctas, at most what fits
 * (more would be a second wave of the same work: a batch-64 winner with a
 * target of 4 an SM ran 64 one-tile splits at batch 1, 2.2x its best). */
static int64_t split_per_sm(const tt_config *c, int fit) {
    const int64_t f = fit > 0 ? fit : 1;
    return c->split_ctas > 0 && c->split_ctas < f ? c->split_ctas : f;
}

int64_t tt__splitkv_slots(const tt_config *c, int sm_count, int fit) {
    return split_per_sm(c, fit) * (sm_count > 0 ? sm_count : 1);
}

int tt__splitkv_varlen_tiles(const tt_config *c, int sm_count, int fit, int64_t total_k, int64_t batch,
                             int64_t heads_kv, int64_t max_tiles, int *splits) {
    *splits = 1;
    if (max_tiles <= 1 || sm_count <= 0 || total_k <= 0 || batch <= 0 || heads_kv <= 0) return 0;
    const int64_t slots = tt__splitkv_slots(c, sm_count, fit), bn = c->block_n;
    /* the sequences' tiles, sum of ceil(L_b / bn) <= T, and at t tiles a
     * split their CTAs, sum of ceil(t_b / t) <= (T + batch (t - 1)) / t */
    const int64_t T = (total_k + batch * (bn - 1)) / bn, m = slots / heads_kv;
    int64_t tps;
    if (m + 1 > batch && T > batch) {
        /* the fewest with heads_kv x that <= slots: one wave */
        tps = (T - batch) / (m + 1 - batch) + 1;
    } else {
        /* the units fill a wave already: a wave's share */
        const int64_t work = heads_kv * (T > 0 ? T : 1);
        tps = (work + slots - 1) / slots;
    }
    if (tps < 1) tps = 1;
    if ((max_tiles + tps - 1) / tps > TT_SPLITKV_MAX_SPLITS)
        tps = (max_tiles + TT_SPLITKV_MAX_SPLITS - 1) / TT_SPLITKV_MAX_SPLITS;
    if (tps >= max_tiles) return 0;
    *splits = (int)((max_tiles + tps - 1) / tps);
    return (int)tps;
}

int tt__splitkv_rotates(const tt__device_limits *dev, int forced) {
    if (forced >= 0) return forced != 0;
    return dev && dev->mem_bus_bits == TT_SPLITKV_ROTATE_BUS_BITS;
}

int tt__splitkv_splits(const tt_config *c, int sm_count, int fit, int64_t ctas, int64_t max_tiles) {
    if (max_tiles <= 1 || sm_count <= 0 || ctas <= 0) return 1;
    const int64_t per_sm = split_per_sm(c, fit);
    const int64_t target = per_sm * sm_count;
    if (ctas >= target) {
        /* More CTAs than a wave: split only as far as it takes to fill the
         * last wave to WAVE_FILL_PCT. Batch 64 x 8 KV heads at 3 CTAs an
         * SM is 512 CTAs in 396 slots: 1.29 waves, the second 29% full
         * (a paged cache on its 2-stage tile ran 1.17-1.25x the contiguous
         * one there on the H200); 2 splits make 2.59 waves of 3. */
        enum { WAVE_FILL_PCT = 85, WAVE_SPLITS_MAX = 4 };
        for (int64_t s = 1; s <= WAVE_SPLITS_MAX && s <= max_tiles; s++) {
            const int64_t n = ctas * s, waves = (n + target - 1) / target;
            if (n * 100 >= waves * target * WAVE_FILL_PCT) return (int)s;
        }
        return 1;
    }
    /* Round down: splits that fill the target's one wave and no more. The
     * earlier ceil(target / ctas) always overshot into a second, mostly
     * empty wave (batch 8, 8 KV heads, 3 CTAs an SM: 7 splits, 448 CTAs
     * for 396 slots, where 6 make 384), and the tuner chose 8-16x the
     * target to dilute that tail. */
    int64_t s = target / ctas;
    if (s > max_tiles) s = max_tiles;
    if (s > TT_SPLITKV_MAX_SPLITS) s = TT_SPLITKV_MAX_SPLITS;
    /* no empty split: as many splits as the tiles per split need */
    const int64_t per = (max_tiles + s - 1) / s;
    return (int)((max_tiles + per - 1) / per);
}

int tt__splitkv_balance(const tt_config *c, int sm_count, int fit, int64_t units, int64_t tiles, int *ctas) {
    *ctas = 0;
    if (tiles <= 1 || sm_count <= 0 || units <= 0 || tiles > INT32_MAX) return 0;
    const int64_t n = units * tiles;
    int64_t cs = split_per_sm(c, fit) * sm_count;
    /* whole units a CTA already: nothing to balance */
    if (units % cs == 0) return 0;
    /* every CTA at least one tile; a unit over at most MAX_SPLITS CTAs
     * (it spans its whole CTAs plus a part at each end) */
    if (cs > n) cs = n;
    if (cs > units * (TT_SPLITKV_MAX_SPLITS - 2)) cs = units * (TT_SPLITKV_MAX_SPLITS - 2);
    /* the device's start(c) = n c / C in 64 bits */
    if (cs > INT32_MAX || n > INT64_MAX / cs) return 0;
    /* Each CTA holds at least n / C tiles, so a unit's tiles meet at most
     * ceil(tiles / that) CTAs plus one it starts inside: the bound the
     * workspace is sized by, and the merge's most splits. */
    const int64_t per = n / cs;
    const int64_t bound = (tiles + per - 1) / per + 1;
    if (bound > TT_SPLITKV_MAX_SPLITS) return 0;
    *ctas = (int)cs;
    return (int)bound;
}

int tt__splitkv_split_tiles(const tt_config *c, int sm_count, int fit, int64_t work_tiles, int64_t max_tiles,
                            int *splits) {
    *splits = 1;
    if (max_tiles <= 1 || sm_count <= 0 || work_tiles <= 0) return 0;
    const int64_t per_sm = split_per_sm(c, fit);
    int64_t tps = (work_tiles + per_sm * sm_count - 1) / (per_sm * sm_count);
    if (tps < 1) tps = 1;
    if ((max_tiles + tps - 1) / tps > TT_SPLITKV_MAX_SPLITS)
        tps = (max_tiles + TT_SPLITKV_MAX_SPLITS - 1) / TT_SPLITKV_MAX_SPLITS;
    if (tps >= max_tiles) return 0;
    *splits = (int)((max_tiles + tps - 1) / tps);
    return (int)tps;
}

/*
 * The space (per key; docs/kernels.md, measured on the H200 in
 * docs/perf.md):
 *   block_m    16/32/64/128 packed rows, the key's tile and one down
 *   block_n    64 or 128 keys a tile
 *   warps      4 or 8: past the row warps they split the tile's keys
 *   stages     2 to 4 (decode streams K/V: deeper rings pay there)
 *   q_in_regs  1 where it fits, else 0
 *   split_ctas 0 (one full wave of what fits an SM), 2 or 4 CTAs an SM:
 *              read by the launch only, one program for the three
 * Not knobs: layout (pinned and not read: Q, K and V rows are unpadded with
 * their chunks swizzled, splitkv/params.h), the fused merge (by the rows a
 * CTA holds; TILETUNE_SPLITKV_FUSED=0 forces the merge kernel).
 */
const tt__family tt__family_splitkv = {
    .id = TT_FAMILY_SPLITKV,
    .causal_max = 2,
    .name = "splitkv",
    .arch_min = 80,
    .arch_max = 199,
    .arch_suffix = "",
    .files = {{"splitkv/mainloop.cuh", tt_splitkv_mainloop_source, &tt_splitkv_mainloop_source_len},
              {"splitkv/params.h", tt_splitkv_params_header, &tt_splitkv_params_header_len}},
    .reads = TT__KNOB_BIT(block_m) | TT__KNOB_BIT(block_n) | TT__KNOB_BIT(warps) | TT__KNOB_BIT(stages) |
             TT__KNOB_BIT(q_in_regs) | TT__KNOB_BIT(split_ctas),
    .host_knobs = TT__KNOB_BIT(split_ctas),
    .pinned = {.layout = TT_LAYOUT_PAD},
    .space = {.block_m = {4, {16, 32, 64, 128}},
              .block_n = {2, {64, 128}},
              .warps = {2, {4, 8}},
              .stages = {3, {2, 3, 4}},
              .q_in_regs = {2, {1, 0}},
              .split_ctas = {3, {0, 2, 4}}},
    .stages_min = 2,
    .check = check,
    .registers = registers,
    .register_budget = register_budget,
    .smem_bytes = smem_bytes,
    .threads = threads,
    /* Two or three CTAs an SM (mainloop.cuh, MIN_CTAS): the driver's own
     * carveout held the d128 16x64 2-stage tile to two an SM, its
     * registers allowing three (ncu on the H200, docs/perf.md). The
     * kernel reads K/V through shared memory only (cp.async.cg). */
    .smem_carveout = 100,
    .useful = useful,
    .entry2 = TT_SPLITKV_COMBINE_ENTRY,
    .launch = tt__splitkv_launch_dense,
};
