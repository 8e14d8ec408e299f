/*
 * The worker supervisor with a stand-in worker (fake_worker.sh): no GPU,
 * a fake GPU whose results land in LOOKUP, a worker that dies on a
 * variant, one that writes garbage, and no worker program at all.
 */
#include <signal.h>
#include <stdlib.h>

#include "harness.h"
#include "store.h"
#include "tt_test.h"

#define WORKER TT_DAEMON_TEST_DIR "/fake_worker.sh"
#define CFG_A "family=mma,block_m=64,block_n=32,warps=4,stages=3,layout=pad,q_in_regs=1"
#define CFG_B "family=mma,block_m=128,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=0"

static void start_with(td *t, const char *mode) {
    setenv("TT_FAKE_WORKER_MODE", mode, 1);
    const char *args[] = {"--worker", WORKER, NULL};
    td_start(t, args);
}

/* Polls `req` until its reply contains `want` (or the body of a listing
 * does); fails after timeout_ms. */
static void wait_for(int fd, const char *req, const char *want, int timeout_ms) {
    char line[1024], v[16], last[1024] = "";
    long long until = td_now_ms() + timeout_ms;
    while (td_now_ms() < until) {
        const char *r = td_req(fd, req);
        snprintf(last, sizeof last, "%s", r);
        int found = strstr(r, want) != NULL;
        int n = strncmp(r, "OK lines=", 9) == 0 ? atoi(td_field(r, "lines", v, sizeof v)) : 0;
        for (int i = 0; i < n; i++) {
            ASSERT(td_read_line(fd, line, sizeof line, 2000) > 0);
            if (strstr(line, want)) found = 1;
            snprintf(last, sizeof last, "%s", line);
        }
        if (found) return;
        usleep(50000);
    }
    TT_FAIL_AT("\"%s\" never showed \"%s\" (last: %s)", req, want, last);
}

TEST(no_gpu_worker_keeps_jobs_queued) {
    td t;
    td_init(&t);
    start_with(&t, "nogpu");
    int fd = td_connect_ok(&t);
    wait_for(fd, "STATUS", "reason=no-gpu", 5000);
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=64 seqlen=128,256"), "OK job=1 keys=2", 15) == 0);
    usleep(300000);
    const char *r = td_req(fd, "STATUS");
    ASSERT_CONTAINS(r, "gpus=0");
    ASSERT_CONTAINS(r, "jobs_queued=1");
    ASSERT_CONTAINS(r, "tuning=waiting reason=no-gpu");
    ASSERT_CONTAINS(r, "rev=00c0ffee"); /* from the worker's HELLO */
    ASSERT_CONTAINS(td_req(fd, "HELLO"), "gpu=none");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(missing_worker_program_means_no_gpu) {
    td t;
    td_init(&t);
    const char *args[] = {"--worker", "/nonexistent/tiletune-worker", NULL};
    td_start(&t, args);
    int fd = td_connect_ok(&t);
    ASSERT(strncmp(td_req(fd, "TUNE dtype=bf16 hdim=128 seqlen=64"), "OK job=", 7) == 0);
    ASSERT_CONTAINS(td_req(fd, "STATUS"), "tuning=waiting reason=no-gpu");
    ASSERT_CONTAINS(td_req(fd, "STATUS"), "jobs_queued=1");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(fake_gpu_results_land_in_lookup) {
    td t;
    td_init(&t);
    char gpu[TT_ID_MAX], want[128], v[128];
    td_fake_gpu(gpu);
    start_with(&t, "gpu");
    int fd = td_connect_ok(&t);
    snprintf(want, sizeof want, "gpu=%s", gpu);
    wait_for(fd, "HELLO", want, 5000);
    ASSERT_CONTAINS(td_req(fd, "HELLO"), "rev=00c0ffee");
    ASSERT_CONTAINS(td_req(fd, "STATUS"), "gpus=1");
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=128 seqlen=512,2048"), "OK job=1 keys=2", 15) == 0);
    wait_for(fd, "JOBS all=1", "state=done", 5000);
    /* no gpu=/rev=: the daemon's own, learnt from the worker */
    const char *r = td_req(fd, "LOOKUP dtype=fp16 hdim=128 seqlen_q=512");
    ASSERT_STREQ(td_field(r, "match", v, sizeof v), "exact");
    ASSERT_STREQ(td_field(r, "config", v, sizeof v), CFG_B);
    ASSERT_STREQ(td_field(r, "tflops", v, sizeof v), "112.50");
    r = td_req(fd, "LOOKUP dtype=fp16 hdim=128 seqlen_q=1900");
    ASSERT_STREQ(td_field(r, "match", v, sizeof v), "nearest");
    ASSERT_STREQ(td_field(r, "seqlen_q", v, sizeof v), "2048");
    ASSERT_CONTAINS(td_req(fd, "STATUS"), "records=2");
    close(fd);
    /* the daemon wrote them through the store: they survive kill -9 */
    ASSERT_EQ(td_stop(&t, SIGKILL), 128 + SIGKILL);
    start_with(&t, "nogpu");
    fd = td_connect_ok(&t);
    char req[256];
    snprintf(req, sizeof req, "LOOKUP dtype=fp16 hdim=128 seqlen_q=2048 gpu=%s rev=00c0ffee", gpu);
    r = td_req(fd, req);
    ASSERT_STREQ(td_field(r, "match", v, sizeof v), "exact");
    ASSERT_STREQ(td_field(r, "tflops", v, sizeof v), "148.50");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

/* A GPU name with a control character from the worker is stored without
 * it: the export of its winners must be a table other nodes accept. */
TEST(control_characters_in_the_gpu_name_are_not_stored) {
    td t;
    td_init(&t);
    setenv("TT_FAKE_GPU_NAME", "Bad%0AGPU%00x", 1);
    start_with(&t, "gpu");
    unsetenv("TT_FAKE_GPU_NAME");
    int fd = td_connect_ok(&t);
    char line[4200];
    long long until = td_now_ms() + 5000;
    while (strstr(td_req(fd, "HELLO"), "gpu=none") && td_now_ms() < until) usleep(50000);
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=128 seqlen=512"), "OK job=1 keys=1", 15) == 0);
    wait_for(fd, "JOBS all=1", "state=done", 5000);
    ASSERT_STREQ(td_req(fd, "EXPORT"), "OK format=json records=1 lines=1");
    ASSERT(td_read_line(fd, line, sizeof line, 2000) > 0);
    if (!strstr(line, "\"name\":\"Bad?GPU?x\"")) TT_FAIL_AT("exported: %s", line);
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(worker_dying_on_a_variant_is_restarted_and_the_variant_recorded) {
    td t;
    td_init(&t);
    char gpu[TT_ID_MAX], v[128];
    td_fake_gpu(gpu);
    start_with(&t, "crash");
    int fd = td_connect_ok(&t);
    wait_for(fd, "STATUS", "gpus=1", 5000);
    ASSERT(strncmp(td_req(fd, "TUNE dtype=bf16 hdim=64 seqlen=1024"), "OK job=1", 8) == 0);
    wait_for(fd, "JOBS all=1", "state=done", 8000);
    const char *r = td_req(fd, "LOOKUP dtype=bf16 hdim=64 seqlen_q=1024");
    ASSERT_STREQ(td_field(r, "match", v, sizeof v), "exact");
    ASSERT_STREQ(td_field(r, "config", v, sizeof v), CFG_B);
    ASSERT_STREQ(td_req(fd, "PING"), "OK pong");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    tt_key k;
    memset(&k, 0, sizeof k);
    k.dtype = TT_DTYPE_BF16;
    k.head_dim = 64;
    k.seqlen_q = k.seqlen_k = 1024;
    snprintf(k.gpu, sizeof k.gpu, "%s", gpu);
    snprintf(k.rev, sizeof k.rev, "00c0ffee");
    ASSERT_EQ(td_failed_status(t.db, &k, CFG_A), TT_MEAS_FAULT);
}

TEST(garbage_on_the_pipe_fails_the_key_not_the_daemon) {
    td t;
    td_init(&t);
    start_with(&t, "garbage");
    int fd = td_connect_ok(&t);
    wait_for(fd, "STATUS", "gpus=1", 5000);
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=64 seqlen=128"), "OK job=1", 8) == 0);
    /* killed and restarted with back-off (0.5 + 1 s) until the key has
     * taken down its worker three times */
    long long t0 = td_now_ms();
    while (td_now_ms() - t0 < 1000) ASSERT_STREQ(td_req(fd, "PING"), "OK pong");
    wait_for(fd, "JOBS all=1", "state=failed", 10000);
    ASSERT(td_stat(fd, "worker_failures") >= 3);
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TT_TEST_MAIN()
