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

/* sm_90 (H100/H200): family wgmma, one brace row per line, as above. Each
 * row is the config with the best worst case over the H200 grid (seqlen
 * 512..16384, fp16 and bf16; docs/perf.md, wgmma v1): of the tuned best,
 * d64 0.90/0.94 (non-causal/causal), d128 0.985/0.92, d256 1.0. */
static const struct default_row defaults_sm90[] = {
    /* d, c, bm, bn, w, st, layout, q_in_regs */
    {64, 0, 64, 64, 4, 2, 1, 0},
    {64, 1, 64, 64, 4, 2, 1, 0},
    {128, 0, 192, 128, 12, 2, 1, 0},
    {128, 1, 64, 64, 4, 2, 1, 0},
    {256, 0, 128, 64, 8, 2, 1, 0},
    {256, 1, 128, 64, 8, 2, 1, 0},
};

/* The table each regime takes its default from, per arch. A kernel family
 * for a regime (split-KV decode) lands as its own table and one entry
 * here; until then every regime runs today's rows. */
typedef struct regime_table {
    const struct default_row *rows;
    size_t n;
    int32_t family;
} regime_table;
#define TABLE(rows, family) {rows, sizeof rows / sizeof rows[0], family}
static const regime_table portable[] = {
    [TT_REGIME_DECODE] = TABLE(defaults, TT_FAMILY_MMA),
    [TT_REGIME_CHUNK] = TABLE(defaults, TT_FAMILY_MMA),
    [TT_REGIME_PREFILL] = TABLE(defaults, TT_FAMILY_MMA),
};
static const regime_table sm90[] = {
    [TT_REGIME_DECODE] = TABLE(defaults_sm90, TT_FAMILY_WGMMA),
    [TT_REGIME_CHUNK] = TABLE(defaults_sm90, TT_FAMILY_WGMMA),
    [TT_REGIME_PREFILL] = TABLE(defaults_sm90, TT_FAMILY_WGMMA),
};
#undef TABLE

static int from_table(const regime_table *t, const tt_key_v2 *key, tt_config *out) {
    for (size_t i = 0; i < t->n; i++) {
        const struct default_row *r = &t->rows[i];
        /* Both causal alignments take the causal row: they differ only
         * where seqlen_q != seqlen_k, by an offset of the diagonal. */
        if (r->head_dim != key->head_dim || r->causal != (key->causal ? 1 : 0)) continue;
        tt_config c;
        memset(&c, 0, sizeof c);
        c.family = t->family;
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

int tt__config_default_sm90(const tt_key *key, tt_config *out) {
    if (!key || !out) return TT_ERR_INVAL;
    tt_key_v2 k;
    tt__key_from_v1(key, &k);
    return from_table(&sm90[tt__key_regime(&k)], &k, out);
}
