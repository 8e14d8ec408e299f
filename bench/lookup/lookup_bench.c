/*
 * The lookup benchmark (bench/lookup/run.sh drives it):
 *
 *   tt_lookup_bench seed DB
 *       puts a grid of tuned winners for a benchmark GPU into DB (through
 *       the store API), so the daemon answers exact and nearest lookups.
 *   tt_lookup_bench socket SOCKET CLIENTS REQUESTS
 *       CLIENTS connections, each sending one LOOKUP and waiting for its
 *       reply before the next, all driven by one epoll thread: the same
 *       shape of load as `redis-benchmark -c CLIENTS -n REQUESTS` (one
 *       event-loop thread, no pipelining), so the numbers compare.
 *   tt_lookup_bench cache SOCKET ITERATIONS [THREADS,...]
 *       the cost of a tt_lookup that hits libtiletune's cache, with each
 *       count of threads (default 1,2) sharing one client at once.
 *
 * Output: one line of key=value per run, for the script to collect.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tuner/store/store.h"
#include "tiletune.h"

#define BENCH_GPU "0bec0bec0bec0bec"
#define BENCH_REV "0dec0dec0dec0dec"

static const int64_t tuned_seqlens[] = {128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
static const int hdims[] = {64, 128, 256};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int die(const char *what, const char *detail) {
    fprintf(stderr, "tt_lookup_bench: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    return 1;
}

/* ---- seed ------------------------------------------------------------------ */

/* A winner of the benchmark's kernel revision: key and tflops given, the
 * rest fixed. */
static tt_record bench_record(tt_dtype dt, int32_t hdim, int causal, int64_t seqlen, const char *gpu,
                              double tflops) {
    tt_record r;
    tt_record_init(&r);
    r.key.dtype = dt;
    r.key.head_dim = hdim;
    r.key.causal = causal;
    r.key.seqlen_q = r.key.seqlen_k = seqlen;
    strcpy(r.key.gpu, gpu);
    strcpy(r.key.rev, BENCH_REV);
    tt_config_default_v2(&r.key, &r.config);
    r.batch = 4;
    r.heads = 16;
    r.time_ms = 1.0;
    r.reps = 10;
    r.tflops = tflops;
    r.status = TT_MEAS_OK;
    r.measured_at = 1700000000;
    strcpy(r.node, "bench");
    return r;
}

static int cmd_seed(const char *db, long extra) {
    char err[256];
    tt_store *s;
    if (tt_store_open(db, &s, err, sizeof err) < 0) return die("cannot open the database", err);
    tt_gpu_info g;
    memset(&g, 0, sizeof g);
    strcpy(g.fingerprint, BENCH_GPU);
    strcpy(g.name, "benchmark GPU");
    g.cc_major = 9;
    g.sm_count = 132;
    g.mem_bytes = INT64_C(141) << 30;
    int rc = tt_store_put_gpu(s, &g);
    if (rc == 0) rc = tt_store_put_rev(s, BENCH_REV, "lookup benchmark");
    int n = 0;
    for (int d = 0; rc == 0 && d < 2; d++)
        for (size_t h = 0; rc == 0 && h < sizeof hdims / sizeof hdims[0]; h++)
            for (int causal = 0; rc == 0 && causal < 2; causal++)
                for (size_t i = 0; rc == 0 && i < sizeof tuned_seqlens / sizeof tuned_seqlens[0]; i++) {
                    tt_record r = bench_record((tt_dtype)d, hdims[h], causal, tuned_seqlens[i], BENCH_GPU,
                                               300.0 + (double)i);
                    rc = tt_store_put_best(s, &r);
                    n++;
                }
    /* extra: a large table for the export attacks (bench/lookup/attack.sh)
     * and the kill -9 runs (kill9.sh), fp16 hdim 64 keys of a GPU of their
     * own whose fingerprint is real (so the records import elsewhere),
     * each a winner with its measurement, in one transaction */
    tt_gpu_info xg = g;
    strcpy(xg.name, "import GPU");
    tt_gpu_fingerprint(xg.name, xg.cc_major, xg.cc_minor, xg.sm_count, xg.mem_bytes, xg.fingerprint);
    if (rc == 0 && extra > 0) rc = tt_store_put_gpu(s, &xg);
    if (rc == 0 && extra > 0) rc = tt_store_begin(s);
    for (long i = 0; rc == 0 && i < extra; i++) {
        tt_record r = bench_record(TT_DTYPE_FP16, 64, (int)(i & 1), 1 + i / 2, xg.fingerprint,
                                   100.0 + (double)(i % 100));
        int became;
        rc = tt_store_add_measurement(s, &r, &became);
        n++;
    }
    if (rc == 0 && extra > 0) rc = tt_store_commit(s);
    if (rc < 0) die("cannot seed", tt_store_errmsg(s));
    tt_store_close(s);
    if (rc == 0) printf("seeded %d winners for gpu=%s rev=%s\n", n, BENCH_GPU, BENCH_REV);
    return rc < 0;
}

/* The request mix: every third key is tuned (exact), the rest fall
 * between tuned seqlens (nearest), over both dtypes, head dims and causal. */
#define NKEYS 96
static void make_key(int i, tt_key *k) {
    memset(k, 0, sizeof *k);
    k->dtype = (tt_dtype)(i & 1);
    k->head_dim = hdims[(i >> 1) % 3];
    k->causal = (i / 6) & 1;
    int64_t s = tuned_seqlens[(i / 12) % 9];
    k->seqlen_q = k->seqlen_k = i % 3 == 0 ? s : s + 100 + i;
    strcpy(k->gpu, BENCH_GPU);
    strcpy(k->rev, BENCH_REV);
}

/* ---- socket ---------------------------------------------------------------- */

typedef struct bconn {
    int fd;
    int64_t sent_at;
    size_t have;
    int next_key;
    char buf[1024];
} bconn;

static char requests[NKEYS][192];
static size_t request_len[NKEYS];

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int send_next(bconn *c) {
    int k = c->next_key;
    c->next_key = (c->next_key + 7) % NKEYS;
    c->sent_at = now_ns();
    ssize_t w = send(c->fd, requests[k], request_len[k], MSG_NOSIGNAL);
    return w == (ssize_t)request_len[k] ? 0 : -1;
}

static int cmd_socket(const char *path, int nclients, long total) {
    for (int i = 0; i < NKEYS; i++) {
        tt_key k;
        make_key(i, &k);
        int n = snprintf(requests[i], sizeof requests[i],
                         "LOOKUP dtype=%s hdim=%d causal=%d seqlen_q=%lld seqlen_k=%lld gpu=%s rev=%s\n",
                         k.dtype == TT_DTYPE_FP16 ? "fp16" : "bf16", (int)k.head_dim, (int)k.causal,
                         (long long)k.seqlen_q, (long long)k.seqlen_k, k.gpu, k.rev);
        request_len[i] = (size_t)n;
    }
    bconn *conns = calloc((size_t)nclients, sizeof *conns);
    int64_t *lat = malloc((size_t)total * sizeof *lat);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (!conns || !lat || ep < 0) return die("out of memory", NULL);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    for (int i = 0; i < nclients; i++) {
        bconn *c = &conns[i];
        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof sa) < 0)
            return die("cannot connect", strerror(errno));
        c->next_key = i % NKEYS;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    }
    long sent = 0, done = 0, exact = 0, nearest = 0, other = 0;
    int64_t t0 = now_ns();
    for (int i = 0; i < nclients && sent < total; i++, sent++)
        if (send_next(&conns[i]) < 0) return die("send failed", strerror(errno));
    struct epoll_event evs[256];
    while (done < total) {
        int n = epoll_wait(ep, evs, 256, 5000);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return die("the daemon stopped answering", NULL);
        int64_t t = now_ns();
        for (int e = 0; e < n; e++) {
            bconn *c = evs[e].data.ptr;
            ssize_t r = read(c->fd, c->buf + c->have, sizeof c->buf - 1 - c->have);
            if (r <= 0) return die("the daemon closed a connection", NULL);
            c->have += (size_t)r;
            char *nl;
            while ((nl = memchr(c->buf, '\n', c->have))) {
                if (strncmp(c->buf, "OK match=exact", 14) == 0) exact++;
                else if (strncmp(c->buf, "OK match=nearest", 16) == 0) nearest++;
                else other++;
                lat[done++] = t - c->sent_at;
                size_t used = (size_t)(nl - c->buf) + 1;
                memmove(c->buf, nl + 1, c->have - used);
                c->have -= used;
                if (sent < total) {
                    if (send_next(c) < 0) return die("send failed", strerror(errno));
                    sent++;
                }
            }
        }
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    qsort(lat, (size_t)total, sizeof *lat, cmp_i64);
    printf(
        "socket clients=%d requests=%ld rps=%.0f p50_us=%.1f p99_us=%.1f exact=%ld nearest=%ld other=%ld\n",
        nclients, total, (double)total / secs, (double)lat[total / 2] / 1e3,
        (double)lat[(size_t)((double)total * 0.99)] / 1e3, exact, nearest, other);
    for (int i = 0; i < nclients; i++) close(conns[i].fd);
    close(ep);
    free(conns);
    free(lat);
    return other != 0; /* an ERR means the benchmark measured the wrong thing */
}

/* ---- cache ----------------------------------------------------------------- */

typedef struct hit_arg {
    tt_client *c;
    long iters;
    double ns, cpu_ns;
    int bad;
} hit_arg;

static int64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *hit_loop(void *p) {
    hit_arg *a = p;
    tt_key keys[NKEYS];
    for (int i = 0; i < NKEYS; i++) make_key(i, &keys[i]);
    tt_lookup_result r;
    int64_t t0 = now_ns(), c0 = thread_cpu_ns();
    for (long i = 0; i < a->iters; i++)
        if (tt_lookup(a->c, &keys[i % NKEYS], &r) != 0) a->bad++;
    a->ns = (double)(now_ns() - t0) / (double)a->iters;
    a->cpu_ns = (double)(thread_cpu_ns() - c0) / (double)a->iters;
    return NULL;
}

/* The mean cost of a hit with `n` threads hitting one client at once:
 * wall time per call, and CPU time per call (what a hit costs the core
 * that runs it, line transfers included, without the time a thread spent
 * waiting for a core when there are more threads than cores). */
static int hits_with_threads(tt_client *c, long iters, int n, double *ns, double *cpu_ns) {
    hit_arg *a = calloc((size_t)n, sizeof *a);
    pthread_t *t = calloc((size_t)n, sizeof *t);
    if (!a || !t) return die("out of memory", NULL);
    for (int i = 0; i < n; i++) a[i] = (hit_arg){c, iters, 0, 0, 0};
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[i], NULL, hit_loop, &a[i]) != 0) return die("cannot start a thread", NULL);
    double sum = 0, cpu = 0;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        sum += a[i].ns;
        cpu += a[i].cpu_ns;
        bad |= a[i].bad != 0;
    }
    *ns = sum / n;
    *cpu_ns = cpu / n;
    free(a);
    free(t);
    return bad;
}

static int cmd_cache(const char *path, long iters, const char *thread_list) {
    tt_client *c;
    if (tt_client_open(path, 1000, &c) < 0) return die("cannot open a client", NULL);
    for (int i = 0; i < NKEYS; i++) { /* fill the cache */
        tt_key k;
        tt_lookup_result r;
        make_key(i, &k);
        if (tt_lookup(c, &k, &r) != 0) return die("the daemon did not answer a lookup", NULL);
    }
    tt_client_stats before, after;
    tt_client_get_stats(c, &before);
    int bad = 0;
    /* One line: hit_ns and hit_cpu_ns (one thread), then
     * hit_ns_Nthreads and hit_cpu_ns_Nthreads per count. With more threads
     * than cores the threads time-share: the wall figure then counts the
     * waits for a core, the CPU figure does not. */
    char line[512];
    int len = snprintf(line, sizeof line, "cache");
    char list[128];
    snprintf(list, sizeof list, "%s", thread_list);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int n = atoi(tok);
        if (n < 1 || n > 256) return die("thread counts are 1..256", tok);
        double ns = 0, cpu_ns = 0;
        bad |= hits_with_threads(c, iters, n, &ns, &cpu_ns);
        if (n == 1)
            len +=
                snprintf(line + len, sizeof line - (size_t)len, " hit_ns=%.1f hit_cpu_ns=%.1f", ns, cpu_ns);
        else
            len += snprintf(line + len, sizeof line - (size_t)len,
                            " hit_ns_%dthreads=%.1f hit_cpu_ns_%dthreads=%.1f", n, ns, n, cpu_ns);
        if (len >= (int)sizeof line) return die("too many thread counts", NULL);
    }
    tt_client_get_stats(c, &after);
    /* nearest answers expire after a second: a run that long re-asks a few */
    long asked = (long)(after.daemon_answers - before.daemon_answers);
    long counted =
        (long)((after.cache_hits + after.daemon_answers) - (before.cache_hits + before.daemon_answers));
    printf("%s iterations=%ld daemon_answers_during=%ld cpus=%ld\n", line, iters, asked,
           sysconf(_SC_NPROCESSORS_ONLN));
    tt_client_close(c);
    /* the sharded counters must add up to every call the threads made */
    long want = 0;
    snprintf(list, sizeof list, "%s", thread_list);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) want += (long)atoi(tok) * iters;
    if (counted != want) {
        fprintf(stderr, "tt_lookup_bench: counters say %ld lookups answered, the threads made %ld\n", counted,
                want);
        return 1;
    }
    return bad;
}

int main(int argc, char **argv) {
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "seed") == 0)
        return cmd_seed(argv[2], argc == 4 ? atol(argv[3]) : 0);
    if (argc == 5 && strcmp(argv[1], "socket") == 0) return cmd_socket(argv[2], atoi(argv[3]), atol(argv[4]));
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "cache") == 0)
        return cmd_cache(argv[2], atol(argv[3]), argc == 5 ? argv[4] : "1,2");
    fprintf(stderr, "usage: tt_lookup_bench seed DB [EXTRA]\n"
                    "       tt_lookup_bench socket SOCKET CLIENTS REQUESTS\n"
                    "       tt_lookup_bench cache SOCKET ITERATIONS [THREADS,...]   (default 1,2)\n");
    return 2;
}
