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
    ASSERT_STREQ(buf, "family=mma,block_m=128,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=1,split_ctas=2");
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
    ASSERT_OK(tt_config_parse("split_ctas=2,q_in_regs=0,layout=0,stages=1,warps=8,block_n=32,block_m=64,family=3", &c));
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
        "family=mma",                                                                     /* missing */
        "family=mma,block_m=128,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=1,x=1", /* unknown */
        "family=mma,block_m=128,block_m=128,warps=4,stages=2,layout=swizzle,q_in_regs=1", /* dup */
        "family=mma,block_m=12x,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=1",  /* nan */
        "family=mma,block_m=1024,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=1", /* range */
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
        tt_key k;
        memset(&k, 0, sizeof k);
        k.head_dim = dims[i];
        k.seqlen_q = k.seqlen_k = 1024;
        tt_config c;
        ASSERT_OK(tt_config_default(&k, &c));
        ASSERT_OK(tt__config_check_ranges(&c, NULL, 0));
    }
    tt_key k = {.head_dim = 80, .seqlen_q = 1, .seqlen_k = 1};
    tt_config c;
    ASSERT_EQ(tt_config_default(&k, &c), TT_ERR_UNSUPPORTED);
}

TEST(key_check_names_what_is_wrong) {
    tt_key k;
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

TEST(strerror_names_every_code) {
    for (int c = TT_FALLBACK; c >= TT_ERR_REMOTE; c--) ASSERT(strcmp(tt_strerror(c), "unknown error") != 0);
    ASSERT_STREQ(tt_strerror(-999), "unknown error");
    ASSERT_STREQ(tt_match_name(TT_MATCH_NEAREST), "nearest");
}

TT_TEST_MAIN()
