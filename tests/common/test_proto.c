#include <stddef.h>
#include <string.h>

#include "common/proto.h"
#include "common/wire.h"
#include "tt_test.h"

static int parse(const char *text, tt__msg *m, const char **err) {
    static char buf[TT_LINE_MAX * 2];
    size_t n = strlen(text);
    memcpy(buf, text, n + 1);
    return tt__proto_parse(buf, n, m, err);
}

TEST(splits_verb_and_fields) {
    tt__msg m;
    const char *err;
    ASSERT_OK(parse("LOOKUP dtype=fp16  hdim=128 seqlen_q=1024", &m, &err));
    ASSERT_STREQ(m.verb, "LOOKUP");
    ASSERT_EQ(m.nfields, 3);
    ASSERT_STREQ(tt__msg_get(&m, "hdim"), "128");
    ASSERT(tt__msg_get(&m, "causal") == NULL);
}

TEST(rejects_each_malformed_class) {
    tt__msg m;
    const char *err;
    const char *bad[] = {"",
                         "   ",
                         "lookup",
                         "LOOKUP x",
                         "LOOKUP =1",
                         "LOOKUP a=",
                         "LOOKUP A=1",
                         "LOOKUP a=1 a=2",
                         "LOOKUP a=\x01",
                         "LOOKUP a=\xff",
                         "LOOKUP a=\xc0\xaf",
                         "LOOKUP a=\xed\xa0\x80",
                         "LOOK-UP"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (parse(bad[i], &m, &err) != TT_ERR_PROTO) TT_FAIL_AT("accepted \"%s\"", bad[i]);
    char nul[] = "PING a=b\0c";
    ASSERT_EQ(tt__proto_parse(nul, sizeof nul - 1, &m, &err), TT_ERR_PROTO);
    ASSERT_STREQ(err, "embedded NUL byte");
}

TEST(accepts_utf8_values_and_limits_length_and_fields) {
    tt__msg m;
    const char *err;
    ASSERT_OK(parse("HELLO client=t\xc3\xa9st\xe2\x82\xac", &m, &err));
    static char longline[TT_LINE_MAX + 2];
    memset(longline, 'a', sizeof longline - 1);
    memcpy(longline, "PING x=", 7);
    ASSERT_EQ(tt__proto_parse(longline, TT_LINE_MAX + 1, &m, &err), TT_ERR_PROTO);
    char many[1024] = "PING";
    for (int i = 0; i < TT_FIELDS_MAX + 1; i++) sprintf(many + strlen(many), " k%d=v", i);
    ASSERT_EQ(parse(many, &m, &err), TT_ERR_PROTO);
}

TEST(key_fields_round_trip) {
    tt__msg m;
    const char *err;
    char e[128];
    tt_key_v2 k, back;
    ASSERT_OK(parse("LOOKUP dtype=bf16 hdim=64 causal=1 seqlen_q=17 gpu=00ff", &m, &err));
    ASSERT_OK(tt__key_from_msg(&m, &k, e, sizeof e));
    ASSERT_EQ(k.seqlen_k, 17);
    ASSERT_STREQ(k.gpu, "00ff");
    char line[256] = "LOOKUP ";
    ASSERT(tt__key_format(&k, line + 7, sizeof line - 7) > 0);
    ASSERT_OK(parse(line, &m, &err));
    ASSERT_OK(tt__key_from_msg(&m, &back, e, sizeof e));
    ASSERT_OK(memcmp(&k, &back, sizeof k));
}

TEST(group_and_bottom_right_round_trip_and_canonicalize) {
    tt__msg m;
    const char *err;
    char e[128], line[256] = "LOOKUP ";
    tt_key_v2 k, back;
    ASSERT_OK(parse("LOOKUP dtype=bf16 hdim=128 causal=2 seqlen_q=8 seqlen_k=32768 group=8", &m, &err));
    ASSERT_OK(tt__key_from_msg(&m, &k, e, sizeof e));
    ASSERT_EQ(k.causal, 2);
    ASSERT_EQ(k.group, 8);
    ASSERT(tt__key_format(&k, line + 7, sizeof line - 7) > 0);
    ASSERT_CONTAINS(line, " group=8");
    ASSERT_OK(parse(line, &m, &err));
    ASSERT_OK(tt__key_from_msg(&m, &back, e, sizeof e));
    ASSERT_OK(memcmp(&k, &back, sizeof k));
    /* group 1 is left off the line: what a daemon without groups reads */
    k.group = 1;
    ASSERT(tt__key_format(&k, line + 7, sizeof line - 7) > 0);
    ASSERT(strstr(line, "group") == NULL);
    /* parsed keys are canonical */
    ASSERT_OK(parse("LOOKUP dtype=bf16 hdim=128 causal=2 seqlen_q=1 seqlen_k=32768", &m, &err));
    ASSERT_OK(tt__key_from_msg(&m, &k, e, sizeof e));
    ASSERT_EQ(k.causal, 0);
    ASSERT_OK(parse("LOOKUP dtype=bf16 hdim=128 seqlen_q=4096 group=8", &m, &err));
    ASSERT_OK(tt__key_from_msg(&m, &k, e, sizeof e));
    ASSERT_EQ(k.group, 1);
}

TEST(key_errors_name_the_field) {
    tt__msg m;
    const char *err;
    char e[128];
    tt_key_v2 k;
    struct {
        const char *line, *want;
        int rc;
    } cases[] = {
        {"LOOKUP hdim=64 seqlen_q=1", "dtype", TT_ERR_INVAL},
        {"LOOKUP dtype=fp32 hdim=64 seqlen_q=1", "fp32", TT_ERR_UNSUPPORTED},
        {"LOOKUP dtype=fp16 hdim=80 seqlen_q=1", "head_dim 80", TT_ERR_UNSUPPORTED},
        {"LOOKUP dtype=fp16 hdim=64 seqlen_q=0", "seqlen_q", TT_ERR_RANGE},
        {"LOOKUP dtype=fp16 hdim=64 seqlen_q=1x", "seqlen_q", TT_ERR_INVAL},
        {"LOOKUP dtype=fp16 hdim=64 seqlen_q=99999999999999999999", "seqlen_q", TT_ERR_RANGE},
        {"LOOKUP dtype=fp16 hdim=64 seqlen_q=4 causal=3", "causal", TT_ERR_RANGE},
        {"LOOKUP dtype=fp16 hdim=64 seqlen_q=4 group=0", "group", TT_ERR_RANGE},
        {"LOOKUP dtype=fp16 hdim=64 seqlen_q=4 group=257", "group", TT_ERR_RANGE},
        {"LOOKUP dtype=fp16 hdim=64 seqlen_q=4 rev=xyz", "rev", TT_ERR_INVAL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ASSERT_OK(parse(cases[i].line, &m, &err));
        int rc = tt__key_from_msg(&m, &k, e, sizeof e);
        if (rc != cases[i].rc) TT_FAIL_AT("%s: rc %d", cases[i].line, rc);
        ASSERT_CONTAINS(e, cases[i].want);
    }
}

/* The reader drops the one '\r' before '\n'; a second one is a control
 * character (both layers used to strip one, so "PING\r\r" was a PING). */
TEST(carriage_return_is_the_readers_and_only_one) {
    tt__msg m;
    const char *err;
    ASSERT_EQ(parse("PING\r", &m, &err), TT_ERR_PROTO);
    ASSERT_EQ(parse("LOOKUP dtype=fp16\r", &m, &err), TT_ERR_PROTO);
}

/* docs/protocol.md: the verb starts the line; a number is 0 or digits
 * without a leading zero, with an optional '-' (no -0, no +). */
TEST(grammar_refuses_space_before_verb_and_odd_numbers) {
    tt__msg m;
    const char *err;
    ASSERT_EQ(parse(" PING", &m, &err), TT_ERR_PROTO);
    ASSERT_STREQ(err, "space before the verb");
    int64_t v;
    const char *bad[] = {"007", "00", "-0", "-007", "+1", " 1", "1 ", "", "-", "0x10", "1e3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (tt__parse_i64(bad[i], INT64_MIN, INT64_MAX, &v) != TT_ERR_INVAL)
            TT_FAIL_AT("accepted \"%s\"", bad[i]);
    const char *good[] = {"0", "7", "-7", "10", "9223372036854775807", "-9223372036854775808"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        if (tt__parse_i64(good[i], INT64_MIN, INT64_MAX, &v) != 0) TT_FAIL_AT("refused \"%s\"", good[i]);
    ASSERT_EQ(tt__parse_i64("9223372036854775808", INT64_MIN, INT64_MAX, &v), TT_ERR_RANGE);
}

typedef struct req_t {
    int64_t job, all;
    char gpu[TT_ID_MAX];
    int fmt, dtype;
    tt__ints hd;
    const char *text;
} req_t;
static const tt__fspec spec[] = {
    {"job", TT_FT_INT, 1, 1, 100, 0, NULL, NULL, offsetof(req_t, job)},
    {"all", TT_FT_INT, 0, 0, 1, 7, NULL, NULL, offsetof(req_t, all)},
    {"gpu", TT_FT_HEX, 0, 0, 0, 0, NULL, NULL, offsetof(req_t, gpu)},
    {"format", TT_FT_WORD, 0, 0, 0, 0, (const char *const[]){"text", "prometheus", NULL}, NULL,
     offsetof(req_t, fmt)},
    {"dtype", TT_FT_DTYPE, 0, 0, 0, 0, NULL, NULL, offsetof(req_t, dtype)},
    {"hdim", TT_FT_INTS, 0, 1, 256, 0, NULL, NULL, offsetof(req_t, hd)},
    {"note", TT_FT_TEXT, 0, 0, 0, 0, NULL, NULL, offsetof(req_t, text)},
};
#define NS ((int)(sizeof spec / sizeof spec[0]))

static int decode(const char *line, req_t *r, uint32_t *has, char *e, size_t n) {
    tt__msg m;
    const char *err;
    ASSERT_OK(parse(line, &m, &err));
    return tt__fields_decode(&m, spec, NS, r, has, e, n);
}

TEST(field_table_fills_typed_request) {
    req_t r;
    uint32_t has;
    char e[160];
    ASSERT_OK(
        decode("X job=5 format=prometheus hdim=64,128 gpu=0a dtype=bf16 note=hi", &r, &has, e, sizeof e));
    ASSERT_EQ(r.job, 5);
    ASSERT_EQ(r.all, 7); /* the default */
    ASSERT(!TT_HAS(has, 1) && TT_HAS(has, 0) && TT_HAS(has, 5));
    ASSERT_EQ(r.fmt, 1);
    ASSERT_EQ(r.dtype, TT_DTYPE_BF16);
    ASSERT_EQ(r.hd.n, 2);
    ASSERT_EQ(r.hd.v[1], 128);
    ASSERT_STREQ(r.gpu, "0a");
    ASSERT_STREQ(r.text, "hi");
    ASSERT_OK(decode("X job=1", &r, &has, e, sizeof e));
    ASSERT_STREQ(r.gpu, "");
    ASSERT(r.text == NULL);
    ASSERT_EQ(r.hd.n, 0);
}

TEST(field_table_errors_name_the_field) {
    req_t r;
    uint32_t has;
    char e[160];
    struct {
        const char *line;
        int rc;
        const char *want;
    } cases[] = {
        {"X job=1 foo=2", TT_ERR_INVAL, "unknown field 'foo'"},
        {"X all=1", TT_ERR_INVAL, "missing field 'job'"},
        {"X job=abc", TT_ERR_RANGE, "job 'abc' is not a number"},
        {"X job=007", TT_ERR_RANGE, "not a number"},
        {"X job=101", TT_ERR_RANGE, "out of range 1..100"},
        {"X job=1 gpu=XYZ", TT_ERR_INVAL, "gpu"},
        {"X job=1 format=xml", TT_ERR_UNSUPPORTED, "format must be one of text, prometheus"},
        {"X job=1 dtype=fp8", TT_ERR_UNSUPPORTED, "dtype"},
        {"X job=1 hdim=64,,128", TT_ERR_RANGE, "empty"},
        {"X job=1 hdim=64,999", TT_ERR_RANGE, "hdim value '999' is out of range"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = decode(cases[i].line, &r, &has, e, sizeof e);
        if (rc != cases[i].rc) TT_FAIL_AT("%s: %d, want %d (%s)", cases[i].line, rc, cases[i].rc, e);
        ASSERT_CONTAINS(e, cases[i].want);
    }
}

/* The wire lists: every ERR word maps back to its status, and a handler
 * status to the first word with it. */
TEST(wire_words_round_trip) {
    for (int i = 0; i < TT_ERRC_COUNT; i++) ASSERT(tt__err_from_code(tt__errc_name((tt_errc)i)) < 0);
    ASSERT_EQ(tt__errc_from_status(TT_ERR_PROTO), TT_ERRC_PROTO);
    ASSERT_EQ(tt__errc_from_status(TT_ERR_INVAL), TT_ERRC_FIELD);
    ASSERT_EQ(tt__errc_from_status(TT_ERR_NOMEM), TT_ERRC_INTERNAL);
    ASSERT_EQ(tt__err_from_code("nonsense"), TT_ERR_REMOTE);
    ASSERT_EQ(tt__verb_find("LOOKUP"), TT_VERB_LOOKUP);
    ASSERT_EQ(tt__verb_find("lookup"), TT_VERB_OTHER);
    ASSERT_STREQ(tt__verb_name(TT_VERB_OTHER), "other");
    ASSERT_STREQ(tt__match_word(TT_MATCH_NEAREST), "nearest");
    ASSERT_STREQ(tt__job_state_word(4), "cancelled");
    ASSERT(tt__job_state_word(5) == NULL);
}

TEST(err_replies_split_code_and_message) {
    char line[] = "ERR permission changing verbs need admin rights";
    const char *code, *msg;
    ASSERT_OK(tt__reply_err(line, &code, &msg));
    ASSERT_STREQ(code, "permission");
    ASSERT_STREQ(msg, "changing verbs need admin rights");
    ASSERT_EQ(tt__err_from_code(code), TT_ERR_PERM);
    char ok[] = "OK pong";
    ASSERT_EQ(tt__reply_err(ok, &code, &msg), TT_ERR_PROTO);
}

/* Free text crosses the worker pipe percent-encoded, one pair for both
 * ends: what the worker encodes the daemon reads back, a control
 * character never comes through. */
TEST(percent_encoding_round_trips_and_drops_control_characters) {
    char enc[64], dec[64];
    tt__pct_encode("NVIDIA H200 =100%", enc, sizeof enc);
    ASSERT_STREQ(enc, "NVIDIA%20H200%20%3D100%25");
    tt__pct_decode(enc, dec, sizeof dec);
    ASSERT_STREQ(dec, "NVIDIA H200 =100%");
    tt__pct_decode("Bad%0AGPU%00x%7f", dec, sizeof dec);
    ASSERT_STREQ(dec, "Bad?GPU?x?");
    tt__pct_decode("50%zz%4", dec, sizeof dec); /* not an escape: kept as it is */
    ASSERT_STREQ(dec, "50%zz%4");
    tt__pct_encode("a b c d", enc, 8); /* cut at a whole escape */
    ASSERT_STREQ(enc, "a%20");
    tt__pct_decode("abcdef", dec, 4);
    ASSERT_STREQ(dec, "abc");
}

TT_TEST_MAIN()
