/*
 * Family splitkv's descriptor: the rules of splitkv.cu's #errors mirrored,
 * its shared memory, the built-in default, the variant space and the
 * split count. No driver calls: variants.c and the CPU tests use it.
 */
#include "kernels/splitkv.h"

#include <string.h>

#include "common/config.h"
#include "common/fail.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

int tt__splitkv_head_dim_ok(int64_t d) { return d == 32 || d == 64 || d == 128 || d == 256; }

long tt__splitkv_smem(const tt_config *c, int32_t d) {
    return TT_SPLITKV_SMEM_BYTES((long)c->block_m, (long)c->block_n, (long)d, (long)c->stages, (long)c->warps);
}

int tt__splitkv_check(const tt_config *c, int32_t d, const tt__device_limits *dev, char *err, size_t errlen) {
    char msg[160];
    if (tt__config_check_ranges(c, msg, sizeof msg) < 0) return tt__fail(TT_ERR_INVAL, err, errlen, "config: %s", msg);
    if (c->family != TT_FAMILY_SPLITKV) return tt__fail(TT_ERR_INVAL, err, errlen, "not a splitkv config");
    if (!tt__splitkv_head_dim_ok(d))
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen, "family splitkv: head_dim %d is not 32, 64, 128 or 256", (int)d);
#define BAD(...) return tt__fail(TT_ERR_INVAL, err, errlen, "family splitkv: " __VA_ARGS__)
    const int bm = c->block_m, bn = c->block_n, w = c->warps;
    if (bm != 16 && bm != 32 && bm != 64 && bm != 128) BAD("block_m %d is not 16, 32, 64 or 128", bm);
    if (w < 1 || w > 8) BAD("warps %d is not 1..8", w);
    if (c->stages < 2 || c->stages > 4) BAD("stages %d is not 2..4", (int)c->stages);
    if (c->layout != TT_LAYOUT_PAD) BAD("layout must be pad");
    const int rw = TT_SKV_RW(bm, d), wm = bm / rw;
    if (w % wm != 0) BAD("warps %d is not a multiple of the %d row warps of block_m %d", w, wm, bm);
    const int wk = w / wm;
    if (bn % (16 * wk) != 0) BAD("block_n %d is not a multiple of 16 x %d key warps", bn, wk);
    const int nt = 32 * w, cpr = d / 8;
    if (nt % cpr != 0 || bn % (nt / cpr) != 0) BAD("block_n %d does not split into the %d threads' copies", bn, nt);
    const int mt = rw / 16, wn = bn / wk;
    /* S, O and Q fragments per thread: over 160 floats ptxas spills (seen:
     * 2 m tiles x (64 + 128) / 2 = 192 spilled 52 bytes at 255 registers) */
    if (mt * (wn + d) / 2 + (c->q_in_regs ? mt * d / 4 : 0) > 160)
        BAD("block_n %d, block_m %d, q_in_regs %d: accumulators leave no registers", bn, bm, (int)c->q_in_regs);
#undef BAD
    if (!dev) return 0;
    if (dev->arch < 80)
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen, "sm_%d: family splitkv needs sm_80 or later", (int)dev->arch);
    long smem = tt__splitkv_smem(c, d);
    if (smem > dev->smem_optin)
        return tt__fail(TT_ERR_RANGE, err, errlen, "needs %ld bytes of shared memory, the device allows %d per block",
                        smem, (int)dev->smem_optin);
    return 0;
}

int64_t tt__splitkv_rows(int64_t seqlen_q, int64_t group) { return seqlen_q * group; }

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

int tt__splitkv_default(int64_t rows, int64_t seqlen_k, int32_t d, const tt__device_limits *dev, tt_config *out) {
    tt__device_limits nominal;
    if (!dev) {
        tt__device_limits_nominal(90, &nominal);
        dev = &nominal;
    }
    (void)seqlen_k;
    const int bm = tile_rows(rows);
    /* Candidates in order of preference; the first legal one on dev wins.
     * From the sweeps on the H200 (docs/perf.md): decode (16 rows) 64-key
     * tiles, 2 stages (three CTAs an SM), 2 CTAs an SM as the split target:
     * the winner at (1, 131072) and, at split target 1, at (16, 32768);
     * 32 rows 128-key tiles, 3 stages (winner at batch 1, Lq 8); 64 rows
     * 64-key tiles, 2 stages (winner at Lq 16); prefill 128 rows, 8 warps. */
    tt_config cand[6];
    size_t n = 0;
    if (bm == 16) {
        make(&cand[n++], 16, 64, 4, 2, 1, 2);
        make(&cand[n++], 16, 64, 4, 2, 0, 2);
    } else if (bm == 32) {
        make(&cand[n++], 32, 128, 4, 3, 0, 0);
        make(&cand[n++], 32, 64, 4, 2, 0, 0);
    } else if (bm == 64) {
        make(&cand[n++], 64, 64, 4, 2, 0, 0);
    } else {
        make(&cand[n++], 128, 64, 8, 2, 0, 0);
        make(&cand[n++], 64, 64, 4, 2, 0, 0);
    }
    make(&cand[n++], 16, 32, 2, 2, 0, 0); /* fits any sm_80+ at every head dim */
    for (size_t i = 0; i < n; i++)
        if (tt__splitkv_check(&cand[i], d, dev, NULL, 0) == 0) {
            *out = cand[i];
            return 0;
        }
    return TT_ERR_UNSUPPORTED;
}

/* The tuned space: tiles no larger than the packed rows need (one size
 * down too, for more query blocks), key tiles, warps, stages and split
 * targets. q_in_regs is 1 where it fits (Q fragments reused every tile). */
static const int space_bn[] = {64, 128};
static const int space_warps[] = {4, 8};
static const int space_stages[] = {2, 3, 4};
static const int space_split[] = {0, 2, 4};

int tt__splitkv_space(int64_t rows, int32_t d, const tt__device_limits *dev, tt_config *out, size_t cap, size_t *n) {
    const int top = tile_rows(rows);
    const int bms[2] = {top, top > 16 ? top / 2 : 0};
    size_t k = 0;
    for (int a = 0; a < 2; a++) {
        if (!bms[a]) continue;
        for (size_t b = 0; b < COUNT(space_bn); b++)
            for (size_t w = 0; w < COUNT(space_warps); w++)
                for (size_t s = 0; s < COUNT(space_stages); s++)
                    for (size_t x = 0; x < COUNT(space_split); x++) {
                        tt_config c;
                        make(&c, bms[a], space_bn[b], space_warps[w], space_stages[s], 1, space_split[x]);
                        if (tt__splitkv_check(&c, d, dev, NULL, 0) < 0) {
                            c.q_in_regs = 0;
                            if (tt__splitkv_check(&c, d, dev, NULL, 0) < 0) continue;
                        }
                        if (k < cap) out[k] = c;
                        k++;
                    }
    }
    *n = k;
    return 0;
}

int tt__splitkv_splits(const tt_config *c, int sm_count, int fit, int64_t ctas, int64_t max_tiles) {
    if (max_tiles <= 1 || sm_count <= 0 || ctas <= 0) return 1;
    const int64_t per_sm = c->split_ctas > 0 ? c->split_ctas : (fit > 0 ? fit : 1);
    const int64_t target = per_sm * sm_count;
    if (ctas >= target) return 1;
    int64_t s = (target + ctas - 1) / ctas;
    if (s > max_tiles) s = max_tiles;
    if (s > TT_SPLITKV_MAX_SPLITS) s = TT_SPLITKV_MAX_SPLITS;
    /* no empty split: as many splits as the tiles per split need */
    const int64_t per = (max_tiles + s - 1) / s;
    return (int)((max_tiles + per - 1) / per);
}

