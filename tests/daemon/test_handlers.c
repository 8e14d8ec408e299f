/* The request handlers in-process: a real store and index, no socket and
 * no supervisor (tt_hctx's sup is NULL), requests as lines, replies read
 * from the output buffer. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/key.h"
#include "tuner/daemon/export.h"
#include "tuner/daemon/handlers.h"
#include "tuner/daemon/log.h"
#include "tt_test.h"

typedef struct fx {
    char dir[64], db[128];
    tt_store *store;
    tt_index *index;
    tt_stats stats;
    tt_auth auth;
    tt_hctx x;
    tt_buf out;
} fx;

static void fx_init(fx *f) {
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/tt-handlers-XXXXXX");
    ASSERT(mkdtemp(f->dir) != NULL);
    snprintf(f->db, sizeof f->db, "%s/tt.db", f->dir);
    char err[256];
    ASSERT_OK(tt_store_open(f->db, &f->store, err, sizeof err));
    ASSERT_OK(tt_index_new(&f->index));
    ASSERT_OK(tt_auth_init(&f->auth, NULL, err, sizeof err));
    f->x = (tt_hctx){.index = f->index,
                     .store = f->store,
                     .stats = &f->stats,
                     .auth = &f->auth,
                     .db_path = f->db,
                     .started_ms = tt_hctx_now_ms()};
    snprintf(f->x.builtin_rev, sizeof f->x.builtin_rev, "0");
    tt_hctx_identity(&f->x, "", "");
    tt_buf_init(&f->out);
}

static void fx_free(fx *f) {
    tt_buf_free(&f->out);
    tt_index_free(f->index);
    tt_store_close(f->store);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", f->dir);
}

/* One request as `uid`; returns the reply (with any body), NUL-ended. */
static const char *req(fx *f, uid_t uid, const char *line) {
    static char text[8192];
    tt_peer p = {.uid = uid, .gid = uid, .pid = 1, .known = 1};
    tt_session s;
    tt_session_init(&s, &p);
    snprintf(text, sizeof text, "%s", line);
    tt_buf_reset(&f->out);
    tt_handle_line(&f->x, &s, text, strlen(text), &f->out);
    tt_session_free(&s);
    size_t n = f->out.len < sizeof text - 1 ? f->out.len : sizeof text - 1;
    memcpy(text, f->out.data, n);
    text[n] = '\0';
    return text;
}

static tt_key_v2 key_of(const char *gpu, const char *rev, int64_t sq) {
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    k.dtype = TT_DTYPE_FP16;
    k.head_dim = 128;
    k.seqlen_q = k.seqlen_k = sq;
    k.group = 1;
    snprintf(k.gpu, sizeof k.gpu, "%s", gpu);
    snprintf(k.rev, sizeof k.rev, "%s", rev);
    return k;
}

/* A key without gpu=/rev= means the serving GPU and revision, as the
 * supervisor last reported them (cached, not asked per LOOKUP). */
TEST(lookup_uses_the_cached_serving_identity) {
    fx f;
    fx_init(&f);
    tt_config cfg;
    ASSERT_OK(
        tt_config_parse("family=mma,block_m=64,block_n=32,warps=4,stages=3,layout=pad,q_in_regs=1", &cfg));
    tt_key_v2 k = key_of("ab12", "77", 1024);
    ASSERT_OK(tt_index_put(f.index, &k, &cfg, 123.456));
    ASSERT_CONTAINS(req(&f, 0, "LOOKUP dtype=fp16 hdim=128 seqlen_q=1024"), "OK match=default");
    tt_hctx_identity(&f.x, "77", "ab12");
    const char *r = req(&f, 1000, "LOOKUP dtype=fp16 hdim=128 seqlen_q=1024");
    ASSERT_CONTAINS(r, "OK match=exact");
    ASSERT_CONTAINS(r, "tflops=123.46");
    ASSERT_CONTAINS(req(&f, 1000, "LOOKUP dtype=fp16 hdim=128 seqlen_q=2000"), "OK match=nearest");
    ASSERT_CONTAINS(req(&f, 1000, "HELLO proto=1"), "rev=77 gpu=ab12");
    /* the worker went away: the built-in revision, no GPU */
    tt_hctx_identity(&f.x, "", "");
    ASSERT_CONTAINS(req(&f, 1000, "HELLO"), "rev=0 gpu=none");
    ASSERT_EQ(f.stats.lookups[TT_MATCH_EXACT], 1);
    ASSERT_EQ(f.stats.requests[TT_VERB_LOOKUP], 3);
    fx_free(&f);
}

TEST(field_errors_get_their_codes) {
    fx f;
    fx_init(&f);
    struct {
        const char *line, *want;
    } cases[] = {
        {"LOOKUP hdim=128 seqlen_q=1", "ERR field missing field 'dtype'"},
        {"LOOKUP dtype=fp16 hdim=128 seqlen_q=1 x=1", "ERR field unknown field 'x'"},
        {"LOOKUP dtype=fp16 hdim=abc seqlen_q=1", "ERR range hdim 'abc' is not a number"},
        {"LOOKUP dtype=fp16 hdim=0128 seqlen_q=1", "ERR range"},
        {"LOOKUP dtype=fp16 hdim=100 seqlen_q=1", "ERR unsupported"},
        {"LOOKUP dtype=fp8 hdim=128 seqlen_q=1", "ERR unsupported"},
        {"LOOKUP dtype=fp16 hdim=128 seqlen_q=1 gpu=XY", "ERR field"},
        {"LOOKUP dtype=fp16 hdim=128 causal=3 seqlen_q=1", "ERR range"},
        {"LOOKUP dtype=fp16 hdim=128 causal=2 seqlen_q=1", "OK match=default"},
        {"LOOKUP dtype=fp16 hdim=128 seqlen_q=1 group=0", "ERR range"},
        {"LOOKUP dtype=fp16 hdim=128 seqlen_q=1 group=257", "ERR range"},
        {"TUNE dtype=fp16 hdim=64 seqlen=128 causal=3", "ERR range"},
        {"TUNE dtype=fp16 hdim=64 seqlen=128 group=0", "ERR range"},
        {"TUNE grid=training", "ERR unsupported grid must be inference"},
        {"TUNE grid=inference dtype=fp16", "ERR field unknown field 'dtype'"},
        {"TUNE grid=inference shard=0/2", "ERR range"},
        {"HELLO proto=2", "ERR version"},
        {"HELLO proto=x", "ERR range"},
        {"PING x=1", "ERR field unknown field 'x'"},
        {"STATS format=xml", "ERR unsupported"},
        {"JOBS all=2", "ERR range"},
        {"JOB", "ERR field missing field 'job'"},
        {"JOB job=0", "ERR range"},
        {"JOB job=5", "ERR notfound"},
        {"NOPE", "ERR verb"},
        {"ping", "ERR proto"},
        {"EXPORT format=xml", "ERR unsupported"},
        {"EXPORT format=sqlite all=1", "ERR field"},
        {"TUNE dtype=fp16 hdim=64 seqlen=128 batch=65536", "ERR range"},
        {"TUNE dtype=fp16 hdim=64 seqlen=128 mode=slow", "ERR unsupported mode must be exhaustive or fast"},
        {"TUNE dtype=fp16 hdim=100 seqlen=128", "ERR unsupported unsupported head_dim 100"},
        {"TUNE dtype=fp16 hdim=64", "ERR field missing field 'seqlen'"},
        {"TUNE stale=1 dtype=fp16", "ERR field unknown field 'dtype'"},
        {"TUNE stale=2", "ERR range"},
        {"TUNE dtype=fp16 hdim=64 seqlen=128 shard=3/2", "ERR range"},
        {"CANCEL job=x", "ERR range"},
        {"CANCEL job=9", "ERR notfound"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *r = req(&f, 0, cases[i].line);
        if (strncmp(r, cases[i].want, strlen(cases[i].want)) != 0) TT_FAIL_AT("%s -> %s", cases[i].line, r);
    }
    fx_free(&f);
}

/* What the verbs gained with groups, bottom-right causal masks and the
 * fleet's view pass through the field tables to their handlers. */
TEST(groups_causal_and_table_fields) {
    fx f;
    fx_init(&f);
    /* causal 2 at seqlen_q == seqlen_k is causal 1: 2 x 2 distinct keys of 3 x 2 */
    ASSERT_CONTAINS(
        req(&f, 0, "TUNE dtype=fp16 hdim=64 causal=0,1,2 seqlen=1,128 seqlen_k=128 group=4,8 mode=fast"),
        "OK job=1 keys=");
    ASSERT_CONTAINS(req(&f, 0, "TUNE grid=inference mode=fast shard=1/4"), "OK job=2 keys=");
    tt_config cfg;
    ASSERT_OK(
        tt_config_parse("family=mma,block_m=64,block_n=32,warps=4,stages=3,layout=pad,q_in_regs=1", &cfg));
    tt_key_v2 k = key_of("ab12", "77", 1);
    k.seqlen_k = 4096;
    k.group = 8;
    k.causal = 0;
    ASSERT_OK(tt_index_put(f.index, &k, &cfg, 50.0));
    tt_hctx_identity(&f.x, "77", "ab12");
    const char *r = req(&f, 0, "LOOKUP dtype=fp16 hdim=128 seqlen_q=1 seqlen_k=4096 group=8");
    ASSERT_CONTAINS(r, "OK match=exact");
    ASSERT_CONTAINS(r, " group=8");
    /* the same key tuned only for another revision: a stale default */
    tt_hctx_identity(&f.x, "78", "ab12");
    r = req(&f, 0, "LOOKUP dtype=fp16 hdim=128 seqlen_q=1 seqlen_k=4096 group=8");
    ASSERT_CONTAINS(r, "OK match=default");
    ASSERT_CONTAINS(r, " stale=1");
    r = req(&f, 0, "STATUS");
    ASSERT_CONTAINS(r, " gpus_lost=0 models=0 gpu_states=none stale=1 table=");
    ASSERT_CONTAINS(r, " last_import=0\n");
    r = req(&f, 0, "STATS format=prometheus");
    ASSERT_CONTAINS(r, "tiletune_stale_keys 1");
    ASSERT_CONTAINS(r, "process_start_time_seconds");
    fx_free(&f);
}

TEST(admin_verbs_refused_before_their_fields) {
    fx f;
    fx_init(&f);
    ASSERT_CONTAINS(req(&f, 1000, "TUNE nonsense=1"), "ERR permission TUNE needs root");
    ASSERT_CONTAINS(req(&f, 1000, "TUNE stale=1"), "ERR permission");
    ASSERT_CONTAINS(req(&f, 1000, "CANCEL job=1"), "ERR permission");
    ASSERT_CONTAINS(req(&f, 1000, "FORGET dtype=fp16 hdim=128 seqlen_q=1"), "ERR permission");
    ASSERT_CONTAINS(req(&f, 1000, "EXPORT format=sqlite"), "ERR permission");
    const char *r = req(&f, 0, "TUNE dtype=fp16,bf16 hdim=64,128 causal=0,1 seqlen=128,256 mode=fast");
    ASSERT_CONTAINS(r, "OK job=1 keys=16");
    r = req(&f, 0, "JOBS");
    ASSERT_CONTAINS(r, "OK lines=1\njob=1 state=queued keys=16");
    ASSERT_CONTAINS(req(&f, 0, "CANCEL job=1"), "OK job=1 state=cancelled");
    ASSERT_EQ(f.stats.jobs_created, 1);
    ASSERT_EQ(f.stats.errors[TT_ERRC_PERMISSION], 5);
    fx_free(&f);
}

/* A non-admin refused in a loop gets one log line a second, not one per
 * request (the journal is the admin's). */
TEST(refused_admin_verbs_log_at_most_once_a_second) {
    fx f;
    fx_init(&f);
    char logpath[160];
    snprintf(logpath, sizeof logpath, "%s/log", f.dir);
    int fd = open(logpath, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    ASSERT(fd >= 0);
    int saved = dup(2);
    dup2(fd, 2);
    tt_log_init(TT_LOG_INFO);
    for (int i = 0; i < 2000; i++) req(&f, 1000, "FORGET dtype=fp16 hdim=128 seqlen_q=1");
    usleep(1100 * 1000);
    req(&f, 1000, "CANCEL job=1");
    dup2(saved, 2);
    close(fd);
    FILE *l = fopen(logpath, "r");
    char line[512];
    int n = 0, summary = 0;
    while (fgets(line, sizeof line, l)) {
        n += strstr(line, "refused") != NULL;
        summary += strstr(line, "1999 more refusals not logged") != NULL;
    }
    fclose(l);
    ASSERT_EQ(n, 2);
    ASSERT_EQ(summary, 1);
    ASSERT_EQ(f.stats.errors[TT_ERRC_PERMISSION], 2001);
    fx_free(&f);
}

TEST(stats_counts_every_verb_and_error) {
    fx f;
    fx_init(&f);
    req(&f, 0, "PING");
    req(&f, 0, "BOGUS");
    const char *r = req(&f, 0, "STATS");
    ASSERT_CONTAINS(r, "requests_ping 1\n");
    ASSERT_CONTAINS(r, "requests_other 1\n");
    ASSERT_CONTAINS(r, "errors_verb 1\n");
    ASSERT_CONTAINS(r, "lookups_nearest 0\n");
    ASSERT_CONTAINS(r, "queue_jobs_cancelled 0\n");
    ASSERT_CONTAINS(req(&f, 0, "STATUS"), "tuning=waiting reason=no-gpu");
    fx_free(&f);
}

TT_TEST_MAIN()
