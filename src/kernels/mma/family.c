/* Family `mma` (sm_80+): its device file is mma/mainloop.cuh. The H200
 * measurements behind the space are in docs/perf.md, the table's size per
 * head dim in docs/kernels.md ("The tuned space"). */
#include "common/fail.h"
#include "common/key.h"
#include "kernels/family.h"

extern const char tt_mma_mainloop_source[];
extern const unsigned long tt_mma_mainloop_source_len;

/* m16 tiles a warp owns: 1 or 2 in a legal config. */
static int32_t m_tiles(const tt_config *c) { return c->warps > 0 ? c->block_m / (16 * c->warps) : 0; }

/* Each warp owns 16 or 32 query rows (one or two m16 tiles); key tiles are
 * whole k16 steps of P V. */
static int check(const tt_config *c, int32_t head_dim, char *err, size_t errlen) {
    (void)head_dim;
    if (c->warps < 1 || c->warps > 16)
        return tt__fail(TT_ERR_INVAL, err, errlen, "warps=%d: the mma kernel takes 1..16", (int)c->warps);
    int mt = m_tiles(c);
    if (c->block_m % (16 * c->warps) != 0 || (mt != 1 && mt != 2))
        return tt__fail(TT_ERR_INVAL, err, errlen, "block_m=%d with %d warps: must be 16 or 32 rows per warp",
                        (int)c->block_m, (int)c->warps);
    if (c->block_n % 16 != 0 || c->block_n < 16 || c->block_n > 256)
        return tt__fail(TT_ERR_INVAL, err, errlen, "block_n=%d is not a multiple of 16 in 16..256",
                        (int)c->block_n);
    return 0;
}

/* The S and O accumulators of each m tile, and Q's fragments when they
 * stay in registers. */
static int32_t registers(const tt_config *c, int32_t head_dim) {
    int32_t mt = m_tiles(c);
    return mt * (c->block_n + head_dim) / 2 + (c->q_in_regs ? mt * head_dim / 4 : 0);
}

static int32_t register_budget(const tt_config *c) {
    (void)c;
    return 256;
}

/* The Q tile plus `stages` K and V tiles of 2-byte elements; padded rows
 * add 8 elements (16 bytes) so ldmatrix rows fall in different banks. */
static int64_t smem_bytes(const tt_config *c, int32_t head_dim) {
    int64_t row = head_dim + (c->layout == TT_LAYOUT_PAD ? 8 : 0);
    return 2 * row * ((int64_t)c->block_m + 2 * (int64_t)c->stages * c->block_n);
}

static int32_t threads(const tt_config *c) { return c->warps * 32; }

/*
 * The space. Why each knob is here:
 *   block_m x warps  (64, 4), (128, 4), (128, 8): one or two m16 tiles per
 *             warp. 128 rows is FA2's choice almost everywhere; 64 helps
 *             short and causal inputs (more CTAs, less diagonal waste).
 *   block_n   32/64/128 keys per tile: bigger tiles amortize the softmax
 *             rescale, smaller ones cut smem (d256) and registers.
 *   stages    1 (FA2's one K + one V buffer) or 2 (a full double buffer).
 * Fixed by measurement, still legal for an explicit config: layout swizzle
 * (padded rows 0.90-0.99x), Q from shared memory (Q in registers
 * 0.87-0.98x), no 3rd stage (0.84-0.96x), no 256-row CTAs, no block_n
 * 48/80/96 (never best). Each value doubles or halves the CI compile-all
 * test (~0.4 s a variant, x 5 head dims x 2 dtypes x 2 causal x 2 archs).
 * (64, 8) is in the product and refused by the rules: 8 rows a warp.
 */
const tt__family tt__family_mma = {
    .id = TT_FAMILY_MMA,
    .causal_max = 2,
    .name = "mma",
    .arch_min = 80,
    .arch_max = 199,
    .arch_suffix = "",
    .files = {{"mma/mainloop.cuh", tt_mma_mainloop_source, &tt_mma_mainloop_source_len}},
    .reads = TT__KNOB_BIT(block_m) | TT__KNOB_BIT(block_n) | TT__KNOB_BIT(warps) | TT__KNOB_BIT(stages) |
             TT__KNOB_BIT(layout) | TT__KNOB_BIT(q_in_regs),
    .space = {.block_m = {2, {64, 128}},
              .block_n = {3, {32, 64, 128}},
              .warps = {2, {4, 8}},
              .stages = {2, {1, 2}},
              .layout = {1, {TT_LAYOUT_SWIZZLE}},
              .q_in_regs = {1, {0}}},
    .stages_min = 1,
    .check = check,
    .registers = registers,
    .register_budget = register_budget,
    .smem_bytes = smem_bytes,
    .threads = threads,
    .defaults = {{0, tt_config_default_v2}},
};
