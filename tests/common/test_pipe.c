/*
 * The worker pipe protocol's table (common/pipe.h): every message written
 * and read back is the same message; the lines docs/worker-protocol.md
 * shows are what the table writes; a line or a message the table does not
 * allow is refused, by the reader and by the writer.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/pipe.h"
#include "tt_test.h"

#define CFG "family=mma,block_m=128,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=0"

static tt_config cfg_of(const char *text) {
    tt_config c;
    if (tt_config_parse(text, &c) < 0) TT_FAIL_AT("bad config %s", text);
    return c;
}

/* Each message with every field of its table carried. */
static void full(tt__pipe_kind kind, tt__pipe_msg *m) {
    tt__pipe_init(m, kind);
    switch (kind) {
    case TT_PIPE_HELLO:
        TT_PIPE_SET(m, hello, proto, 1);
        TT_PIPE_SET_TEXT(m, hello, rev, "b0a61270c5030cf6");
        TT_PIPE_SET(m, hello, gpu_count, 2);
        TT_PIPE_SET(m, hello, index, 1);
        TT_PIPE_SET_TEXT(m, hello, name, "NVIDIA H200 =100% \xc3\xa9");
        TT_PIPE_SET(m, hello, cc_major, 9);
        TT_PIPE_SET(m, hello, cc_minor, 0);
        TT_PIPE_SET(m, hello, sms, 132);
        TT_PIPE_SET(m, hello, mem_bytes, 150754820096LL);
        TT_PIPE_SET_TEXT(m, hello, driver, "570.86.15");
        TT_PIPE_SET_TEXT(m, hello, cuda, "13.0");
        TT_PIPE_SET_TEXT(m, hello, nvrtc, "13.0 (V13.0.88)");
        break;
    case TT_PIPE_TRY:
        TT_PIPE_SET(m, try, id, 7);
        TT_PIPE_SET(m, try, config, cfg_of(CFG));
        break;
    case TT_PIPE_RESULT:
        TT_PIPE_SET(m, result, id, 7);
        TT_PIPE_SET(m, result, status, TT__N_MEAS_SKIPPED);
        TT_PIPE_SET(m, result, config, cfg_of(CFG));
        TT_PIPE_SET(m, result, batch, 4);
        TT_PIPE_SET(m, result, heads, 16);
        TT_PIPE_SET(m, result, regs, 168);
        TT_PIPE_SET(m, result, smem_bytes, 49152);
        TT_PIPE_SET(m, result, spill_bytes, 0);
        TT_PIPE_SET(m, result, time_ms, 0.412);
        TT_PIPE_SET(m, result, tflops, 333.6);
        TT_PIPE_SET(m, result, time_min_ms, 0.408123);
        TT_PIPE_SET(m, result, spread, 0.004);
        TT_PIPE_SET(m, result, reps, 50);
        TT_PIPE_SET(m, result, nonfinite, 3);
        TT_PIPE_SET(m, result, rel_err, 1.5e-05);
        TT_PIPE_SET(m, result, lse_err, 0.00123);
        TT_PIPE_SET(m, result, sm_clock_mhz, 1980);
        TT_PIPE_SET(m, result, temp_c, 45);
        TT_PIPE_SET(m, result, busy, 1);
        TT_PIPE_SET(m, result, reason, "deadline");
        break;
    case TT_PIPE_DONE:
        TT_PIPE_SET(m, done, id, 7);
        TT_PIPE_SET(m, done, status, TT_PIPE_KEY_FAILED);
        TT_PIPE_SET(m, done, reason, "no-correct-variant");
        break;
    case TT_PIPE_MEASURE: {
        tt_key_v2 k = {0};
        k.dtype = TT_DTYPE_BF16;
        k.head_dim = 128;
        k.causal = 2;
        k.seqlen_q = 1024;
        k.seqlen_k = 8192;
        k.group = 4;
        snprintf(k.gpu, sizeof k.gpu, "5d1c0e0f9a3b7c21");
        snprintf(k.rev, sizeof k.rev, "b0a61270c5030cf6");
        TT_PIPE_SET(m, measure, id, 1);
        TT_PIPE_SET(m, measure, job, 3);
        TT_PIPE_SET(m, measure, seq, 12);
        tt__pipe_measure_set_key(m, &k);
        TT_PIPE_SET(m, measure, mode, TT__N_MODE_FAST);
        TT_PIPE_SET(m, measure, batch, 2);
        TT_PIPE_SET(m, measure, heads, 32);
        TT_PIPE_SET(m, measure, avoid, 4096);
        break;
    }
    case TT_PIPE_AVOID: TT_PIPE_SET(m, avoid, config, cfg_of(CFG)); break;
    case TT_PIPE_OTHER: break;
    }
}

/* b read back from a: the same message (every field compared by the table;
 * reals exactly: the test values have at most 6 significant digits). */
static void assert_same(const tt__pipe_msg *a, const tt__pipe_msg *b) {
    const char *d = tt__pipe_diff(a, b, 0);
    if (d) TT_FAIL_AT("%s: %s differs after the round trip", tt__pipe_word(a->kind), d);
}

static int parse(const char *text, tt__pipe_msg *m, char *err, size_t errlen) {
    static char buf[TT_LINE_MAX * 2];
    size_t n = strlen(text);
    memcpy(buf, text, n + 1);
    return tt__pipe_parse(buf, n, m, err, errlen);
}

TEST(every_message_round_trips_with_every_field) {
    for (int k = 0; k < TT_PIPE_KINDS; k++) {
        tt__pipe_msg m, back;
        char line[TT_LINE_MAX + 1], err[256];
        int n;
        full((tt__pipe_kind)k, &m);
        tt__pipe_spec((tt__pipe_kind)k, &n);
        /* a field added to a table without a value here fails here */
        if (m.has != (n == 32 ? ~0u : (1u << n) - 1))
            TT_FAIL_AT("%s: a field without a test value", tt__pipe_word(m.kind));
        int len = tt__pipe_format(&m, line, sizeof line, err, sizeof err);
        if (len < 0) TT_FAIL_AT("%s: %s", tt__pipe_word(m.kind), err);
        ASSERT_EQ((size_t)len, strlen(line));
        if (parse(line, &back, err, sizeof err) < 0) TT_FAIL_AT("%s: %s", line, err);
        assert_same(&m, &back);
    }
}

TEST(a_message_with_only_its_required_fields_round_trips) {
    for (int k = 0; k < TT_PIPE_KINDS; k++) {
        tt__pipe_msg m, back;
        char line[TT_LINE_MAX + 1], err[256];
        int n;
        full((tt__pipe_kind)k, &m);
        const tt__fspec *spec = tt__pipe_spec((tt__pipe_kind)k, &n);
        tt__pipe_msg bare = m;
        bare.has = 0;
        for (int i = 0; i < n; i++)
            if (spec[i].required) bare.has |= 1u << i;
        if (tt__pipe_format(&bare, line, sizeof line, err, sizeof err) < 0) TT_FAIL_AT("%s", err);
        if (parse(line, &back, err, sizeof err) < 0) TT_FAIL_AT("%s: %s", line, err);
        assert_same(&bare, &back); /* the absent ones at their defaults */
    }
}

/* The lines of docs/worker-protocol.md, as both ends wrote them by hand
 * before the table. */
TEST(the_table_writes_the_documented_lines) {
    tt__pipe_msg m;
    char line[TT_LINE_MAX + 1], err[256];
    tt__pipe_init(&m, TT_PIPE_HELLO);
    TT_PIPE_SET(&m, hello, proto, 1);
    TT_PIPE_SET_TEXT(&m, hello, rev, "b0a61270c5030cf6");
    TT_PIPE_SET(&m, hello, gpu_count, 1);
    TT_PIPE_SET(&m, hello, index, 0);
    TT_PIPE_SET_TEXT(&m, hello, name, "NVIDIA H200");
    TT_PIPE_SET(&m, hello, cc_major, 9);
    TT_PIPE_SET(&m, hello, cc_minor, 0);
    TT_PIPE_SET(&m, hello, sms, 132);
    TT_PIPE_SET(&m, hello, mem_bytes, 150754820096LL);
    TT_PIPE_SET_TEXT(&m, hello, driver, "570.86.15");
    TT_PIPE_SET_TEXT(&m, hello, cuda, "13.0");
    TT_PIPE_SET_TEXT(&m, hello, nvrtc, "13.0");
    ASSERT(tt__pipe_format(&m, line, sizeof line, err, sizeof err) > 0);
    ASSERT_STREQ(line, "HELLO proto=1 rev=b0a61270c5030cf6 gpu_count=1 index=0 name=NVIDIA%20H200 cc_major=9 "
                       "cc_minor=0 sms=132 mem_bytes=150754820096 driver=570.86.15 cuda=13.0 nvrtc=13.0");
    tt__pipe_init(&m, TT_PIPE_HELLO);
    TT_PIPE_SET(&m, hello, proto, 1);
    TT_PIPE_SET_TEXT(&m, hello, rev, "00c0ffee");
    TT_PIPE_SET(&m, hello, gpu_count, 0);
    TT_PIPE_SET_TEXT(&m, hello, name, ""); /* no GPU: left out */
    ASSERT(tt__pipe_format(&m, line, sizeof line, err, sizeof err) > 0);
    ASSERT_STREQ(line, "HELLO proto=1 rev=00c0ffee gpu_count=0");

    tt_key_v2 k = {0};
    k.dtype = TT_DTYPE_FP16;
    k.head_dim = 128;
    k.seqlen_q = k.seqlen_k = 4096;
    k.group = 1;
    snprintf(k.gpu, sizeof k.gpu, "5d1c0e0f9a3b7c21");
    snprintf(k.rev, sizeof k.rev, "b0a61270c5030cf6");
    tt__pipe_init(&m, TT_PIPE_MEASURE);
    TT_PIPE_SET(&m, measure, id, 1);
    TT_PIPE_SET(&m, measure, job, 3);
    TT_PIPE_SET(&m, measure, seq, 0);
    tt__pipe_measure_set_key(&m, &k);
    TT_PIPE_SET(&m, measure, mode, TT__N_MODE_EXHAUSTIVE);
    TT_PIPE_SET(&m, measure, batch, 0);
    TT_PIPE_SET(&m, measure, heads, 0);
    TT_PIPE_SET(&m, measure, avoid, 1);
    ASSERT(tt__pipe_format(&m, line, sizeof line, err, sizeof err) > 0);
    ASSERT_STREQ(line, "MEASURE id=1 job=3 seq=0 dtype=fp16 hdim=128 causal=0 seqlen_q=4096 seqlen_k=4096 "
                       "gpu=5d1c0e0f9a3b7c21 rev=b0a61270c5030cf6 mode=exhaustive batch=0 heads=0 avoid=1");
    char key[256];
    ASSERT(tt__key_format(&k, key, sizeof key) > 0);
    ASSERT(strstr(line, key) != NULL); /* the key as LOOKUP writes it */

    tt__pipe_init(&m, TT_PIPE_RESULT);
    TT_PIPE_SET(&m, result, id, 1);
    TT_PIPE_SET(&m, result, status, TT__N_MEAS_OK);
    TT_PIPE_SET(&m, result, config, cfg_of(CFG));
    TT_PIPE_SET(&m, result, batch, 4);
    TT_PIPE_SET(&m, result, heads, 16);
    TT_PIPE_SET(&m, result, time_ms, 0.412);
    TT_PIPE_SET(&m, result, tflops, 333.6);
    TT_PIPE_SET(&m, result, spread, 0.004);
    TT_PIPE_SET(&m, result, reps, 50);
    ASSERT(tt__pipe_format(&m, line, sizeof line, err, sizeof err) > 0);
    ASSERT_STREQ(line, "RESULT id=1 status=ok config=" CFG " batch=4 heads=16 time_ms=0.412 tflops=333.6 "
                       "spread=0.004 reps=50");
    tt__pipe_init(&m, TT_PIPE_DONE);
    TT_PIPE_SET(&m, done, id, 1);
    TT_PIPE_SET(&m, done, status, TT_PIPE_KEY_DONE);
    ASSERT(tt__pipe_format(&m, line, sizeof line, err, sizeof err) > 0);
    ASSERT_STREQ(line, "DONE id=1 status=done");
}

TEST(the_reader_refuses_what_the_table_does_not_allow) {
    static const struct {
        const char *line;
        int rc;
        const char *why;
    } bad[] = {
        {"RESULT id=1 status=ok config=" CFG " time_ms=1 tflops=2 bogus=1", TT_ERR_INVAL,
         "unknown field 'bogus'"},
        {"RESULT id=1 status=ok time_ms=1 tflops=2", TT_ERR_INVAL, "missing field 'config'"},
        {"TRY config=" CFG, TT_ERR_INVAL, "missing field 'id'"},
        {"HELLO rev=ab gpu_count=1", TT_ERR_INVAL, "missing field 'proto'"},
        {"HELLO proto=2 rev=ab gpu_count=1", TT_ERR_RANGE, "proto '2' is out of range 1..1"},
        {"HELLO proto=1 rev=ab gpu_count=65", TT_ERR_RANGE, "gpu_count '65' is out of range 0..64"},
        {"HELLO proto=1 rev=AB gpu_count=1", TT_ERR_INVAL, "rev 'AB' must be 1..32 lower-case hex digits"},
        {"HELLO proto=1 rev=ab gpu_count=1 name=NVIDIA%2", TT_ERR_INVAL, "'%' without two hex digits"},
        {"HELLO proto=1 rev=ab gpu_count=1 name=%zz", TT_ERR_INVAL, "'%' without two hex digits"},
        {"HELLO proto=1 rev=ab gpu_count=1 sms=0", TT_ERR_RANGE, "sms '0' is out of range"},
        {"RESULT id=1 status=ok config=" CFG " busy=2", TT_ERR_RANGE, "busy '2' is out of range 0..1"},
        {"RESULT id=1 status=ok config=" CFG " time_ms=inf", TT_ERR_RANGE, "not a finite number"},
        {"RESULT id=1 status=ok config=" CFG " time_ms=nan", TT_ERR_RANGE, "not a finite number"},
        {"RESULT id=1 status=ok config=" CFG " time_ms=1x", TT_ERR_RANGE, "not a finite number"},
        {"RESULT id=1 status=ok config=" CFG " time_ms=-0.5", TT_ERR_RANGE, "out of range"},
        {"RESULT id=1 status=ok config=" CFG " reps=1.5", TT_ERR_RANGE, "reps '1.5' is not a number"},
        {"RESULT id=1 status=great config=" CFG, TT_ERR_UNSUPPORTED,
         "status must be one of ok, wrong, fault, timeout, skipped"},
        {"RESULT id=-1 status=ok config=" CFG, TT_ERR_RANGE, "id '-1' is out of range"},
        {"RESULT id=01 status=ok config=" CFG, TT_ERR_RANGE, "id '01' is not a number"},
        {"AVOID config=family=mma,block_m=7", TT_ERR_INVAL, "is not a variant's config"},
        {"MEASURE id=1 dtype=fp32 hdim=128 seqlen_q=1", TT_ERR_UNSUPPORTED, "unsupported dtype 'fp32'"},
        {"MEASURE id=1 dtype=fp16 hdim=128 seqlen_q=1 mode=slow", TT_ERR_UNSUPPORTED, "mode must be one of"},
        {"MEASURE id=1 dtype=fp16 hdim=128 seqlen_q=1 avoid=4097", TT_ERR_RANGE,
         "avoid '4097' is out of range"},
        {"DONE id=1 status=maybe", TT_ERR_UNSUPPORTED, "status must be one of done, failed"},
        {"PROGRESS id=1", TT_ERR_NOTFOUND, "no message PROGRESS"},
        {"RESULT id=1 \x01", TT_ERR_PROTO, "control character"},
        {"RESULT id=1 status=", TT_ERR_PROTO, "empty value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tt__pipe_msg m;
        char err[256] = "";
        int rc = parse(bad[i].line, &m, err, sizeof err);
        if (rc != bad[i].rc) TT_FAIL_AT("\"%s\": %d (%s), not %d", bad[i].line, rc, err, bad[i].rc);
        if (!strstr(err, bad[i].why)) TT_FAIL_AT("\"%s\": \"%s\" lacks \"%s\"", bad[i].line, err, bad[i].why);
        if (rc == TT_ERR_PROTO || rc == TT_ERR_NOTFOUND) ASSERT_EQ(m.kind, TT_PIPE_OTHER);
        else ASSERT(m.kind != TT_PIPE_OTHER); /* the reader knows what it refused */
    }
}

/* What one field cannot say alone: a GPU without its identity, ok without
 * its time, a key out of the kernels' range. */
TEST(messages_whose_fields_disagree_are_refused) {
    tt__pipe_msg m;
    char err[256];
    ASSERT_OK(parse("HELLO proto=1 rev=ab gpu_count=1 name=X cc_major=9 cc_minor=0 mem_bytes=1", &m, err,
                    sizeof err));
    ASSERT_EQ(tt__pipe_hello_gpu(&m, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "without 'sms'");
    ASSERT_OK(parse("RESULT id=1 status=ok config=" CFG " time_ms=1", &m, err, sizeof err));
    ASSERT_EQ(tt__pipe_result_check(&m, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "without 'tflops'");
    ASSERT_OK(parse("RESULT id=1 status=wrong config=" CFG, &m, err, sizeof err));
    ASSERT_OK(tt__pipe_result_check(&m, err, sizeof err));
    tt_key_v2 k;
    ASSERT_OK(parse("MEASURE id=1 dtype=fp16 hdim=100 seqlen_q=64", &m, err, sizeof err));
    ASSERT(tt__pipe_measure_key(&m, &k, err, sizeof err) < 0);
    ASSERT_OK(parse("MEASURE id=1 dtype=fp16 hdim=64 seqlen_q=64", &m, err, sizeof err));
    ASSERT_OK(tt__pipe_measure_key(&m, &k, err, sizeof err));
    ASSERT_EQ(k.seqlen_k, 64); /* absent: seqlen_q */
    ASSERT_EQ(k.group, 1);
    ASSERT_EQ(m.u.measure.mode, TT__N_MODE_EXHAUSTIVE);
}

/* A control character or bytes that are not UTF-8 in a GPU name would be
 * stored and exported: they read as '?'. */
TEST(free_text_reads_without_control_characters_or_broken_utf8) {
    tt__pipe_msg m;
    char err[256];
    ASSERT_OK(parse("HELLO proto=1 rev=ab gpu_count=1 name=Bad%0AGPU%00x%FFy%C3%A9", &m, err, sizeof err));
    ASSERT_STREQ(m.u.hello.name, "Bad?GPU?x?y\xc3\xa9");
    char name[200];
    memset(name, 'a', sizeof name);
    memcpy(name, "HELLO proto=1 rev=ab gpu_count=1 name=", 38);
    name[38 + TT_PIPE_TEXT_MAX] = '\0';
    ASSERT_EQ(parse(name, &m, err, sizeof err), TT_ERR_RANGE);
    ASSERT_CONTAINS(err, "name is longer than 127 bytes");
    name[38 + TT_PIPE_TEXT_MAX - 1] = '\0';
    ASSERT_OK(parse(name, &m, err, sizeof err));
}

/* The writer refuses a field its table does not have, a required one left
 * out and any value the reader would refuse: a message not in the table
 * is never written. */
TEST(the_comparison_sees_each_difference) {
    tt__pipe_msg a, b;
    full(TT_PIPE_RESULT, &a);
    b = a;
    ASSERT(tt__pipe_diff(&a, &b, 0) == NULL);
    TT_PIPE_SET(&b, result, tflops, 333.6001);
    ASSERT_STREQ(tt__pipe_diff(&a, &b, 0), "tflops");
    ASSERT(tt__pipe_diff(&a, &b, 1e-5) == NULL);
    b = a;
    b.u.result.reason = "deadlined";
    ASSERT_STREQ(tt__pipe_diff(&a, &b, 0), "reason");
    b = a;
    b.has &= ~TT_PIPE_BIT(result, busy);
    ASSERT_STREQ(tt__pipe_diff(&a, &b, 0), "has");
    a.has = b.has; /* not carried: b must hold the default */
    ASSERT_STREQ(tt__pipe_diff(&a, &b, 0), "busy");
    b.u.result.busy = -1;
    ASSERT(tt__pipe_diff(&a, &b, 0) == NULL);
    b.kind = TT_PIPE_TRY;
    ASSERT_STREQ(tt__pipe_diff(&a, &b, 0), "kind");
}

TEST(the_writer_refuses_what_the_table_does_not_allow) {
    tt__pipe_msg m;
    char line[TT_LINE_MAX + 1], err[256];
    full(TT_PIPE_TRY, &m);
    m.has |= 1u << TT_PF_try_COUNT; /* a field past TRY's table */
    ASSERT_EQ(tt__pipe_format(&m, line, sizeof line, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "not in its table");
    full(TT_PIPE_TRY, &m);
    m.has &= ~TT_PIPE_BIT(try, config);
    ASSERT_EQ(tt__pipe_format(&m, line, sizeof line, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "missing field 'config'");

    full(TT_PIPE_RESULT, &m);
    TT_PIPE_SET(&m, result, busy, 2);
    ASSERT_EQ(tt__pipe_format(&m, line, sizeof line, err, sizeof err), TT_ERR_RANGE);
    ASSERT_CONTAINS(err, "busy 2 is out of range 0..1");
    full(TT_PIPE_RESULT, &m);
    TT_PIPE_SET(&m, result, time_ms, NAN);
    ASSERT_EQ(tt__pipe_format(&m, line, sizeof line, err, sizeof err), TT_ERR_RANGE);
    ASSERT_CONTAINS(err, "time_ms");
    full(TT_PIPE_RESULT, &m);
    TT_PIPE_SET(&m, result, tflops, INFINITY);
    ASSERT_EQ(tt__pipe_format(&m, line, sizeof line, err, sizeof err), TT_ERR_RANGE);
    full(TT_PIPE_RESULT, &m);
    TT_PIPE_SET(&m, result, status, 5);
    ASSERT_EQ(tt__pipe_format(&m, line, sizeof line, err, sizeof err), TT_ERR_UNSUPPORTED);
    full(TT_PIPE_RESULT, &m);
    TT_PIPE_SET(&m, result, reason, "two words");
    ASSERT_EQ(tt__pipe_format(&m, line, sizeof line, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "reason");
    full(TT_PIPE_HELLO, &m);
    m.u.hello.driver[0] = '\0'; /* carried but empty: the grammar has no empty value */
    ASSERT_EQ(tt__pipe_format(&m, line, sizeof line, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "driver is empty");
    full(TT_PIPE_HELLO, &m);
    snprintf(m.u.hello.rev, sizeof m.u.hello.rev, "XYZ");
    ASSERT_EQ(tt__pipe_format(&m, line, sizeof line, err, sizeof err), TT_ERR_INVAL);
    full(TT_PIPE_MEASURE, &m);
    TT_PIPE_SET(&m, measure, avoid, TT_PIPE_AVOID_MAX + 1);
    ASSERT_EQ(tt__pipe_format(&m, line, sizeof line, err, sizeof err), TT_ERR_RANGE);
    full(TT_PIPE_DONE, &m);
    ASSERT_EQ(tt__pipe_format(&m, line, 10, err, sizeof err), TT_ERR_RANGE); /* does not fit */
    ASSERT_CONTAINS(err, "does not fit");
    tt__pipe_init(&m, TT_PIPE_OTHER);
    ASSERT_EQ(tt__pipe_format(&m, line, sizeof line, err, sizeof err), TT_ERR_INVAL);
}

TT_TEST_MAIN()
