/*
 * The real tiletuned on a temporary socket and database, driven with raw
 * protocol lines: lookups of each match kind, pipelining, concurrency,
 * malformed requests, limits, restarts, signals, authorization.
 */
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "harness.h"
#include "common/proto.h"
#include "tuner/store/store.h"
#include "common/key.h"
#include "tt_test.h"

#define REV "00c0ffee"

static tt_config cfg_a(void) {
    tt_config c;
    ASSERT_OK(
        tt_config_parse("family=mma,block_m=64,block_n=32,warps=4,stages=3,layout=pad,q_in_regs=1", &c));
    return c;
}

static tt_config cfg_b(void) {
    tt_config c;
    ASSERT_OK(tt_config_parse(
        "family=mma,block_m=128,block_n=128,warps=8,stages=2,layout=swizzle,q_in_regs=0", &c));
    return c;
}

static tt_key_v2 mkkey(const char *gpu, int hdim, int64_t sq, int64_t sk) {
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    k.dtype = TT_DTYPE_FP16;
    k.head_dim = hdim;
    k.seqlen_q = sq;
    k.seqlen_k = sk;
    snprintf(k.gpu, sizeof k.gpu, "%s", gpu);
    snprintf(k.rev, sizeof k.rev, "%s", REV);
    return k;
}

static void seed_two(const td *t, char gpu[TT_ID_MAX]) {
    td_fake_gpu(gpu);
    tt_key_v2 k = mkkey(gpu, 128, 512, 512);
    tt_config a = cfg_a(), b = cfg_b();
    td_seed(t->db, &k, &a, 150.5);
    k = mkkey(gpu, 128, 4096, 4096);
    td_seed(t->db, &k, &b, 300.25);
}

static void expect_lookup(int fd, const char *gpu, const char *rest, const char *match, const char *cfg,
                          const char *sq) {
    char req[512], v[256];
    snprintf(req, sizeof req, "LOOKUP gpu=%s rev=%s %s", gpu, REV, rest);
    const char *r = td_req(fd, req);
    if (strncmp(r, "OK ", 3) != 0) TT_FAIL_AT("%s -> %s", req, r);
    ASSERT_STREQ(td_field(r, "match", v, sizeof v), match);
    if (cfg) ASSERT_STREQ(td_field(r, "config", v, sizeof v), cfg);
    if (sq) ASSERT_STREQ(td_field(r, "seqlen_q", v, sizeof v), sq);
}

TEST(lookup_each_match_kind_from_seeded_db) {
    td t;
    td_init(&t);
    char gpu[TT_ID_MAX], ta[TT_CONFIG_TEXT_MAX], tb[TT_CONFIG_TEXT_MAX], v[64];
    seed_two(&t, gpu);
    tt_config a = cfg_a(), b = cfg_b();
    tt_config_format(&a, ta, sizeof ta);
    tt_config_format(&b, tb, sizeof tb);
    td_start(&t, NULL);
    int fd = td_connect_ok(&t);
    expect_lookup(fd, gpu, "dtype=fp16 hdim=128 seqlen_q=512", "exact", ta, "512");
    ASSERT_STREQ(td_field(td_req(fd, "LOOKUP dtype=fp16 hdim=128 seqlen_q=512 gpu="
                                     "0"),
                          "match", v, sizeof v),
                 "default");
    /* log distance: 1000 is nearer 512 (0.67) than 4096 (1.41); 3000 nearer 4096 */
    expect_lookup(fd, gpu, "dtype=fp16 hdim=128 seqlen_q=1000", "nearest", ta, "512");
    expect_lookup(fd, gpu, "dtype=fp16 hdim=128 seqlen_q=3000", "nearest", tb, "4096");
    expect_lookup(fd, gpu, "dtype=fp16 hdim=128 seqlen_q=100000", "nearest", tb, "4096");
    /* other head_dim, dtype, causal flag: nothing tuned -> default */
    expect_lookup(fd, gpu, "dtype=fp16 hdim=64 seqlen_q=512", "default", NULL, "512");
    expect_lookup(fd, gpu, "dtype=bf16 hdim=128 seqlen_q=512", "default", NULL, "512");
    expect_lookup(fd, gpu, "dtype=fp16 hdim=128 causal=1 seqlen_q=512", "default", NULL, "512");
    const char *r = td_req(fd, "LOOKUP dtype=fp16 hdim=128 seqlen_q=512 rev=1234 gpu=abcd");
    ASSERT_STREQ(td_field(r, "match", v, sizeof v), "default");
    ASSERT(strstr(r, "tflops=") == NULL);
    char req[256];
    snprintf(req, sizeof req, "LOOKUP dtype=fp16 hdim=128 seqlen_q=512 gpu=%s rev=%s", gpu, REV);
    ASSERT_STREQ(td_field(td_req(fd, req), "tflops", v, sizeof v), "150.50");
    ASSERT_CONTAINS(td_req(fd, "STATUS"), "records=2");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(pipelined_requests_answered_in_order) {
    td t;
    td_init(&t);
    td_start(&t, NULL);
    int fd = td_connect_ok(&t);
    static char batch[100 * 80];
    size_t n = 0;
    for (int i = 0; i < 100; i++)
        n += (size_t)sprintf(batch + n, i % 10 == 9 ? "PING\n" : "LOOKUP dtype=fp16 hdim=64 seqlen_q=%d\n",
                             i + 1);
    td_send(fd, batch, n);
    char line[1024], v[32], want[32];
    for (int i = 0; i < 100; i++) {
        ASSERT(td_read_line(fd, line, sizeof line, 5000) > 0);
        if (i % 10 == 9) {
            ASSERT_STREQ(line, "OK pong");
        } else {
            snprintf(want, sizeof want, "%d", i + 1);
            ASSERT_STREQ(td_field(line, "seqlen_q", v, sizeof v), want);
        }
    }
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(many_concurrent_clients) {
    td t;
    td_init(&t);
    td_start(&t, NULL);
    enum { N = 256 };
    static int fds[N];
    for (int i = 0; i < N; i++) fds[i] = td_connect_ok(&t);
    char req[128], line[1024], v[32], want[32];
    for (int i = 0; i < N; i++) {
        snprintf(req, sizeof req, "LOOKUP dtype=bf16 hdim=256 seqlen_q=%d\n", 1000 + i);
        td_sendstr(fds[i], req);
    }
    for (int i = N - 1; i >= 0; i--) {
        ASSERT(td_read_line(fds[i], line, sizeof line, 5000) > 0);
        snprintf(want, sizeof want, "%d", 1000 + i);
        ASSERT_STREQ(td_field(line, "seqlen_q", v, sizeof v), want);
    }
    int fd = td_connect_ok(&t);
    ASSERT_EQ(td_stat(fd, "connections_open"), N + 1);
    for (int i = 0; i < N; i++) close(fds[i]);
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(every_malformed_class_gets_err_and_daemon_goes_on) {
    td t;
    td_init(&t);
    td_start(&t, NULL);
    int fd = td_connect_ok(&t);
    static const struct {
        const char *line;
        size_t len; /* 0: strlen */
        const char *code;
    } cases[] = {
        {"FROB x=1", 0, "verb"},
        {"lookup dtype=fp16", 0, "proto"},
        {"LOOKUP hdim=128 seqlen_q=1", 0, "field"},                       /* missing */
        {"LOOKUP dtype=fp16 dtype=fp16 hdim=128 seqlen_q=1", 0, "proto"}, /* duplicate */
        {"LOOKUP dtype=fp16 hdim=128 seqlen_q=1 color=red", 0, "field"},  /* unknown */
        {"PING extra=1", 0, "field"},
        {"LOOKUP dtype=fp16 hdim=128 seqlen_q=99999999999", 0, "range"}, /* out of range */
        {"LOOKUP dtype=fp16 hdim=128 seqlen_q=0", 0, "range"},
        {"LOOKUP dtype=fp16 hdim=128 seqlen_q=99999999999999999999999", 0, "range"},
        {"LOOKUP dtype=fp16 hdim=128 seqlen_q=12x", 0, "range"}, /* not a number */
        {"LOOKUP dtype=fp16 hdim=abc seqlen_q=1", 0, "range"},
        {"LOOKUP dtype=fp16 hdim=128 causal=3 seqlen_q=1", 0, "range"},
        {"LOOKUP dtype=fp16 hdim=128 group=0 seqlen_q=1", 0, "range"},
        {"LOOKUP dtype=fp32 hdim=128 seqlen_q=1", 0, "unsupported"}, /* dtype */
        {"LOOKUP dtype=fp16 hdim=48 seqlen_q=1", 0, "unsupported"},  /* head_dim */
        {"LOOKUP dtype=fp16 hdim=128 seqlen_q=1 gpu=XYZ", 0, "field"},
        {"PING a=b\0c", 10, "proto"},    /* NUL */
        {"PING a=\xff\xfe", 0, "proto"}, /* UTF-8 */
        {"PING a=\xc0\xaf", 0, "proto"}, /* overlong UTF-8 */
        {"PING a=\x01", 0, "proto"},     /* control */
        {"", 0, "proto"},                /* empty */
        {"HELLO proto=2", 0, "version"},
        {"TUNE dtype=fp16 hdim=64 seqlen=512 batch=65536", 0, "range"}, /* past the grid's z */
        {"HELLO proto=x", 0, "range"},
        {"STATS format=xml", 0, "unsupported"},
        {"JOBS all=7", 0, "range"},
        {"TUNE dtype=fp16 hdim=64 seqlen=1,,2", 0, "range"},
        {"TUNE dtype=fp16 hdim=63 seqlen=1", 0, "unsupported"},
        {"TUNE dtype=fp16 hdim=64 seqlen=128 mode=lazy", 0, "unsupported"},
        {"TUNE dtype=fp16 hdim=64", 0, "field"},
        {"TUNE dtype=fp16 hdim=64 seqlen=1 causal=3", 0, "range"},
        {"TUNE dtype=fp16 hdim=64 seqlen=1 group=0", 0, "range"},
        {"TUNE grid=training", 0, "unsupported"},
        {"TUNE grid=inference dtype=fp16", 0, "field"},
        {"CANCEL job=999", 0, "notfound"},
        {"CANCEL job=-3", 0, "range"},
    };
    char line[8192], code[32];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].line);
        char buf[512];
        memcpy(buf, cases[i].line, len);
        buf[len] = '\n';
        td_send(fd, buf, len + 1);
        ASSERT(td_read_line(fd, line, sizeof line, 5000) > 0);
        if (strncmp(line, "ERR ", 4) != 0) TT_FAIL_AT("case %zu (%s) -> %s", i, cases[i].line, line);
        sscanf(line + 4, "%31s", code);
        if (strcmp(code, cases[i].code) != 0)
            TT_FAIL_AT("case %zu (%s): got %s, want %s", i, cases[i].line, line, cases[i].code);
        ASSERT_STREQ(td_req(fd, "PING"), "OK pong");
    }
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(overlong_line_gets_toolong_and_close) {
    td t;
    td_init(&t);
    td_start(&t, NULL);
    char line[256];
    static char big[TT_LINE_MAX + 64];
    /* without a newline: the daemon cannot frame it and must not wait for one */
    int fd = td_connect_ok(&t);
    memset(big, 'a', sizeof big);
    memcpy(big, "PING x=", 7);
    td_send(fd, big, TT_LINE_MAX + 10);
    ASSERT(td_read_line(fd, line, sizeof line, 5000) > 0);
    ASSERT(strncmp(line, "ERR toolong", 11) == 0);
    ASSERT(td_wait_eof(fd, 3000));
    close(fd);
    /* a complete line one byte too long; exactly 4096 is fine */
    fd = td_connect_ok(&t);
    big[TT_LINE_MAX] = '\n';
    td_send(fd, big, TT_LINE_MAX + 1);
    ASSERT(td_read_line(fd, line, sizeof line, 5000) > 0);
    ASSERT_STREQ(line, "ERR field unknown field 'x'");
    big[TT_LINE_MAX] = 'a';
    big[TT_LINE_MAX + 1] = '\n';
    td_send(fd, big, TT_LINE_MAX + 2);
    ASSERT(td_read_line(fd, line, sizeof line, 5000) > 0);
    ASSERT(strncmp(line, "ERR toolong", 11) == 0);
    ASSERT(td_wait_eof(fd, 3000));
    close(fd);
    fd = td_connect_ok(&t);
    ASSERT_STREQ(td_req(fd, "PING"), "OK pong");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(connection_cap_refuses_with_busy) {
    td t;
    td_init(&t);
    const char *args[] = {"--max-connections", "4", NULL};
    td_start(&t, args);
    int fds[4];
    for (int i = 0; i < 4; i++) {
        fds[i] = td_connect_ok(&t);
        ASSERT_STREQ(td_req(fds[i], "PING"), "OK pong");
    }
    int extra = td_connect_ok(&t);
    char line[256];
    ASSERT(td_read_line(extra, line, sizeof line, 5000) > 0);
    ASSERT(strncmp(line, "ERR busy", 8) == 0);
    ASSERT(td_wait_eof(extra, 3000));
    close(extra);
    for (int i = 0; i < 4; i++) ASSERT_STREQ(td_req(fds[i], "PING"), "OK pong");
    close(fds[0]);
    /* the freed slot is usable once the daemon has seen the close */
    int ok = 0;
    for (int i = 0; i < 100 && !ok; i++) {
        int fd = td_connect_ok(&t);
        td_sendstr(fd, "PING\n");
        ok = td_read_line(fd, line, sizeof line, 2000) > 0 && strcmp(line, "OK pong") == 0;
        close(fd);
        if (!ok) usleep(20000);
    }
    ASSERT(ok);
    ASSERT(td_stat(fds[1], "connections_refused") >= 1);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(half_line_does_not_stall_others) {
    td t;
    td_init(&t);
    td_start(&t, NULL);
    int slow = td_connect_ok(&t);
    td_sendstr(slow, "LOOKUP dtype=fp16 hd");
    int fd = td_connect_ok(&t);
    long long t0 = td_now_ms();
    for (int i = 0; i < 50; i++)
        ASSERT(strncmp(td_req(fd, "LOOKUP dtype=fp16 hdim=64 seqlen_q=77"), "OK match=default", 16) == 0);
    ASSERT(td_now_ms() - t0 < 2000);
    td_sendstr(slow, "im=64 seqlen_q=9\n");
    char line[512], v[32];
    ASSERT(td_read_line(slow, line, sizeof line, 5000) > 0);
    ASSERT_STREQ(td_field(line, "seqlen_q", v, sizeof v), "9");
    close(slow);
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(idle_connection_times_out) {
    td t;
    td_init(&t);
    const char *args[] = {"--idle-timeout", "1", NULL};
    td_start(&t, args);
    int fd = td_connect_ok(&t);
    ASSERT_STREQ(td_req(fd, "PING"), "OK pong");
    char line[256];
    long long t0 = td_now_ms();
    ASSERT(td_read_line(fd, line, sizeof line, 4000) > 0);
    ASSERT(strncmp(line, "ERR timeout", 11) == 0);
    ASSERT(td_now_ms() - t0 >= 900);
    ASSERT(td_wait_eof(fd, 3000));
    close(fd);
    /* a half-written line does not keep a connection alive either */
    fd = td_connect_ok(&t);
    td_sendstr(fd, "PIN");
    ASSERT(td_read_line(fd, line, sizeof line, 4000) > 0);
    ASSERT(strncmp(line, "ERR timeout", 11) == 0);
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(restart_after_kill9_loses_nothing) {
    td t;
    td_init(&t);
    char gpu[TT_ID_MAX], v[64], req[256];
    seed_two(&t, gpu);
    td_start(&t, NULL);
    int fd = td_connect_ok(&t);
    const char *r = td_req(fd, "TUNE dtype=fp16,bf16 hdim=64 seqlen=256,512,1024 causal=0,1");
    ASSERT(strncmp(r, "OK job=", 7) == 0);
    ASSERT_STREQ(td_field(r, "keys", v, sizeof v), "12");
    char job[32];
    td_field(r, "job", job, sizeof job);
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGKILL), 128 + SIGKILL);
    td_start(&t, NULL); /* a stale socket file is left behind: replaced */
    fd = td_connect_ok(&t);
    snprintf(req, sizeof req, "LOOKUP dtype=fp16 hdim=128 seqlen_q=4096 gpu=%s rev=%s", gpu, REV);
    ASSERT_STREQ(td_field(td_req(fd, req), "match", v, sizeof v), "exact");
    r = td_req(fd, "JOBS");
    ASSERT_STREQ(r, "OK lines=1");
    char line[512];
    ASSERT(td_read_line(fd, line, sizeof line, 2000) > 0);
    ASSERT_STREQ(td_field(line, "job", v, sizeof v), job);
    ASSERT_STREQ(td_field(line, "state", v, sizeof v), "queued");
    ASSERT_STREQ(td_field(line, "keys", v, sizeof v), "12");
    ASSERT_CONTAINS(td_req(fd, "STATUS"), "jobs_queued=1");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(tune_queues_the_inference_grid_and_group_lists) {
    td t;
    td_init(&t);
    char gpu[TT_ID_MAX], v[64];
    seed_two(&t, gpu);
    td_start(&t, NULL);
    int fd = td_connect_ok(&t);
    const char *r = td_req(fd, "TUNE grid=inference mode=fast");
    ASSERT(strncmp(r, "OK job=", 7) == 0);
    char keys[16];
    snprintf(keys, sizeof keys, "%zu", tt__inference_grid(NULL, 0));
    ASSERT_STREQ(td_field(r, "keys", v, sizeof v), keys);
    /* lists of groups and causal alignments; equal problems are one key */
    r = td_req(fd, "TUNE dtype=bf16 hdim=128 seqlen=1,2048 seqlen_k=4096,2048 causal=0,2 group=1,4,8");
    ASSERT(strncmp(r, "OK job=", 7) == 0);
    /* q=1: k 4096 and 2048 x group 3 (causal 2 folds into 0) = 6;
     * q=2048 k=4096 (chunk? 4x2048 > 4096: prefill) causal 0, 2 = 2;
     * q=2048 k=2048 causal 0, 1 = 2 */
    ASSERT_STREQ(td_field(r, "keys", v, sizeof v), "10");
    char req[256];
    snprintf(req, sizeof req, "LOOKUP dtype=bf16 hdim=128 causal=2 seqlen_q=8 seqlen_k=32768 group=8 gpu=%s",
             gpu);
    ASSERT_STREQ(td_field(td_req(fd, req), "match", v, sizeof v), "default");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(sigterm_removes_socket_and_closes_db) {
    td t;
    td_init(&t);
    char gpu[TT_ID_MAX];
    seed_two(&t, gpu);
    td_start(&t, NULL);
    int fd = td_connect_ok(&t);
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=64 seqlen=128"), "OK job=", 7) == 0);
    /* a request in flight when the signal comes is still answered */
    td_sendstr(fd, "PING\n");
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    char line[64];
    ASSERT(td_read_line(fd, line, sizeof line, 2000) > 0);
    ASSERT_STREQ(line, "OK pong");
    ASSERT(td_wait_eof(fd, 2000));
    close(fd);
    struct stat st;
    ASSERT(stat(t.sock, &st) < 0 && errno == ENOENT);
    char wal[400];
    snprintf(wal, sizeof wal, "%s-wal", t.db);
    /* the last connection checkpoints and removes the WAL on a clean close */
    ASSERT(stat(wal, &st) < 0 || st.st_size == 0);
    tt_store *s;
    char err[256];
    ASSERT_OK(tt_store_open(t.db, &s, err, sizeof err));
    tt_job_counts jc;
    ASSERT_OK(tt_store_job_counts(s, &jc));
    ASSERT_EQ(jc.queued, 1);
    tt_store_close(s);
    /* SIGINT too */
    td_start(&t, NULL);
    ASSERT_EQ(td_stop(&t, SIGINT), 0);
    ASSERT(stat(t.sock, &st) < 0);
}

TEST(refuses_live_socket_and_non_socket_path) {
    td t;
    td_init(&t);
    td_start(&t, NULL);
    td second = t;
    snprintf(second.db, sizeof second.db, "%s/other.db", t.dir);
    snprintf(second.log, sizeof second.log, "%s/second.log", t.dir);
    /* a second daemon on the same socket exits non-zero, leaving the first alone */
    pid_t pid = fork();
    if (pid == 0) {
        execl(TILETUNED, TILETUNED, "--socket", t.sock, "--db", second.db, "--worker", "", "--log-level",
              "error", (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    int fd = td_connect_ok(&t);
    ASSERT_STREQ(td_req(fd, "PING"), "OK pong");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    /* a regular file where the socket goes is never removed */
    FILE *f = fopen(t.sock, "w");
    fputs("precious", f);
    fclose(f);
    pid = fork();
    if (pid == 0) {
        execl(TILETUNED, TILETUNED, "--socket", t.sock, "--db", t.db, "--worker", "", "--log-level", "error",
              (char *)NULL);
        _exit(127);
    }
    waitpid(pid, &st, 0);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    struct stat sb;
    ASSERT(stat(t.sock, &sb) == 0 && S_ISREG(sb.st_mode));
}

TEST(tune_jobs_cancel_forget) {
    td t;
    td_init(&t);
    char gpu[TT_ID_MAX], v[64], req[256], line[512];
    seed_two(&t, gpu);
    td_start(&t, NULL);
    int fd = td_connect_ok(&t);
    const char *r =
        td_req(fd, "TUNE dtype=fp16 hdim=64,128 seqlen=512 seqlen_k=512,1024 mode=fast batch=2 heads=8");
    ASSERT_STREQ(td_field(r, "keys", v, sizeof v), "4");
    char job[32];
    td_field(r, "job", job, sizeof job);
    ASSERT_STREQ(td_req(fd, "JOBS"), "OK lines=1");
    ASSERT(td_read_line(fd, line, sizeof line, 2000) > 0);
    ASSERT_STREQ(td_field(line, "mode", v, sizeof v), "fast");
    snprintf(req, sizeof req, "CANCEL job=%s", job);
    snprintf(line, sizeof line, "OK job=%s state=cancelled", job);
    ASSERT_STREQ(td_req(fd, req), line);
    ASSERT(strncmp(td_req(fd, req), "ERR notfound", 12) == 0);
    ASSERT_STREQ(td_req(fd, "JOBS"), "OK lines=0");
    ASSERT_STREQ(td_req(fd, "JOBS all=1"), "OK lines=1");
    ASSERT(td_read_line(fd, line, sizeof line, 2000) > 0);
    ASSERT_STREQ(td_field(line, "state", v, sizeof v), "cancelled");
    snprintf(req, sizeof req, "FORGET dtype=fp16 hdim=128 seqlen_q=512 gpu=%s rev=%s", gpu, REV);
    ASSERT_STREQ(td_req(fd, req), "OK forgot=1");
    ASSERT_STREQ(td_req(fd, req), "OK forgot=0");
    /* 512 is gone: the nearest is now 4096 */
    snprintf(req, sizeof req, "LOOKUP dtype=fp16 hdim=128 seqlen_q=512 gpu=%s rev=%s", gpu, REV);
    r = td_req(fd, req);
    ASSERT_STREQ(td_field(r, "match", v, sizeof v), "nearest");
    ASSERT_STREQ(td_field(r, "seqlen_q", v, sizeof v), "4096");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    /* and it stays forgotten */
    td_start(&t, NULL);
    fd = td_connect_ok(&t);
    ASSERT_STREQ(td_field(td_req(fd, req), "match", v, sizeof v), "nearest");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(stats_text_and_prometheus) {
    td t;
    td_init(&t);
    td_start(&t, NULL);
    int fd = td_connect_ok(&t);
    td_req(fd, "LOOKUP dtype=fp16 hdim=64 seqlen_q=5");
    td_req(fd, "LOOKUP dtype=fp16 hdim=64 seqlen_q=6");
    td_req(fd, "NOPE");
    char line[512], v[32];
    const char *r = td_req(fd, "STATS");
    int n = atoi(td_field(r, "lines", v, sizeof v)), seen = 0;
    for (int i = 0; i < n; i++) {
        ASSERT(td_read_line(fd, line, sizeof line, 2000) > 0);
        if (strcmp(line, "requests_lookup 2") == 0 || strcmp(line, "lookups_default 2") == 0 ||
            strcmp(line, "errors_verb 1") == 0 || strcmp(line, "requests_other 1") == 0)
            seen++;
    }
    ASSERT_EQ(seen, 4);
    r = td_req(fd, "STATS format=prometheus");
    n = atoi(td_field(r, "lines", v, sizeof v));
    int help = 0, type = 0, lk = 0;
    for (int i = 0; i < n; i++) {
        ASSERT(td_read_line(fd, line, sizeof line, 2000) > 0);
        help += strncmp(line, "# HELP tiletune_", 16) == 0;
        type += strncmp(line, "# TYPE tiletune_", 16) == 0;
        lk += strcmp(line, "tiletune_lookups_total{match=\"default\"} 2") == 0;
    }
    ASSERT(help > 5 && help == type);
    ASSERT_EQ(lk, 1);
    ASSERT_STREQ(td_req(fd, "PING"), "OK pong"); /* the body was exactly n lines */
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

/* Runs `line` as uid/gid 65534 (nobody) through setpriv, the way an
 * unprivileged local user would, and returns the reply. */
static const char *as_nobody(const td *t, const char *line) {
    static char out[512];
    char cmd[1024];
    snprintf(
        cmd, sizeof cmd,
        "printf '%%s\\n' '%s' | setpriv --reuid=65534 --regid=65534 --clear-groups "
        "/usr/bin/python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
        "s.sendall(sys.stdin.buffer.read()); f=s.makefile(); print(f.readline().strip())' %s",
        line, t->sock);
    FILE *p = popen(cmd, "r");
    ASSERT(p != NULL);
    out[0] = '\0';
    if (!fgets(out, sizeof out, p)) out[0] = '\0';
    pclose(p);
    out[strcspn(out, "\n")] = '\0';
    return out;
}

TEST(authorization_by_peer_credentials) {
    if (getuid() != 0) TT_SKIP("needs root to run a client as another uid (setpriv)");
    if (system("command -v setpriv >/dev/null && test -x /usr/bin/python3") != 0)
        TT_SKIP("setpriv or python3 missing");
    td t;
    td_init(&t);
    ASSERT_OK(chmod(t.dir, 0755));
    td_start(&t, NULL);
    ASSERT_OK(chmod(t.sock, 0666)); /* the socket unit's SocketMode does this in production */
    ASSERT(strncmp(as_nobody(&t, "LOOKUP dtype=fp16 hdim=64 seqlen_q=128"), "OK match=default", 16) == 0);
    ASSERT(strncmp(as_nobody(&t, "STATUS"), "OK version=", 11) == 0);
    ASSERT(strncmp(as_nobody(&t, "TUNE dtype=fp16 hdim=64 seqlen=128"), "ERR permission", 14) == 0);
    ASSERT(strncmp(as_nobody(&t, "CANCEL job=1"), "ERR permission", 14) == 0);
    ASSERT(strncmp(as_nobody(&t, "FORGET dtype=fp16 hdim=64 seqlen_q=128"), "ERR permission", 14) == 0);
    int fd = td_connect_ok(&t); /* root may */
    ASSERT(strncmp(td_req(fd, "TUNE dtype=fp16 hdim=64 seqlen=128"), "OK job=", 7) == 0);
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    /* with --admin-group naming nobody's group, nobody may */
    struct group *g = getgrgid(65534);
    if (!g) TT_SKIP("no group with gid 65534");
    char name[64];
    snprintf(name, sizeof name, "%s", g->gr_name);
    const char *args[] = {"--admin-group", name, NULL};
    td_start(&t, args);
    ASSERT_OK(chmod(t.sock, 0666));
    ASSERT(strncmp(as_nobody(&t, "TUNE dtype=fp16 hdim=64 seqlen=256"), "OK job=", 7) == 0);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    /* an unknown admin group is a start-up error */
    pid_t pid = fork();
    if (pid == 0) {
        execl(TILETUNED, TILETUNED, "--socket", t.sock, "--db", t.db, "--worker", "", "--admin-group",
              "no-such-group-tt", "--log-level", "error", (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 1);
}

TEST(socket_activation) {
    if (system("command -v systemd-socket-activate >/dev/null 2>&1") != 0)
        TT_SKIP("systemd-socket-activate not installed: socket activation not tested");
    td t;
    td_init(&t);
    char listen[400];
    snprintf(listen, sizeof listen, "--listen=%s", t.sock);
    const char *prefix[] = {"/usr/bin/env", "systemd-socket-activate", listen, NULL};
    td_start_wrapped(&t, prefix, NULL);
    int fd = td_connect_ok(&t);
    ASSERT(strncmp(td_req(fd, "HELLO proto=1 client=test"), "OK proto=1 server=tiletuned/", 28) == 0);
    close(fd);
    char line[512];
    FILE *f = fopen(t.log, "r");
    int said = 0;
    while (f && fgets(line, sizeof line, f)) said |= strstr(line, "(socket from systemd)") != NULL;
    if (f) fclose(f);
    ASSERT(said);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

/* READY=1 once the socket answers, WATCHDOG=1 at half of WATCHDOG_USEC,
 * STOPPING=1 on SIGTERM: read from our own NOTIFY_SOCKET. */
TEST(systemd_notify_ready_watchdog_stopping) {
    td t;
    td_init(&t);
    char path[100];
    ASSERT(snprintf(path, sizeof path, "%s/notify", t.dir) < (int)sizeof path);
    int ns = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT(ns >= 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    ASSERT_OK(bind(ns, (struct sockaddr *)&sa, sizeof sa));
    setenv("NOTIFY_SOCKET", path, 1);
    setenv("WATCHDOG_USEC", "200000", 1);
    td_start(&t, NULL);
    unsetenv("NOTIFY_SOCKET");
    char msg[512];
    int ready = 0, watchdog = 0, stopping = 0;
    long long until = td_now_ms() + 2000;
    while (td_now_ms() < until && watchdog < 2) {
        struct pollfd p = {ns, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t n = recv(ns, msg, sizeof msg - 1, 0);
        if (n <= 0) continue;
        msg[n] = '\0';
        ready += strstr(msg, "READY=1") != NULL;
        watchdog += strstr(msg, "WATCHDOG=1") != NULL;
    }
    ASSERT_EQ(ready, 1);
    ASSERT(watchdog >= 2);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    while (1) {
        struct pollfd p = {ns, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0) break;
        ssize_t n = recv(ns, msg, sizeof msg - 1, 0);
        if (n <= 0) break;
        msg[n] = '\0';
        stopping += strstr(msg, "STOPPING=1") != NULL;
    }
    ASSERT_EQ(stopping, 1);
    close(ns);
}

/* A client that pipelines far more than it reads is paused, not dropped,
 * and nobody else waits for it; then it gets every reply, in order. */
TEST(write_backpressure_pauses_only_the_slow_reader) {
    td t;
    td_init(&t);
    td_start(&t, NULL);
    int slow = td_connect_ok(&t);
    const char *req = "STATS format=prometheus\n";
    size_t rl = strlen(req);
    int sent = 0, blocked = 0;
    long long until = td_now_ms() + 1000;
    size_t off = 0;
    while (td_now_ms() < until && sent < 20000) {
        ssize_t n = send(slow, req + off, rl - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            ASSERT(errno == EAGAIN || errno == EWOULDBLOCK);
            blocked = 1;
            usleep(1000);
            continue;
        }
        off += (size_t)n;
        if (off == rl) {
            off = 0;
            sent++;
        }
    }
    ASSERT(off == 0 || (td_send(slow, req + off, rl - off), ++sent));
    ASSERT(sent > 100);
    /* the daemon stopped reading from us: our socket buffer filled */
    ASSERT(blocked);
    int fd = td_connect_ok(&t);
    long long t0 = td_now_ms();
    for (int i = 0; i < 20; i++) ASSERT_STREQ(td_req(fd, "PING"), "OK pong");
    ASSERT(td_now_ms() - t0 < 1000);
    close(fd);
    char line[512], v[32];
    for (int i = 0; i < sent; i++) {
        ASSERT(td_read_line(slow, line, sizeof line, 5000) > 0);
        if (strncmp(line, "OK lines=", 9) != 0) TT_FAIL_AT("reply %d: %s", i, line);
        int n = atoi(td_field(line, "lines", v, sizeof v));
        for (int j = 0; j < n; j++) ASSERT(td_read_line(slow, line, sizeof line, 5000) > 0);
    }
    ASSERT_STREQ(td_req(slow, "PING"), "OK pong");
    close(slow);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(socket_and_db_from_the_environment) {
    td t;
    td_init(&t);
    setenv("TILETUNE_SOCKET", t.sock, 1);
    setenv("TILETUNE_DB", t.db, 1);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        execl(TILETUNED, TILETUNED, "--worker", "", "--log-level", "error", (char *)NULL);
        _exit(127);
    }
    int fd = -1;
    for (int i = 0; i < 500 && fd < 0; i++)
        if ((fd = td_connect(t.sock)) < 0) usleep(10000);
    ASSERT(fd >= 0);
    ASSERT_STREQ(td_req(fd, "PING"), "OK pong");
    close(fd);
    kill(pid, SIGTERM);
    int st;
    waitpid(pid, &st, 0);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    struct stat sb;
    ASSERT_OK(stat(t.db, &sb));
}

TEST(help_and_version) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "%s --help | grep -q -- --admin-group && %s --version | grep -q tiletuned",
             TILETUNED, TILETUNED);
    ASSERT_EQ(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s --max-connections zero 2>/dev/null", TILETUNED);
    int st = system(cmd);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 2);
}

TT_TEST_MAIN()
