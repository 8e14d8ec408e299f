/*
 * A node with several GPUs, with stand-in workers (fake_worker.sh): one
 * worker per GPU, one job's keys spread over all of them, a node of mixed
 * models tuning each model apart, and a GPU that falls off the bus while
 * the others go on.
 */
#include <signal.h>
#include <stdlib.h>

#include "harness.h"
#include "tuner/store/record.h"
#include "tt_test.h"

#define WORKER TT_DAEMON_TEST_DIR "/fake_worker.sh"
#define CFG_B "family=mma,block_m=128,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=0"

static void start_gpus(td *t, int ngpus, const char *mode) {
    char n[16];
    snprintf(n, sizeof n, "%d", ngpus);
    setenv("TT_FAKE_GPUS", n, 1);
    setenv("TT_FAKE_WORKER_MODE", mode, 1);
    const char *args[] = {"--worker", WORKER, NULL};
    td_start(t, args);
}

static void clear_env(void) {
    unsetenv("TT_FAKE_GPUS");
    unsetenv("TT_FAKE_GPU_NAMES");
    unsetenv("TT_FAKE_GPU_LOG");
    unsetenv("TT_FAKE_GONE_GPU");
    unsetenv("TT_FAKE_GONE_FILE");
    unsetenv("TT_FAKE_DELAY");
}

/* Which GPU measured each key, from the stand-ins' log: counts per GPU
 * index, and the number of measurements in all. */
static int per_gpu(const char *log, int *count, int max) {
    FILE *f = fopen(log, "r");
    if (!f) TT_FAIL_AT("no log %s", log);
    char line[1024];
    int total = 0;
    memset(count, 0, sizeof *count * (size_t)max);
    while (fgets(line, sizeof line, f)) {
        int g;
        if (sscanf(line, "gpu=%d", &g) == 1 && g >= 0 && g < max) count[g]++;
        total++;
    }
    fclose(f);
    return total;
}

TEST(one_job_spreads_over_every_gpu) {
    td t;
    td_init(&t);
    char log[512];
    snprintf(log, sizeof log, "%s/gpus.log", t.dir);
    setenv("TT_FAKE_GPU_LOG", log, 1);
    setenv("TT_FAKE_DELAY", "0.3", 1);
    start_gpus(&t, 4, "slow");
    int fd = td_connect_ok(&t);
    td_wait_for(fd, "STATUS", "gpus=4", 5000);
    ASSERT_CONTAINS(td_req(fd, "STATUS"), "gpu_states=ready,ready,ready,ready");
    ASSERT_CONTAINS(td_req(fd, "STATUS"), "models=1");
    /* identical GPUs share one model: one key each, whoever measures it */
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=64 seqlen=128,256,512,1024,2048,4096,8192,16384"),
                   "OK job=1 keys=8", 15) == 0);
    td_wait_for(fd, "JOBS all=1", "state=done", 10000);
    int count[4], total = per_gpu(log, count, 4);
    ASSERT_EQ(total, 8); /* every key measured once */
    for (int g = 0; g < 4; g++)
        if (count[g] == 0)
            TT_FAIL_AT("GPU %d measured no key (%d %d %d %d)", g, count[0], count[1], count[2], count[3]);
    ASSERT_CONTAINS(td_req(fd, "STATUS"), "records=8");
    close(fd);
    clear_env();
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(mixed_models_tune_each_model_apart) {
    td t;
    td_init(&t);
    char a[TT_ID_MAX], b[TT_ID_MAX], req[256], v[128];
    tt_gpu_fingerprint("Model A", 9, 0, 132, 1000000000LL, a);
    tt_gpu_fingerprint("Model B", 9, 0, 132, 1000000000LL, b);
    setenv("TT_FAKE_GPU_NAMES", "Model%20A,Model%20B", 1);
    start_gpus(&t, 2, "gpu");
    int fd = td_connect_ok(&t);
    td_wait_for(fd, "STATUS", "models=2", 5000);
    /* two keys without gpu=: one per model */
    ASSERT(strncmp(td_req(fd, "TUNE dtype=bf16 hdim=128 seqlen=512,2048"), "OK job=1 keys=4", 15) == 0);
    td_wait_for(fd, "JOBS all=1", "state=done", 5000);
    const char *fps[2] = {a, b};
    for (int m = 0; m < 2; m++)
        for (int q = 512; q <= 2048; q *= 4) {
            snprintf(req, sizeof req, "LOOKUP dtype=bf16 hdim=128 seqlen_q=%d gpu=%s", q, fps[m]);
            const char *r = td_req(fd, req);
            if (strcmp(td_field(r, "match", v, sizeof v), "exact") != 0)
                TT_FAIL_AT("model %c seqlen %d: %s", 'A' + m, q, r);
        }
    /* a key that names its model is queued for that model alone */
    snprintf(req, sizeof req, "TUNE dtype=fp16 hdim=64 seqlen=128 gpu=%s", b);
    ASSERT(strncmp(td_req(fd, req), "OK job=2 keys=1", 15) == 0);
    close(fd);
    clear_env();
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(a_gpu_that_falls_off_the_bus_is_reported_and_its_key_measured_by_another) {
    td t;
    td_init(&t);
    char gone[512], log[512], req[256], v[128];
    snprintf(gone, sizeof gone, "%s/gpu1.gone", t.dir);
    snprintf(log, sizeof log, "%s/gpus.log", t.dir);
    setenv("TT_FAKE_GONE_GPU", "1", 1);
    setenv("TT_FAKE_GONE_FILE", gone, 1);
    setenv("TT_FAKE_GPU_LOG", log, 1);
    setenv("TT_FAKE_DELAY", "0.2", 1);
    start_gpus(&t, 2, "slow");
    int fd = td_connect_ok(&t);
    td_wait_for(fd, "STATUS", "gpus=2", 5000);
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=128 seqlen=256,512,1024,2048"), "OK job=1 keys=4", 15) ==
           0);
    td_wait_for(fd, "JOBS all=1", "state=done", 10000);
    const char *st = td_req(fd, "STATUS");
    ASSERT_CONTAINS(st, "gpus_lost=1");
    ASSERT_CONTAINS(st, "gpu_states=ready,lost");
    ASSERT_CONTAINS(st, "gpus=1");
    int count[2];
    per_gpu(log, count, 2);
    ASSERT_EQ(count[1], 1); /* GPU 1 took one key and died on it */
    ASSERT_EQ(count[0], 4); /* GPU 0 measured all four, that one too */
    /* the variant GPU 1 died on is not blamed: the GPU was gone, the
     * variant fine, and it is every key's winner */
    for (int q = 256; q <= 2048; q *= 2) {
        snprintf(req, sizeof req, "LOOKUP dtype=fp16 hdim=128 seqlen_q=%d", q);
        const char *r = td_req(fd, req);
        ASSERT_STREQ(td_field(r, "match", v, sizeof v), "exact");
        ASSERT_STREQ(td_field(r, "config", v, sizeof v), CFG_B);
    }
    close(fd);
    clear_env();
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    k.dtype = TT_DTYPE_FP16;
    k.head_dim = 128;
    k.seqlen_q = k.seqlen_k = 256;
    td_fake_gpu(k.gpu);
    snprintf(k.rev, sizeof k.rev, "00c0ffee");
    for (int q = 256; q <= 2048; q *= 2) {
        k.seqlen_q = k.seqlen_k = q;
        if (td_failed_status(t.db, &k, CFG_B) != TT_MEAS_OK)
            TT_FAIL_AT("variant B recorded failed at seqlen %d", q);
    }
}

TT_TEST_MAIN()
