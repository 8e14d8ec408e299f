/* The variant space without compiling: the shape rules (the family descriptors,
 * kernels/family.h), device limits, seqlen pruning, the table's size. */
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/key.h"
#include "kernels/family.h"
#include "tt_test.h"
#include "kernels/variants.h"

static tt_config cfg(int bm, int bn, int w, int st, int layout, int qr) {
    tt_config c;
    memset(&c, 0, sizeof c);
    c.family = TT_FAMILY_MMA;
    c.block_m = bm;
    c.block_n = bn;
    c.warps = w;
    c.stages = st;
    c.layout = layout;
    c.q_in_regs = qr;
    return c;
}

TEST(nominal_limits) {
    tt__device_limits d;
    ASSERT_OK(tt__device_limits_nominal(90, &d));
    ASSERT_EQ(d.smem_optin, 227 * 1024);
    ASSERT_OK(tt__device_limits_nominal(80, &d));
    ASSERT_EQ(d.smem_optin, 163 * 1024);
    ASSERT_OK(tt__device_limits_nominal(86, &d));
    ASSERT_EQ(d.smem_optin, 99 * 1024);
    ASSERT_EQ(tt__device_limits_nominal(75, &d), TT_ERR_UNSUPPORTED);
}

TEST(shape_rules) {
    char err[256];
    tt_config c = cfg(128, 64, 4, 2, 1, 0);
    ASSERT_OK(tt__variant_check(&c, 128, NULL, err, sizeof err));
    c = cfg(64, 64, 8, 2, 1, 0); /* 8 rows per warp */
    ASSERT_EQ(tt__variant_check(&c, 128, NULL, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "16 or 32 rows per warp");
    c = cfg(256, 64, 4, 2, 1, 0); /* 64 rows per warp */
    ASSERT_EQ(tt__variant_check(&c, 64, NULL, err, sizeof err), TT_ERR_INVAL);
    c = cfg(128, 24, 4, 2, 1, 0);
    ASSERT_EQ(tt__variant_check(&c, 64, NULL, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "block_n=24");
    c = cfg(128, 128, 4, 1, 1, 0); /* 2 m tiles x (128 + 256) / 2 = 384 > 256 */
    ASSERT_EQ(tt__variant_check(&c, 256, NULL, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "255 registers");
    c = cfg(128, 128, 4, 1, 1, 1); /* 2 x 256 / 2 + 2 x 128 / 4 = 320 */
    ASSERT_EQ(tt__variant_check(&c, 128, NULL, err, sizeof err), TT_ERR_INVAL);
    c = cfg(128, 64, 4, 1, 1, 1); /* 192 + 64 = 256: legal, ptxas decides */
    ASSERT_OK(tt__variant_check(&c, 128, NULL, err, sizeof err));
    c = cfg(128, 64, 4, 1, 1, 0);
    c.family = 2; /* no such family */
    ASSERT_EQ(tt__variant_check(&c, 128, NULL, err, sizeof err), TT_ERR_INVAL);
    c = cfg(128, 64, 4, 1, 1, 0);
    ASSERT_EQ(tt__variant_check(&c, 80, NULL, err, sizeof err), TT_ERR_UNSUPPORTED);
}

/* A default must run wherever it is the default: the portable table on
 * every sm_80+ part (the smallest opt-in shared memory, sm_86/89's), the
 * sm_90 table on sm_90; other arches get the portable one. Every regime:
 * prefill, decode at GQA groups 1..16, chunks of few and many rows. */
TEST(every_default_is_legal_where_it_runs) {
    const int dims[] = {32, 64, 96, 128, 256}, archs[] = {80, 86, 89, 90};
    const struct {
        int64_t lq, lk;
        int32_t group;
    } shapes[] = {{1024, 1024, 1}, {1, 32768, 1}, {1, 32768, 4},  {1, 4096, 16},   {8, 8192, 4},
                  {64, 8192, 1},   {64, 8192, 4}, {512, 8192, 4}, {512, 32768, 1}, {4096, 1024, 1}};
    int checked = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int i = 0; i < 5; i++)
            for (int c = 0; c < 3; c++) {
                tt_key_v2 k = {.dtype = TT_DTYPE_BF16,
                               .head_dim = dims[i],
                               .causal = c,
                               .seqlen_q = shapes[s].lq,
                               .seqlen_k = shapes[s].lk,
                               .group = shapes[s].group};
                tt_config portable, own;
                char err[256];
                ASSERT_OK(tt_config_default_v2(&k, &portable));
                for (int a = 0; a < 4; a++) {
                    tt__device_limits d;
                    ASSERT_OK(tt__device_limits_nominal(archs[a], &d));
                    if (tt__variant_check(&portable, dims[i], &d, err, sizeof err) < 0)
                        TT_FAIL_AT("d%d causal %d %lldx%lld group %d: portable default on sm_%d: %s", dims[i],
                                   c, (long long)k.seqlen_q, (long long)k.seqlen_k, (int)k.group, archs[a],
                                   err);
                    ASSERT_OK(tt__config_default_arch(&k, archs[a], &own));
                    if (tt__variant_check(&own, dims[i], &d, err, sizeof err) < 0)
                        TT_FAIL_AT("d%d causal %d %lldx%lld group %d: sm_%d default: %s", dims[i], c,
                                   (long long)k.seqlen_q, (long long)k.seqlen_k, (int)k.group, archs[a], err);
                    if (archs[a] != 90) ASSERT(tt_config_equal(&own, &portable));
                    checked++;
                }
                /* decode and short chunks run splitkv where it serves the head
                 * dim; Hopper's prefill runs ws (wgmma for bottom-right) */
                ASSERT_OK(tt__config_default_arch(&k, 90, &own));
                const int64_t rows = k.seqlen_q * k.group;
                const int skv = dims[i] != 96, decode = k.seqlen_q <= 16,
                          chunk = 4 * k.seqlen_q <= k.seqlen_k;
                int32_t want;
                if (skv && (decode || (chunk && rows <= 1024))) want = TT_FAMILY_SPLITKV;
                else if (dims[i] % 64 != 0) /* no sm_90 row: the portable one */
                    want = skv && chunk ? TT_FAMILY_SPLITKV : TT_FAMILY_MMA;
                else if (c == 2 && k.seqlen_q > k.seqlen_k) want = TT_FAMILY_WGMMA;
                /* short causal d64: one CTA a 64-row wgmma tile */
                else if (dims[i] == 64 && c > 0 && k.seqlen_q <= 1024 && k.seqlen_k <= 1024)
                    want = TT_FAMILY_WGMMA;
                else want = TT_FAMILY_WS;
                if (own.family != want)
                    TT_FAIL_AT("d%d causal %d %lldx%lld group %d: sm_90 default family %d, want %d", dims[i],
                               c, (long long)k.seqlen_q, (long long)k.seqlen_k, (int)k.group, (int)own.family,
                               (int)want);
                ASSERT_EQ(portable.family, skv && (decode || chunk) ? TT_FAMILY_SPLITKV : TT_FAMILY_MMA);
            }
    printf("%d defaults checked\n", checked);
}

/* A decode default's tile holds the packed rows (seqlen_q x group): one
 * token of group 4 is a 16-row tile, eight tokens of group 4 a 32-row one;
 * past 128 rows the 128-row tile. */
TEST(decode_defaults_follow_the_packed_rows) {
    const struct {
        int64_t lq;
        int32_t group, block_m;
    } cases[] = {{1, 1, 16}, {1, 4, 16}, {1, 16, 16}, {8, 4, 32}, {16, 4, 64}, {16, 8, 128}, {16, 16, 128}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tt_key_v2 k = {.dtype = TT_DTYPE_FP16,
                       .head_dim = 128,
                       .seqlen_q = cases[i].lq,
                       .seqlen_k = 65536,
                       .group = cases[i].group};
        tt_config c;
        ASSERT_OK(tt_config_default_v2(&k, &c));
        ASSERT_EQ(c.family, TT_FAMILY_SPLITKV);
        ASSERT_EQ(c.block_m, cases[i].block_m);
        ASSERT_OK(tt__config_default_sm90(&k, &c));
        ASSERT_EQ(c.block_m, cases[i].block_m);
    }
}

static tt_config wg(int warps, int bn, int st) {
    tt_config c = cfg(16 * warps, bn, warps, st, TT_LAYOUT_SWIZZLE, 0);
    c.family = TT_FAMILY_WGMMA;
    return c;
}

TEST(wgmma_shape_rules) {
    char err[256];
    tt__device_limits h100, a100;
    ASSERT_OK(tt__device_limits_nominal(90, &h100));
    ASSERT_OK(tt__device_limits_nominal(80, &a100));
    tt_config c = wg(8, 128, 2);
    ASSERT_OK(tt__variant_check(&c, 128, &h100, err, sizeof err));
    /* Hopper only */
    ASSERT_EQ(tt__variant_check(&c, 128, &a100, err, sizeof err), TT_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(err, "sm_90 only");
    /* whole 64-column panels */
    ASSERT_EQ(tt__variant_check(&c, 96, &h100, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "64, 128 or 256");
    /* 64 rows a warpgroup */
    c.block_m = 64;
    ASSERT_EQ(tt__variant_check(&c, 128, &h100, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "64 rows a warpgroup");
    c = wg(6, 128, 2);
    ASSERT_EQ(tt__variant_check(&c, 128, &h100, err, sizeof err), TT_ERR_INVAL);
    c = wg(8, 96, 2); /* N of S = Q K^T in whole 64s */
    ASSERT_EQ(tt__variant_check(&c, 128, &h100, err, sizeof err), TT_ERR_INVAL);
    c = wg(8, 128, 1); /* no single-buffer schedule */
    ASSERT_EQ(tt__variant_check(&c, 128, &h100, err, sizeof err), TT_ERR_INVAL);
    c = wg(8, 128, 2);
    c.layout = TT_LAYOUT_PAD;
    ASSERT_EQ(tt__variant_check(&c, 128, &h100, err, sizeof err), TT_ERR_INVAL);
    c = wg(8, 256, 2); /* 128 + 128 + 64 accumulator registers at d256 */
    ASSERT_EQ(tt__variant_check(&c, 256, &h100, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "accumulator registers");
    c = wg(12, 128, 2); /* 160: fits 12 warps' 168 registers */
    ASSERT_OK(tt__variant_check(&c, 128, &h100, err, sizeof err));
    c = wg(12, 192, 2); /* 96 + 32 + 48 = 176 > 168 */
    ASSERT_EQ(tt__variant_check(&c, 64, &h100, err, sizeof err), TT_ERR_INVAL);
    /* shared memory: d128 128 x 128 x 3 stages = 2*128*(128 + 6*128) + 1 KB */
    c = wg(8, 128, 3);
    ASSERT_OK(tt__variant_check(&c, 128, &h100, err, sizeof err));
    c = wg(8, 128, 4);
    ASSERT_EQ(tt__variant_check(&c, 128, &h100, err, sizeof err), TT_ERR_RANGE);
    ASSERT_CONTAINS(err, "295936");
}

/* Size of the space for a key (family -1: both families), each entry
 * checked against the rules it was enumerated under. */
static size_t space_count(int hd, int arch, int64_t seqlen_k, int family) {
    tt__device_limits d;
    ASSERT_OK(tt__device_limits_nominal(arch, &d));
    tt_key k;
    memset(&k, 0, sizeof k);
    k.head_dim = hd;
    k.dtype = TT_DTYPE_BF16;
    k.seqlen_q = seqlen_k;
    k.seqlen_k = seqlen_k;
    tt__space_entry *e = NULL;
    size_t n = 0, f = 0;
    ASSERT_OK(tt__space_enumerate(&k, &d, 0, NULL, 1, &e, &n, NULL, 0));
    for (size_t i = 0; i < n; i++) {
        ASSERT_EQ(e[i].status, TT_VARIANT_UNCHECKED);
        ASSERT_OK(tt__variant_check(&e[i].variant.config, hd, &d, NULL, 0));
        ASSERT_EQ(e[i].variant.arch, arch);
        ASSERT_EQ(e[i].variant.head_dim, hd);
        f += family < 0 || e[i].variant.config.family == family;
    }
    free(e);
    return f;
}

static size_t space_size(int hd, int arch, int64_t seqlen_k) { return space_count(hd, arch, seqlen_k, -1); }
static size_t count_family(int hd, int arch, int64_t seqlen_k, int family) {
    return space_count(hd, arch, seqlen_k, family);
}

TEST(wgmma_variants_are_in_the_space_on_sm90_only) {
    ASSERT(count_family(128, 90, 0, TT_FAMILY_WGMMA) >= 6);
    ASSERT(count_family(64, 90, 0, TT_FAMILY_WGMMA) >= 6);
    ASSERT(count_family(256, 90, 0, TT_FAMILY_WGMMA) >= 2);
    ASSERT_EQ(count_family(96, 90, 0, TT_FAMILY_WGMMA), 0);
    ASSERT_EQ(count_family(32, 90, 0, TT_FAMILY_WGMMA), 0);
    ASSERT_EQ(count_family(128, 80, 0, TT_FAMILY_WGMMA), 0);
    ASSERT_EQ(count_family(128, 89, 0, TT_FAMILY_WGMMA), 0);
    /* two stages are the wgmma minimum, not pruned for one-tile keys */
    ASSERT_EQ(count_family(128, 90, 1, TT_FAMILY_WGMMA), count_family(128, 90, 0, TT_FAMILY_WGMMA));
}

/* A family whose mainloop lacks a mask is not in the space of keys that
 * need it: ws masks top-left only, so bottom-right keys tune the others. */
/* Family ws takes bottom-right masks where every row sees a key (seqlen_q
 * <= seqlen_k); a key with more queries than keys leaves it out. */
TEST(bottom_right_keys_with_empty_rows_leave_out_ws) {
    tt__device_limits d;
    ASSERT_OK(tt__device_limits_nominal(90, &d));
    for (int causal = 0; causal <= 2; causal++)
        for (int more_q = 0; more_q < 2; more_q++) {
            tt_key k;
            memset(&k, 0, sizeof k);
            k.head_dim = 128;
            k.dtype = TT_DTYPE_BF16;
            k.causal = causal;
            k.seqlen_q = more_q ? 4096 : 512;
            k.seqlen_k = more_q ? 512 : 4096;
            tt__space_entry *e = NULL;
            size_t n = 0, ws = 0, wg = 0;
            ASSERT_OK(tt__space_enumerate(&k, &d, 0, NULL, 1, &e, &n, NULL, 0));
            for (size_t i = 0; i < n; i++) {
                ws += e[i].variant.config.family == TT_FAMILY_WS;
                wg += e[i].variant.config.family == TT_FAMILY_WGMMA;
            }
            free(e);
            ASSERT(wg > 0);
            if (causal == 2 && more_q) ASSERT_EQ(ws, 0);
            else ASSERT(ws > 0);
        }
}

TEST(shared_memory_limit) {
    tt__device_limits h100, a100, ada;
    ASSERT_OK(tt__device_limits_nominal(90, &h100));
    ASSERT_OK(tt__device_limits_nominal(80, &a100));
    ASSERT_OK(tt__device_limits_nominal(89, &ada));
    /* d256, 64 x 128, 2 stages, swizzle: 2*256*(64 + 4*128) = 294912 B */
    tt_config c = cfg(64, 128, 4, 2, 1, 0);
    char err[256];
    ASSERT_EQ(tt__variant_check(&c, 256, &h100, err, sizeof err), TT_ERR_RANGE);
    ASSERT_CONTAINS(err, "294912");
    /* d256, 64 x 64, 2 stages: 163840 B: fits sm_90 and sm_80, not sm_89 */
    c = cfg(64, 64, 4, 2, 1, 0);
    ASSERT_OK(tt__variant_check(&c, 256, &h100, err, sizeof err));
    ASSERT_OK(tt__variant_check(&c, 256, &a100, err, sizeof err));
    ASSERT_EQ(tt__variant_check(&c, 256, &ada, err, sizeof err), TT_ERR_RANGE);
}

TEST(space_is_tens_per_head_dim) {
    int hds[5] = {32, 64, 96, 128, 256};
    for (int i = 0; i < 5; i++) {
        size_t skv90 = count_family(hds[i], 90, 0, TT_FAMILY_SPLITKV);
        size_t n90 = space_size(hds[i], 90, 0) - skv90;
        size_t n80 = space_size(hds[i], 80, 0) - count_family(hds[i], 80, 0, TT_FAMILY_SPLITKV);
        printf("d%d: %zu variants on sm_90 (+%zu splitkv), %zu on sm_80\n", hds[i], n90, skv90, n80);
        ASSERT(n90 >= 8 && n90 <= 80);
        ASSERT(n80 <= n90);
        /* splitkv: every tile shape when seqlen_q is unknown, a few
         * tens once it is (tests/kernels/test_splitkv.c) */
        ASSERT(skv90 <= 160);
        ASSERT_EQ(skv90 == 0, hds[i] == 96);
    }
    ASSERT(space_size(256, 86, 0) < space_size(256, 80, 0));
}

TEST(short_keys_prune_stages) {
    /* one K/V tile: a second stage has nothing to prefetch */
    size_t full = space_size(64, 90, 0), one = space_size(64, 90, 1);
    ASSERT(one < full);
    tt__device_limits d;
    tt__device_limits_nominal(90, &d);
    tt_key k = {.head_dim = 64, .dtype = TT_DTYPE_FP16, .seqlen_q = 1, .seqlen_k = 1};
    tt__space_entry *e;
    size_t n;
    ASSERT_OK(tt__space_enumerate(&k, &d, 0, NULL, 1, &e, &n, NULL, 0));
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ(e[i].variant.config.stages, tt__family_of(e[i].variant.config.family)->stages_min);
    free(e);
}

/* tt_sdpa_variants passes the caller's key through: the largest seqlen_k
 * prunes nothing (the tile count's rounding must not overflow). */
TEST(huge_seqlen_k_prunes_nothing) {
    tt__device_limits d;
    tt__device_limits_nominal(90, &d);
    tt_key k = {.head_dim = 64, .dtype = TT_DTYPE_FP16, .seqlen_q = 1, .seqlen_k = INT64_MAX};
    tt__space_entry *e;
    size_t n;
    ASSERT_OK(tt__space_enumerate(&k, &d, 0, NULL, 1, &e, &n, NULL, 0));
    free(e);
    /* the same seqlen_q with no seqlen_k: splitkv's tiles follow seqlen_q */
    tt_key k0 = {.head_dim = 64, .dtype = TT_DTYPE_FP16, .seqlen_q = 1, .seqlen_k = 0};
    size_t n0;
    ASSERT_OK(tt__space_enumerate(&k0, &d, 0, NULL, 1, &e, &n0, NULL, 0));
    free(e);
    ASSERT_EQ(n, n0);
}

TEST(bad_keys) {
    tt__device_limits d;
    tt__device_limits_nominal(90, &d);
    tt_key k = {.head_dim = 100, .dtype = TT_DTYPE_FP16};
    tt__space_entry *e;
    size_t n;
    char err[128];
    ASSERT_EQ(tt__space_enumerate(&k, &d, 0, NULL, 1, &e, &n, err, sizeof err), TT_ERR_UNSUPPORTED);
    k.head_dim = 64;
    k.dtype = (tt_dtype)5;
    ASSERT_EQ(tt__space_enumerate(&k, &d, 0, NULL, 1, &e, &n, err, sizeof err), TT_ERR_UNSUPPORTED);
}

/* The table: row i is family i, named as knobs.def names the family knob's
 * value; its files, functions and defaults are there; a knob it does not
 * read has no space list and a pinned value in range; a knob it reads has
 * one, in range. */
TEST(family_table_is_consistent) {
    const tt__knob *fk = tt__knob_find("family");
    ASSERT(fk && fk->names);
    ASSERT_EQ((size_t)(fk->max - fk->min + 1), tt__family_count);
    for (size_t i = 0; i < tt__family_count; i++) {
        const tt__family *f = tt__families[i];
        ASSERT_EQ((size_t)f->id, i);
        ASSERT(tt__family_of(f->id) == f);
        int32_t parsed = -1;
        ASSERT_OK(tt__knob_parse_value(fk, f->name, &parsed));
        ASSERT_EQ(parsed, f->id);
        ASSERT(f->files[0].name && f->files[0].text && *f->files[0].len > 0);
        ASSERT(f->check && f->registers && f->register_budget && f->smem_bytes && f->threads);
        ASSERT(f->arch_min >= 80 && f->arch_min <= f->arch_max && f->arch_suffix);
        /* a host-only knob is one the family reads; a second entry is for
         * its own launch path */
        ASSERT_EQ(f->host_knobs & ~f->reads, 0u);
        ASSERT(!f->entry2 || f->launch);
        /* A family with no default table of its own (ws, not yet a
         * default) runs where another family's table answers. */
        if (!f->defaults[0].lookup) {
            int covered = 0;
            for (size_t j = 0; j < tt__family_count; j++)
                for (int d = 0; d < 2 && tt__families[j]->defaults[d].lookup; d++) {
                    int32_t a = tt__families[j]->defaults[d].arch;
                    covered |= a == 0 ? tt__families[j]->arch_min <= f->arch_min &&
                                            tt__families[j]->arch_max >= f->arch_max
                                      : a == f->arch_min && a == f->arch_max;
                }
            if (!covered)
                TT_FAIL_AT("%s has no default table and no other family's covers its archs", f->name);
        }
        const tt__knob_values *lists = (const tt__knob_values *)&f->space;
        for (int k = 0; k < tt__knob_count(); k++) {
            const tt__knob *kn = tt__knob_at(k);
            if (k == TT__KNOB_family) continue;
            if (f->reads & (1u << k)) {
                if (lists[k].n < 1)
                    TT_FAIL_AT("%s reads %s but its space has no value for it", f->name, kn->name);
                for (int j = 0; j < lists[k].n; j++)
                    ASSERT(lists[k].v[j] >= kn->min && lists[k].v[j] <= kn->max);
            } else {
                if (lists[k].n != 0)
                    TT_FAIL_AT("%s lists values of %s, which it does not read", f->name, kn->name);
                int32_t pin = tt__knob_get(kn, &f->pinned);
                ASSERT(pin >= kn->min && pin <= kn->max);
            }
        }
    }
    ASSERT(tt__family_of(-1) == NULL);
    ASSERT(tt__family_of((int32_t)tt__family_count) == NULL);
}

/* No two variants of a key's space are the same kernel: configs differ in
 * a knob their family reads (the others are pinned). */
TEST(space_has_no_duplicate_kernels) {
    const int dims[] = {32, 64, 96, 128, 256};
    tt__device_limits d;
    ASSERT_OK(tt__device_limits_nominal(90, &d));
    for (int i = 0; i < 5; i++) {
        tt_key k = {.dtype = TT_DTYPE_FP16, .head_dim = dims[i]};
        tt__space_entry *e = NULL;
        size_t n = 0;
        ASSERT_OK(tt__space_enumerate(&k, &d, 0, NULL, 1, &e, &n, NULL, 0));
        for (size_t a = 0; a < n; a++)
            for (size_t b = a + 1; b < n; b++)
                ASSERT(!tt_config_equal(&e[a].variant.config, &e[b].variant.config));
        free(e);
    }
    /* a knob a family does not read is refused off its pinned value */
    tt_config c = wg(8, 128, 2);
    char err[256];
    c.q_in_regs = 1;
    ASSERT_EQ(tt__variant_check(&c, 128, NULL, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "q_in_regs=1");
}

/* Each family's shared memory and threads, computed by hand. */
TEST(family_smem_and_threads) {
    tt_config c = cfg(128, 64, 4, 2, TT_LAYOUT_SWIZZLE, 0);
    ASSERT_EQ(tt__config_smem_bytes(&c, 128), 2 * 128 * (128 + 4 * 64));
    c.layout = TT_LAYOUT_PAD; /* rows of 136 elements */
    ASSERT_EQ(tt__config_smem_bytes(&c, 128), 2 * 136 * (128 + 4 * 64));
    ASSERT_EQ(tt__config_threads(&c), 128);
    c = wg(12, 128, 2);
    ASSERT_EQ(tt__config_smem_bytes(&c, 128), 2 * 128 * (192 + 4 * 128) + 1024);
    ASSERT_EQ(tt__config_threads(&c), 384);
    c.family = 99;
    ASSERT_EQ(tt__config_smem_bytes(&c, 128), -1);
}

/* Bottom-right causal (2) is a variant of its own; other values are no key. */
TEST(causal_modes) {
    tt__device_limits d;
    ASSERT_OK(tt__device_limits_nominal(90, &d));
    tt_key k = {.dtype = TT_DTYPE_BF16, .head_dim = 128, .causal = 2, .seqlen_q = 4096, .seqlen_k = 1024};
    tt__space_entry *e = NULL;
    size_t n = 0;
    char err[256];
    ASSERT_OK(tt__space_enumerate(&k, &d, 0, NULL, 1, &e, &n, err, sizeof err));
    ASSERT(n > 0);
    for (size_t i = 0; i < n; i++) ASSERT_EQ(e[i].variant.causal, 2);
    free(e);
    k.causal = 3;
    ASSERT_EQ(tt__space_enumerate(&k, &d, 0, NULL, 1, &e, &n, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "causal");
    tt_key_v2 k2;
    k.causal = 2;
    tt__key_from_v1(&k, &k2);
    ASSERT_OK(tt__key_check(&k2, err, sizeof err));
    k2.causal = 3;
    ASSERT_EQ(tt__key_check(&k2, err, sizeof err), TT_ERR_RANGE);
    /* a bottom-right key takes the causal default */
    tt_config c1, c2;
    k.causal = 1;
    ASSERT_OK(tt_config_default(&k, &c1));
    k.causal = 2;
    ASSERT_OK(tt_config_default(&k, &c2));
    ASSERT(tt_config_equal(&c1, &c2));
}

TT_TEST_MAIN()
