#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/key.h"
#include "tt_test.h"

static tt_config sample(void) {
    tt_config c;
    memset(&c, 0, sizeof c);
    c.family = TT_FAMILY_MMA;
    c.block_m = 128;
    c.block_n = 64;
    c.warps = 4;
    c.stages = 2;
    c.layout = TT_LAYOUT_SWIZZLE;
    c.q_in_regs = 1;
    return c;
}

TEST(canonical_text_names_every_knob_in_order) {
    tt_config c = sample();
    char buf[TT_CONFIG_TEXT_MAX];
    int n = tt_config_format(&c, buf, sizeof buf);
    ASSERT(n > 0);
    ASSERT_STREQ(buf, "family=mma,block_m=128,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=1");
    ASSERT_EQ(n, (int)strlen(buf));
    /* a knob added after the first release appears only when not neutral */
    c.split_ctas = 2;
    n = tt_config_format(&c, buf, sizeof buf);
    ASSERT_STREQ(
        buf, "family=mma,block_m=128,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=1,split_ctas=2");
    ASSERT_EQ(n, (int)strlen(buf));
}

TEST(text_parses_back_to_the_same_config) {
    tt_config c = sample(), back;
    char buf[TT_CONFIG_TEXT_MAX];
    for (int layout = 0; layout <= 1; layout++)
        for (int st = 1; st <= 4; st++) {
            c.layout = layout;
            c.stages = st;
            c.split_ctas = st % 2 ? 0 : st;
            ASSERT(tt_config_format(&c, buf, sizeof buf) > 0);
            ASSERT_OK(tt_config_parse(buf, &back));
            ASSERT(tt_config_equal(&c, &back));
            ASSERT_OK(memcmp(&c, &back, sizeof c));
        }
}

TEST(parse_accepts_any_order_and_numeric_enums) {
    tt_config c;
    ASSERT_OK(tt_config_parse(
        "split_ctas=2,q_in_regs=0,layout=0,stages=1,warps=8,block_n=32,block_m=64,family=3", &c));
    ASSERT_EQ(c.block_m, 64);
    ASSERT_EQ(c.warps, 8);
    ASSERT_EQ(c.layout, TT_LAYOUT_PAD);
    ASSERT_EQ(c.family, TT_FAMILY_SPLITKV);
    ASSERT_EQ(c.split_ctas, 2);
    /* a text without it (an older daemon's, a stored record) reads it as 0 */
    ASSERT_OK(tt_config_parse("q_in_regs=0,layout=0,stages=1,warps=8,block_n=32,block_m=64,family=0", &c));
    ASSERT_EQ(c.split_ctas, 0);
}

TEST(parse_rejects_malformed_text) {
    tt_config c = sample(), before = c;
    const char *bad[] = {
        "",
        "family=mma",                                                                        /* missing */
        "family=mma,block_m=128,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=1,x=1", /* unknown */
        "family=mma,block_m=128,block_m=128,warps=4,stages=2,layout=swizzle,q_in_regs=1",    /* dup */
        "family=mma,block_m=12x,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=1",     /* nan */
        "family=mma,block_m=1024,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=1",    /* range */
        "family=wgmmm,block_m=128,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=1",
        "family=mma,block_m=128,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=1,",
        "family=mma,,block_m=128",
        "family=mma,block_m=+128,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (tt_config_parse(bad[i], &c) == 0) TT_FAIL_AT("accepted \"%s\"", bad[i]);
        ASSERT_OK(memcmp(&c, &before, sizeof c)); /* out untouched on failure */
    }
}

TEST(format_refuses_out_of_range_and_short_buffers) {
    tt_config c = sample();
    char buf[TT_CONFIG_TEXT_MAX];
    ASSERT_EQ(tt_config_format(&c, buf, 10), TT_ERR_RANGE);
    /* one byte short of the text and its NUL: the buffer stays as it was */
    int n = tt_config_format(&c, buf, sizeof buf);
    ASSERT(n > 0);
    memset(buf, 'x', sizeof buf);
    ASSERT_EQ(tt_config_format(&c, buf, (size_t)n), TT_ERR_RANGE);
    for (size_t i = 0; i < sizeof buf; i++) ASSERT_EQ(buf[i], 'x');
    ASSERT_EQ(tt_config_format(&c, buf, (size_t)n + 1), n);
    c.stages = 99;
    ASSERT_EQ(tt_config_format(&c, buf, sizeof buf), TT_ERR_RANGE);
}

TEST(knob_table_walks_every_field) {
    ASSERT_EQ(tt__knob_count(), 8);
    ASSERT_STREQ(tt__knob_at(0)->name, "family");
    ASSERT_STREQ(tt__knob_find("block_n")->macro, "TT_BLOCK_N");
    tt_config c = sample();
    tt__knob_set(tt__knob_find("warps"), &c, 8);
    ASSERT_EQ(c.warps, 8);
    ASSERT(tt__knob_find("reserved") == NULL);
}

TEST(defaults_exist_for_every_supported_key) {
    int dims[] = {32, 64, 96, 128, 256};
    for (int i = 0; i < 5; i++) {
        tt_key_v2 k;
        memset(&k, 0, sizeof k);
        k.head_dim = dims[i];
        k.seqlen_q = k.seqlen_k = 1024;
        tt_config c;
        ASSERT_OK(tt_config_default_v2(&k, &c));
        ASSERT_OK(tt__config_check_ranges(&c, NULL, 0));
    }
    tt_key_v2 k = {.head_dim = 80, .seqlen_q = 1, .seqlen_k = 1};
    tt_config c;
    ASSERT_EQ(tt_config_default_v2(&k, &c), TT_ERR_UNSUPPORTED);
}

TEST(key_check_names_what_is_wrong) {
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    k.head_dim = 128;
    k.seqlen_q = k.seqlen_k = 4096;
    char err[128];
    ASSERT_OK(tt__key_check(&k, err, sizeof err));
    k.head_dim = 48;
    ASSERT_EQ(tt__key_check(&k, err, sizeof err), TT_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(err, "head_dim 48");
    k.head_dim = 64;
    k.seqlen_k = 0;
    ASSERT_EQ(tt__key_check(&k, err, sizeof err), TT_ERR_RANGE);
    ASSERT_CONTAINS(err, "seqlen_k");
    k.seqlen_k = 1;
    strcpy(k.gpu, "XYZ");
    ASSERT_EQ(tt__key_check(&k, err, sizeof err), TT_ERR_INVAL);
}

TEST(regimes_split_at_16_query_rows_and_a_4x_longer_cache) {
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    struct {
        int64_t q, k;
        tt__regime want;
    } cases[] = {
        {1, 1, TT_REGIME_DECODE},        {1, 131072, TT_REGIME_DECODE},
        {16, 16, TT_REGIME_DECODE},      {16, 1 << 20, TT_REGIME_DECODE},
        {17, 68, TT_REGIME_CHUNK},       {17, 67, TT_REGIME_PREFILL},
        {512, 2048, TT_REGIME_CHUNK},    {512, 2047, TT_REGIME_PREFILL},
        {512, 32768, TT_REGIME_CHUNK},   {4096, 4096, TT_REGIME_PREFILL},
        {4096, 1024, TT_REGIME_PREFILL}, {TT_SEQLEN_MAX / 4, TT_SEQLEN_MAX, TT_REGIME_CHUNK},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        k.seqlen_q = cases[i].q;
        k.seqlen_k = cases[i].k;
        if (tt__key_regime(&k) != cases[i].want)
            TT_FAIL_AT("q %lld k %lld: %s", (long long)k.seqlen_q, (long long)k.seqlen_k,
                       tt__regime_name(tt__key_regime(&k)));
    }
    ASSERT_STREQ(tt__regime_name(TT_REGIME_DECODE), "decode");
    ASSERT_STREQ(tt__regime_name(TT_REGIME_CHUNK), "chunk");
    ASSERT_STREQ(tt__regime_name(TT_REGIME_PREFILL), "prefill");
}

TEST(canonical_keys_fold_equal_masks_and_prefill_groups) {
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    k.seqlen_q = 1;
    k.seqlen_k = 4096;
    k.causal = TT_CAUSAL_BOTTOM_RIGHT;
    tt__key_canon(&k);
    ASSERT_EQ(k.causal, TT_CAUSAL_NONE);
    ASSERT_EQ(k.group, 1);         /* 0 reads as 1 */
    k.causal = TT_CAUSAL_TOP_LEFT; /* one query row sees key 0 only: kept */
    tt__key_canon(&k);
    ASSERT_EQ(k.causal, TT_CAUSAL_TOP_LEFT);
    k.seqlen_q = 8;
    k.causal = TT_CAUSAL_BOTTOM_RIGHT;
    k.group = 8;
    tt__key_canon(&k);
    ASSERT_EQ(k.causal, TT_CAUSAL_BOTTOM_RIGHT);
    ASSERT_EQ(k.group, 8);
    k.seqlen_q = k.seqlen_k = 2048;
    tt__key_canon(&k);
    ASSERT_EQ(k.causal, TT_CAUSAL_TOP_LEFT);
    ASSERT_EQ(k.group, 1); /* prefill */
}

TEST(key_check_takes_three_causal_values_and_groups_to_256) {
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    k.head_dim = 128;
    k.seqlen_q = k.seqlen_k = 64;
    char err[128];
    for (int c = 0; c <= 2; c++) {
        k.causal = c;
        ASSERT_OK(tt__key_check(&k, err, sizeof err));
    }
    k.causal = 3;
    ASSERT_EQ(tt__key_check(&k, err, sizeof err), TT_ERR_RANGE);
    ASSERT_CONTAINS(err, "bottom-right");
    k.causal = 0;
    k.group = 256;
    ASSERT_OK(tt__key_check(&k, err, sizeof err));
    k.group = 257;
    ASSERT_EQ(tt__key_check(&k, err, sizeof err), TT_ERR_RANGE);
    k.group = -1;
    ASSERT_EQ(tt__key_check(&k, err, sizeof err), TT_ERR_RANGE);
}

TEST(inference_grid_is_the_documented_list) {
    size_t n = tt__inference_grid(NULL, 0);
    tt_key_v2 *keys = calloc(n, sizeof *keys);
    ASSERT(keys != NULL);
    ASSERT_EQ(tt__inference_grid(keys, n), n);
    /* 7 seqlen_q x 5 seqlen_k x 3 groups x 2 head dims x 2 dtypes, less
     * the prefill keys' repeats over groups: seqlen_q 512 over 1k */
    ASSERT_EQ(n, (size_t)(7 * 5 * 3 - 2) * 2 * 2);
    size_t per_regime[3] = {0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        char err[128];
        if (tt__key_check(&keys[i], err, sizeof err) < 0) TT_FAIL_AT("key %zu: %s", i, err);
        tt_key_v2 c = keys[i];
        tt__key_canon(&c);
        ASSERT(memcmp(&c, &keys[i], sizeof c) == 0); /* canonical */
        ASSERT_EQ(keys[i].causal, keys[i].seqlen_q > 1 ? TT_CAUSAL_BOTTOM_RIGHT : TT_CAUSAL_NONE);
        per_regime[tt__key_regime(&keys[i])]++;
        for (size_t j = 0; j < i; j++)
            if (memcmp(&keys[i], &keys[j], sizeof keys[i]) == 0) TT_FAIL_AT("key %zu repeats %zu", i, j);
    }
    ASSERT_EQ(per_regime[TT_REGIME_DECODE], (size_t)5 * 5 * 3 * 4);
    ASSERT_EQ(per_regime[TT_REGIME_PREFILL], (size_t)1 * 4);
    free(keys);
}

TEST(defaults_route_through_the_regime) {
    /* one table per regime and arch: decode and chunks run splitkv,
     * prefill the dense rows, where both causal alignments take the
     * causal row */
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    k.head_dim = 128;
    tt_config pre, dec, chunk, br;
    k.seqlen_q = k.seqlen_k = 4096;
    ASSERT_OK(tt_config_default_v2(&k, &pre));
    k.seqlen_q = 1;
    k.seqlen_k = 32768;
    ASSERT_OK(tt_config_default_v2(&k, &dec));
    k.seqlen_q = 512;
    ASSERT_OK(tt_config_default_v2(&k, &chunk));
    ASSERT_EQ(pre.family, TT_FAMILY_MMA);
    ASSERT_EQ(dec.family, TT_FAMILY_SPLITKV);
    ASSERT_EQ(dec.block_m, 16);
    ASSERT_EQ(chunk.family, TT_FAMILY_SPLITKV);
    ASSERT_EQ(chunk.block_m, 128);
    k.seqlen_q = k.seqlen_k = 4096;
    k.causal = TT_CAUSAL_TOP_LEFT;
    ASSERT_OK(tt_config_default_v2(&k, &pre));
    k.causal = TT_CAUSAL_BOTTOM_RIGHT;
    ASSERT_OK(tt_config_default_v2(&k, &br));
    ASSERT(tt_config_equal(&pre, &br));
    tt_key k1;
    tt__key_to_v1(&k, &k1);
    ASSERT_OK(tt_config_default(&k1, &dec));
    ASSERT(tt_config_equal(&dec, &br));
    /* sm_90: ws, bottom-right included, but wgmma where rows see no key
     * (bottom-right, more queries than keys: ws's loop does not take it) */
    ASSERT_OK(tt__config_default_sm90(&k, &dec));
    ASSERT_EQ(dec.family, TT_FAMILY_WS);
    k.seqlen_k = 1024;
    ASSERT_OK(tt__config_default_sm90(&k, &dec));
    ASSERT_EQ(dec.family, TT_FAMILY_WGMMA);
    k.seqlen_k = 4096;
    k.causal = TT_CAUSAL_TOP_LEFT;
    ASSERT_OK(tt__config_default_sm90(&k, &dec));
    ASSERT_EQ(dec.family, TT_FAMILY_WS);
}

/* A call the default's family cannot take runs another family's default:
 * sm_90's other dense rows, else the portable one; never the same family. */
TEST(default_of_another_family) {
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    k.head_dim = 128;
    k.seqlen_q = k.seqlen_k = 4096;
    tt_config c;
    ASSERT_OK(tt__config_default_other(&k, 90, TT_FAMILY_WS, &c));
    ASSERT_EQ(c.family, TT_FAMILY_WGMMA);
    ASSERT_OK(tt__config_default_other(&k, 90, TT_FAMILY_WGMMA, &c));
    ASSERT_EQ(c.family, TT_FAMILY_WS);
    ASSERT_OK(tt__config_default_other(&k, 80, TT_FAMILY_WS, &c));
    ASSERT_EQ(c.family, TT_FAMILY_MMA);
    ASSERT_EQ(tt__config_default_other(&k, 80, TT_FAMILY_MMA, &c), TT_ERR_UNSUPPORTED);
    /* d96: no sm_90 row; the portable mma one */
    k.head_dim = 96;
    ASSERT_OK(tt__config_default_other(&k, 90, TT_FAMILY_WS, &c));
    ASSERT_EQ(c.family, TT_FAMILY_MMA);
}

/* sm_90 prefill rows pinned to the H200 tunes' winners (docs/perf.md,
 * defaults v5): a row's change must come with a measurement. */
static tt_config sm90_default(int d, int causal, int64_t lq, int64_t lk) {
    const tt_key_v2 k = {
        .dtype = TT_DTYPE_BF16, .head_dim = d, .causal = causal, .seqlen_q = lq, .seqlen_k = lk};
    tt_config c;
    memset(&c, 0, sizeof c);
    ASSERT_OK(tt__config_default_sm90(&k, &c));
    return c;
}

TEST(sm90_prefill_defaults_follow_the_measured_winners) {
    /* d64 non-causal: 128-row tiles where 192 rows would pad the queries */
    ASSERT_EQ(sm90_default(64, 0, 256, 256).block_m, 128);
    ASSERT_EQ(sm90_default(64, 0, 512, 512).block_m, 192);
    /* d64 causal: wgmma to 1024, the persistent grid to 8k, then one CTA a tile */
    ASSERT_EQ(sm90_default(64, 1, 1024, 1024).family, TT_FAMILY_WGMMA);
    tt_config c = sm90_default(64, 1, 8192, 8192);
    ASSERT_EQ(c.family, TT_FAMILY_WS);
    ASSERT_EQ(c.q_in_regs, 1);
    ASSERT_EQ(sm90_default(64, 1, 16384, 16384).q_in_regs, 0);
    /* d128, both masks: 128x128 persistent without ping-pong to 16k, 192x80 past */
    for (int causal = 0; causal <= 1; causal++) {
        c = sm90_default(128, causal, 512, 512);
        ASSERT_EQ(c.block_m, 128);
        ASSERT_EQ(c.block_n, 128);
        ASSERT_EQ(c.layout, 0);
        ASSERT_EQ(c.q_in_regs, 1);
        ASSERT_EQ(sm90_default(128, causal, 16384, 16384).block_m, 128);
        c = sm90_default(128, causal, 32768, 32768);
        ASSERT_EQ(c.block_m, 192);
        ASSERT_EQ(c.block_n, 80);
        ASSERT_EQ(c.q_in_regs, 1);
    }
    /* a 512-token chunk over a long cache that fills the GPU keeps the
     * ping-pong schedule */
    tt_key_v2 k = {.dtype = TT_DTYPE_BF16, .head_dim = 128, .seqlen_q = 512, .seqlen_k = 32768};
    for (int causal = 0; causal <= 1; causal++) {
        k.causal = causal ? TT_CAUSAL_BOTTOM_RIGHT : TT_CAUSAL_NONE;
        ASSERT_OK(tt__config_default_dense_filled(&k, 90, 0, &c));
        ASSERT_EQ(c.family, TT_FAMILY_WS);
        ASSERT_EQ(c.block_m, 128);
        ASSERT_EQ(c.layout, 1);
    }
}

TEST(strerror_names_every_code) {
    for (int c = TT_FALLBACK; c >= TT_ERR_REMOTE; c--) ASSERT(strcmp(tt_strerror(c), "unknown error") != 0);
    ASSERT_STREQ(tt_strerror(-999), "unknown error");
    ASSERT_STREQ(tt_match_name(TT_MATCH_NEAREST), "nearest");
}

TT_TEST_MAIN()
