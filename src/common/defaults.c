/* The built-in default config per key: what a lookup answers when nothing
 * is tuned, and what libtiletune runs without a daemon. The portable table
 * must be valid on every sm_80+ device (shared memory <= 99 KB, the
 * sm_86/89 opt-in limit; no register spill for sm_80, sm_86 or sm_90). An
 * arch may have its own rows (sm_90: the wgmma family, far faster there);
 * tt_sdpa_fwd runs those on that arch. Every row must be within reach of
 * the tuned best (issue 3 target: within 15%); docs/perf.md records the
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

static int from_table(const struct default_row *rows, size_t n, int32_t family, const tt_key *key,
                      tt_config *out) {
    for (size_t i = 0; i < n; i++) {
        const struct default_row *r = &rows[i];
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

int tt_config_default(const tt_key *key, tt_config *out) {
    if (!key || !out) return TT_ERR_INVAL;
    if (!tt__head_dim_supported(key->head_dim)) return TT_ERR_UNSUPPORTED;
    return from_table(defaults, sizeof defaults / sizeof defaults[0], TT_FAMILY_MMA, key, out);
}

int tt__config_default_arch(const tt_key *key, int32_t arch, tt_config *out) {
    if (!key || !out) return TT_ERR_INVAL;
    if (!tt__head_dim_supported(key->head_dim)) return TT_ERR_UNSUPPORTED;
    if (arch == 90 &&
        from_table(defaults_sm90, sizeof defaults_sm90 / sizeof defaults_sm90[0], TT_FAMILY_WGMMA, key, out) == 0)
        return 0;
    return tt_config_default(key, out);
}
