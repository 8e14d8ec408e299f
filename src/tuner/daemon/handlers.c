#include "tuner/daemon/handlers.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tuner/fleet/shard.h"
#include "tuner/daemon/export.h"
#include "tuner/daemon/handlers_fleet.h"
#include "common/key.h"
#include "tuner/daemon/log.h"
#include "common/proto.h"

#define JOB_KEYS_MAX 4096
/* Refused admin verbs are logged at most this often (a non-admin could
 * otherwise fill the journal); the rest are counted in the next line. */
#define REFUSED_LOG_MS 1000

uint64_t tt_hctx_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void tt_handle_error(tt_hctx *x, tt_buf *out, tt_errc code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    x->stats->errors[code]++;
    tt_buf_printf(out, "ERR %s %s\n", tt__errc_name(code), msg);
}

#define ERR(code, ...) tt_handle_error(x, out, TT_ERRC_##code, __VA_ARGS__)

void tt_session_init(tt_session *s, const tt_peer *peer) {
    memset(s, 0, sizeof *s);
    if (peer) s->peer = *peer;
    s->admin = -1;
}

void tt_session_free(tt_session *s) {
    tt_fleet_body_free(s->fleet_body);
    s->fleet_body = NULL;
    tt_export_free(s->export);
    s->export = NULL;
}

int tt_session_is_admin(tt_hctx *x, tt_session *s) {
    if (s->admin < 0) s->admin = tt_auth_is_admin(x->auth, &s->peer);
    return s->admin;
}

void tt_hctx_identity(tt_hctx *x, const char *rev, const char *gpu) {
    snprintf(x->rev, sizeof x->rev, "%s", rev && rev[0] ? rev : x->builtin_rev);
    snprintf(x->gpu, sizeof x->gpu, "%s", gpu ? gpu : "");
}

int tt_need_admin(tt_hctx *x, tt_session *s, const char *verb, tt_buf *out) {
    if (tt_session_is_admin(x, s)) return 0;
    uint64_t now = tt_hctx_now_ms();
    if (x->refused_log_ms == 0 || now - x->refused_log_ms >= REFUSED_LOG_MS) {
        if (x->refused_quiet)
            tt_info("refused %s from uid %d (not an admin); %lld more refusals not logged", verb,
                    (int)s->peer.uid, (long long)x->refused_quiet);
        else tt_info("refused %s from uid %d (not an admin)", verb, (int)s->peer.uid);
        x->refused_log_ms = now;
        x->refused_quiet = 0;
    } else {
        x->refused_quiet++;
    }
    ERR(PERMISSION, "%s needs root, the daemon's user%s", verb, x->admin_group ? " or the admin group" : "");
    return -1;
}

/* ---- the verbs' requests and field tables ------------------------------------------------ */

#define F_INT(st, f, name, req, lo, hi, dflt) \
    { name, TT_FT_INT, req, lo, hi, dflt, NULL, NULL, offsetof(st, f) }
#define F_HEX(st, f, name) \
    { name, TT_FT_HEX, 0, 0, 0, 0, NULL, NULL, offsetof(st, f) }
#define F_WORD(st, f, name, words) \
    { name, TT_FT_WORD, 0, 0, 0, 0, words, NULL, offsetof(st, f) }
#define F_ENUM(st, f, name, set, parse, dflt) \
    { name, TT_FT_ENUM, 0, 0, 0, dflt, (const char *const[]){set, NULL}, parse, offsetof(st, f) }
#define F_INTS(st, f, name, req, lo, hi) \
    { name, TT_FT_INTS, req, lo, hi, 0, NULL, NULL, offsetof(st, f) }
#define F_TEXT(st, f, name) \
    { name, TT_FT_TEXT, 0, 0, 0, 0, NULL, NULL, offsetof(st, f) }
#define NSPEC(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int parse_mode(const char *s, int *out) {
    tt_job_mode m;
    if (tt_job_mode_parse(s, &m) < 0) return TT_ERR_INVAL;
    *out = (int)m;
    return 0;
}

typedef struct req_hello {
    int64_t proto;
    const char *client;
} req_hello;
static const tt__fspec hello_spec[] = {
    F_INT(req_hello, proto, "proto", 0, INT64_MIN, INT64_MAX, TT_PROTOCOL_VERSION),
    F_TEXT(req_hello, client, "client"),
};

/* A tuning key as LOOKUP and FORGET take it. */
typedef struct req_key {
    int dtype;
    int64_t hdim, causal, seqlen_q, seqlen_k, group;
    char gpu[TT_ID_MAX], rev[TT_ID_MAX];
} req_key;
static const tt__fspec key_spec[] = {
    {"dtype", TT_FT_DTYPE, 1, 0, 0, 0, NULL, NULL, offsetof(req_key, dtype)},
    F_INT(req_key, hdim, "hdim", 1, 1, 1 << 20, 0),
    /* 0 none, 1 top-left, 2 bottom-right (docs/protocol.md) */
    F_INT(req_key, causal, "causal", 0, 0, 2, 0),
    F_INT(req_key, seqlen_q, "seqlen_q", 1, 1, TT_SEQLEN_MAX, 0),
    F_INT(req_key, seqlen_k, "seqlen_k", 0, 1, TT_SEQLEN_MAX, 0), /* absent: seqlen_q */
    F_INT(req_key, group, "group", 0, 1, TT_GROUP_MAX, 1),
    F_HEX(req_key, gpu, "gpu"),
    F_HEX(req_key, rev, "rev"),
};
enum { KEY_SEQLEN_K = 4 };

typedef struct req_stats {
    int prometheus;
} req_stats;
static const tt__fspec stats_spec[] = {
    F_WORD(req_stats, prometheus, "format", ((const char *const[]){"text", "prometheus", NULL})),
};

/* The options TUNE and TUNE stale=1 share. */
#define JOB_OPTIONS(st)                                                                                      \
    F_ENUM(st, mode, "mode", "exhaustive or fast", parse_mode,                                               \
           TT_JOB_EXHAUSTIVE), /* 65535: the kernel's grid takes batch in gridDim.z; 0: the worker's rule */ \
        F_INT(st, batch, "batch", 0, 1, 65535, 0), F_INT(st, heads, "heads", 0, 1, 4096, 0),                 \
        F_HEX(st, gpu, "gpu")

typedef struct req_tune {
    tt__ints dtype, hdim, causal, seqlen, seqlen_k, group;
    int mode;
    int64_t batch, heads;
    char gpu[TT_ID_MAX];
    const char *shard;
} req_tune;
static const tt__fspec tune_spec[] = {
    {"dtype", TT_FT_DTYPES, 1, 0, 0, 0, NULL, NULL, offsetof(req_tune, dtype)},
    F_INTS(req_tune, hdim, "hdim", 1, 1, 1 << 20),
    F_INTS(req_tune, causal, "causal", 0, 0, 2),
    F_INTS(req_tune, seqlen, "seqlen", 1, 1, TT_SEQLEN_MAX),
    F_INTS(req_tune, seqlen_k, "seqlen_k", 0, 1, TT_SEQLEN_MAX),
    F_INTS(req_tune, group, "group", 0, 1, TT_GROUP_MAX),
    JOB_OPTIONS(req_tune),
    F_TEXT(req_tune, shard, "shard"),
};

/* TUNE grid=inference: the inference grid (tt__inference_grid,
 * docs/tuning.md) in place of key lists. */
typedef struct req_grid {
    const char *grid;
    int mode;
    int64_t batch, heads;
    char gpu[TT_ID_MAX];
    const char *shard;
} req_grid;
static const tt__fspec grid_spec[] = {
    F_TEXT(req_grid, grid, "grid"),
    JOB_OPTIONS(req_grid),
    F_TEXT(req_grid, shard, "shard"),
};

typedef struct req_stale {
    int64_t stale;
    int mode;
    int64_t batch, heads;
    char gpu[TT_ID_MAX];
} req_stale;
static const tt__fspec stale_spec[] = {
    F_INT(req_stale, stale, "stale", 1, 1, 1, 0),
    JOB_OPTIONS(req_stale),
};

typedef struct req_job {
    int64_t job;
} req_job;
static const tt__fspec job_spec[] = {F_INT(req_job, job, "job", 1, 1, INT64_MAX, 0)};

typedef struct req_jobs {
    int64_t all;
} req_jobs;
static const tt__fspec jobs_spec[] = {F_INT(req_jobs, all, "all", 0, 0, 1, 0)};

static char *put_u64(char *p, uint64_t v) {
    char tmp[24], *t = tmp + sizeof tmp;
    do {
        *--t = (char)('0' + v % 10);
    } while ((v /= 10));
    size_t n = (size_t)(tmp + sizeof tmp - t);
    memcpy(p, t, n);
    return p + n;
}

/* The key of a LOOKUP/FORGET request, gpu and rev defaulted to the
 * serving ones. */
static int read_key(tt_hctx *x, const req_key *r, uint32_t has, tt_key_v2 *key, tt_buf *out) {
    char err[256];
    memset(key, 0, sizeof *key);
    key->dtype = (tt_dtype)r->dtype;
    key->head_dim = (int32_t)r->hdim;
    key->causal = (int32_t)r->causal;
    key->seqlen_q = r->seqlen_q;
    key->seqlen_k = TT_HAS(has, KEY_SEQLEN_K) ? r->seqlen_k : r->seqlen_q;
    key->group = (int32_t)r->group;
    memcpy(key->gpu, r->gpu[0] ? r->gpu : x->gpu, TT_ID_MAX);
    memcpy(key->rev, r->rev[0] ? r->rev : x->rev, TT_ID_MAX);
    int rc = tt__key_check(key, err, sizeof err);
    if (rc < 0) {
        tt_handle_error(x, out, tt__errc_from_status(rc), "%s", err);
        return -1;
    }
    tt__key_canon(key);
    return 0;
}

static void h_hello(tt_hctx *x, tt_session *s, const void *req, uint32_t has, tt_buf *out) {
    const req_hello *r = req;
    (void)s;
    if (TT_HAS(has, 0) && r->proto != TT_PROTOCOL_VERSION) {
        ERR(VERSION, "protocol %lld not spoken; this daemon speaks %d", (long long)r->proto,
            TT_PROTOCOL_VERSION);
        return;
    }
    tt_buf_printf(out, "OK proto=%d server=tiletuned/%s rev=%s gpu=%s\n", TT_PROTOCOL_VERSION,
                  TT_VERSION_STRING, x->rev, x->gpu[0] ? x->gpu : "none");
}

static void h_ping(tt_hctx *x, tt_session *s, const void *req, uint32_t has, tt_buf *out) {
    (void)x, (void)s, (void)req, (void)has;
    tt_buf_append(out, "OK pong\n", 8);
}

static void h_lookup(tt_hctx *x, tt_session *s, const void *req, uint32_t has, tt_buf *out) {
    tt_key_v2 key;
    (void)s;
    if (read_key(x, req, has, &key, out) < 0) return;
    tt_lookup_result r;
    int rc = tt_index_lookup(x->index, &key, &r);
    if (rc < 0) {
        ERR(UNSUPPORTED, "no config for this key");
        return;
    }
    char cfg[TT_CONFIG_TEXT_MAX];
    if (tt_config_format(&r.config, cfg, sizeof cfg) < 0) {
        ERR(INTERNAL, "config does not format");
        return;
    }
    x->stats->lookups[r.match]++;
    /* Built by appends, not printf: this is the daemon's hottest reply. */
    char line[TT_CONFIG_TEXT_MAX + 160], *p = line;
    p = stpcpy(p, "OK match=");
    p = stpcpy(p, tt_match_name(r.match));
    p = stpcpy(p, " config=");
    p = stpcpy(p, cfg);
    p = stpcpy(p, " seqlen_q=");
    p = put_u64(p, (uint64_t)r.seqlen_q);
    p = stpcpy(p, " seqlen_k=");
    p = put_u64(p, (uint64_t)r.seqlen_k);
    if (r.group > 1) { /* group 1 left off: the reply of a daemon before groups */
        p = stpcpy(p, " group=");
        p = put_u64(p, (uint64_t)r.group);
    }
    /* a default answer where a winner of another kernel revision exists */
    if (r.match == TT_MATCH_DEFAULT && tt_index_other_rev(x->index, &key)) p = stpcpy(p, " stale=1");
    if (r.match != TT_MATCH_DEFAULT && r.tflops >= 0 && r.tflops < 1e12) {
        uint64_t c = (uint64_t)(r.tflops * 100 + 0.5); /* %.2f */
        p = stpcpy(p, " tflops=");
        p = put_u64(p, c / 100);
        *p++ = '.';
        *p++ = (char)('0' + c / 10 % 10);
        *p++ = (char)('0' + c % 10);
    }
    *p++ = '\n';
    tt_buf_append(out, line, (size_t)(p - line));
}

static int job_counts(tt_hctx *x, tt_job_counts *jc, tt_buf *out) {
    if (tt_store_job_counts(x->store, jc) < 0) {
        ERR(DB, "%s", tt_store_errmsg(x->store));
        return -1;
    }
    return 0;
}

static void sup_status(tt_hctx *x, tt_supervisor_status *st) {
    if (x->sup) tt_supervisor_get_status(x->sup, st);
    else {
        memset(st, 0, sizeof *st);
        st->state = TT_TUNING_WAITING;
        st->reason = "no-gpu";
    }
}

static void h_status(tt_hctx *x, tt_session *s, const void *req, uint32_t has, tt_buf *out) {
    (void)s, (void)req, (void)has;
    tt_job_counts jc;
    if (job_counts(x, &jc, out) < 0) return;
    tt_supervisor_status st;
    sup_status(x, &st);
    /* Each GPU's worker, in GPU order: "ready,busy,lost" */
    char states[512];
    size_t ns = 0;
    const char *gs;
    for (int i = 0; x->sup && (gs = tt_supervisor_gpu_state(x->sup, i)) && ns + 16 < sizeof states; i++)
        ns += (size_t)snprintf(states + ns, sizeof states - ns, "%s%s", i ? "," : "", gs);
    tt_fleet_ident id;
    tt_fleet_table_ident(x, &id);
    tt_buf_printf(out,
                  "OK version=%s uptime_s=%llu gpus=%d rev=%s gpu=%s records=%zu jobs_queued=%lld "
                  "jobs_running=%lld tuning=%s reason=%s gpus_lost=%d models=%d gpu_states=%s "
                  "stale=%lld table=%s last_import=%lld\n",
                  TT_VERSION_STRING, (unsigned long long)((tt_hctx_now_ms() - x->started_ms) / 1000), st.gpus,
                  x->rev, x->gpu[0] ? x->gpu : "none", tt_index_count(x->index), (long long)jc.queued,
                  (long long)jc.running, tt_tuning_state_name(st.state), st.reason, st.lost, st.models,
                  ns ? states : "none", (long long)id.stale, id.checksum, (long long)id.last_import_at);
}

static void h_stats(tt_hctx *x, tt_session *s, const void *req, uint32_t has, tt_buf *out) {
    const req_stats *r = req;
    (void)s, (void)has;
    tt_job_counts jc;
    if (job_counts(x, &jc, out) < 0) return;
    tt_supervisor_status st;
    sup_status(x, &st);
    tt_fleet_ident id;
    tt_fleet_table_ident(x, &id);
    tt_stats_gauges g = {
        .stale = id.stale,
        .last_import_at = id.last_import_at,
        .table = id.checksum,
        .conn_open = x->conn_open ? *x->conn_open : 0,
        .records = (int64_t)tt_index_count(x->index),
        .uptime_s = (int64_t)((tt_hctx_now_ms() - x->started_ms) / 1000),
        .jobs = {jc.queued, jc.running, jc.done, jc.failed, jc.cancelled},
        .gpus = st.gpus,
        .rev = x->rev,
        .start_time_s = x->start_time_s,
        .store = x->store,
    };
    tt_buf body;
    tt_buf_init(&body);
    int lines = tt_stats_format(x->stats, &g, r->prometheus, &body);
    /* A body cut short by a failed allocation is refused whole rather than
     * sent with a count the client cannot check. */
    if (body.oom) ERR(INTERNAL, "out of memory building STATS");
    else {
        tt_buf_printf(out, "OK lines=%d\n", lines);
        tt_buf_append(out, body.data, body.len);
    }
    tt_buf_free(&body);
}

/* Queues keys[0..*n) as one job. On a node of mixed GPU models each key
 * without gpu= is queued once per model, so every model gets its own
 * winner (a key without gpu= is otherwise measured by whichever GPU claims
 * it first). *keys may be replaced (the caller frees it). */
static int job_create_per_model(tt_hctx *x, tt_key_v2 **keys, int *n, tt_job_mode mode, int32_t batch,
                                int32_t heads, int64_t *id) {
    char fps[8][TT_ID_MAX];
    int models = x->sup ? tt_supervisor_models(x->sup, fps, 8) : 0, open = 0;
    for (int i = 0; i < *n; i++) open += (*keys)[i].gpu[0] == '\0';
    if (models > 1 && open > 0) {
        if ((long long)*n + (long long)open * (models - 1) > JOB_KEYS_MAX) return TT_ERR_RANGE;
        tt_key_v2 *k2 = calloc((size_t)*n + (size_t)open * (size_t)(models - 1), sizeof *k2);
        if (!k2) return TT_ERR_NOMEM;
        int k = 0;
        for (int i = 0; i < *n; i++) {
            if ((*keys)[i].gpu[0]) {
                k2[k++] = (*keys)[i];
                continue;
            }
            for (int g = 0; g < models; g++) {
                k2[k] = (*keys)[i];
                snprintf(k2[k++].gpu, TT_ID_MAX, "%.*s", TT_ID_MAX - 1,
                         fps[g]); /* fingerprints fit: -O3 cannot tell */
            }
        }
        free(*keys);
        *keys = k2;
        *n = k;
    }
    return tt_store_job_create(x->store, *keys, *n, mode, batch, heads, id);
}

/* A new job of keys[0..n) (freed here), each key without gpu= once per GPU
 * model of the node when `per_model`; answers OK job= or ERR. */
static void queue_job(tt_hctx *x, tt_key_v2 *keys, int n, int per_model, int mode, int64_t batch,
                      int64_t heads, const char *what, tt_buf *out) {
    int64_t id;
    tt_job_info info;
    int rc =
        per_model
            ? job_create_per_model(x, &keys, &n, (tt_job_mode)mode, (int32_t)batch, (int32_t)heads, &id)
            : tt_store_job_create(x->store, keys, n, (tt_job_mode)mode, (int32_t)batch, (int32_t)heads, &id);
    free(keys);
    if (rc == TT_ERR_RANGE) {
        ERR(RANGE, "one key per GPU model of this node is over %d keys in one job", JOB_KEYS_MAX);
        return;
    }
    if (rc == TT_ERR_NOMEM) {
        ERR(INTERNAL, "out of memory");
        return;
    }
    if (rc < 0 || tt_store_job_get(x->store, id, &info) < 0) {
        ERR(DB, "%s", tt_store_errmsg(x->store));
        return;
    }
    x->stats->jobs_created++;
    tt_info("queued job %lld: %lld %s, %s", (long long)id, (long long)info.keys, what,
            tt_job_mode_name((tt_job_mode)mode));
    tt_buf_printf(out, "OK job=%lld keys=%lld\n", (long long)id, (long long)info.keys);
    if (x->sup) tt_supervisor_kick(x->sup);
}

/* The keys of a TUNE, or shard i/n of them (keys freed here), as a job. */
static void queue_shard(tt_hctx *x, tt_key_v2 *keys, int n, long long total, const char *shard, int mode,
                        int64_t batch, int64_t heads, tt_buf *out) {
    int shard_i = 1, shard_n = 1;
    char serr[128];
    if (shard && tt_shard_parse(shard, &shard_i, &shard_n, serr, sizeof serr) < 0) {
        free(keys);
        ERR(RANGE, "%s", serr);
        return;
    }
    if (shard_n > 1 && (n = (int)tt_shard_select(keys, (size_t)n, shard_i, shard_n)) == 0) {
        free(keys);
        ERR(RANGE, "shard %d/%d of this grid of %lld keys is empty", shard_i, shard_n, total);
        return;
    }
    queue_job(x, keys, n, 1, mode, batch, heads, "keys", out);
}

static void h_tune(tt_hctx *x, tt_session *s, const void *req, uint32_t has, tt_buf *out) {
    const req_tune *r = req;
    (void)s, (void)has;
    for (int i = 0; i < r->hdim.n; i++)
        if (!tt__head_dim_supported((int32_t)r->hdim.v[i])) {
            ERR(UNSUPPORTED, "unsupported head_dim %lld (32, 64, 96, 128 or 256)", (long long)r->hdim.v[i]);
            return;
        }
    int nca = r->causal.n ? r->causal.n : 1, nsk = r->seqlen_k.n, ngq = r->group.n ? r->group.n : 1;
    long long total = (long long)r->dtype.n * r->hdim.n * nca * r->seqlen.n * (nsk ? nsk : 1) * ngq;
    if (total > JOB_KEYS_MAX) {
        ERR(RANGE, "%lld keys in one job; at most %d", total, JOB_KEYS_MAX);
        return;
    }
    tt_key_v2 *keys = calloc((size_t)total, sizeof *keys);
    if (!keys) {
        ERR(INTERNAL, "out of memory");
        return;
    }
    int n = 0;
    for (int a = 0; a < r->dtype.n; a++)
        for (int b = 0; b < r->hdim.n; b++)
            for (int e = 0; e < nca; e++)
                for (int f = 0; f < r->seqlen.n; f++)
                    for (int g = 0; g < (nsk ? nsk : 1); g++)
                        for (int q = 0; q < ngq; q++) {
                            tt_key_v2 *k = &keys[n++];
                            k->dtype = (tt_dtype)r->dtype.v[a];
                            k->head_dim = (int32_t)r->hdim.v[b];
                            k->causal = r->causal.n ? (int32_t)r->causal.v[e] : 0;
                            k->seqlen_q = r->seqlen.v[f];
                            k->seqlen_k = nsk ? r->seqlen_k.v[g] : r->seqlen.v[f];
                            k->group = r->group.n ? (int32_t)r->group.v[q] : 1;
                            /* equal problems are one key (the store drops
                             * a job's repeats) */
                            tt__key_canon(k);
                            memcpy(k->gpu, r->gpu, TT_ID_MAX);
                        }
    queue_shard(x, keys, n, total, r->shard, r->mode, r->batch, r->heads, out);
}

/* TUNE grid=inference: the inference grid (tt__inference_grid,
 * docs/tuning.md). */
static void h_tune_grid(tt_hctx *x, tt_session *s, const void *req, uint32_t has, tt_buf *out) {
    const req_grid *r = req;
    (void)s, (void)has;
    if (strcmp(r->grid, "inference") != 0) {
        ERR(UNSUPPORTED, "grid must be inference");
        return;
    }
    size_t total = tt__inference_grid(NULL, 0);
    tt_key_v2 *keys = calloc(total, sizeof *keys);
    if (!keys) {
        ERR(INTERNAL, "out of memory");
        return;
    }
    tt__inference_grid(keys, total);
    for (size_t i = 0; i < total; i++) memcpy(keys[i].gpu, r->gpu, TT_ID_MAX);
    queue_shard(x, keys, (int)total, (long long)total, r->shard, r->mode, r->batch, r->heads, out);
}

typedef struct jobs_ctx {
    tt_buf body;
    int n;
} jobs_ctx;

static int add_job(void *ud, const tt_job_info *j) {
    jobs_ctx *c = ud;
    tt_buf_printf(&c->body, "job=%lld state=%s keys=%lld done=%lld mode=%s created=%lld failed=%lld\n",
                  (long long)j->id, tt_job_state_name(j->state), (long long)j->keys,
                  (long long)(j->done + j->failed), tt_job_mode_name(j->mode), (long long)j->created_at,
                  (long long)j->failed);
    c->n++;
    return 0;
}

static void h_jobs(tt_hctx *x, tt_session *s, const void *req, uint32_t has, tt_buf *out) {
    const req_jobs *r = req;
    (void)s, (void)has;
    jobs_ctx c;
    tt_buf_init(&c.body);
    c.n = 0;
    if (tt_store_job_list(x->store, (int)r->all, add_job, &c) < 0) {
        ERR(DB, "%s", tt_store_errmsg(x->store));
    } else if (c.body.oom) { /* add_job counted lines that were not added */
        ERR(INTERNAL, "out of memory listing jobs");
    } else {
        tt_buf_printf(out, "OK lines=%d\n", c.n);
        tt_buf_append(out, c.body.data, c.body.len);
    }
    tt_buf_free(&c.body);
}

static void h_cancel(tt_hctx *x, tt_session *s, const void *req, uint32_t has, tt_buf *out) {
    int64_t id = ((const req_job *)req)->job;
    (void)s, (void)has;
    int rc = tt_store_job_cancel(x->store, id);
    if (rc == TT_ERR_NOTFOUND) {
        ERR(NOTFOUND, "no queued or running job %lld", (long long)id);
        return;
    }
    if (rc < 0) {
        ERR(DB, "%s", tt_store_errmsg(x->store));
        return;
    }
    x->stats->jobs_cancelled++;
    tt_info("cancelled job %lld", (long long)id);
    tt_buf_printf(out, "OK job=%lld state=cancelled\n", (long long)id);
    if (x->sup) tt_supervisor_kick(x->sup); /* a key held across a worker restart is dropped now */
}

typedef struct stale_ctx {
    tt_key_v2 *keys;
    int n, cap;
} stale_ctx;

static int add_stale(void *ud, const tt_key_v2 *key) {
    stale_ctx *c = ud;
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 64;
        tt_key_v2 *k = realloc(c->keys, (size_t)cap * sizeof *k);
        if (!k) return TT_ERR_NOMEM;
        c->keys = k;
        c->cap = cap;
    }
    c->keys[c->n++] = *key;
    return c->n >= JOB_KEYS_MAX ? 1 : 0;
}

/* TUNE stale=1: a job of every key whose winner is from another kernel
 * revision than the workers' (tt_store_stale_keys), for the daemon's GPU
 * model (or gpu=). */
static void h_tune_stale(tt_hctx *x, tt_session *s, const void *req, uint32_t has, tt_buf *out) {
    const req_stale *r = req;
    (void)s, (void)has;
    stale_ctx c = {NULL, 0, 0};
    int rc = tt_store_stale_keys(x->store, x->rev, r->gpu[0] ? r->gpu : x->gpu, add_stale, &c);
    if (rc < 0) {
        free(c.keys);
        ERR(DB, "%s", rc == TT_ERR_NOMEM ? "out of memory" : tt_store_errmsg(x->store));
        return;
    }
    if (c.n == 0) {
        free(c.keys);
        ERR(NOTFOUND, "no stale keys: every tuned key is for kernel revision %s", x->rev);
        return;
    }
    queue_job(x, c.keys, c.n, 0, r->mode, r->batch, r->heads, "stale keys", out);
}

typedef struct progress_ctx {
    tt_hctx *x;
    tt_buf body;
    int n;
    int64_t measured, first_claim;
    double w_done, w_left; /* keys weighted by their cost, for the ETA */
    double best_tflops;    /* the fastest winner among the job's keys */
    char best_key[160], best_cfg[TT_CONFIG_TEXT_MAX];
} progress_ctx;

/* A key's share of a job's time: its attention work plus a fixed part
 * (compiles, checks, launch overheads dominate keys below ~4096). */
static double key_weight(const tt_key_v2 *k) {
    double work = (double)k->seqlen_q * (double)k->seqlen_k * (k->causal ? 0.5 : 1.0);
    return work + 4096.0 * 4096.0;
}

static int add_progress(void *ud, const tt_jkey_progress *p) {
    progress_ctx *c = ud;
    tt_key_v2 k = p->key;
    if (!k.gpu[0]) snprintf(k.gpu, sizeof k.gpu, "%s", c->x->gpu);
    if (!k.rev[0]) snprintf(k.rev, sizeof k.rev, "%s", c->x->rev);
    char keytext[200];
    tt__key_format(&p->key, keytext, sizeof keytext);
    tt_buf_printf(&c->body, "seq=%d state=%s %s measured=%lld", (int)p->seq, tt_jkey_state_name(p->state),
                  keytext, (long long)p->measured);
    tt_lookup_result r;
    if (k.gpu[0] && tt_index_lookup(c->x->index, &k, &r) == 0 && r.match == TT_MATCH_EXACT) {
        char cfg[TT_CONFIG_TEXT_MAX];
        if (tt_config_format(&r.config, cfg, sizeof cfg) >= 0) {
            tt_buf_printf(&c->body, " tflops=%.2f config=%s", r.tflops, cfg);
            if (r.tflops > c->best_tflops) {
                c->best_tflops = r.tflops;
                snprintf(c->best_cfg, sizeof c->best_cfg, "%s", cfg);
                snprintf(c->best_key, sizeof c->best_key, "%s/%d/%s/%lld", tt__dtype_name(k.dtype),
                         (int)k.head_dim, k.causal ? "causal" : "full", (long long)k.seqlen_q);
            }
        }
    }
    tt_buf_append(&c->body, "\n", 1);
    c->n++;
    c->measured += p->measured;
    if (p->claimed_at > 0 && (c->first_claim == 0 || p->claimed_at < c->first_claim))
        c->first_claim = p->claimed_at;
    if (p->state == TT_JKEY_DONE || p->state == TT_JKEY_FAILED) c->w_done += key_weight(&p->key);
    else if (p->state == TT_JKEY_PENDING || p->state == TT_JKEY_RUNNING) c->w_left += key_weight(&p->key);
    return 0;
}

/* JOB job=N: one job's progress for `tiletune watch`: counts, variants
 * measured, elapsed time and an ETA, the best winner so far, then one line
 * per key (docs/protocol.md). */
static void h_job(tt_hctx *x, tt_session *s, const void *req, uint32_t has, tt_buf *out) {
    int64_t id = ((const req_job *)req)->job;
    (void)s, (void)has;
    tt_job_info j;
    int rc = tt_store_job_get(x->store, id, &j);
    if (rc == TT_ERR_NOTFOUND) {
        ERR(NOTFOUND, "no job %lld", (long long)id);
        return;
    }
    progress_ctx c;
    memset(&c, 0, sizeof c);
    c.x = x;
    tt_buf_init(&c.body);
    if (rc < 0 || tt_store_job_progress(x->store, id, x->gpu, x->rev, add_progress, &c) < 0) {
        tt_buf_free(&c.body);
        ERR(DB, "%s", tt_store_errmsg(x->store));
        return;
    }
    if (c.body.oom) { /* a line may be cut in half, the count is off */
        tt_buf_free(&c.body);
        ERR(INTERNAL, "out of memory listing the job's keys");
        return;
    }
    int finished = j.state == TT_JOB_DONE || j.state == TT_JOB_FAILED || j.state == TT_JOB_CANCELLED;
    int64_t now = (int64_t)time(NULL), end = finished ? j.updated_at : now;
    int64_t elapsed = c.first_claim > 0 && end > c.first_claim ? end - c.first_claim : 0;
    /* -1: no estimate yet (nothing finished) or nothing left */
    int64_t eta =
        !finished && c.w_done > 0 && c.w_left > 0 ? (int64_t)(elapsed * c.w_left / c.w_done + 0.5) : -1;
    tt_buf_printf(out,
                  "OK job=%lld state=%s mode=%s keys=%lld done=%lld failed=%lld running=%lld measured=%lld "
                  "created=%lld elapsed_s=%lld eta_s=%lld",
                  (long long)j.id, tt_job_state_name(j.state), tt_job_mode_name(j.mode), (long long)j.keys,
                  (long long)(j.done + j.failed), (long long)j.failed, (long long)j.running,
                  (long long)c.measured, (long long)j.created_at, (long long)elapsed, (long long)eta);
    if (c.best_tflops > 0)
        tt_buf_printf(out, " best_tflops=%.2f best_key=%s best_config=%s", c.best_tflops, c.best_key,
                      c.best_cfg);
    tt_buf_printf(out, " lines=%d\n", c.n);
    tt_buf_append(out, c.body.data, c.body.len);
    tt_buf_free(&c.body);
}

static void h_forget(tt_hctx *x, tt_session *s, const void *req, uint32_t has, tt_buf *out) {
    tt_key_v2 key;
    (void)s;
    if (read_key(x, req, has, &key, out) < 0) return;
    int forgot = 0;
    if (key.gpu[0]) { /* without a GPU nothing can have been tuned */
        int rc = tt_store_forget(x->store, &key, &forgot);
        if (rc < 0 && rc != TT_ERR_NOTFOUND) {
            ERR(DB, "%s", tt_store_errmsg(x->store));
            return;
        }
        tt_index_remove(x->index, &key);
    }
    tt_buf_printf(out, "OK forgot=%d\n", forgot ? 1 : 0);
}

/* ---- dispatch ---------------------------------------------------------------------------- */

typedef void (*handler_fn)(tt_hctx *x, tt_session *s, const void *req, uint32_t has, tt_buf *out);

/* A verb's declaration: who may use it, its fields, its handler. `when`:
 * this entry serves the verb only when that field is present (TUNE
 * stale=1 is another request than TUNE with key lists). */
typedef struct verb_def {
    tt_verb verb;
    const char *name; /* for messages: "TUNE" */
    int admin;
    const char *when;
    const tt__fspec *spec;
    int nspec;
    handler_fn fn;
} verb_def;

static const verb_def verbs[] = {
    {TT_VERB_HELLO, "HELLO", 0, NULL, hello_spec, NSPEC(hello_spec), h_hello},
    {TT_VERB_PING, "PING", 0, NULL, NULL, 0, h_ping},
    {TT_VERB_LOOKUP, "LOOKUP", 0, NULL, key_spec, NSPEC(key_spec), h_lookup},
    {TT_VERB_STATUS, "STATUS", 0, NULL, NULL, 0, h_status},
    {TT_VERB_STATS, "STATS", 0, NULL, stats_spec, NSPEC(stats_spec), h_stats},
    {TT_VERB_TUNE, "TUNE", 1, "stale", stale_spec, NSPEC(stale_spec), h_tune_stale},
    {TT_VERB_TUNE, "TUNE", 1, "grid", grid_spec, NSPEC(grid_spec), h_tune_grid},
    {TT_VERB_TUNE, "TUNE", 1, NULL, tune_spec, NSPEC(tune_spec), h_tune},
    {TT_VERB_JOBS, "JOBS", 0, NULL, jobs_spec, NSPEC(jobs_spec), h_jobs},
    {TT_VERB_CANCEL, "CANCEL", 1, NULL, job_spec, NSPEC(job_spec), h_cancel},
    {TT_VERB_FORGET, "FORGET", 1, NULL, key_spec, NSPEC(key_spec), h_forget},
    {TT_VERB_JOB, "JOB", 0, NULL, job_spec, NSPEC(job_spec), h_job},
};

int tt_handle_line(tt_hctx *x, tt_session *s, char *line, size_t len, tt_buf *out) {
    tt__msg m;
    const char *perr;
    if (len > 0 && line[len - 1] == '\r') len--;
    if (len > TT_LINE_MAX) {
        tt_handle_error(x, out, TT_ERRC_TOOLONG, "request line over %d bytes; closing", TT_LINE_MAX);
        return TT_HANDLE_CLOSE;
    }
    if (s->fleet_body) return tt_handle_import_line(x, s, line, len, out);
    if (tt__proto_parse(line, len, &m, &perr) < 0) {
        x->stats->requests[TT_VERB_OTHER]++;
        tt_handle_error(x, out, TT_ERRC_PROTO, "%s", perr);
        return TT_HANDLE_OK;
    }
    tt_verb v = tt__verb_find(m.verb);
    x->stats->requests[v]++;
    if (v == TT_VERB_IMPORT) return tt_handle_import(x, s, &m, out);
    if (v == TT_VERB_EXPORT) {
        tt_handle_export(x, s, &m, out);
        return TT_HANDLE_OK;
    }
    const verb_def *def = NULL;
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0] && !def; i++)
        if (verbs[i].verb == v && (!verbs[i].when || tt__msg_get(&m, verbs[i].when))) def = &verbs[i];
    if (!def) {
        tt_handle_error(x, out, TT_ERRC_VERB, "unknown verb '%.32s'", m.verb);
        return TT_HANDLE_OK;
    }
    if (def->admin && tt_need_admin(x, s, def->name, out) < 0) return TT_HANDLE_OK;
    union {
        req_hello hello;
        req_key key;
        req_stats stats;
        req_tune tune;
        req_grid grid;
        req_stale stale;
        req_job job;
        req_jobs jobs;
    } req;
    uint32_t has = 0;
    char err[256];
    int rc = tt__fields_decode(&m, def->spec, def->nspec, &req, &has, err, sizeof err);
    if (rc < 0) {
        tt_handle_error(x, out, tt__errc_from_status(rc), "%s", err);
        return TT_HANDLE_OK;
    }
    def->fn(x, s, &req, has, out);
    return TT_HANDLE_OK;
}
