/*
 * The real daemon through the real clients: the `tiletune` CLI binary and
 * libtiletune's tt_lookup, against seeded records and against results that
 * arrive from a stand-in worker while the daemon runs.
 */
#include <signal.h>
#include <stdlib.h>
#include <time.h>

/* The CLI runner of the client tests; not every helper in it is used here. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../client/cli_run.h"
#pragma GCC diagnostic pop
#include "harness.h"
#include "tuner/store/store.h"
#include "tt_test.h"

#define REV "00c0ffee"
#define CFG_A "family=mma,block_m=64,block_n=32,warps=4,stages=3,layout=pad,q_in_regs=1"
#define CFG_B "family=mma,block_m=128,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=0"

static tt_key_v2 mkkey(const char *gpu, const char *rev, int64_t seqlen) {
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    k.dtype = TT_DTYPE_FP16;
    k.head_dim = 128;
    k.seqlen_q = k.seqlen_k = seqlen;
    snprintf(k.gpu, sizeof k.gpu, "%s", gpu);
    snprintf(k.rev, sizeof k.rev, "%s", rev);
    return k;
}

TEST(cli_against_the_daemon) {
    td t;
    td_init(&t);
    char gpu[TT_ID_MAX];
    td_fake_gpu(gpu);
    tt_key_v2 k = mkkey(gpu, REV, 2048);
    tt_config a;
    ASSERT_OK(tt_config_parse(CFG_A, &a));
    td_seed(t.db, &k, &a, 222.0);
    td_start(&t, NULL);
    cli_result r;
    cli(&r, "--socket", t.sock, "ping", NULL);
    ASSERT_EQ(r.rc, 0);
    cli(&r, "--socket", t.sock, "lookup", "--seqlen", "2048", "--hdim", "128", "--dtype", "fp16", "--gpu",
        gpu, "--rev", REV, "--json", NULL);
    if (r.rc != 0) TT_FAIL_AT("lookup: rc %d: %s", r.rc, r.err);
    ASSERT_CONTAINS(r.out, "exact");
    ASSERT_CONTAINS(r.out, "222");
    cli(&r, "--socket", t.sock, "lookup", "--seqlen", "1500", "--hdim", "128", "--dtype", "fp16", "--gpu",
        gpu, "--rev", REV, NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "nearest");
    cli(&r, "--socket", t.sock, "lookup", "--seqlen", "1500", "--hdim", "64", "--dtype", "bf16", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "default");
    cli(&r, "--socket", t.sock, "tune", "--seqlen", "256,512", "--hdim", "64", "--dtype", "fp16", "--causal",
        "both", NULL);
    if (r.rc != 0) TT_FAIL_AT("tune: rc %d: %s", r.rc, r.err);
    cli(&r, "--socket", t.sock, "jobs", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "queued");
    cli(&r, "--socket", t.sock, "status", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "no-gpu");
    cli(&r, "--socket", t.sock, "stats", "--prom", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "# TYPE tiletune_requests_total counter");
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    /* the daemon is gone: a one-line reason and exit 1 */
    cli(&r, "--socket", t.sock, "ping", NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT_CONTAINS(r.err, t.sock);
}

TEST(libtiletune_lookup_against_the_daemon) {
    td t;
    td_init(&t);
    char gpu[TT_ID_MAX];
    td_fake_gpu(gpu);
    tt_key_v2 k = mkkey(gpu, REV, 512);
    tt_config a, b;
    ASSERT_OK(tt_config_parse(CFG_A, &a));
    ASSERT_OK(tt_config_parse(CFG_B, &b));
    td_seed(t.db, &k, &a, 100.0);
    k = mkkey(gpu, REV, 8192);
    td_seed(t.db, &k, &b, 300.0);
    td_start(&t, NULL);
    tt_client *c;
    ASSERT_OK(tt_client_open(t.sock, 2000, &c));
    tt_lookup_result res;
    k = mkkey(gpu, REV, 512);
    ASSERT_EQ(tt_lookup_v2(c, &k, &res), 0);
    ASSERT_EQ(res.match, TT_MATCH_EXACT);
    ASSERT(tt_config_equal(&res.config, &a));
    ASSERT(res.tflops > 99.9 && res.tflops < 100.1);
    k = mkkey(gpu, REV, 6000);
    ASSERT_EQ(tt_lookup_v2(c, &k, &res), 0);
    ASSERT_EQ(res.match, TT_MATCH_NEAREST);
    ASSERT_EQ(res.seqlen_q, 8192);
    ASSERT(tt_config_equal(&res.config, &b));
    k = mkkey(gpu, "beef", 512);
    ASSERT_EQ(tt_lookup_v2(c, &k, &res), 0);
    ASSERT_EQ(res.match, TT_MATCH_DEFAULT);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    /* daemon gone: the built-in default, flagged as a fallback */
    k = mkkey(gpu, REV, 777);
    ASSERT_EQ(tt_lookup_v2(c, &k, &res), TT_FALLBACK);
    ASSERT_EQ(res.match, TT_MATCH_DEFAULT);
    tt_client_close(c);
}

/* The daemon closes a connection idle past --idle-timeout (its last words
 * "ERR timeout", then EOF). The next lookup must still get the daemon's
 * answer on a fresh connection, not the built-in default and a back-off. */
TEST(lookup_after_the_daemon_closed_an_idle_connection) {
    td t;
    td_init(&t);
    char gpu[TT_ID_MAX];
    td_fake_gpu(gpu);
    tt_key_v2 k = mkkey(gpu, REV, 512);
    tt_config a;
    ASSERT_OK(tt_config_parse(CFG_A, &a));
    td_seed(t.db, &k, &a, 100.0);
    k = mkkey(gpu, REV, 1024);
    td_seed(t.db, &k, &a, 200.0);
    const char *const extra[] = {"--idle-timeout", "1", NULL};
    td_start(&t, extra);
    tt_client *c;
    ASSERT_OK(tt_client_open(t.sock, 2000, &c));
    tt_lookup_result res;
    k = mkkey(gpu, REV, 512);
    ASSERT_EQ(tt_lookup_v2(c, &k, &res), 0);
    ASSERT_EQ(res.match, TT_MATCH_EXACT);
    struct timespec nap = {2, 500000000}; /* past the idle time-out and the linger */
    nanosleep(&nap, NULL);
    k = mkkey(gpu, REV, 1024);
    ASSERT_EQ(tt_lookup_v2(c, &k, &res), 0);
    ASSERT_EQ(res.match, TT_MATCH_EXACT);
    ASSERT(res.tflops > 199.9 && res.tflops < 200.1);
    tt_client_stats st;
    ASSERT_OK(tt_client_get_stats(c, &st));
    ASSERT_EQ(st.fallbacks, 0);
    ASSERT_EQ(st.connects, 2);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    tt_client_close(c);
}

TEST(results_from_a_worker_reach_the_library) {
    td t;
    td_init(&t);
    setenv("TT_FAKE_WORKER_MODE", "gpu", 1);
    const char *args[] = {"--worker", TT_DAEMON_TEST_DIR "/fake_worker.sh", NULL};
    td_start(&t, args);
    cli_result r;
    cli(&r, "--socket", t.sock, "tune", "--seqlen", "1024", "--hdim", "128", "--dtype", "fp16", "--causal",
        "no", NULL);
    if (r.rc != 0) TT_FAIL_AT("tune: rc %d: %s", r.rc, r.err);
    long long until = td_now_ms() + 8000;
    int done = 0;
    while (!done && td_now_ms() < until) {
        cli(&r, "--socket", t.sock, "jobs", "--all", NULL);
        done = strstr(r.out, "done") != NULL;
        if (!done) usleep(50000);
    }
    if (!done) TT_FAIL_AT("job never finished: %s", r.out);
    tt_client *c;
    ASSERT_OK(tt_client_open(t.sock, 2000, &c));
    tt_key_v2 k = mkkey("", "", 1024); /* the daemon's own GPU and revision */
    tt_lookup_result res;
    ASSERT_EQ(tt_lookup_v2(c, &k, &res), 0);
    ASSERT_EQ(res.match, TT_MATCH_EXACT);
    tt_config b;
    ASSERT_OK(tt_config_parse(CFG_B, &b));
    ASSERT(tt_config_equal(&res.config, &b));
    tt_client_close(c);
    cli(&r, "--socket", t.sock, "lookup", "--seqlen", "1024", "--hdim", "128", "--dtype", "fp16", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "exact");
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TT_TEST_MAIN()
