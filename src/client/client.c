/* tt_client: lookups through the per-process cache, else one round trip to
 * the daemon, else the built-in default. Two locks, never nested: the
 * cache's writer lock (cache.c) and `io`, held across socket calls. Cache
 * hits take neither.
 *
 * fork(): the child has only the forking thread, but copies of every lock
 * as they were, and of the fds. A lock another thread held would never be
 * released (the child's lookups would wait out their time-out), and the
 * parent's stream must not be shared (each would read the other's
 * replies). So every open client is on a list, and a pthread_atfork child
 * handler resets each one: fresh locks, the inherited socket closed. */
#include "client/client_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client/cache.h"
#include "client/conn.h"
#include "common/key.h"

#define CACHE_ENTRIES 1024
#define TTL_NS_DEFAULT INT64_C(1000000000)
#define BACKOFF_MIN_NS_DEFAULT INT64_C(50000000)   /* 50 ms */
#define BACKOFF_MAX_NS_DEFAULT INT64_C(5000000000) /* 5 s */

/* The counters, sharded by thread: a cache hit that added to one shared
 * word made every hitting core take that line in turn: ~45 ns a hit on one
 * thread, ~110 ns each with two (docs/perf.md). A thread adds to its
 * own shard's line (still an atomic add: past STAT_SHARDS threads, two may
 * share one); a read sums the shards. */
enum { STAT_HITS, STAT_ANSWERS, STAT_FALLBACKS, STAT_CONNECTS, STAT_FAILURES, STAT_KEY_ERRORS, STAT_COUNT };
#define STAT_SHARDS 64

typedef struct counter_shard {
    _Alignas(64) _Atomic uint64_t n[STAT_COUNT];
} counter_shard;

struct tt_client {
    tt__cache *cache;
    int timeout_ms;
    int64_t ttl_ns;
    /* No connection attempt before this time (0: none pending). Read without
     * `io` so that, while the daemon is down, a lookup returns the fallback
     * at once instead of queueing behind a thread that is trying. */
    _Atomic int64_t retry_at;
    counter_shard *counters;      /* STAT_SHARDS of them, one cache line each */
    _Atomic int64_t last_failure; /* TT_ERR_* of the latest failed attempt */

    tt_client *prev, *next; /* the list of open clients, under registry_lock */

    pthread_mutex_t io; /* guards everything below */
    tt__conn *conn;     /* its fd is -1 in a fork child until the next connect */
    int64_t backoff_ns, backoff_min_ns, backoff_max_ns;
    uint64_t rng;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

/* The cache's expiry clock: the coarse clock is a vDSO read of a
 * jiffy-updated value (a few ns, ~4 ms resolution), ample for a 1 s TTL. */
static int64_t coarse_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static tt_client *registry;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static int atfork_rc;

/* prepare/parent: the forking thread holds the list across fork(), so the
 * child's copy is whole and the child may unlock it. */
static void fork_prepare(void) { pthread_mutex_lock(&registry_lock); }
static void fork_parent(void) { pthread_mutex_unlock(&registry_lock); }

/* The child runs this alone, before fork() returns. Re-initializing a lock
 * that a vanished thread holds is the only way to free it; nothing in the
 * child can be using it yet. No allocation or free here: the connection's
 * struct goes at the next connect. */
static void fork_child(void) {
    for (tt_client *c = registry; c; c = c->next) {
        pthread_mutex_init(&c->io, NULL);
        if (c->conn) tt__conn_drop_fd(c->conn);
        tt__cache_after_fork(c->cache);
        c->rng ^= (uint64_t)getpid() << 32; /* the child's back-off jitter is its own */
    }
    pthread_mutex_unlock(&registry_lock);
}

static void register_atfork(void) { atfork_rc = pthread_atfork(fork_prepare, fork_parent, fork_child); }

int tt_client_open(const char *socket_path, int timeout_ms, tt_client **out) {
    if (!out) return TT_ERR_INVAL;
    const char *path = tt__socket_path(socket_path);
    tt_client *c = calloc(1, sizeof *c);
    if (!c) return TT_ERR_NOMEM;
    size_t n = strlen(path);
    if (n >= sizeof c->path) {
        free(c);
        return TT_ERR_INVAL;
    }
    memcpy(c->path, path, n + 1);
    c->counters = aligned_alloc(_Alignof(counter_shard), STAT_SHARDS * sizeof *c->counters);
    if (!c->counters) {
        free(c);
        return TT_ERR_NOMEM;
    }
    for (int i = 0; i < STAT_SHARDS; i++)
        for (int j = 0; j < STAT_COUNT; j++) atomic_init(&c->counters[i].n[j], 0);
    int rc = tt__cache_new(CACHE_ENTRIES, &c->cache);
    if (rc < 0) {
        free(c->counters);
        free(c);
        return rc;
    }
    if (pthread_mutex_init(&c->io, NULL) != 0) {
        tt__cache_free(c->cache);
        free(c->counters);
        free(c);
        return TT_ERR_NOMEM;
    }
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 100;
    c->ttl_ns = TTL_NS_DEFAULT;
    c->backoff_min_ns = BACKOFF_MIN_NS_DEFAULT;
    c->backoff_max_ns = BACKOFF_MAX_NS_DEFAULT;
    c->rng = (uint64_t)tt__now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)c;
    pthread_once(&atfork_once, register_atfork);
    if (atfork_rc != 0) {
        tt_client_close(c);
        return TT_ERR_NOMEM;
    }
    pthread_mutex_lock(&registry_lock);
    c->next = registry;
    if (registry) registry->prev = c;
    registry = c;
    pthread_mutex_unlock(&registry_lock);
    *out = c;
    return 0;
}

void tt_client_close(tt_client *c) {
    if (!c) return;
    pthread_mutex_lock(&registry_lock);
    if (c->prev) c->prev->next = c->next;
    else if (registry == c) registry = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&registry_lock);
    tt__conn_close(c->conn);
    pthread_mutex_destroy(&c->io);
    tt__cache_free(c->cache);
    free(c->counters);
    free(c);
}

void tt__client_set_backoff(tt_client *c, int min_ms, int max_ms) {
    pthread_mutex_lock(&c->io);
    c->backoff_min_ns = (int64_t)min_ms * 1000000;
    c->backoff_max_ns = (int64_t)max_ms * 1000000;
    pthread_mutex_unlock(&c->io);
}

int tt__client_conn_fd(tt_client *c) {
    pthread_mutex_lock(&c->io);
    int fd = c->conn ? tt__conn_fd(c->conn) : -1;
    pthread_mutex_unlock(&c->io);
    return fd;
}

void tt__client_set_ttl(tt_client *c, int ttl_ms) { c->ttl_ns = (int64_t)ttl_ms * 1000000; }

int tt_client_get_stats(tt_client *c, tt_client_stats *out) {
    if (!c || !out) return TT_ERR_INVAL;
    tt_client_stats s;
    memset(&s, 0, sizeof s);
    uint64_t sum[STAT_COUNT] = {0};
    for (int i = 0; i < STAT_SHARDS; i++)
        for (int j = 0; j < STAT_COUNT; j++)
            sum[j] += atomic_load_explicit(&c->counters[i].n[j], memory_order_relaxed);
    s.cache_hits = sum[STAT_HITS];
    s.daemon_answers = sum[STAT_ANSWERS];
    s.fallbacks = sum[STAT_FALLBACKS];
    s.connects = sum[STAT_CONNECTS];
    s.failures = sum[STAT_FAILURES];
    /* every call ends in exactly one of these: no add of its own on the hit path */
    s.lookups = sum[STAT_HITS] + sum[STAT_ANSWERS] + sum[STAT_FALLBACKS] + sum[STAT_KEY_ERRORS];
    s.key_errors = sum[STAT_KEY_ERRORS];
    s.last_failure = atomic_load_explicit(&c->last_failure, memory_order_relaxed);
    *out = s;
    return 0;
}

void tt_client_flush(tt_client *c) {
    if (c) tt__cache_clear(c->cache);
}

/* A thread's shard, handed out round-robin at its first count. The
 * initial-exec model makes the read one load off the thread pointer (the
 * default model for a shared library calls __tls_get_addr); 4 bytes of the
 * static TLS surplus that glibc keeps for libraries loaded later. */
static _Atomic unsigned next_shard;
static _Thread_local __attribute__((tls_model("initial-exec"))) unsigned thread_shard;

static void count(tt_client *c, int what) {
    unsigned s = thread_shard;
    if (!s)
        s = thread_shard = atomic_fetch_add_explicit(&next_shard, 1, memory_order_relaxed) % STAT_SHARDS + 1;
    atomic_fetch_add_explicit(&c->counters[s - 1].n[what], 1, memory_order_relaxed);
}

static int fallback(tt_client *c, const tt_key_v2 *key, tt_lookup_result *out) {
    int rc = tt__lookup_default(key, out);
    if (rc < 0) return rc;
    count(c, STAT_FALLBACKS);
    return TT_FALLBACK;
}

/* Under io. The pointer is cleared before the struct is freed: fork_child
 * reads c->conn without io (a thread in the middle of this is gone in the
 * child), and must see either a live connection or none, never a freed
 * one (it would close the fd read from freed memory and write into it). */
static void drop_conn(tt_client *c) {
    tt__conn *old = c->conn;
    c->conn = NULL;
    atomic_thread_fence(memory_order_release); /* the NULL is visible before the free's stores */
    tt__conn_close(old);
}

/* Under io. Exponential back-off with +-25% jitter, so the processes of a
 * node that lost the daemon together do not all come back in one burst. */
static void failed(tt_client *c, int close_conn, int why) {
    if (close_conn) drop_conn(c);
    c->backoff_ns = c->backoff_ns ? c->backoff_ns * 2 : c->backoff_min_ns;
    if (c->backoff_ns > c->backoff_max_ns) c->backoff_ns = c->backoff_max_ns;
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    int64_t jitter = c->backoff_ns / 2 ? (int64_t)(c->rng % (uint64_t)(c->backoff_ns / 2)) : 0;
    atomic_store(&c->retry_at, tt__now_ns() + c->backoff_ns * 3 / 4 + jitter);
    atomic_store_explicit(&c->last_failure, why, memory_order_relaxed);
    count(c, STAT_FAILURES);
}

static void succeeded(tt_client *c) {
    c->backoff_ns = 0;
    atomic_store(&c->retry_at, 0);
}

/* Under io: a connection that has said HELLO. */
static int ensure_conn(tt_client *c, int64_t deadline) {
    if (c->conn && tt__conn_fd(c->conn) >= 0) return 0;
    drop_conn(c); /* a fork child's, its fd already closed */
    tt__conn *conn;
    int rc = tt__conn_open(c->path, deadline, &conn, NULL, 0);
    if (rc < 0) return rc;
    tt__reply r;
    rc = tt__conn_request(conn, "HELLO proto=1 client=libtiletune/" TT_VERSION_STRING, &r, deadline, NULL, 0);
    if (rc == 0) rc = r.status;
    tt__reply_free(&r);
    if (rc < 0) {
        tt__conn_close(conn);
        return rc;
    }
    c->conn = conn;
    count(c, STAT_CONNECTS);
    return 0;
}

_Static_assert(TT_PROTOCOL_VERSION == 1, "HELLO above asks for proto=1");

/* The daemon's verdict that the key itself is bad: the caller's error,
 * returned as is. Every other failure is the daemon's, and gets the
 * fallback. */
static int is_key_error(int status) {
    return status == TT_ERR_INVAL || status == TT_ERR_RANGE || status == TT_ERR_UNSUPPORTED;
}

/* Error codes after which the daemon closes the connection. */
static int closes_conn(const char *code) {
    return strcmp(code, "busy") == 0 || strcmp(code, "timeout") == 0 || strcmp(code, "toolong") == 0;
}

/* Under io: one LOOKUP round trip. > 0: fall back (the failure is
 * recorded); 0: *res holds the answer; < 0: the key's error. A kept
 * connection may have been closed by the daemon meanwhile (its idle
 * time-out: "ERR timeout", then EOF; or a restart): that is no sign the
 * daemon is down, so the request gets one more try on a new connection. */
static int ask(tt_client *c, const tt_key_v2 *key, tt_lookup_result *res, int64_t deadline) {
    char line[TT_LINE_MAX];
    memcpy(line, "LOOKUP ", 7);
    if (tt__key_format(key, line + 7, sizeof line - 7) < 0) return TT_ERR_INVAL;
    for (int retry = 0;; retry++) {
        int kept = c->conn && tt__conn_fd(c->conn) >= 0;
        int rc = ensure_conn(c, deadline);
        if (rc < 0) {
            failed(c, 1, rc);
            return 1;
        }
        tt__reply r;
        rc = tt__conn_request(c->conn, line, &r, deadline, NULL, 0);
        int again = kept && retry == 0;
        if (rc < 0) {
            if (again && rc == TT_ERR_IO) {
                drop_conn(c);
                continue;
            }
            failed(c, 1, rc);
            return 1;
        }
        if (r.status < 0) {
            rc = r.status;
            int close_conn = closes_conn(r.code), idle = strcmp(r.code, "timeout") == 0;
            tt__reply_free(&r);
            if (is_key_error(rc)) return rc;
            if (again && idle) {
                drop_conn(c);
                continue;
            }
            failed(c, close_conn, rc);
            return 1;
        }
        rc = tt__lookup_reply_parse(&r.msg, res);
        tt__reply_free(&r);
        if (rc < 0) {
            failed(c, 1, rc);
            return 1;
        }
        succeeded(c);
        return 0;
    }
}

static int lock_until(pthread_mutex_t *m, int64_t deadline) {
    struct timespec ts = {.tv_sec = deadline / 1000000000, .tv_nsec = deadline % 1000000000};
    return pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &ts);
}

static int lookup(tt_client *c, const tt_key_v2 *key, tt_lookup_result *out);

int tt_lookup(tt_client *c, const tt_key *key, tt_lookup_result *out) {
    if (!c || !key || !out) return TT_ERR_INVAL;
    tt_key_v2 k;
    tt__key_from_v1(key, &k);
    tt__key_canon(&k);
    return lookup(c, &k, out);
}

int tt_lookup_v2(tt_client *c, const tt_key_v2 *key, tt_lookup_result *out) {
    if (!c || !key || !out) return TT_ERR_INVAL;
    for (size_t i = 0; i < sizeof key->reserved / sizeof key->reserved[0]; i++)
        if (key->reserved[i]) return TT_ERR_INVAL;
    tt_key_v2 k = *key;
    tt__key_canon(&k);
    return lookup(c, &k, out);
}

/* `key` is canonical (tt__key_canon): equal problems share a cache slot. */
static int lookup(tt_client *c, const tt_key_v2 *key, tt_lookup_result *out) {
    if (tt__cache_get(c->cache, key, coarse_now_ns, out)) {
        count(c, STAT_HITS);
        return 0;
    }
    /* Only a valid key is ever cached, so checking after the probe is safe. */
    int rc = tt__key_check(key, NULL, 0);
    if (rc < 0) {
        count(c, STAT_KEY_ERRORS);
        return rc;
    }
    int64_t now = tt__now_ns();
    if (now < atomic_load(&c->retry_at)) return fallback(c, key, out);
    /* A thread stuck on the socket holds io for at most its own time-out;
     * waiting longer than ours would break our promise. */
    if (lock_until(&c->io, now + (int64_t)c->timeout_ms * 1000000) != 0) return fallback(c, key, out);
    tt_lookup_result res;
    if (tt__cache_get(c->cache, key, coarse_now_ns, out)) { /* another thread asked */
        pthread_mutex_unlock(&c->io);
        count(c, STAT_HITS);
        return 0;
    }
    if (tt__now_ns() < atomic_load(&c->retry_at)) {
        pthread_mutex_unlock(&c->io);
        return fallback(c, key, out);
    }
    /* Read before asking: a tt_client_flush while we wait for the answer
     * must keep it out of the cache (an exact answer would stay forever). */
    uint64_t gen = tt__cache_generation(c->cache);
    rc = ask(c, key, &res, now + (int64_t)c->timeout_ms * 1000000);
    pthread_mutex_unlock(&c->io);
    if (rc > 0) return fallback(c, key, out);
    if (rc < 0) {
        count(c, STAT_KEY_ERRORS);
        return rc;
    }
    count(c, STAT_ANSWERS);
    tt__cache_put_since(c->cache, gen, key, &res,
                        res.match == TT_MATCH_EXACT ? 0 : coarse_now_ns() + c->ttl_ns);
    *out = res;
    return 0;
}
