/* tt_client against no daemon, a mute daemon and a fake one: fallback
 * within the time-out, back-off, reply parsing, ERR mapping, caching,
 * threads. */
#include <fcntl.h>
#include <pthread.h>

#include "client/client_internal.h"
#include "fake_daemon.h"
#include "tiletune.h"
#include "tt_test.h"

#define CFG "family=mma,block_m=64,block_n=32,warps=4,stages=3,layout=pad,q_in_regs=1"

static tt_key key_of(int64_t seqlen) {
    tt_key k;
    memset(&k, 0, sizeof k);
    k.dtype = TT_DTYPE_BF16;
    k.head_dim = 128;
    k.seqlen_q = k.seqlen_k = seqlen;
    return k;
}

/* Answers LOOKUP with the key's own seqlens, so a reply can be matched to
 * its request; "hdim=96" asks for a nearest match. */
static const char *tuned(fake_daemon *f, const char *line) {
    static __thread char buf[512];
    if (strncmp(line, "HELLO ", 6) == 0) return "OK proto=1 server=fake/0 rev=ab gpu=none\n";
    if (strncmp(line, "LOOKUP ", 7) != 0) return "ERR verb unknown verb\n";
    const char *mode = (const char *)f->arg;
    if (mode && strcmp(mode, "unsupported") == 0) return "ERR unsupported head_dim 128 is not built\n";
    if (mode && strcmp(mode, "busy") == 0) return "ERR busy too many connections\n";
    if (mode && strcmp(mode, "garbage") == 0) return "OK match=sideways config=x seqlen_q=1 seqlen_k=1\n";
    const char *q = strstr(line, "seqlen_q="), *k = strstr(line, "seqlen_k=");
    long long sq = q ? atoll(q + 9) : 0, sk = k ? atoll(k + 9) : 0;
    const char *match = strstr(line, "hdim=96") ? "nearest" : "exact";
    const char *g = strstr(line, " group=");
    char group[32] = ""; /* the key's group echoed, as a record of that group would */
    if (g) snprintf(group, sizeof group, " group=%ld", atol(g + 7));
    snprintf(buf, sizeof buf, "OK match=%s config=" CFG " seqlen_q=%lld seqlen_k=%lld%s tflops=312.5\n",
             match, sq, sk, group);
    return buf;
}

static void expect_default(const tt_key *k, const tt_lookup_result *r) {
    tt_config def;
    ASSERT_OK(tt_config_default(k, &def));
    ASSERT(tt_config_equal(&r->config, &def));
    ASSERT_EQ(r->match, TT_MATCH_DEFAULT);
    ASSERT_EQ(r->seqlen_q, k->seqlen_q);
    ASSERT(r->tflops == 0);
}

TEST(no_daemon_falls_back_at_once_then_backs_off) {
    tt_client *c;
    ASSERT_OK(tt_client_open("/nonexistent/dir/tiletune.sock", 200, &c));
    tt_key k = key_of(1000);
    tt_lookup_result r;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ASSERT_EQ(tt_lookup(c, &k, &r), TT_FALLBACK);
    ASSERT(ms_since(&t0) < 50);
    expect_default(&k, &r);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 1000; i++) ASSERT_EQ(tt_lookup(c, &k, &r), TT_FALLBACK);
    ASSERT(ms_since(&t0) < 40); /* well under the 50 ms first back-off */
    tt_client_stats s;
    ASSERT_OK(tt_client_get_stats(c, &s));
    ASSERT_EQ(s.fallbacks, 1001);
    ASSERT_EQ(s.failures, 1); /* one attempt: the rest were in back-off */
    ASSERT_EQ(s.connects, 0);
    ASSERT_EQ(s.lookups, 1001);
    ASSERT_EQ(s.last_failure, TT_ERR_NODAEMON); /* why the fallbacks came */
    /* an invalid key: the caller's error, counted apart */
    k.head_dim = 80;
    ASSERT_EQ(tt_lookup(c, &k, &r), TT_ERR_UNSUPPORTED);
    ASSERT_OK(tt_client_get_stats(c, &s));
    ASSERT_EQ(s.key_errors, 1);
    ASSERT_EQ(s.lookups, 1002);
    tt_client_close(c);
}

static void fallback_within_timeout(fake_mode mode) {
    fake_daemon *f = fake_start(mode, NULL);
    tt_client *c;
    const int timeout = 150;
    ASSERT_OK(tt_client_open(f->path, timeout, &c));
    tt_key k = key_of(777);
    tt_lookup_result r;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ASSERT_EQ(tt_lookup(c, &k, &r), TT_FALLBACK);
    double ms = ms_since(&t0);
    printf("mute daemon (%s): fallback after %.1f ms (time-out %d ms)\n",
           mode == FAKE_NO_ACCEPT ? "never accepts" : "accepts, never answers", ms, timeout);
    ASSERT(ms >= timeout - 1);
    ASSERT(ms < timeout + 30);
    expect_default(&k, &r);
    /* in back-off: no second wait */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ASSERT_EQ(tt_lookup(c, &k, &r), TT_FALLBACK);
    ASSERT(ms_since(&t0) < 5);
    tt_client_close(c);
    fake_stop(f);
}

TEST(daemon_that_never_accepts) { fallback_within_timeout(FAKE_NO_ACCEPT); }
TEST(daemon_that_never_answers) { fallback_within_timeout(FAKE_ACCEPT_MUTE); }

/* tt_lookup_v2 sends the group and takes the answering record's back;
 * each group is its own cache entry, and tt_lookup asks for group 1. */
TEST(group_travels_both_ways_and_splits_the_cache) {
    fake_daemon *f = fake_start(FAKE_SERVE, tuned);
    tt_client *c;
    ASSERT_OK(tt_client_open(f->path, 1000, &c));
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    k.dtype = TT_DTYPE_BF16;
    k.head_dim = 128;
    k.causal = TT_CAUSAL_BOTTOM_RIGHT;
    k.seqlen_q = 8;
    k.seqlen_k = 32768;
    k.group = 8;
    tt_lookup_result r;
    ASSERT_OK(tt_lookup_v2(c, &k, &r));
    ASSERT_EQ(r.group, 8);
    pthread_mutex_lock(&f->lock);
    ASSERT_STREQ(f->last, "LOOKUP dtype=bf16 hdim=128 causal=2 seqlen_q=8 seqlen_k=32768 group=8");
    pthread_mutex_unlock(&f->lock);
    k.group = 4;
    ASSERT_OK(tt_lookup_v2(c, &k, &r));
    ASSERT_EQ(r.group, 4);
    ASSERT_EQ(atomic_load(&f->nlookup), 2);
    k.group = 8;
    ASSERT_OK(tt_lookup_v2(c, &k, &r)); /* cached */
    ASSERT_EQ(r.group, 8);
    ASSERT_EQ(atomic_load(&f->nlookup), 2);
    tt_key k1;
    memset(&k1, 0, sizeof k1);
    k1.dtype = TT_DTYPE_BF16;
    k1.head_dim = 128;
    k1.causal = TT_CAUSAL_BOTTOM_RIGHT;
    k1.seqlen_q = 8;
    k1.seqlen_k = 32768;
    ASSERT_OK(tt_lookup(c, &k1, &r));
    ASSERT_EQ(r.group, 1);
    pthread_mutex_lock(&f->lock);
    ASSERT_STREQ(f->last, "LOOKUP dtype=bf16 hdim=128 causal=2 seqlen_q=8 seqlen_k=32768");
    pthread_mutex_unlock(&f->lock);
    ASSERT_EQ(atomic_load(&f->nlookup), 3);
    tt_client_close(c);
    fake_stop(f);
}

TEST(answer_parsed_and_cached) {
    fake_daemon *f = fake_start(FAKE_SERVE, tuned);
    tt_client *c;
    ASSERT_OK(tt_client_open(f->path, 1000, &c));
    tt_key k = key_of(2048);
    k.seqlen_k = 4096;
    k.causal = 1;
    strcpy(k.gpu, "00ff");
    tt_lookup_result r;
    ASSERT_OK(tt_lookup(c, &k, &r));
    ASSERT_EQ(r.match, TT_MATCH_EXACT);
    ASSERT_EQ(r.seqlen_q, 2048);
    ASSERT_EQ(r.seqlen_k, 4096);
    ASSERT(r.tflops == 312.5);
    tt_config want;
    ASSERT_OK(tt_config_parse(CFG, &want));
    ASSERT(tt_config_equal(&r.config, &want));
    pthread_mutex_lock(&f->lock);
    ASSERT_STREQ(f->last, "LOOKUP dtype=bf16 hdim=128 causal=1 seqlen_q=2048 seqlen_k=4096 gpu=00ff");
    pthread_mutex_unlock(&f->lock);
    for (int i = 0; i < 100; i++) {
        tt_lookup_result again;
        ASSERT_OK(tt_lookup(c, &k, &again));
        ASSERT(memcmp(&again, &r, sizeof r) == 0);
    }
    ASSERT_EQ(atomic_load(&f->nlookup), 1);
    ASSERT_EQ(atomic_load(&f->nhello), 1);
    tt_client_stats s;
    ASSERT_OK(tt_client_get_stats(c, &s));
    ASSERT_EQ(s.cache_hits, 100);
    ASSERT_EQ(s.daemon_answers, 1);
    ASSERT_EQ(s.connects, 1);
    ASSERT_EQ(s.lookups, 101);
    ASSERT_EQ(s.last_failure, 0);
    /* another key: same connection, no second HELLO */
    k.seqlen_q = 100;
    ASSERT_OK(tt_lookup(c, &k, &r));
    ASSERT_EQ(r.seqlen_q, 100);
    ASSERT_EQ(atomic_load(&f->nhello), 1);
    ASSERT_EQ(atomic_load(&f->nconns), 1);
    /* flush: asked again */
    tt_client_flush(c);
    ASSERT_OK(tt_lookup(c, &k, &r));
    ASSERT_EQ(atomic_load(&f->nlookup), 3);
    tt_client_close(c);
    fake_stop(f);
}

/* The first LOOKUP's answer is held back until the test has flushed the
 * cache; the first answer is "tuned for 1", later ones "tuned for 2". */
static _Atomic int flush_asked, flush_done;
static const char *slow_then_retuned(fake_daemon *f, const char *line) {
    (void)f;
    if (strncmp(line, "HELLO ", 6) == 0) return "OK proto=1 server=fake/0 rev=ab gpu=none\n";
    if (atomic_fetch_add(&flush_asked, 1) == 0) {
        while (!atomic_load(&flush_done)) usleep(1000);
        return "OK match=exact config=" CFG " seqlen_q=1 seqlen_k=1 tflops=1\n";
    }
    return "OK match=exact config=" CFG " seqlen_q=2 seqlen_k=2 tflops=2\n";
}

static void *lookup_once(void *arg) {
    tt_client *c = arg;
    tt_key k = key_of(4096);
    tt_lookup_result r;
    return (void *)(intptr_t)tt_lookup(c, &k, &r);
}

/* A flush while a lookup waits for the daemon: that (older) answer must
 * not be cached after the flush, or an exact answer stays forever. */
TEST(flush_during_a_lookup_keeps_its_answer_out) {
    fake_daemon *f = fake_start(FAKE_SERVE, slow_then_retuned);
    tt_client *c;
    ASSERT_OK(tt_client_open(f->path, 5000, &c));
    pthread_t t;
    ASSERT_OK(pthread_create(&t, NULL, lookup_once, c));
    while (atomic_load(&flush_asked) == 0) usleep(1000);
    tt_client_flush(c);
    atomic_store(&flush_done, 1);
    void *ret;
    pthread_join(t, &ret);
    ASSERT_EQ((int)(intptr_t)ret, 0);
    tt_key k = key_of(4096);
    tt_lookup_result r;
    ASSERT_OK(tt_lookup(c, &k, &r));
    ASSERT_EQ(atomic_load(&f->nlookup), 2);
    ASSERT(r.tflops == 2);
    tt_client_close(c);
    fake_stop(f);
}

TEST(nearest_answers_expire) {
    fake_daemon *f = fake_start(FAKE_SERVE, tuned);
    tt_client *c;
    ASSERT_OK(tt_client_open(f->path, 1000, &c));
    tt__client_set_ttl(c, 60);
    tt_key k = key_of(512);
    k.head_dim = 96;
    tt_lookup_result r;
    ASSERT_OK(tt_lookup(c, &k, &r));
    ASSERT_EQ(r.match, TT_MATCH_NEAREST);
    ASSERT_OK(tt_lookup(c, &k, &r));
    ASSERT_EQ(atomic_load(&f->nlookup), 1);
    sleep_ms(100);
    ASSERT_OK(tt_lookup(c, &k, &r));
    ASSERT_EQ(atomic_load(&f->nlookup), 2);
    tt_client_close(c);
    fake_stop(f);
}

TEST(reconnects_after_back_off) {
    char dir[64], path[108];
    fake_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/later.sock", dir);
    tt_client *c;
    ASSERT_OK(tt_client_open(path, 500, &c));
    tt__client_set_backoff(c, 40, 1000);
    tt_key k = key_of(64);
    tt_lookup_result r;
    ASSERT_EQ(tt_lookup(c, &k, &r), TT_FALLBACK);
    fake_daemon *f = fake_start_at(path, FAKE_SERVE, tuned);
    ASSERT_EQ(tt_lookup(c, &k, &r), TT_FALLBACK); /* still backing off */
    ASSERT_EQ(atomic_load(&f->nrequests), 0);
    sleep_ms(70); /* 40 ms +- 25% */
    ASSERT_OK(tt_lookup(c, &k, &r));
    ASSERT_EQ(r.match, TT_MATCH_EXACT);
    ASSERT_EQ(atomic_load(&f->nhello), 1);

    /* the daemon restarts: the kept connection is dead, but the daemon is
     * up again; the next miss asks it on a new connection, no fallback */
    fake_stop(f);
    f = fake_start_at(path, FAKE_SERVE, tuned);
    k.seqlen_q = k.seqlen_k = 65;
    ASSERT_OK(tt_lookup(c, &k, &r));
    ASSERT_EQ(r.seqlen_q, 65);
    ASSERT_EQ(atomic_load(&f->nhello), 1);
    /* and stopped for good: the default, and a back-off */
    fake_stop(f);
    k.seqlen_q = k.seqlen_k = 66;
    ASSERT_EQ(tt_lookup(c, &k, &r), TT_FALLBACK);
    f = fake_start_at(path, FAKE_SERVE, tuned);
    ASSERT_EQ(tt_lookup(c, &k, &r), TT_FALLBACK); /* still backing off */
    sleep_ms(70);
    ASSERT_OK(tt_lookup(c, &k, &r));
    ASSERT_EQ(r.seqlen_q, 66);
    tt_client_close(c);
    fake_stop(f);
    rmdir(dir);
}

TEST(back_off_doubles) {
    tt_client *c;
    ASSERT_OK(tt_client_open("/nonexistent/x.sock", 100, &c));
    tt__client_set_backoff(c, 20, 1000);
    tt_key k = key_of(64);
    tt_lookup_result r;
    /* failures at t=0, ~20, ~60, ~140 ms: about 4 attempts in 200 ms, not
     * one per call */
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long calls = 0;
    while (ms_since(&t0) < 200) {
        ASSERT_EQ(tt_lookup(c, &k, &r), TT_FALLBACK);
        calls++;
        sleep_ms(1);
    }
    tt_client_stats s;
    ASSERT_OK(tt_client_get_stats(c, &s));
    printf("%ld calls, %llu attempts\n", calls, (unsigned long long)s.failures);
    ASSERT(s.failures >= 3 && s.failures <= 6);
    ASSERT(calls > 50);
    tt_client_close(c);
}

TEST(daemon_errors) {
    tt_key k = key_of(128);
    tt_lookup_result r, sentinel;
    memset(&sentinel, 0xab, sizeof sentinel);

    /* the daemon rejects the key: the caller's error, out untouched */
    fake_daemon *f = fake_start(FAKE_SERVE, tuned);
    f->arg = (void *)"unsupported";
    tt_client *c;
    ASSERT_OK(tt_client_open(f->path, 500, &c));
    r = sentinel;
    ASSERT_EQ(tt_lookup(c, &k, &r), TT_ERR_UNSUPPORTED);
    ASSERT(memcmp(&r, &sentinel, sizeof r) == 0);
    tt_client_stats s;
    ASSERT_OK(tt_client_get_stats(c, &s));
    ASSERT_EQ(s.failures, 0);
    ASSERT_EQ(s.key_errors, 1);
    ASSERT_EQ(s.last_failure, 0);
    tt_client_close(c);

    /* busy, or a reply we cannot read: the default, and a back-off */
    const char *modes[] = {"busy", "garbage"};
    const int why[] = {TT_ERR_BUSY, TT_ERR_PROTO};
    for (int i = 0; i < 2; i++) {
        f->arg = (void *)modes[i];
        ASSERT_OK(tt_client_open(f->path, 500, &c));
        ASSERT_EQ(tt_lookup(c, &k, &r), TT_FALLBACK);
        expect_default(&k, &r);
        ASSERT_OK(tt_client_get_stats(c, &s));
        ASSERT_EQ(s.failures, 1);
        ASSERT_EQ(s.last_failure, why[i]);
        tt_client_close(c);
    }
    fake_stop(f);
}

static const char *wrong_version(fake_daemon *f, const char *line) {
    (void)f;
    if (strncmp(line, "HELLO ", 6) == 0) return "ERR version this daemon speaks proto=2\n";
    return "OK match=exact config=" CFG " seqlen_q=1 seqlen_k=1\n";
}

TEST(hello_refused) {
    fake_daemon *f = fake_start(FAKE_SERVE, wrong_version);
    tt_client *c;
    ASSERT_OK(tt_client_open(f->path, 500, &c));
    tt_key k = key_of(1);
    tt_lookup_result r;
    ASSERT_EQ(tt_lookup(c, &k, &r), TT_FALLBACK);
    ASSERT_EQ(atomic_load(&f->nlookup), 0);
    tt_client_close(c);
    fake_stop(f);
}

TEST(invalid_arguments) {
    tt_client *c;
    ASSERT_EQ(tt_client_open(NULL, 100, NULL), TT_ERR_INVAL);
    char longpath[300];
    memset(longpath, 'p', sizeof longpath - 1);
    longpath[sizeof longpath - 1] = '\0';
    ASSERT_EQ(tt_client_open(longpath, 100, &c), TT_ERR_INVAL);
    ASSERT_OK(tt_client_open("/nonexistent/x.sock", 0, &c));
    tt_key k = key_of(10);
    tt_lookup_result r, sentinel;
    memset(&sentinel, 0xcd, sizeof sentinel);
    r = sentinel;
    k.head_dim = 48;
    ASSERT_EQ(tt_lookup(c, &k, &r), TT_ERR_UNSUPPORTED);
    k = key_of(0);
    ASSERT_EQ(tt_lookup(c, &k, &r), TT_ERR_RANGE);
    k = key_of(10);
    strcpy(k.gpu, "XYZ");
    ASSERT_EQ(tt_lookup(c, &k, &r), TT_ERR_INVAL);
    ASSERT(memcmp(&r, &sentinel, sizeof r) == 0);
    ASSERT_EQ(tt_lookup(NULL, &k, &r), TT_ERR_INVAL);
    ASSERT_EQ(tt_lookup(c, NULL, &r), TT_ERR_INVAL);
    ASSERT_EQ(tt_lookup(c, &k, NULL), TT_ERR_INVAL);
    tt_client_close(c);
    tt_client_close(NULL);
}

/* Eight threads share one client: every answer must be the one for the
 * thread's own key, whether from the cache or from the daemon. */
static tt_client *shared;
static void *hammer(void *arg) {
    long id = (long)(intptr_t)arg;
    for (int i = 0; i < 20000; i++) {
        tt_key k = key_of(1 + (i * 13 + id) % 97);
        tt_lookup_result r;
        int rc = tt_lookup(shared, &k, &r);
        if (rc < 0 || r.seqlen_q != k.seqlen_q) {
            fprintf(stderr, "thread %ld: rc %d seqlen %lld for %lld\n", id, rc, (long long)r.seqlen_q,
                    (long long)k.seqlen_q);
            exit(1);
        }
        if (rc == 0 && i % 1000 == 0) tt_client_flush(shared);
    }
    return NULL;
}

static void run_threads(void) {
    pthread_t t[8];
    for (long i = 0; i < 8; i++) pthread_create(&t[i], NULL, hammer, (void *)(intptr_t)i);
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
}

TEST(eight_threads_with_daemon) {
    fake_daemon *f = fake_start(FAKE_SERVE, tuned);
    ASSERT_OK(tt_client_open(f->path, 2000, &shared));
    run_threads();
    tt_client_stats s;
    ASSERT_OK(tt_client_get_stats(shared, &s));
    printf("hits %llu answers %llu fallbacks %llu\n", (unsigned long long)s.cache_hits,
           (unsigned long long)s.daemon_answers, (unsigned long long)s.fallbacks);
    ASSERT_EQ(s.fallbacks, 0);
    ASSERT_EQ(s.cache_hits + s.daemon_answers, 8 * 20000);
    ASSERT_EQ(s.daemon_answers, atomic_load(&f->nlookup));
    tt_client_close(shared);
    fake_stop(f);
}

TEST(eight_threads_without_daemon) {
    ASSERT_OK(tt_client_open("/nonexistent/x.sock", 100, &shared));
    run_threads();
    tt_client_close(shared);
}

TEST(forked_child_gets_its_own_connection) {
    fake_daemon *f = fake_start(FAKE_SERVE, tuned);
    tt_client *c;
    ASSERT_OK(tt_client_open(f->path, 1000, &c));
    tt_key k = key_of(5);
    tt_lookup_result r;
    ASSERT_OK(tt_lookup(c, &k, &r));
    pid_t pid = fork();
    if (pid == 0) {
        tt_key k2 = key_of(6);
        tt_lookup_result r2;
        _exit(tt_lookup(c, &k2, &r2) == 0 && r2.seqlen_q == 6 ? 0 : 1);
    }
    int st;
    waitpid(pid, &st, 0);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ASSERT_EQ(atomic_load(&f->nconns), 2); /* the child did not use the parent's stream */
    /* the parent's stream is still in step */
    k = key_of(7);
    ASSERT_OK(tt_lookup(c, &k, &r));
    ASSERT_EQ(r.seqlen_q, 7);
    tt_client_close(c);
    fake_stop(f);
}

/* Like `tuned`, but a LOOKUP of seqlen_q=999 is never answered: the
 * thread that asks holds the client's lock until its time-out. */
static const char *stalls_999(fake_daemon *f, const char *line) {
    if (strncmp(line, "LOOKUP ", 7) == 0 && strstr(line, "seqlen_q=999 ")) return "";
    return tuned(f, line);
}

static void *lookup_999(void *arg) {
    tt_key k = key_of(999);
    tt_lookup_result r;
    ASSERT_EQ(tt_lookup((tt_client *)arg, &k, &r), TT_FALLBACK);
    return NULL;
}

/* A fork while another thread is inside a lookup (holding the lock, its
 * request on the parent's stream): the child must not wait for a lock no
 * thread of its own will release, nor keep the parent's socket open. */
TEST(child_forked_during_a_lookup_asks_at_once) {
    fake_daemon *f = fake_start(FAKE_SERVE, stalls_999);
    tt_client *c;
    const int timeout = 1500;
    ASSERT_OK(tt_client_open(f->path, timeout, &c));
    tt_key k = key_of(5);
    tt_lookup_result r;
    ASSERT_OK(tt_lookup(c, &k, &r));
    int parent_fd = tt__client_conn_fd(c);
    ASSERT(parent_fd >= 0);
    pthread_t t;
    pthread_create(&t, NULL, lookup_999, c);
    while (atomic_load(&f->nlookup) < 2) sleep_ms(1); /* the stalled request is out */
    sleep_ms(20);
    pid_t pid = fork();
    if (pid == 0) {
        errno = 0;
        if (fcntl(parent_fd, F_GETFD) != -1 || errno != EBADF) _exit(2); /* parent's stream kept */
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        tt_key k2 = key_of(6);
        tt_lookup_result r2;
        int rc = tt_lookup(c, &k2, &r2);
        double ms = ms_since(&t0);
        if (ms > timeout / 5) _exit(3); /* waited on the parent thread's lock */
        if (rc != 0 || r2.match != TT_MATCH_EXACT || r2.seqlen_q != 6) _exit(4);
        /* and the next lookup in the child reuses the child's own stream */
        k2 = key_of(8);
        _exit(tt_lookup(c, &k2, &r2) == 0 && r2.seqlen_q == 8 ? 0 : 5);
    }
    int st;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
    ASSERT_EQ(atomic_load(&f->nconns), 2); /* the parent's, then one for the child */
    ASSERT_EQ(atomic_load(&f->nhello), 2);
    pthread_join(t, NULL);
    tt_client_close(c);
    fake_stop(f);
}

TT_TEST_MAIN()
