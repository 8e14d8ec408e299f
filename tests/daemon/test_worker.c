/*
 * The worker supervisor with a stand-in worker (fake_worker.sh): no GPU,
 * a fake GPU whose results land in LOOKUP, a worker that dies on a
 * variant, one that writes garbage, and no worker program at all.
 */
#include <signal.h>
#include <stdlib.h>

#include "harness.h"
#include "tuner/store/store.h"
#include "tt_test.h"

#define WORKER TT_DAEMON_TEST_DIR "/fake_worker.sh"
#define CFG_A "family=mma,block_m=64,block_n=32,warps=4,stages=3,layout=pad,q_in_regs=1"
#define CFG_B "family=mma,block_m=128,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=0"

static void start_with(td *t, const char *mode) {
    setenv("TT_FAKE_WORKER_MODE", mode, 1);
    const char *args[] = {"--worker", WORKER, NULL};
    td_start(t, args);
}

TEST(no_gpu_worker_keeps_jobs_queued) {
    td t;
    td_init(&t);
    start_with(&t, "nogpu");
    int fd = td_connect_ok(&t);
    td_wait_for(fd, "STATUS", "reason=no-gpu", 5000);
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
    td_wait_for(fd, "HELLO", want, 5000);
    ASSERT_CONTAINS(td_req(fd, "HELLO"), "rev=00c0ffee");
    ASSERT_CONTAINS(td_req(fd, "STATUS"), "gpus=1");
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=128 seqlen=512,2048"), "OK job=1 keys=2", 15) == 0);
    td_wait_for(fd, "JOBS all=1", "state=done", 5000);
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
    td_wait_for(fd, "JOBS all=1", "state=done", 5000);
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
    td_wait_for(fd, "STATUS", "gpus=1", 5000);
    ASSERT(strncmp(td_req(fd, "TUNE dtype=bf16 hdim=64 seqlen=1024"), "OK job=1", 8) == 0);
    td_wait_for(fd, "JOBS all=1", "state=done", 8000);
    const char *r = td_req(fd, "LOOKUP dtype=bf16 hdim=64 seqlen_q=1024");
    ASSERT_STREQ(td_field(r, "match", v, sizeof v), "exact");
    ASSERT_STREQ(td_field(r, "config", v, sizeof v), CFG_B);
    ASSERT_STREQ(td_req(fd, "PING"), "OK pong");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    tt_key_v2 k;
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
    td_wait_for(fd, "STATUS", "gpus=1", 5000);
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=64 seqlen=128"), "OK job=1", 8) == 0);
    /* killed and restarted with back-off (0.5 + 1 s) until the key has
     * taken down its worker three times */
    long long t0 = td_now_ms();
    while (td_now_ms() - t0 < 1000) ASSERT_STREQ(td_req(fd, "PING"), "OK pong");
    td_wait_for(fd, "JOBS all=1", "state=failed", 10000);
    ASSERT(td_stat(fd, "worker_failures") >= 3);
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

static int count_measurements(void *ud, const tt_record *rec) {
    (void)rec;
    ++*(int *)ud;
    return 0;
}

/* How many lines of the daemon's log contain `s`. */
static int log_count(const td *t, const char *s) {
    FILE *f = fopen(t->log, "r");
    char line[2048];
    int n = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) n += strstr(line, s) != NULL;
    fclose(f);
    return n;
}

/* A worker that lies: RESULTs with a field the pipe protocol's table does
 * not have, a value out of its range or not finite, ok without tflops, a
 * status that is not one, a malformed id, and a DONE with an unknown
 * status. Each is refused and logged; only the true RESULT is stored. */
TEST(lines_the_pipe_table_refuses_are_logged_and_never_stored) {
    td t;
    td_init(&t);
    char gpu[TT_ID_MAX], v[128];
    td_fake_gpu(gpu);
    start_with(&t, "liar");
    int fd = td_connect_ok(&t);
    td_wait_for(fd, "STATUS", "gpus=1", 5000);
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=128 seqlen=512"), "OK job=1 keys=1", 15) == 0);
    td_wait_for(fd, "JOBS all=1", "state=done", 5000);
    const char *r = td_req(fd, "LOOKUP dtype=fp16 hdim=128 seqlen_q=512");
    ASSERT_STREQ(td_field(r, "config", v, sizeof v), CFG_B);
    ASSERT_STREQ(td_field(r, "tflops", v, sizeof v), "112.50");
    ASSERT_STREQ(td_req(fd, "PING"), "OK pong");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    tt_store *s;
    char err[256];
    int n = 0;
    ASSERT_OK(tt_store_open(t.db, &s, err, sizeof err));
    ASSERT_OK(tt_store_each_measurement(s, gpu, count_measurements, &n));
    tt_store_close(s);
    ASSERT_EQ(n, 1);
    ASSERT_EQ(log_count(&t, "line refused"), 12);
    ASSERT_EQ(log_count(&t, "unknown field 'bogus'"), 1);
    ASSERT_EQ(log_count(&t, "busy '7' is out of range 0..1"), 1);
    ASSERT_EQ(log_count(&t, "spread 'nan' is not a finite number"), 1);
    ASSERT_EQ(log_count(&t, "status=ok without 'tflops'"), 1);
    ASSERT_EQ(log_count(&t, "DONE: status must be one of done, failed"), 1);
}

/* A HELLO whose GPU name is not percent-encoded: the worker is refused
 * (killed and restarted), the GPU is never registered. */
TEST(a_hello_the_pipe_table_refuses_registers_no_gpu) {
    const char *names[] = {"Bad%zzGPU", "Bad%2"};
    for (int i = 0; i < 2; i++) {
        td t;
        td_init(&t);
        setenv("TT_FAKE_GPU_NAME", names[i], 1);
        start_with(&t, "gpu");
        unsetenv("TT_FAKE_GPU_NAME");
        int fd = td_connect_ok(&t);
        long long until = td_now_ms() + 5000;
        while (td_stat(fd, "worker_failures") < 1 && td_now_ms() < until) usleep(50000);
        ASSERT(td_stat(fd, "worker_failures") >= 1);
        ASSERT_CONTAINS(td_req(fd, "STATUS"), "gpus=0");
        ASSERT_STREQ(td_req(fd, "PING"), "OK pong");
        close(fd);
        ASSERT_EQ(td_stop(&t, SIGTERM), 0);
        ASSERT(log_count(&t, "has a '%' without two hex digits") >= 1);
    }
}

/* The MEASURE lines the stand-in got for `job` ($TT_FAKE_LOG). */
static int measures_of(const char *log, int job) {
    char line[1024], want[32];
    snprintf(want, sizeof want, " job=%d ", job);
    FILE *f = fopen(log, "r");
    if (!f) return 0;
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, want)) n++;
    fclose(f);
    return n;
}

/* The reply to `JOB job=N`, header and key lines joined by '\n' (static
 * buffer). */
static const char *job_text(int fd, int job) {
    static char text[8192];
    char req[64], line[1024], v[16];
    snprintf(req, sizeof req, "JOB job=%d", job);
    snprintf(text, sizeof text, "%s", td_req(fd, req));
    int n = strncmp(text, "OK ", 3) == 0 ? atoi(td_field(text, "lines", v, sizeof v)) : 0;
    for (int i = 0; i < n; i++) {
        ASSERT(td_read_line(fd, line, sizeof line, 2000) > 0);
        size_t len = strlen(text);
        snprintf(text + len, sizeof text - len, "\n%s", line);
    }
    return text;
}

static void wait_job(int fd, int job, const char *want, int timeout_ms) {
    long long until = td_now_ms() + timeout_ms;
    const char *r;
    while (!strstr(r = job_text(fd, job), want) && td_now_ms() < until) usleep(50000);
    if (!strstr(r, want)) TT_FAIL_AT("JOB job=%d never showed \"%s\" (last: %s)", job, want, r);
}

/* Starts the daemon with a stand-in in mode `first` that turns into
 * `after` once it has crashed ($TT_FAKE_MODE_FILE, set to `modefile`); its
 * MEASURE lines go to `log` if not NULL. Returns a connection once the
 * worker said HELLO. */
static int start_crashing(td *t, const char *first, const char *after, char modefile[320], char *log) {
    td_init(t);
    if (log) {
        snprintf(log, 320, "%s/measure.log", t->dir);
        setenv("TT_FAKE_LOG", log, 1);
    }
    snprintf(modefile, 320, "%s/mode", t->dir);
    setenv("TT_FAKE_MODE_FILE", modefile, 1);
    setenv("TT_FAKE_AFTER_CRASH", after, 1);
    start_with(t, first);
    int fd = td_connect_ok(t);
    td_wait_for(fd, "STATUS", "gpus=1", 5000);
    return fd;
}

static void crash_env_clear(void) {
    unsetenv("TT_FAKE_MODE_FILE");
    unsetenv("TT_FAKE_AFTER_CRASH");
    unsetenv("TT_FAKE_LOG");
    unsetenv("TT_FAKE_DELAY");
}

static void write_mode(const char *modefile, const char *mode) {
    FILE *f = fopen(modefile, "w");
    ASSERT(f != NULL);
    fprintf(f, "%s\n", mode);
    fclose(f);
}

/* A job cancelled while its key is being measured, whose worker then
 * dies: the restarted worker must not get the key again, and the key ends
 * cancelled (not done, not running). */
TEST(cancelled_key_is_not_measured_again_after_a_crash) {
    td t;
    char modefile[320], log[320];
    setenv("TT_FAKE_DELAY", "1", 1);
    int fd = start_crashing(&t, "slowcrash", "gpu", modefile, log);
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=64 seqlen=128"), "OK job=1 keys=1", 15) == 0);
    long long until = td_now_ms() + 5000;
    while (measures_of(log, 1) == 0 && td_now_ms() < until) usleep(20000);
    ASSERT_EQ(measures_of(log, 1), 1); /* the worker is on the key (TRY, then dies) */
    ASSERT_STREQ(td_req(fd, "CANCEL job=1"), "OK job=1 state=cancelled");
    /* the worker dies about 1 s after its TRY; the next job runs on the
     * restarted one, so when it is done the restart has had its chance */
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=64 seqlen=256"), "OK job=2 keys=1", 15) == 0);
    wait_job(fd, 2, "OK job=2 state=done", 8000);
    ASSERT_EQ(measures_of(log, 1), 1);
    ASSERT_EQ(measures_of(log, 2), 1);
    wait_job(fd, 1, "seq=0 state=cancelled", 1000);
    ASSERT_CONTAINS(job_text(fd, 1), "OK job=1 state=cancelled");
    ASSERT_CONTAINS(job_text(fd, 1), "running=0");
    /* the variant it died on is still recorded: that was a real fault */
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    k.dtype = TT_DTYPE_FP16;
    k.head_dim = 64;
    k.seqlen_q = k.seqlen_k = 128;
    td_fake_gpu(k.gpu);
    snprintf(k.rev, sizeof k.rev, "00c0ffee");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    crash_env_clear();
    ASSERT_EQ(td_failed_status(t.db, &k, CFG_A), TT_MEAS_FAULT);
}

/* A job cancelled while its worker waits out the restart back-off (0.5 s
 * after a crash): the restarted worker gets the next job's key, not the
 * cancelled one. */
TEST(cancel_during_the_restart_back_off_drops_the_key) {
    td t;
    char modefile[320], log[320];
    int fd = start_crashing(&t, "crash", "gpu", modefile, log);
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=64 seqlen=128,256"), "OK job=1 keys=2", 15) == 0);
    td_wait_for(fd, "STATUS", "reason=restarting", 5000);
    ASSERT_STREQ(td_req(fd, "CANCEL job=1"), "OK job=1 state=cancelled");
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=64 seqlen=512"), "OK job=2 keys=1", 15) == 0);
    wait_job(fd, 2, "OK job=2 state=done", 8000);
    ASSERT_EQ(measures_of(log, 1), 1);
    const char *r = job_text(fd, 1);
    ASSERT_CONTAINS(r, "OK job=1 state=cancelled");
    ASSERT_CONTAINS(r, "running=0");
    wait_job(fd, 1, "seq=0 state=cancelled", 1000);
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    crash_env_clear();
}

/* The worker is restarted after a crash and the new one finds no GPU: the
 * key it held goes back to pending (the job to queued), lookups are still
 * served, and the key runs when a GPU is back. */
TEST(claim_is_released_when_the_restarted_worker_has_no_gpu) {
    td t;
    char modefile[320], v[64];
    int fd = start_crashing(&t, "crash", "nogpu", modefile, NULL);
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=128 seqlen=512"), "OK job=1 keys=1", 15) == 0);
    td_wait_for(fd, "STATUS", "reason=no-gpu", 5000);
    wait_job(fd, 1, "seq=0 state=pending", 2000);
    const char *r = job_text(fd, 1);
    ASSERT_CONTAINS(r, "OK job=1 state=queued");
    ASSERT_CONTAINS(r, "running=0");
    td_wait_for(fd, "JOBS", "job=1 state=queued", 1000);
    ASSERT_STREQ(td_req(fd, "PING"), "OK pong");
    r = td_req(fd, "LOOKUP dtype=fp16 hdim=128 seqlen_q=512");
    ASSERT_STREQ(td_field(r, "match", v, sizeof v), "default");
    /* the GPU is back: the next TUNE probes for it (at most every 5 s) */
    write_mode(modefile, "gpu");
    usleep(5200000);
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=128 seqlen=1024"), "OK job=2 keys=1", 15) == 0);
    td_wait_for(fd, "JOBS all=1", "job=2 state=done", 8000);
    ASSERT_CONTAINS(job_text(fd, 1), "OK job=1 state=done");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    crash_env_clear();
}

/* Same, with a restarted worker that dies before its HELLO: it never got
 * the key, so the key is not failed for it; it waits, pending. */
TEST(claim_is_released_when_the_restarted_worker_dies_before_hello) {
    td t;
    char modefile[320];
    int fd = start_crashing(&t, "crash", "exit", modefile, NULL);
    ASSERT(strncmp(td_req(fd, "TUNE dtype=bf16 hdim=128 seqlen=512"), "OK job=1 keys=1", 15) == 0);
    wait_job(fd, 1, "seq=0 state=pending", 3000);
    /* three restarts that die before HELLO (0.5 + 1 + 2 s): still pending */
    usleep(4000000);
    const char *r = job_text(fd, 1);
    ASSERT_CONTAINS(r, "OK job=1 state=queued");
    ASSERT_CONTAINS(r, "running=0");
    ASSERT_CONTAINS(td_req(fd, "STATUS"), "tuning=waiting reason=restarting");
    ASSERT_STREQ(td_req(fd, "PING"), "OK pong");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    crash_env_clear();
}

TT_TEST_MAIN()
