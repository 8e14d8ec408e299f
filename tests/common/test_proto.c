#include <string.h>

#include "common/proto.h"
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
    ASSERT_OK(parse("LOOKUP dtype=fp16  hdim=128 seqlen_q=1024\r", &m, &err));
    ASSERT_STREQ(m.verb, "LOOKUP");
    ASSERT_EQ(m.nfields, 3);
    ASSERT_STREQ(tt__msg_get(&m, "hdim"), "128");
    ASSERT(tt__msg_get(&m, "causal") == NULL);
}

TEST(rejects_each_malformed_class) {
    tt__msg m;
    const char *err;
    const char *bad[] = {"", "   ", "lookup", "LOOKUP x", "LOOKUP =1", "LOOKUP a=", "LOOKUP A=1",
                         "LOOKUP a=1 a=2", "LOOKUP a=\x01", "LOOKUP a=\xff", "LOOKUP a=\xc0\xaf",
                         "LOOKUP a=\xed\xa0\x80", "LOOK-UP"};
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

TEST(field_check_reports_unknown_and_missing) {
    tt__msg m;
    const char *err;
    char e[128];
    static const char *const allowed[] = {"job", NULL}, *const required[] = {"job", NULL};
    ASSERT_OK(parse("CANCEL job=1 foo=2", &m, &err));
    ASSERT_EQ(tt__msg_check(&m, allowed, required, e, sizeof e), TT_ERR_INVAL);
    ASSERT_CONTAINS(e, "foo");
    ASSERT_OK(parse("CANCEL", &m, &err));
    ASSERT_EQ(tt__msg_check(&m, allowed, required, e, sizeof e), TT_ERR_INVAL);
    ASSERT_CONTAINS(e, "missing field 'job'");
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

TT_TEST_MAIN()
