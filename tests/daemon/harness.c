#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tuner/store/store.h"

/* The harness runs inside a test's child process and fails it with the
 * ASSERTs of tt_test.h; the runner that header also defines is not used. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-variable"
#include "tt_test.h"
#pragma GCC diagnostic pop

long long td_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A passing test leaves nothing behind; a failing one keeps its directory
 * (socket, database, daemon log) for a look. */
static void remove_dir(int status, void *arg) {
    char *dir = arg;
    if (status == 0 || status == 77) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    } else {
        fprintf(stderr, "kept %s\n", dir);
    }
    free(dir);
}

void td_init(td *t) {
    memset(t, 0, sizeof *t);
    snprintf(t->dir, sizeof t->dir, "/tmp/ttd-XXXXXX");
    ASSERT(mkdtemp(t->dir) != NULL);
    char *copy = strdup(t->dir);
    if (copy) on_exit(remove_dir, copy);
    snprintf(t->sock, sizeof t->sock, "%s/s.sock", t->dir);
    snprintf(t->db, sizeof t->db, "%s/tune.db", t->dir);
    snprintf(t->log, sizeof t->log, "%s/daemon.log", t->dir);
}

void td_dump_log(const td *t) {
    FILE *f = fopen(t->log, "r");
    if (!f) return;
    char line[1024];
    fprintf(stderr, "---- %s\n", t->log);
    while (fgets(line, sizeof line, f)) fputs(line, stderr);
    fclose(f);
}

int td_connect(const char *sock) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    size_t n = strlen(sock);
    if (n >= sizeof sa.sun_path) {
        close(fd);
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(sa.sun_path, sock, n + 1);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int td_connect_ok(const td *t) {
    int fd = td_connect(t->sock);
    if (fd < 0) {
        td_dump_log(t);
        TT_FAIL_AT("connect %s: %s", t->sock, strerror(errno));
    }
    return fd;
}

void td_start_wrapped(td *t, const char *const *prefix, const char *const *extra) {
    const char *argv[64];
    int n = 0, has_worker = 0;
    for (; prefix && *prefix; prefix++) argv[n++] = *prefix;
    argv[n++] = TILETUNED;
    argv[n++] = "--socket";
    argv[n++] = t->sock;
    argv[n++] = "--db";
    argv[n++] = t->db;
    argv[n++] = "--log-level";
    argv[n++] = "debug";
    for (const char *const *e = extra; e && *e && n < 60; e++) {
        if (strcmp(*e, "--worker") == 0) has_worker = 1;
        argv[n++] = *e;
    }
    if (!has_worker) {
        argv[n++] = "--worker";
        argv[n++] = "";
    }
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        /* A failing test exits at once: its daemon must not outlive it
         * (nor hold the test's stdout open). */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        int fd = open(t->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) dup2(fd, 1);
        if (fd >= 0) dup2(fd, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    t->pid = pid;
    long long until = td_now_ms() + 10000;
    while (td_now_ms() < until) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            t->pid = 0;
            td_dump_log(t);
            TT_FAIL_AT("daemon exited during start (status %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        }
        int fd = td_connect(t->sock);
        if (fd >= 0) {
            const char *r = td_req(fd, "PING");
            close(fd);
            if (strcmp(r, "OK pong") == 0) return;
        }
        usleep(10000);
    }
    td_dump_log(t);
    TT_FAIL_AT("daemon did not answer within 10 s");
}

void td_start(td *t, const char *const *extra) { td_start_wrapped(t, NULL, extra); }

int td_stop(td *t, int sig) {
    if (!t->pid) return -1;
    kill(t->pid, sig);
    int st = 0;
    /* Bounded: a daemon that does not stop fails the test, not the suite. */
    for (int i = 0; i < 1000; i++) {
        if (waitpid(t->pid, &st, WNOHANG) == t->pid) {
            t->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        usleep(10000);
    }
    kill(t->pid, SIGKILL);
    waitpid(t->pid, &st, 0);
    t->pid = 0;
    td_dump_log(t);
    TT_FAIL_AT("daemon did not stop within 10 s of signal %d", sig);
    return -1;
}

void td_send(int fd, const char *data, size_t len) {
    while (len) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) TT_FAIL_AT("send: %s", strerror(errno));
        data += n;
        len -= (size_t)n;
    }
}

void td_sendstr(int fd, const char *s) { td_send(fd, s, strlen(s)); }

/* Bytes received but not yet returned as lines, per fd. */
#define FDS_MAX 2048
static struct {
    char *buf;
    size_t len;
} pending[FDS_MAX];

int td_read_line(int fd, char *out, size_t cap, int timeout_ms) {
    ASSERT(fd >= 0 && fd < FDS_MAX);
    if (!pending[fd].buf) ASSERT((pending[fd].buf = malloc(1 << 20)) != NULL);
    long long until = td_now_ms() + timeout_ms;
    for (;;) {
        char *nl = memchr(pending[fd].buf, '\n', pending[fd].len);
        if (nl) {
            size_t n = (size_t)(nl - pending[fd].buf);
            size_t c = n < cap - 1 ? n : cap - 1;
            memcpy(out, pending[fd].buf, c);
            out[c] = '\0';
            memmove(pending[fd].buf, nl + 1, pending[fd].len - n - 1);
            pending[fd].len -= n + 1;
            return (int)c;
        }
        long long left = until - td_now_ms();
        if (left <= 0) return -2;
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, (int)left);
        if (r == 0) return -2;
        if (r < 0) continue;
        ASSERT(pending[fd].len < (1 << 20));
        ssize_t n = recv(fd, pending[fd].buf + pending[fd].len, (1 << 20) - pending[fd].len, 0);
        if (n <= 0) {
            pending[fd].len = 0;
            return -1;
        }
        pending[fd].len += (size_t)n;
    }
}

const char *td_req(int fd, const char *line) {
    static char reply[65536];
    char req[8192];
    snprintf(req, sizeof req, "%s\n", line);
    td_sendstr(fd, req);
    int n = td_read_line(fd, reply, sizeof reply, 5000);
    if (n < 0) TT_FAIL_AT("no reply to \"%.80s\" (%s)", line, n == -1 ? "connection closed" : "time-out");
    return reply;
}

int td_wait_eof(int fd, int timeout_ms) {
    char line[8192];
    long long until = td_now_ms() + timeout_ms;
    for (;;) {
        long long left = until - td_now_ms();
        if (left <= 0) return 0;
        int n = td_read_line(fd, line, sizeof line, (int)left);
        if (n == -1) return 1;
        if (n == -2) return 0;
    }
}

const char *td_field(const char *line, const char *key, char *out, size_t cap) {
    size_t kl = strlen(key);
    out[0] = '\0';
    for (const char *p = line; (p = strstr(p, key)); p += kl) {
        if ((p == line || p[-1] == ' ') && p[kl] == '=') {
            const char *v = p + kl + 1;
            size_t n = strcspn(v, " ");
            if (n >= cap) n = cap - 1;
            memcpy(out, v, n);
            out[n] = '\0';
            break;
        }
    }
    return out;
}

void td_fake_gpu(char out[TT_ID_MAX]) { tt_gpu_fingerprint("Fake GPU", 9, 0, 132, 1000000000LL, out); }

void td_seed(const char *db, const tt_key_v2 *key, const tt_config *cfg, double tflops) {
    tt_store *s;
    char err[256];
    if (tt_store_open(db, &s, err, sizeof err) < 0) TT_FAIL_AT("open %s: %s", db, err);
    tt_gpu_info g;
    memset(&g, 0, sizeof g);
    snprintf(g.fingerprint, sizeof g.fingerprint, "%s", key->gpu);
    snprintf(g.name, sizeof g.name, "Seeded GPU");
    g.cc_major = 9;
    g.sm_count = 132;
    g.mem_bytes = 1000000000LL;
    ASSERT_OK(tt_store_put_gpu(s, &g));
    ASSERT_OK(tt_store_put_rev(s, key->rev, "test"));
    tt_record r;
    tt_record_init(&r);
    r.key = *key;
    r.config = *cfg;
    r.batch = 4;
    r.heads = 16;
    r.time_ms = 1.0;
    r.tflops = tflops;
    r.status = TT_MEAS_OK;
    r.measured_at = 1700000000;
    snprintf(r.node, sizeof r.node, "test");
    int became = 0;
    if (tt_store_add_measurement(s, &r, &became) < 0) TT_FAIL_AT("seed: %s", tt_store_errmsg(s));
    ASSERT_EQ(became, 1);
    tt_store_close(s);
}

void td_seed_many(const char *db, const char *gpu, const char *rev, int n) {
    tt_store *s;
    char err[256];
    if (tt_store_open(db, &s, err, sizeof err) < 0) TT_FAIL_AT("open %s: %s", db, err);
    tt_gpu_info g;
    memset(&g, 0, sizeof g);
    snprintf(g.fingerprint, sizeof g.fingerprint, "%s", gpu);
    snprintf(g.name, sizeof g.name, "Seeded GPU");
    g.cc_major = 9;
    g.sm_count = 132;
    g.mem_bytes = 1000000000LL;
    ASSERT_OK(tt_store_put_gpu(s, &g));
    ASSERT_OK(tt_store_put_rev(s, rev, "test"));
    ASSERT_OK(tt_store_begin(s));
    tt_record r;
    tt_record_init(&r);
    ASSERT_OK(tt_config_parse("family=mma,block_m=64,block_n=32,warps=4,stages=3,layout=pad,q_in_regs=1",
                              &r.config));
    r.key.dtype = TT_DTYPE_FP16;
    r.key.head_dim = 128;
    snprintf(r.key.gpu, sizeof r.key.gpu, "%s", gpu);
    snprintf(r.key.rev, sizeof r.key.rev, "%s", rev);
    r.batch = 4;
    r.heads = 16;
    r.time_ms = 1.0;
    r.status = TT_MEAS_OK;
    r.measured_at = 1700000000;
    snprintf(r.node, sizeof r.node, "test");
    for (int i = 0; i < n; i++) {
        r.key.causal = i & 1;
        r.key.seqlen_q = r.key.seqlen_k = 1 + i / 2;
        r.tflops = 100 + i % 50;
        int became = 0;
        if (tt_store_add_measurement(s, &r, &became) < 0) TT_FAIL_AT("seed: %s", tt_store_errmsg(s));
    }
    ASSERT_OK(tt_store_commit(s));
    tt_store_close(s);
}

long long td_stat(int fd, const char *name) {
    char v[32], line[512];
    const char *r = td_req(fd, "STATS");
    if (strncmp(r, "OK lines=", 9) != 0) TT_FAIL_AT("STATS -> %s", r);
    int n = atoi(td_field(r, "lines", v, sizeof v));
    size_t nl = strlen(name);
    long long value = -1;
    for (int i = 0; i < n; i++) {
        ASSERT(td_read_line(fd, line, sizeof line, 2000) > 0);
        if (strncmp(line, name, nl) == 0 && line[nl] == ' ') value = atoll(line + nl + 1);
    }
    return value;
}

typedef struct failed_find {
    tt_config want;
    tt_meas_status st;
} failed_find;

static int find_failed(void *ud, const tt_config *cfg, tt_meas_status st) {
    failed_find *f = ud;
    if (tt_config_equal(cfg, &f->want)) f->st = st;
    return 0;
}

int td_failed_status(const char *db, const tt_key_v2 *key, const char *cfg) {
    tt_store *s;
    char err[256];
    failed_find f = {.st = TT_MEAS_OK};
    if (tt_config_parse(cfg, &f.want) < 0) TT_FAIL_AT("bad config %s", cfg);
    if (tt_store_open(db, &s, err, sizeof err) < 0) TT_FAIL_AT("open %s: %s", db, err);
    if (tt_store_failed_configs(s, key, find_failed, &f) < 0)
        TT_FAIL_AT("failed configs: %s", tt_store_errmsg(s));
    tt_store_close(s);
    return (int)f.st;
}

/* Polls `req` until its reply contains `want` (or the body of a listing
 * does); fails after timeout_ms. */
void td_wait_for(int fd, const char *req, const char *want, int timeout_ms) {
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
