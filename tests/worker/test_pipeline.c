/*
 * The tuning pipeline on the CPU: the real tiletuned with the
 * real tiletune-worker on a node without a GPU, and with the stand-in
 * worker the tests control (tests/daemon/fake_worker.sh, modes slow/hang): cancel during a running key, resume
 * after a daemon restart in the middle of a job, a worker that hangs, the
 * JOB progress verb, TUNE stale=1, and the CLI's watch / tune --wait.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "harness.h"
#include "tuner/store/store.h"
#include "tt_test.h"

#define FAKE TT_DAEMON_TEST_DIR "/fake_worker.sh"
#define CFG_A "family=mma,block_m=64,block_n=32,warps=4,stages=3,layout=pad,q_in_regs=1"
#define CFG_B "family=mma,block_m=128,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=0"

static void start_slow(td *t, const char *mode, const char *delay) {
    setenv("TT_FAKE_WORKER_MODE", mode, 1);
    setenv("TT_FAKE_DELAY", delay, 1);
    const char *args[] = {"--worker", FAKE, "--worker-timeout", "2", NULL};
    td_start(t, args);
}

/* Polls `req` until its first line contains `want`; fails after
 * timeout_ms. Body lines of a lines=N reply are read and skipped. */
static void wait_for(int fd, const char *req, const char *want, int timeout_ms) {
    char line[4096], v[16], last[4096] = "";
    long long until = td_now_ms() + timeout_ms;
    while (td_now_ms() < until) {
        const char *r = td_req(fd, req);
        snprintf(last, sizeof last, "%s", r);
        int found = strstr(r, want) != NULL;
        const char *l = strstr(r, " lines=");
        int n = l ? atoi(l + 7) : 0;
        (void)v;
        for (int i = 0; i < n; i++) ASSERT(td_read_line(fd, line, sizeof line, 2000) > 0);
        if (found) return;
        usleep(50000);
    }
    TT_FAIL_AT("\"%s\" never showed \"%s\" (last: %s)", req, want, last);
}

/* Sends JOB job=<id> and copies the head line and up to 16 key lines. */
static void job_reply(int fd, const char *job, char *head, size_t cap, char keys[][512], int *n) {
    char req[64], v[16];
    snprintf(req, sizeof req, "JOB job=%s", job);
    snprintf(head, cap, "%s", td_req(fd, req));
    ASSERT(strncmp(head, "OK job=", 7) == 0);
    int lines = atoi(td_field(head, "lines", v, sizeof v));
    *n = 0;
    for (int i = 0; i < lines; i++) {
        char line[512];
        ASSERT(td_read_line(fd, line, sizeof line, 2000) > 0);
        if (*n < 16) snprintf(keys[(*n)++], 512, "%s", line);
    }
}

TEST(real_worker_without_gpu_says_so_and_the_job_waits) {
    char gpu_probe[256];
    snprintf(gpu_probe, sizeof gpu_probe, "%s --gpu 0 </dev/null 2>/dev/null | grep -q name=", TT_WORKER_BIN);
    if (system(gpu_probe) == 0) TT_SKIP("this node has a GPU: the no-GPU path is not what runs here");
    td t;
    td_init(&t);
    const char *args[] = {"--worker", TT_WORKER_BIN, NULL};
    td_start(&t, args);
    int fd = td_connect_ok(&t);
    char v[64], rev[TT_ID_MAX];
    ASSERT_OK(tt_kernel_revision(rev));
    wait_for(fd, "STATUS", "reason=no-gpu", 5000);
    const char *r = td_req(fd, "TUNE dtype=fp16 hdim=128 seqlen=1024,4096 causal=0,1");
    ASSERT_STREQ(td_field(r, "keys", v, sizeof v), "4");
    usleep(300000);
    r = td_req(fd, "STATUS");
    ASSERT_CONTAINS(r, "tuning=waiting reason=no-gpu");
    ASSERT_CONTAINS(r, "jobs_queued=1");
    ASSERT_STREQ(td_field(r, "rev", v, sizeof v), rev); /* the worker's HELLO: the kernel source's hash */
    /* the job stays whole in the queue */
    char head[1024], keys[16][512];
    int n;
    job_reply(fd, "1", head, sizeof head, keys, &n);
    ASSERT_STREQ(td_field(head, "state", v, sizeof v), "queued");
    ASSERT_STREQ(td_field(head, "done", v, sizeof v), "0");
    ASSERT_STREQ(td_field(head, "eta_s", v, sizeof v), "-1");
    ASSERT_EQ(n, 4);
    ASSERT_CONTAINS(keys[0], "state=pending");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(cancel_while_a_key_is_measured) {
    td t;
    td_init(&t);
    start_slow(&t, "slow", "1");
    int fd = td_connect_ok(&t);
    wait_for(fd, "STATUS", "gpus=1", 5000);
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=64 seqlen=128,256,512,1024"), "OK job=1 keys=4", 15) ==
           0);
    wait_for(fd, "STATUS", "tuning=running", 3000);
    ASSERT_STREQ(td_req(fd, "CANCEL job=1"), "OK job=1 state=cancelled");
    /* lookups are answered while the claimed key is still measured */
    ASSERT(strncmp(td_req(fd, "LOOKUP dtype=fp16 hdim=64 seqlen_q=128"), "OK match=", 9) == 0);
    /* the claimed key finishes; nothing else is handed out */
    wait_for(fd, "STATUS", "tuning=idle", 5000);
    usleep(1500000);
    ASSERT_CONTAINS(td_req(fd, "STATUS"), "tuning=idle");
    char head[1024], keys[16][512], v[64];
    int n;
    job_reply(fd, "1", head, sizeof head, keys, &n);
    ASSERT_STREQ(td_field(head, "state", v, sizeof v), "cancelled");
    ASSERT_STREQ(td_field(head, "done", v, sizeof v), "1");
    ASSERT_STREQ(td_field(head, "measured", v, sizeof v), "2"); /* A and B of the one key */
    ASSERT_EQ(n, 4);
    ASSERT_CONTAINS(keys[0], "state=done");
    ASSERT_CONTAINS(keys[0], "config=" CFG_B);
    for (int i = 1; i < 4; i++) ASSERT_CONTAINS(keys[i], "state=cancelled");
    ASSERT_STREQ(td_field(td_req(fd, "LOOKUP dtype=fp16 hdim=64 seqlen_q=128"), "match", v, sizeof v),
                 "exact");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(resume_after_daemon_restart_mid_job) {
    td t;
    td_init(&t);
    char log[400], v[64];
    snprintf(log, sizeof log, "%s/measure.log", t.dir);
    setenv("TT_FAKE_LOG", log, 1);
    start_slow(&t, "slow", "1");
    int fd = td_connect_ok(&t);
    wait_for(fd, "STATUS", "gpus=1", 5000);
    ASSERT(strncmp(td_req(fd, "TUNE dtype=bf16 hdim=128 seqlen=256,512,1024 mode=fast"), "OK job=1 keys=3",
                   15) == 0);
    wait_for(fd, "JOB job=1", "done=1", 6000);
    close(fd);
    /* the daemon dies with the second key claimed */
    ASSERT_EQ(td_stop(&t, SIGKILL), 128 + SIGKILL);
    start_slow(&t, "slow", "0");
    fd = td_connect_ok(&t);
    wait_for(fd, "JOB job=1", "state=done", 8000);
    char head[1024], keys[16][512];
    int n;
    job_reply(fd, "1", head, sizeof head, keys, &n);
    ASSERT_STREQ(td_field(head, "done", v, sizeof v), "3");
    ASSERT_STREQ(td_field(head, "failed", v, sizeof v), "0");
    ASSERT_STREQ(td_field(head, "mode", v, sizeof v), "fast");
    for (int i = 0; i < 3; i++) ASSERT_CONTAINS(keys[i], "config=" CFG_B);
    ASSERT_CONTAINS(head, "best_config=" CFG_B);
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    /* the key finished before the crash was not measured again: 3 keys,
     * at most 4 MEASUREs (the one in flight is asked again) */
    FILE *f = fopen(log, "r");
    ASSERT(f);
    int lines = 0, first = 0;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        lines++;
        if (strstr(line, "seqlen_q=256 ")) first++;
        ASSERT_CONTAINS(line, "mode=fast");
    }
    fclose(f);
    ASSERT(lines >= 3 && lines <= 4);
    ASSERT_EQ(first, 1);
    unsetenv("TT_FAKE_LOG");
}

TEST(a_hanging_variant_is_recorded_timeout_and_skipped) {
    td t;
    td_init(&t);
    char gpu[TT_ID_MAX], v[128];
    td_fake_gpu(gpu);
    start_slow(&t, "hang", "0");
    int fd = td_connect_ok(&t);
    wait_for(fd, "STATUS", "gpus=1", 5000);
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=256 seqlen=2048"), "OK job=1", 8) == 0);
    /* silent for --worker-timeout 2 s: killed, restarted, the key again
     * with A in AVOID; lookups answered all along */
    long long t0 = td_now_ms();
    while (td_now_ms() - t0 < 2500) ASSERT_STREQ(td_req(fd, "PING"), "OK pong");
    wait_for(fd, "JOB job=1", "state=done", 10000);
    const char *r = td_req(fd, "LOOKUP dtype=fp16 hdim=256 seqlen_q=2048");
    ASSERT_STREQ(td_field(r, "match", v, sizeof v), "exact");
    ASSERT_STREQ(td_field(r, "config", v, sizeof v), CFG_B);
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    k.dtype = TT_DTYPE_FP16;
    k.head_dim = 256;
    k.seqlen_q = k.seqlen_k = 2048;
    snprintf(k.gpu, sizeof k.gpu, "%s", gpu);
    snprintf(k.rev, sizeof k.rev, "00c0ffee");
    ASSERT_EQ(td_failed_status(t.db, &k, CFG_A), TT_MEAS_TIMEOUT);
}

TEST(tune_stale_retunes_keys_of_other_revisions) {
    td t;
    td_init(&t);
    char gpu[TT_ID_MAX], v[TT_CONFIG_TEXT_MAX];
    td_fake_gpu(gpu); /* the stand-in's GPU, so the daemon's own */
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    k.dtype = TT_DTYPE_FP16;
    k.head_dim = 128;
    snprintf(k.gpu, sizeof k.gpu, "%s", gpu);
    tt_config cfg;
    tt_config_parse(CFG_A, &cfg);
    /* two keys tuned with an older revision, one with the current one */
    snprintf(k.rev, sizeof k.rev, "0bad");
    k.seqlen_q = k.seqlen_k = 512;
    td_seed(t.db, &k, &cfg, 10);
    k.seqlen_q = k.seqlen_k = 4096;
    td_seed(t.db, &k, &cfg, 10);
    snprintf(k.rev, sizeof k.rev, "00c0ffee");
    k.seqlen_q = k.seqlen_k = 1024;
    td_seed(t.db, &k, &cfg, 10);
    start_slow(&t, "slow", "0");
    int fd = td_connect_ok(&t);
    wait_for(fd, "STATUS", "gpus=1", 5000);
    const char *r = td_req(fd, "TUNE stale=1 mode=fast");
    ASSERT(strncmp(r, "OK job=", 7) == 0);
    ASSERT_STREQ(td_field(r, "keys", v, sizeof v), "2");
    wait_for(fd, "JOB job=1", "state=done", 8000);
    r = td_req(fd, "LOOKUP dtype=fp16 hdim=128 seqlen_q=4096");
    ASSERT_STREQ(td_field(r, "match", v, sizeof v), "exact");
    ASSERT_STREQ(td_field(r, "config", v, sizeof v), CFG_B);
    /* nothing stale any more */
    ASSERT(strncmp(td_req(fd, "TUNE stale=1"), "ERR notfound", 12) == 0);
    ASSERT(strncmp(td_req(fd, "TUNE stale=2"), "ERR range", 9) == 0);
    ASSERT(strncmp(td_req(fd, "TUNE stale=1 seqlen=5"), "ERR field", 9) == 0);
    ASSERT(strncmp(td_req(fd, "JOB job=99"), "ERR notfound", 12) == 0);
    ASSERT(strncmp(td_req(fd, "JOB"), "ERR field", 9) == 0);
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

/* Runs the CLI; returns its exit status with stdout in out. */
static int cli(const td *t, const char *args, char *out, size_t cap) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s --socket %s %s 2>&1", TT_CLI_PATH, t->sock, args);
    FILE *p = popen(cmd, "r");
    ASSERT(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

TEST(cli_tune_wait_watch_and_json_events) {
    td t;
    td_init(&t);
    start_slow(&t, "slow", "0.3");
    int fd = td_connect_ok(&t);
    wait_for(fd, "STATUS", "gpus=1", 5000);
    static char out[65536];
    /* not a terminal: plain lines, the last one the finished job */
    ASSERT_EQ(cli(&t, "tune --dtype fp16 --hdim 64 --seqlen 128,256 --causal both --wait", out, sizeof out),
              0);
    ASSERT_CONTAINS(out, "job 1 queued: 4 keys");
    ASSERT_CONTAINS(out, "job 1 done: 4/4 keys, 8 variants measured, 0 failed");
    ASSERT_CONTAINS(out, "best 1");
    /* JSON events: one object per line, a key event per key */
    ASSERT_EQ(cli(&t, "tune --dtype bf16 --hdim 128 --seqlen 512,1024 --causal no --mode fast --wait --json",
                  out, sizeof out),
              0);
    int keys = 0, finished = 0;
    for (char *save = NULL, *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        ASSERT(l[0] == '{');
        if (strstr(l, "\"event\": \"key\"") || strstr(l, "\"event\":\"key\"")) keys++;
        if (strstr(l, "\"event\":\"finished\"")) {
            finished++;
            ASSERT_CONTAINS(l, "\"state\":\"done\"");
            ASSERT_CONTAINS(l, "\"measured\":4");
        }
    }
    ASSERT_EQ(keys, 2);
    ASSERT_EQ(finished, 1);
    /* watch of a finished job returns at once */
    ASSERT_EQ(cli(&t, "watch 1", out, sizeof out), 0);
    ASSERT_CONTAINS(out, "job 1 done: 4/4 keys");
    /* a cancelled job: exit 1 */
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=64 seqlen=100,200,300,400,500,600"), "OK job=3", 8) == 0);
    ASSERT_STREQ(td_req(fd, "CANCEL job=3"), "OK job=3 state=cancelled");
    ASSERT_EQ(cli(&t, "watch 3", out, sizeof out), 1);
    ASSERT_CONTAINS(out, "cancelled");
    ASSERT_EQ(cli(&t, "tune --default-grid --stale", out, sizeof out), 2);
    ASSERT_EQ(cli(&t, "tune --hdim 64", out, sizeof out), 2);
    ASSERT_EQ(cli(&t, "watch x", out, sizeof out), 2);
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(cli_default_grid_is_the_node_grid) {
    td t;
    td_init(&t);
    td_start(&t, NULL); /* no worker: the job only queues */
    static char out[4096];
    ASSERT_EQ(cli(&t, "tune --default-grid --mode fast", out, sizeof out), 0);
    /* 9 seqlens x 3 head dims x 2 dtypes x 2 causal */
    ASSERT_CONTAINS(out, "queued: 108 keys");
    ASSERT_CONTAINS(out, "tuning is waiting: no-gpu");
    /* --wait on a node that cannot tune says so and fails */
    ASSERT_EQ(cli(&t, "watch 1 --interval 100", out, sizeof out), 1);
    ASSERT_CONTAINS(out, "no GPU");
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

/* An option without its value is named as such, not as an unknown one. */
TEST(worker_option_without_value) {
    static const char *const opts[] = {"--cache-dir", "--threads", "--budget-ms"};
    for (int i = 0; i < 3; i++) {
        char cmd[1024], out[2048];
        snprintf(cmd, sizeof cmd, "%s --gpu 0 %s 2>&1", TT_WORKER_BIN, opts[i]);
        FILE *p = popen(cmd, "r");
        ASSERT(p);
        size_t n = fread(out, 1, sizeof out - 1, p);
        out[n] = '\0';
        int st = pclose(p);
        ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 2);
        ASSERT(strstr(out, "unknown argument") == NULL);
        ASSERT_CONTAINS(out, opts[i]);
    }
}

TT_TEST_MAIN()
