#include "tuner/daemon/handlers.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tuner/daemon/conn.h"
#include "tuner/fleet/shard.h"
#include "tuner/daemon/handlers_fleet.h"
#include "common/key.h"
#include "tuner/daemon/log.h"
#include "common/proto.h"

#define LIST_MAX 64     /* values in one TUNE list field */
#define JOB_KEYS_MAX 4096

void tt_handle_error(tt_daemon *d, tt_buf *out, tt_errc code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    d->stats.errors[code]++;
    tt_buf_printf(out, "ERR %s %s\n", tt_errc_name(code), msg);
}

#define ERR(code, ...) tt_handle_error(d, out, TT_ERRC_##code, __VA_ARGS__)

/* Fields of a tuning key, as LOOKUP and FORGET take them. */
static const char *const key_fields[] = {"dtype", "hdim", "causal", "seqlen_q", "seqlen_k", "group", "gpu", "rev", NULL};
static const char *const key_required[] = {"dtype", "hdim", "seqlen_q", NULL};

/* The grammar check says a field is missing or unknown (ERR field); a
 * value that is not a number must say `range`, which tt__key_from_msg
 * cannot tell apart from a missing field, so numbers are checked first. */
static int check_numbers(tt_daemon *d, const tt__msg *m, const char *const *names, tt_buf *out) {
    for (; *names; names++) {
        const char *v = tt__msg_get(m, *names);
        int64_t x;
        if (v && tt__parse_i64(v, INT64_MIN, INT64_MAX, &x) == TT_ERR_INVAL) {
            ERR(RANGE, "%s '%s' is not a number", *names, v);
            return -1;
        }
    }
    return 0;
}

static int check_fields(tt_daemon *d, const tt__msg *m, const char *const *allowed,
                        const char *const *required, tt_buf *out) {
    char err[256];
    if (tt__msg_check(m, allowed, required, err, sizeof err) < 0) {
        ERR(FIELD, "%s", err);
        return -1;
    }
    return 0;
}

/* A key from LOOKUP/FORGET fields with gpu and rev defaulted to the
 * daemon's own. */
static int read_key(tt_daemon *d, const tt__msg *m, tt_key_v2 *key, tt_buf *out) {
    static const char *const numbers[] = {"hdim", "causal", "seqlen_q", "seqlen_k", "group", NULL};
    char err[256];
    if (check_fields(d, m, key_fields, key_required, out) < 0 || check_numbers(d, m, numbers, out) < 0)
        return -1;
    int rc = tt__key_from_msg(m, key, err, sizeof err);
    if (rc < 0) {
        tt_handle_error(d, out, tt_errc_from_status(rc), "%s", err);
        return -1;
    }
    if (!key->gpu[0]) snprintf(key->gpu, sizeof key->gpu, "%s", tt_daemon_gpu(d));
    if (!key->rev[0]) snprintf(key->rev, sizeof key->rev, "%s", tt_daemon_rev(d));
    return 0;
}

static int need_admin(tt_daemon *d, tt_conn *c, const char *verb, tt_buf *out) {
    if (tt_conn_is_admin(c)) return 0;
    const tt_peer *p = tt_conn_peer(c);
    tt_info("refused %s from uid %d (not an admin)", verb, (int)p->uid);
    ERR(PERMISSION, "%s needs root, the daemon's user%s", verb,
        d->opts.admin_group ? " or the admin group" : "");
    return -1;
}

static void h_hello(tt_daemon *d, const tt__msg *m, tt_buf *out) {
    static const char *const allowed[] = {"proto", "client", NULL};
    static const char *const numbers[] = {"proto", NULL};
    if (check_fields(d, m, allowed, NULL, out) < 0 || check_numbers(d, m, numbers, out) < 0) return;
    const char *p = tt__msg_get(m, "proto");
    int64_t v;
    if (p && (tt__parse_i64(p, 0, INT32_MAX, &v) < 0 || v != TT_PROTOCOL_VERSION)) {
        ERR(VERSION, "protocol %s not spoken; this daemon speaks %d", p, TT_PROTOCOL_VERSION);
        return;
    }
    const char *gpu = tt_daemon_gpu(d);
    tt_buf_printf(out, "OK proto=%d server=tiletuned/%s rev=%s gpu=%s\n", TT_PROTOCOL_VERSION,
                  TT_VERSION_STRING, tt_daemon_rev(d), gpu[0] ? gpu : "none");
}

static void h_ping(tt_daemon *d, const tt__msg *m, tt_buf *out) {
    if (check_fields(d, m, NULL, NULL, out) < 0) return;
    tt_buf_append(out, "OK pong\n", 8);
}

static char *put_u64(char *p, uint64_t v) {
    char tmp[24], *t = tmp + sizeof tmp;
    do *--t = (char)('0' + v % 10); while ((v /= 10));
    size_t n = (size_t)(tmp + sizeof tmp - t);
    memcpy(p, t, n);
    return p + n;
}

static void h_lookup(tt_daemon *d, const tt__msg *m, tt_buf *out) {
    tt_key_v2 key;
    if (read_key(d, m, &key, out) < 0) return;
    tt_lookup_result r;
    int rc = tt_index_lookup(d->index, &key, &r);
    if (rc < 0) {
        ERR(UNSUPPORTED, "no config for this key");
        return;
    }
    char cfg[TT_CONFIG_TEXT_MAX];
    if (tt_config_format(&r.config, cfg, sizeof cfg) < 0) {
        ERR(INTERNAL, "config does not format");
        return;
    }
    d->stats.lookups[r.match]++;
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
    if (r.match == TT_MATCH_DEFAULT && tt_index_other_rev(d->index, &key)) p = stpcpy(p, " stale=1");
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

static int job_counts(tt_daemon *d, tt_job_counts *jc, tt_buf *out) {
    if (tt_store_job_counts(d->store, jc) < 0) {
        ERR(DB, "%s", tt_store_errmsg(d->store));
        return -1;
    }
    return 0;
}

static void h_status(tt_daemon *d, const tt__msg *m, tt_buf *out) {
    if (check_fields(d, m, NULL, NULL, out) < 0) return;
    tt_job_counts jc;
    if (job_counts(d, &jc, out) < 0) return;
    tt_supervisor_status st;
    tt_supervisor_get_status(d->sup, &st);
    const char *gpu = tt_daemon_gpu(d);
    /* Each GPU's worker, in GPU order: "ready,busy,lost" */
    char states[512];
    size_t ns = 0;
    const char *gs;
    for (int i = 0; (gs = tt_supervisor_gpu_state(d->sup, i)) && ns + 16 < sizeof states; i++)
        ns += (size_t)snprintf(states + ns, sizeof states - ns, "%s%s", i ? "," : "", gs);
    tt_fleet_ident id;
    tt_fleet_table_ident(d, &id);
    tt_buf_printf(out,
                  "OK version=%s uptime_s=%llu gpus=%d rev=%s gpu=%s records=%zu jobs_queued=%lld "
                  "jobs_running=%lld tuning=%s reason=%s gpus_lost=%d models=%d gpu_states=%s "
                  "stale=%lld table=%s last_import=%lld\n",
                  TT_VERSION_STRING, (unsigned long long)((uv_now(d->loop) - d->started_ms) / 1000),
                  st.gpus, tt_daemon_rev(d), gpu[0] ? gpu : "none", tt_index_count(d->index),
                  (long long)jc.queued, (long long)jc.running, tt_tuning_state_name(st.state),
                  st.reason, st.lost, st.models, ns ? states : "none", (long long)id.stale, id.checksum,
                  (long long)id.last_import_at);
}

static void h_stats(tt_daemon *d, const tt__msg *m, tt_buf *out) {
    static const char *const allowed[] = {"format", NULL};
    if (check_fields(d, m, allowed, NULL, out) < 0) return;
    const char *f = tt__msg_get(m, "format");
    int prom = 0;
    if (f && strcmp(f, "prometheus") == 0) prom = 1;
    else if (f && strcmp(f, "text") != 0) {
        ERR(UNSUPPORTED, "format must be text or prometheus");
        return;
    }
    tt_job_counts jc;
    if (job_counts(d, &jc, out) < 0) return;
    tt_supervisor_status st;
    tt_supervisor_get_status(d->sup, &st);
    tt_fleet_ident id;
    tt_fleet_table_ident(d, &id);
    tt_stats_gauges g = {
        .stale = id.stale,
        .last_import_at = id.last_import_at,
        .table = id.checksum,
        .conn_open = d->conn_open,
        .records = (int64_t)tt_index_count(d->index),
        .uptime_s = (int64_t)((uv_now(d->loop) - d->started_ms) / 1000),
        .jobs = {jc.queued, jc.running, jc.done, jc.failed, jc.cancelled},
        .gpus = st.gpus,
        .rev = tt_daemon_rev(d),
        .start_time_s = d->start_time_s,
        .store = d->store,
    };
    tt_buf body;
    tt_buf_init(&body);
    int lines = tt_stats_format(&d->stats, &g, prom, &body);
    /* A body cut short by a failed allocation is refused whole rather than
     * sent with a count the client cannot check. */
    if (body.oom) ERR(INTERNAL, "out of memory building STATS");
    else {
        tt_buf_printf(out, "OK lines=%d\n", lines);
        tt_buf_append(out, body.data, body.len);
    }
    tt_buf_free(&body);
}

/* A comma-separated list of integers within [min, max]. */
static int parse_list(tt_daemon *d, const char *name, const char *s, int64_t min, int64_t max,
                      int64_t *vals, int *n, tt_buf *out) {
    *n = 0;
    char item[32];
    while (1) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        if (*n == LIST_MAX) {
            ERR(RANGE, "%s has more than %d values", name, LIST_MAX);
            return -1;
        }
        if (len == 0 || len >= sizeof item) {
            ERR(RANGE, "%s has an empty or overlong value", name);
            return -1;
        }
        memcpy(item, s, len);
        item[len] = '\0';
        int rc = tt__parse_i64(item, min, max, &vals[*n]);
        if (rc < 0) {
            ERR(RANGE, "%s value '%s' is %s", name, item,
                rc == TT_ERR_INVAL ? "not a number" : "out of range");
            return -1;
        }
        (*n)++;
        if (!comma) return 0;
        s = comma + 1;
    }
}

/* The options TUNE and TUNE stale=1 share: mode, batch, heads (0 = the
 * worker's rule), gpu. Answers ERR and returns -1 on a bad one. */
static int job_options(tt_daemon *d, const tt__msg *m, tt_buf *out, tt_job_mode *mode, int64_t *batch,
                       int64_t *heads, const char **gpu) {
    const char *s;
    *mode = TT_JOB_EXHAUSTIVE;
    *batch = *heads = 0;
    if ((s = tt__msg_get(m, "mode")) && tt_job_mode_parse(s, mode) < 0) {
        ERR(UNSUPPORTED, "mode must be exhaustive or fast");
        return -1;
    }
    /* 65535: the kernel's grid takes batch in gridDim.z */
    if ((s = tt__msg_get(m, "batch")) && tt__parse_i64(s, 1, 65535, batch) < 0) {
        ERR(RANGE, "batch out of range 1..65535");
        return -1;
    }
    if ((s = tt__msg_get(m, "heads")) && tt__parse_i64(s, 1, 4096, heads) < 0) {
        ERR(RANGE, "heads out of range 1..4096");
        return -1;
    }
    *gpu = tt__msg_get(m, "gpu");
    if (*gpu && !tt__is_hex_id(*gpu)) {
        ERR(FIELD, "gpu must be a hex fingerprint");
        return -1;
    }
    return 0;
}

static void h_tune_stale(tt_daemon *d, const tt__msg *m, tt_buf *out);
static void h_tune_grid(tt_daemon *d, const tt__msg *m, tt_buf *out);
static void queue_keys(tt_daemon *d, tt_key_v2 *keys, int n, long long total, int shard_i, int shard_n,
                       tt_job_mode mode, int64_t batch, int64_t heads, tt_buf *out);

/* Queues keys[0..*n) as one job. On a node of mixed GPU models each key
 * without gpu= is queued once per model, so every model gets its own
 * winner (a key without gpu= is otherwise measured by whichever GPU claims
 * it first). *keys may be replaced (the caller frees it). */
static int job_create_per_model(tt_daemon *d, tt_key_v2 **keys, int *n, tt_job_mode mode, int32_t batch,
                                int32_t heads, int64_t *id) {
    char fps[8][TT_ID_MAX];
    int models = tt_supervisor_models(d->sup, fps, 8), open = 0;
    for (int i = 0; i < *n; i++) open += (*keys)[i].gpu[0] == '\0';
    if (models > 1 && open > 0) {
        if ((long long)*n + (long long)open * (models - 1) > JOB_KEYS_MAX) return TT_ERR_RANGE;
        tt_key_v2 *x = calloc((size_t)*n + (size_t)open * (size_t)(models - 1), sizeof *x);
        if (!x) return TT_ERR_NOMEM;
        int k = 0;
        for (int i = 0; i < *n; i++) {
            if ((*keys)[i].gpu[0]) {
                x[k++] = (*keys)[i];
                continue;
            }
            for (int g = 0; g < models; g++) {
                x[k] = (*keys)[i];
                snprintf(x[k++].gpu, TT_ID_MAX, "%.*s", TT_ID_MAX - 1, fps[g]); /* fingerprints fit: -O3 cannot tell */
            }
        }
        free(*keys);
        *keys = x;
        *n = k;
    }
    return tt_store_job_create(d->store, *keys, *n, mode, batch, heads, id);
}

static void h_tune(tt_daemon *d, tt_conn *c, const tt__msg *m, tt_buf *out) {
    static const char *const allowed[] = {"dtype", "hdim", "causal", "seqlen", "seqlen_k", "group",
                                          "mode",  "batch", "heads", "gpu", "shard", NULL};
    static const char *const required[] = {"dtype", "hdim", "seqlen", NULL};
    static const char *const numbers[] = {"batch", "heads", NULL};
    if (need_admin(d, c, "TUNE", out) < 0) return;
    if (tt__msg_get(m, "stale")) {
        h_tune_stale(d, m, out);
        return;
    }
    if (tt__msg_get(m, "grid")) {
        h_tune_grid(d, m, out);
        return;
    }
    if (check_fields(d, m, allowed, required, out) < 0 || check_numbers(d, m, numbers, out) < 0) return;

    int64_t dt[LIST_MAX], hd[LIST_MAX], ca[LIST_MAX], sq[LIST_MAX], sk[LIST_MAX], gq[LIST_MAX];
    int ndt = 0, nhd, nca = 1, nsq, nsk = 0, ngq = 1;
    const char *s = tt__msg_get(m, "dtype");
    while (s) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        char name[16];
        tt_dtype t;
        if (ndt == LIST_MAX || len == 0 || len >= sizeof name) {
            ERR(RANGE, "bad dtype list");
            return;
        }
        memcpy(name, s, len);
        name[len] = '\0';
        if (tt__dtype_parse(name, &t) < 0) {
            ERR(UNSUPPORTED, "unsupported dtype '%s' (fp16 or bf16)", name);
            return;
        }
        dt[ndt++] = t;
        s = comma ? comma + 1 : NULL;
    }
    if (parse_list(d, "hdim", tt__msg_get(m, "hdim"), 1, 1 << 20, hd, &nhd, out) < 0) return;
    for (int i = 0; i < nhd; i++)
        if (!tt__head_dim_supported((int32_t)hd[i])) {
            ERR(UNSUPPORTED, "unsupported head_dim %lld (32, 64, 96, 128 or 256)", (long long)hd[i]);
            return;
        }
    ca[0] = 0;
    if ((s = tt__msg_get(m, "causal")) && parse_list(d, "causal", s, 0, 2, ca, &nca, out) < 0) return;
    gq[0] = 1;
    if ((s = tt__msg_get(m, "group")) && parse_list(d, "group", s, 1, TT_GROUP_MAX, gq, &ngq, out) < 0) return;
    if (parse_list(d, "seqlen", tt__msg_get(m, "seqlen"), 1, TT_SEQLEN_MAX, sq, &nsq, out) < 0) return;
    if ((s = tt__msg_get(m, "seqlen_k")) &&
        parse_list(d, "seqlen_k", s, 1, TT_SEQLEN_MAX, sk, &nsk, out) < 0)
        return;
    tt_job_mode mode;
    int64_t batch, heads;
    const char *gpu;
    if (job_options(d, m, out, &mode, &batch, &heads, &gpu) < 0) return;
    int shard_i = 1, shard_n = 1;
    char serr[128];
    if ((s = tt__msg_get(m, "shard")) && tt_shard_parse(s, &shard_i, &shard_n, serr, sizeof serr) < 0) {
        ERR(RANGE, "%s", serr);
        return;
    }
    long long total = (long long)ndt * nhd * nca * nsq * (nsk ? nsk : 1) * ngq;
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
    for (int a = 0; a < ndt; a++)
        for (int b = 0; b < nhd; b++)
            for (int e = 0; e < nca; e++)
                for (int f = 0; f < nsq; f++)
                    for (int g = 0; g < (nsk ? nsk : 1); g++)
                        for (int x = 0; x < ngq; x++) {
                            tt_key_v2 *k = &keys[n++];
                            k->dtype = (tt_dtype)dt[a];
                            k->head_dim = (int32_t)hd[b];
                            k->causal = (int32_t)ca[e];
                            k->seqlen_q = sq[f];
                            k->seqlen_k = nsk ? sk[g] : sq[f];
                            k->group = (int32_t)gq[x];
                            /* equal problems are one key (the store drops
                             * a job's repeats) */
                            tt__key_canon(k);
                            if (gpu) snprintf(k->gpu, sizeof k->gpu, "%s", gpu);
                        }
    queue_keys(d, keys, n, total, shard_i, shard_n, mode, batch, heads, out);
}

/* Queues a job of keys[0..n) (freed here), or of shard i/n of them. */
static void queue_keys(tt_daemon *d, tt_key_v2 *keys, int n, long long total, int shard_i, int shard_n,
                       tt_job_mode mode, int64_t batch, int64_t heads, tt_buf *out) {
    if (shard_n > 1 && (n = (int)tt_shard_select(keys, (size_t)n, shard_i, shard_n)) == 0) {
        free(keys);
        ERR(RANGE, "shard %d/%d of this grid of %lld keys is empty", shard_i, shard_n, total);
        return;
    }
    int64_t id;
    tt_job_info info;
    int rc = job_create_per_model(d, &keys, &n, mode, (int32_t)batch, (int32_t)heads, &id);
    free(keys);
    if (rc == TT_ERR_RANGE) {
        ERR(RANGE, "one key per GPU model of this node is over %d keys in one job", JOB_KEYS_MAX);
        return;
    }
    if (rc == TT_ERR_NOMEM) {
        ERR(INTERNAL, "out of memory");
        return;
    }
    if (rc < 0 || tt_store_job_get(d->store, id, &info) < 0) {
        ERR(DB, "%s", tt_store_errmsg(d->store));
        return;
    }
    d->stats.jobs_created++;
    tt_info("queued job %lld: %lld keys, %s", (long long)id, (long long)info.keys, tt_job_mode_name(mode));
    tt_buf_printf(out, "OK job=%lld keys=%lld\n", (long long)id, (long long)info.keys);
    tt_supervisor_kick(d->sup);
}

/* TUNE grid=inference: the inference grid (tt__inference_grid,
 * docs/tuning.md). */
static void h_tune_grid(tt_daemon *d, const tt__msg *m, tt_buf *out) {
    static const char *const allowed[] = {"grid", "mode", "batch", "heads", "gpu", "shard", NULL};
    static const char *const numbers[] = {"batch", "heads", NULL};
    if (check_fields(d, m, allowed, NULL, out) < 0 || check_numbers(d, m, numbers, out) < 0) return;
    if (strcmp(tt__msg_get(m, "grid"), "inference") != 0) {
        ERR(UNSUPPORTED, "grid must be inference");
        return;
    }
    tt_job_mode mode;
    int64_t batch, heads;
    const char *gpu, *s;
    if (job_options(d, m, out, &mode, &batch, &heads, &gpu) < 0) return;
    int shard_i = 1, shard_n = 1;
    char serr[128];
    if ((s = tt__msg_get(m, "shard")) && tt_shard_parse(s, &shard_i, &shard_n, serr, sizeof serr) < 0) {
        ERR(RANGE, "%s", serr);
        return;
    }
    size_t total = tt__inference_grid(NULL, 0);
    tt_key_v2 *keys = calloc(total, sizeof *keys);
    if (!keys) {
        ERR(INTERNAL, "out of memory");
        return;
    }
    tt__inference_grid(keys, total);
    for (size_t i = 0; gpu && i < total; i++) snprintf(keys[i].gpu, sizeof keys[i].gpu, "%s", gpu);
    queue_keys(d, keys, (int)total, (long long)total, shard_i, shard_n, mode, batch, heads, out);
}

typedef struct jobs_ctx {
    tt_buf body;
    int n;
} jobs_ctx;

static int add_job(void *ud, const tt_job_info *j) {
    jobs_ctx *x = ud;
    tt_buf_printf(&x->body, "job=%lld state=%s keys=%lld done=%lld mode=%s created=%lld failed=%lld\n",
                  (long long)j->id, tt_job_state_name(j->state), (long long)j->keys,
                  (long long)(j->done + j->failed), tt_job_mode_name(j->mode),
                  (long long)j->created_at, (long long)j->failed);
    x->n++;
    return 0;
}

static void h_jobs(tt_daemon *d, const tt__msg *m, tt_buf *out) {
    static const char *const allowed[] = {"all", NULL};
    static const char *const numbers[] = {"all", NULL};
    if (check_fields(d, m, allowed, NULL, out) < 0 || check_numbers(d, m, numbers, out) < 0) return;
    int64_t all = 0;
    const char *s = tt__msg_get(m, "all");
    if (s && tt__parse_i64(s, 0, 1, &all) < 0) {
        ERR(RANGE, "all must be 0 or 1");
        return;
    }
    jobs_ctx x;
    tt_buf_init(&x.body);
    x.n = 0;
    if (tt_store_job_list(d->store, (int)all, add_job, &x) < 0) {
        ERR(DB, "%s", tt_store_errmsg(d->store));
    } else if (x.body.oom) { /* add_job counted lines that were not added */
        ERR(INTERNAL, "out of memory listing jobs");
    } else {
        tt_buf_printf(out, "OK lines=%d\n", x.n);
        tt_buf_append(out, x.body.data, x.body.len);
    }
    tt_buf_free(&x.body);
}

static void h_cancel(tt_daemon *d, tt_conn *c, const tt__msg *m, tt_buf *out) {
    static const char *const allowed[] = {"job", NULL};
    static const char *const numbers[] = {"job", NULL};
    if (need_admin(d, c, "CANCEL", out) < 0) return;
    if (check_fields(d, m, allowed, allowed, out) < 0 || check_numbers(d, m, numbers, out) < 0) return;
    int64_t id;
    if (tt__parse_i64(tt__msg_get(m, "job"), 1, INT64_MAX, &id) < 0) {
        ERR(RANGE, "job must be a positive number");
        return;
    }
    int rc = tt_store_job_cancel(d->store, id);
    if (rc == TT_ERR_NOTFOUND) {
        ERR(NOTFOUND, "no queued or running job %lld", (long long)id);
        return;
    }
    if (rc < 0) {
        ERR(DB, "%s", tt_store_errmsg(d->store));
        return;
    }
    d->stats.jobs_cancelled++;
    tt_info("cancelled job %lld", (long long)id);
    tt_buf_printf(out, "OK job=%lld state=cancelled\n", (long long)id);
    tt_supervisor_kick(d->sup); /* a key held across a worker restart is dropped now */
}

/* ---- issue 4: TUNE stale=1 and the JOB progress verb ------------------------------- */

typedef struct stale_ctx {
    tt_key_v2 *keys;
    int n, cap;
} stale_ctx;

static int add_stale(void *ud, const tt_key_v2 *key) {
    stale_ctx *x = ud;
    if (x->n == x->cap) {
        int cap = x->cap ? 2 * x->cap : 64;
        tt_key_v2 *k = realloc(x->keys, (size_t)cap * sizeof *k);
        if (!k) return TT_ERR_NOMEM;
        x->keys = k;
        x->cap = cap;
    }
    x->keys[x->n++] = *key;
    return x->n >= JOB_KEYS_MAX ? 1 : 0;
}

/* TUNE stale=1: a job of every key whose winner is from another kernel
 * revision than the workers' (tt_store_stale_keys), for the daemon's GPU
 * model (or gpu=). */
static void h_tune_stale(tt_daemon *d, const tt__msg *m, tt_buf *out) {
    static const char *const allowed[] = {"stale", "mode", "batch", "heads", "gpu", NULL};
    static const char *const numbers[] = {"stale", "batch", "heads", NULL};
    if (check_fields(d, m, allowed, NULL, out) < 0 || check_numbers(d, m, numbers, out) < 0) return;
    int64_t v, batch, heads;
    const char *s = tt__msg_get(m, "stale");
    if (tt__parse_i64(s, 1, 1, &v) < 0) {
        ERR(RANGE, "stale must be 1");
        return;
    }
    tt_job_mode mode;
    const char *gpu;
    if (job_options(d, m, out, &mode, &batch, &heads, &gpu) < 0) return;
    const char *rev = tt_daemon_rev(d);
    stale_ctx x = {NULL, 0, 0};
    int rc = tt_store_stale_keys(d->store, rev, gpu ? gpu : tt_daemon_gpu(d), add_stale, &x);
    if (rc < 0) {
        free(x.keys);
        ERR(DB, "%s", rc == TT_ERR_NOMEM ? "out of memory" : tt_store_errmsg(d->store));
        return;
    }
    if (x.n == 0) {
        free(x.keys);
        ERR(NOTFOUND, "no stale keys: every tuned key is for kernel revision %s", rev);
        return;
    }
    int64_t id;
    tt_job_info info;
    rc = tt_store_job_create(d->store, x.keys, x.n, mode, (int32_t)batch, (int32_t)heads, &id);
    free(x.keys);
    if (rc < 0 || tt_store_job_get(d->store, id, &info) < 0) {
        ERR(DB, "%s", tt_store_errmsg(d->store));
        return;
    }
    d->stats.jobs_created++;
    tt_info("queued job %lld: %lld stale keys, %s", (long long)id, (long long)info.keys, tt_job_mode_name(mode));
    tt_buf_printf(out, "OK job=%lld keys=%lld\n", (long long)id, (long long)info.keys);
    tt_supervisor_kick(d->sup);
}

typedef struct progress_ctx {
    tt_daemon *d;
    tt_buf body;
    int n;
    int64_t measured, first_claim;
    double w_done, w_left;  /* keys weighted by their cost, for the ETA */
    double best_tflops;     /* the fastest winner among the job's keys */
    char best_key[160], best_cfg[TT_CONFIG_TEXT_MAX];
} progress_ctx;

/* A key's share of a job's time: its attention work plus a fixed part
 * (compiles, checks, launch overheads dominate keys below ~4096). */
static double key_weight(const tt_key_v2 *k) {
    double work = (double)k->seqlen_q * (double)k->seqlen_k * (k->causal ? 0.5 : 1.0);
    return work + 4096.0 * 4096.0;
}

static int add_progress(void *ud, const tt_jkey_progress *p) {
    progress_ctx *x = ud;
    tt_key_v2 k = p->key;
    if (!k.gpu[0]) snprintf(k.gpu, sizeof k.gpu, "%s", tt_daemon_gpu(x->d));
    if (!k.rev[0]) snprintf(k.rev, sizeof k.rev, "%s", tt_daemon_rev(x->d));
    char keytext[200];
    tt__key_format(&p->key, keytext, sizeof keytext);
    tt_buf_printf(&x->body, "seq=%d state=%s %s measured=%lld", (int)p->seq, tt_jkey_state_name(p->state),
                  keytext, (long long)p->measured);
    tt_lookup_result r;
    if (k.gpu[0] && tt_index_lookup(x->d->index, &k, &r) == 0 && r.match == TT_MATCH_EXACT) {
        char cfg[TT_CONFIG_TEXT_MAX];
        if (tt_config_format(&r.config, cfg, sizeof cfg) >= 0) {
            tt_buf_printf(&x->body, " tflops=%.2f config=%s", r.tflops, cfg);
            if (r.tflops > x->best_tflops) {
                x->best_tflops = r.tflops;
                snprintf(x->best_cfg, sizeof x->best_cfg, "%s", cfg);
                snprintf(x->best_key, sizeof x->best_key, "%s/%d/%s/%lld", tt__dtype_name(k.dtype),
                         (int)k.head_dim, k.causal ? "causal" : "full", (long long)k.seqlen_q);
            }
        }
    }
    tt_buf_append(&x->body, "\n", 1);
    x->n++;
    x->measured += p->measured;
    if (p->claimed_at > 0 && (x->first_claim == 0 || p->claimed_at < x->first_claim)) x->first_claim = p->claimed_at;
    if (p->state == TT_JKEY_DONE || p->state == TT_JKEY_FAILED) x->w_done += key_weight(&p->key);
    else if (p->state == TT_JKEY_PENDING || p->state == TT_JKEY_RUNNING) x->w_left += key_weight(&p->key);
    return 0;
}

/* JOB job=N: one job's progress for `tiletune watch`: counts, variants
 * measured, elapsed time and an ETA, the best winner so far, then one line
 * per key (docs/protocol.md). */
static void h_job(tt_daemon *d, const tt__msg *m, tt_buf *out) {
    static const char *const allowed[] = {"job", NULL};
    if (check_fields(d, m, allowed, allowed, out) < 0 || check_numbers(d, m, allowed, out) < 0) return;
    int64_t id;
    if (tt__parse_i64(tt__msg_get(m, "job"), 1, INT64_MAX, &id) < 0) {
        ERR(RANGE, "job must be a positive number");
        return;
    }
    tt_job_info j;
    int rc = tt_store_job_get(d->store, id, &j);
    if (rc == TT_ERR_NOTFOUND) {
        ERR(NOTFOUND, "no job %lld", (long long)id);
        return;
    }
    progress_ctx x;
    memset(&x, 0, sizeof x);
    x.d = d;
    tt_buf_init(&x.body);
    if (rc < 0 || tt_store_job_progress(d->store, id, tt_daemon_gpu(d), tt_daemon_rev(d), add_progress, &x) < 0) {
        tt_buf_free(&x.body);
        ERR(DB, "%s", tt_store_errmsg(d->store));
        return;
    }
    if (x.body.oom) { /* a line may be cut in half, the count is off */
        tt_buf_free(&x.body);
        ERR(INTERNAL, "out of memory listing the job's keys");
        return;
    }
    int finished = j.state == TT_JOB_DONE || j.state == TT_JOB_FAILED || j.state == TT_JOB_CANCELLED;
    int64_t now = (int64_t)time(NULL), end = finished ? j.updated_at : now;
    int64_t elapsed = x.first_claim > 0 && end > x.first_claim ? end - x.first_claim : 0;
    /* -1: no estimate yet (nothing finished) or nothing left */
    int64_t eta = !finished && x.w_done > 0 && x.w_left > 0 ? (int64_t)(elapsed * x.w_left / x.w_done + 0.5) : -1;
    tt_buf_printf(out, "OK job=%lld state=%s mode=%s keys=%lld done=%lld failed=%lld running=%lld measured=%lld "
                       "created=%lld elapsed_s=%lld eta_s=%lld",
                  (long long)j.id, tt_job_state_name(j.state), tt_job_mode_name(j.mode), (long long)j.keys,
                  (long long)(j.done + j.failed), (long long)j.failed, (long long)j.running, (long long)x.measured,
                  (long long)j.created_at, (long long)elapsed, (long long)eta);
    if (x.best_tflops > 0)
        tt_buf_printf(out, " best_tflops=%.2f best_key=%s best_config=%s", x.best_tflops, x.best_key, x.best_cfg);
    tt_buf_printf(out, " lines=%d\n", x.n);
    tt_buf_append(out, x.body.data, x.body.len);
    tt_buf_free(&x.body);
}

static void h_forget(tt_daemon *d, tt_conn *c, const tt__msg *m, tt_buf *out) {
    if (need_admin(d, c, "FORGET", out) < 0) return;
    tt_key_v2 key;
    if (read_key(d, m, &key, out) < 0) return;
    int forgot = 0;
    if (key.gpu[0]) { /* without a GPU nothing can have been tuned */
        int rc = tt_store_forget(d->store, &key, &forgot);
        if (rc < 0 && rc != TT_ERR_NOTFOUND) {
            ERR(DB, "%s", tt_store_errmsg(d->store));
            return;
        }
        tt_index_remove(d->index, &key);
    }
    tt_buf_printf(out, "OK forgot=%d\n", forgot ? 1 : 0);
}

int tt_handle_line(tt_daemon *d, tt_conn *c, char *line, size_t len, tt_buf *out) {
    tt__msg m;
    const char *perr;
    if (len > 0 && line[len - 1] == '\r') len--;
    if (len > TT_LINE_MAX) {
        tt_handle_error(d, out, TT_ERRC_TOOLONG, "request line over %d bytes; closing", TT_LINE_MAX);
        return TT_HANDLE_CLOSE;
    }
    if (*tt_conn_fleet_body(c)) return tt_handle_import_line(d, c, line, len, out);
    if (tt__proto_parse(line, len, &m, &perr) < 0) {
        d->stats.requests[TT_VERB_OTHER]++;
        tt_handle_error(d, out, TT_ERRC_PROTO, "%s", perr);
        return TT_HANDLE_OK;
    }
    tt_verb v = tt_verb_find(m.verb);
    d->stats.requests[v]++;
    switch (v) {
    case TT_VERB_HELLO: h_hello(d, &m, out); break;
    case TT_VERB_PING: h_ping(d, &m, out); break;
    case TT_VERB_LOOKUP: h_lookup(d, &m, out); break;
    case TT_VERB_STATUS: h_status(d, &m, out); break;
    case TT_VERB_STATS: h_stats(d, &m, out); break;
    case TT_VERB_TUNE: h_tune(d, c, &m, out); break;
    case TT_VERB_JOBS: h_jobs(d, &m, out); break;
    case TT_VERB_CANCEL: h_cancel(d, c, &m, out); break;
    case TT_VERB_FORGET: h_forget(d, c, &m, out); break;
    case TT_VERB_IMPORT: return tt_handle_import(d, c, &m, out);
    case TT_VERB_EXPORT: tt_handle_export(d, &m, out); break;
    case TT_VERB_JOB: h_job(d, &m, out); break;
    default: tt_handle_error(d, out, TT_ERRC_VERB, "unknown verb '%.32s'", m.verb); break;
    }
    return TT_HANDLE_OK;
}
