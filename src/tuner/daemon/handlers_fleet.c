#include "tuner/daemon/handlers_fleet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tuner/daemon/conn.h"
#include "tuner/fleet/merge.h"
#include "tuner/fleet/plausible.h"
#include "tuner/fleet/record.h"
#include "tuner/daemon/handlers.h"
#include "common/fail.h"
#include "common/hash.h"
#include "common/key.h"
#include "tuner/daemon/log.h"
#ifdef TT_HAVE_KERNELS
#include "kernels/variants.h"
#endif

/* A SQLite snapshot bigger than this is not sent over the socket. */
#define SNAPSHOT_MAX (256 << 20)
/* Snapshot bytes per base64 body line (4000 characters). */
#define B64_CHUNK 3000

struct tt_fleet_body {
    int64_t remaining; /* body lines still to come */
    int discard;       /* the reply is out already: swallow the body */
    tt_fleet_policy policy;
    int dry_run, strict;
    tt_fleet_rec *recs;
    int64_t *line_of; /* body line number of recs[i] */
    size_t n, cap;
    int64_t line_no;
    tt_buf rejects; /* "record=N reason" lines */
    int64_t nrej;
};

void tt_fleet_body_free(tt_fleet_body *b) {
    if (!b) return;
    free(b->recs);
    free(b->line_of);
    tt_buf_free(&b->rejects);
    free(b);
}

#define ERR(code, ...) tt_handle_error(d, out, TT_ERRC_##code, __VA_ARGS__)

/* The kernel source's rule for a record's config on the GPU the record
 * names: the arch's nominal limits (its family, shared memory) and, where
 * the record has its compile report, the register file (64 K registers a
 * CTA, 255 a thread on every arch the kernels run on). */
static int arch_rule(const tt_record *r, const tt_gpu_info *g, char *err, size_t errlen) {
#ifdef TT_HAVE_KERNELS
    tt__device_limits lim;
    if (tt__device_limits_nominal(g->cc_major * 10 + g->cc_minor, &lim) < 0)
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen, "no kernel family runs on this compute capability");
    int rc = tt__variant_check(&r->config, r->key.head_dim, &lim, err, errlen);
    if (rc < 0) return rc;
    if (r->regs > 255 || (int64_t)r->regs * 32 * r->config.warps > 65536)
        return tt__fail(TT_ERR_RANGE, err, errlen, "%d registers a thread x %d warps do not fit the register file",
                        (int)r->regs, (int)r->config.warps);
    if (r->smem_bytes > lim.smem_optin)
        return tt__fail(TT_ERR_RANGE, err, errlen, "%d bytes of shared memory, the arch allows %d per block",
                        (int)r->smem_bytes, (int)lim.smem_optin);
    return 0;
#else
    (void)r, (void)g, (void)err, (void)errlen;
    return 0;
#endif
}

int tt_fleet_daemon_config_rule(const tt_fleet_rec *f, const char *config_text, char *err, size_t errlen) {
    int rc = tt_fleet_plausible_check(f, config_text, err, errlen);
    if (rc < 0) return rc;
    char why[256];
    if (arch_rule(&f->rec, &f->gpu, why, sizeof why) < 0)
        return tt__fail(TT_ERR_INVAL, err, errlen, "config %s not valid at head_dim %d on %s (sm_%d%d): %s",
                        config_text, (int)f->rec.key.head_dim, f->gpu.name, (int)f->gpu.cc_major,
                        (int)f->gpu.cc_minor, why);
    return 0;
}

static int flag(const tt__msg *m, const char *name, int *out) {
    const char *s = tt__msg_get(m, name);
    int64_t v = 0;
    if (s && tt__parse_i64(s, 0, 1, &v) < 0) return -1;
    *out = (int)v;
    return 0;
}

int tt_handle_import(tt_daemon *d, tt_conn *c, const tt__msg *m, tt_buf *out) {
    static const char *const allowed[] = {"policy", "dry_run", "strict", "lines", NULL};
    tt_fleet_body **slot = tt_conn_fleet_body(c);
    int64_t lines;
    const char *s = tt__msg_get(m, "lines");
    if (!s || tt__parse_i64(s, 0, TT_FLEET_RECORDS_MAX, &lines) < 0) {
        ERR(RANGE, "IMPORT needs lines=N with N in 0..%d (one table record per body line); closing",
            TT_FLEET_RECORDS_MAX);
        return TT_HANDLE_CLOSE;
    }
    tt_fleet_body *b = calloc(1, sizeof *b);
    if (!b) {
        ERR(INTERNAL, "out of memory; closing");
        return TT_HANDLE_CLOSE;
    }
    tt_buf_init(&b->rejects);
    b->remaining = lines;
    b->discard = 1; /* until every check passed */
    char err[256];
    if (!tt_conn_is_admin(c)) {
        tt_info("refused IMPORT from uid %d (not an admin)", (int)tt_conn_peer(c)->uid);
        ERR(PERMISSION, "IMPORT needs root, the daemon's user%s", d->opts.admin_group ? " or the admin group" : "");
    } else if (tt__msg_check(m, allowed, NULL, err, sizeof err) < 0) {
        ERR(FIELD, "%s", err);
    } else if (tt_fleet_policy_parse(tt__msg_get(m, "policy") ? tt__msg_get(m, "policy") : "faster",
                                     &b->policy) < 0) {
        ERR(UNSUPPORTED, "policy must be faster, newer or fill");
    } else if (flag(m, "dry_run", &b->dry_run) < 0 || flag(m, "strict", &b->strict) < 0) {
        ERR(RANGE, "dry_run and strict must be 0 or 1");
    } else {
        b->discard = 0;
    }
    *slot = b;
    if (lines == 0) return tt_handle_import_line(d, c, NULL, 0, out);
    return TT_HANDLE_OK;
}

/* What the merge's callbacks need. */
typedef struct merge_ctx {
    tt_daemon *d;
    tt_fleet_body *b;
} merge_ctx;

static void on_reject(void *ud, size_t i, const char *reason) {
    tt_fleet_body *b = ((merge_ctx *)ud)->b;
    tt_buf_printf(&b->rejects, "record=%lld %s\n", (long long)b->line_of[i], reason);
    b->nrej++;
}

static void on_winner(void *ud, const tt_record *rec) {
    tt_daemon *d = ((merge_ctx *)ud)->d;
    if (tt_index_put(d->index, &rec->key, &rec->config, rec->tflops) < 0)
        tt_err("out of memory updating the index after an import");
}

/* The whole body is in: merge it and reply. */
static void finish_import(tt_daemon *d, tt_fleet_body *b, tt_buf *out) {
    tt_fleet_counts n;
    int committed = 0;
    char err[512];
    merge_ctx x = {d, b};
    int64_t parse_rejects = b->nrej;
    tt_fleet_merge_opts o = {
        .policy = b->policy,
        /* strict with a record already refused: count what would have
         * happened, change nothing */
        .dry_run = b->dry_run || (b->strict && parse_rejects > 0),
        .strict = b->strict,
        .local_gpu = tt_daemon_gpu(d),
        .local_rev = tt_daemon_rev(d),
        .on_reject = on_reject,
        .on_winner = on_winner,
        .ud = &x,
    };
    int rc = tt_fleet_merge(d->store, b->recs, b->n, &o, &n, &committed, err, sizeof err);
    if (rc < 0) {
        tt_handle_error(d, out, rc == TT_ERR_NOMEM ? TT_ERRC_INTERNAL : TT_ERRC_DB,
                        "import not merged, nothing changed: %s", err);
        return;
    }
    n.rejected += parse_rejects;
    if (committed) d->last_import_at = (int64_t)time(NULL);
    tt_info("import (%s%s%s): added=%lld replaced=%lld kept=%lld rejected=%lld stale=%lld foreign=%lld%s",
            tt_fleet_policy_name(b->policy), b->dry_run ? ", dry run" : "", b->strict ? ", strict" : "",
            (long long)n.added, (long long)n.replaced, (long long)n.kept, (long long)n.rejected,
            (long long)n.stale, (long long)n.foreign, committed ? "" : " (not committed)");
    /* The merge is done: out of memory for the reasons drops them, never
     * the counts (lines=0, no body, rather than a count the body breaks). */
    int reasons = !b->rejects.oom;
    tt_buf_printf(out,
                  "OK added=%lld replaced=%lld kept=%lld rejected=%lld stale=%lld foreign=%lld "
                  "history=%lld committed=%d lines=%lld\n",
                  (long long)n.added, (long long)n.replaced, (long long)n.kept, (long long)n.rejected,
                  (long long)n.stale, (long long)n.foreign, (long long)n.history, committed,
                  reasons ? (long long)b->nrej : 0LL);
    if (reasons) tt_buf_append(out, b->rejects.data, b->rejects.len);
}

static int grow(tt_fleet_body *b) {
    if (b->n < b->cap) return 0;
    size_t cap = b->cap ? b->cap * 2 : 64;
    tt_fleet_rec *r = realloc(b->recs, cap * sizeof *r);
    if (!r) return -1;
    b->recs = r;
    int64_t *l = realloc(b->line_of, cap * sizeof *l);
    if (!l) return -1;
    b->line_of = l;
    b->cap = cap;
    return 0;
}

int tt_handle_import_line(tt_daemon *d, tt_conn *c, const char *line, size_t len, tt_buf *out) {
    tt_fleet_body **slot = tt_conn_fleet_body(c), *b = *slot;
    if (line) {
        b->remaining--;
        b->line_no++;
        if (!b->discard) {
            char err[512];
            if (grow(b) < 0) {
                /* Cannot keep the record: the import cannot be whole. */
                b->discard = 1;
                ERR(INTERNAL, "out of memory holding the import; nothing changed");
            } else if (tt_fleet_rec_parse(line, len, tt_fleet_daemon_config_rule, (int64_t)time(NULL), &b->recs[b->n], err,
                                          sizeof err) < 0) {
                tt_buf_printf(&b->rejects, "record=%lld %s\n", (long long)b->line_no, err);
                b->nrej++;
            } else {
                b->line_of[b->n++] = b->line_no;
            }
        }
    }
    if (b->remaining > 0) return TT_HANDLE_OK;
    if (!b->discard) finish_import(d, b, out);
    tt_fleet_body_free(b);
    *slot = NULL;
    return TT_HANDLE_OK;
}

/* ---- EXPORT ---------------------------------------------------------------- */

typedef struct export_ctx {
    tt_record *recs;
    tt_fleet_kind *kinds;
    size_t n, cap;
    const char *gpu, *rev; /* filters, NULL: any */
    tt_fleet_kind kind;    /* of the records being collected */
} export_ctx;

static int collect(void *ud, const tt_record *rec) {
    export_ctx *x = ud;
    if ((x->gpu && strcmp(rec->key.gpu, x->gpu) != 0) || (x->rev && strcmp(rec->key.rev, x->rev) != 0))
        return 0;
    if (x->n == x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 256;
        tt_record *r = realloc(x->recs, cap * sizeof *r);
        if (!r) return TT_ERR_NOMEM;
        x->recs = r;
        tt_fleet_kind *k = realloc(x->kinds, cap * sizeof *k);
        if (!k) return TT_ERR_NOMEM;
        x->kinds = k;
        x->cap = cap;
    }
    x->kinds[x->n] = x->kind;
    x->recs[x->n++] = *rec;
    return 0;
}

/* The GPU rows the records name, fetched once each (after the
 * iteration: its callbacks must not call into the store). */
static int gpu_of(tt_daemon *d, const char *fp, tt_gpu_info **cache, size_t *n, tt_gpu_info *out) {
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*cache)[i].fingerprint, fp) == 0) {
            *out = (*cache)[i];
            return 0;
        }
    int rc = tt_store_get_gpu(d->store, fp, out);
    if (rc < 0) return rc;
    tt_gpu_info *g = realloc(*cache, (*n + 1) * sizeof *g);
    if (!g) return TT_ERR_NOMEM;
    *cache = g;
    g[(*n)++] = *out;
    return 0;
}

static void export_records(tt_daemon *d, const char *gpu, const char *rev, int all, tt_buf *out) {
    export_ctx x = {.gpu = gpu, .rev = rev, .kind = TT_FLEET_BEST};
    tt_gpu_info *gpus = NULL;
    size_t ngpus = 0;
    tt_buf body;
    tt_buf_init(&body);
    tt_fleet_rec *f = malloc(sizeof *f);
    char line[TT_FLEET_LINE_MAX + 1];
    int rc = f ? tt_store_each_best(d->store, collect, &x) : TT_ERR_NOMEM;
    if (rc == 0 && all) {
        x.kind = TT_FLEET_MEASUREMENT;
        rc = tt_store_each_measurement(d->store, gpu, collect, &x);
    }
    if (rc < 0) {
        ERR(DB, "export: %s", rc == TT_ERR_NOMEM ? "out of memory" : tt_store_errmsg(d->store));
        goto out;
    }
    for (size_t i = 0; i < x.n; i++) {
        memset(f, 0, sizeof *f);
        f->kind = x.kinds[i];
        f->rec = x.recs[i];
        if ((rc = gpu_of(d, x.recs[i].key.gpu, &gpus, &ngpus, &f->gpu)) < 0 ||
            (rc = tt_fleet_rec_format(f, line, sizeof line)) < 0) {
            ERR(INTERNAL, "export: record %zu cannot be written (%s)", i + 1, tt_strerror(rc));
            goto out;
        }
        tt_buf_append(&body, line, (size_t)rc);
        tt_buf_append(&body, "\n", 1);
    }
    if (body.oom) {
        ERR(INTERNAL, "export: out of memory");
        goto out;
    }
    tt_buf_printf(out, "OK format=json records=%zu lines=%zu\n", x.n, x.n);
    tt_buf_append(out, body.data, body.len);
out:
    tt_buf_free(&body);
    free(f);
    free(gpus);
    free(x.recs);
    free(x.kinds);
}

static void base64_lines(const unsigned char *p, size_t n, tt_buf *out) {
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t at = 0; at < n; at += B64_CHUNK) {
        size_t end = at + B64_CHUNK < n ? at + B64_CHUNK : n;
        char line[B64_CHUNK / 3 * 4 + 8];
        size_t k = 0;
        for (size_t i = at; i < end; i += 3) {
            uint32_t v = (uint32_t)p[i] << 16;
            if (i + 1 < end) v |= (uint32_t)p[i + 1] << 8;
            if (i + 2 < end) v |= p[i + 2];
            line[k++] = a[v >> 18 & 63];
            line[k++] = a[v >> 12 & 63];
            line[k++] = i + 1 < end ? a[v >> 6 & 63] : '=';
            line[k++] = i + 2 < end ? a[v & 63] : '=';
        }
        line[k++] = '\n';
        tt_buf_append(out, line, k);
    }
}

/* A consistent copy of the whole database (VACUUM INTO a file next to
 * it, read back, removed), sent as base64 lines: the daemon never writes
 * where a client says, and the client may not be able to read the state
 * directory. */
static void export_sqlite(tt_daemon *d, tt_buf *out) {
    static unsigned counter;
    char path[4200];
    snprintf(path, sizeof path, "%s.export-%d-%u", d->opts.db_path, (int)getpid(), counter++);
    unsigned char *data = NULL;
    FILE *f = NULL;
    if (tt_store_snapshot(d->store, path) < 0) {
        ERR(DB, "snapshot: %s", tt_store_errmsg(d->store));
        return;
    }
    long size = -1;
    if ((f = fopen(path, "rb")) && fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || size > SNAPSHOT_MAX) {
        if (size > SNAPSHOT_MAX) ERR(RANGE, "the database snapshot is %ld bytes, over %d to send", size, SNAPSHOT_MAX);
        else ERR(DB, "snapshot: cannot read it back");
        goto out;
    }
    rewind(f);
    data = malloc((size_t)size + 1);
    if (!data || fread(data, 1, (size_t)size, f) != (size_t)size) {
        ERR(INTERNAL, "snapshot: cannot read it back");
        goto out;
    }
    size_t lines = ((size_t)size + B64_CHUNK - 1) / B64_CHUNK;
    tt_buf_printf(out, "OK format=sqlite bytes=%ld lines=%zu\n", size, lines);
    base64_lines(data, (size_t)size, out);
out:
    if (f) fclose(f);
    free(data);
    unlink(path);
}

void tt_handle_export(tt_daemon *d, const tt__msg *m, tt_buf *out) {
    static const char *const allowed[] = {"gpu", "rev", "all", "format", NULL};
    char err[256];
    if (tt__msg_check(m, allowed, NULL, err, sizeof err) < 0) {
        ERR(FIELD, "%s", err);
        return;
    }
    const char *gpu = tt__msg_get(m, "gpu"), *rev = tt__msg_get(m, "rev");
    const char *format = tt__msg_get(m, "format");
    int all;
    if ((gpu && !tt__is_hex_id(gpu)) || (rev && !tt__is_hex_id(rev))) {
        ERR(FIELD, "gpu and rev must be 1..32 lower-case hex digits");
        return;
    }
    if (flag(m, "all", &all) < 0) {
        ERR(RANGE, "all must be 0 or 1");
        return;
    }
    if (!format || strcmp(format, "json") == 0) export_records(d, gpu, rev, all, out);
    else if (strcmp(format, "sqlite") == 0 && !gpu && !rev && !all) export_sqlite(d, out);
    else if (strcmp(format, "sqlite") == 0) ERR(FIELD, "format=sqlite copies the whole database: no gpu, rev or all");
    else ERR(UNSUPPORTED, "format must be json or sqlite");
}

/* ---- the table's identity (STATUS, STATS) ------------------------------------ */

typedef struct ident_ctx {
    tt_daemon *d;
    const char *gpu, *rev;
    uint64_t sum;
    int64_t stale;
} ident_ctx;

static void ident_one(void *ud, const tt_key_v2 *key, const tt_config *cfg) {
    ident_ctx *x = ud;
    x->sum = tt_fleet_table_sum_add(x->sum, key, cfg);
    /* stale: this GPU's winner of another revision with none of the
     * current one, which lookups answer with the default */
    if (x->gpu[0] && strcmp(key->gpu, x->gpu) == 0 && strcmp(key->rev, x->rev) != 0) {
        tt_key_v2 k = *key;
        snprintf(k.rev, sizeof k.rev, "%s", x->rev);
        tt_lookup_result r;
        if (tt_index_lookup(x->d->index, &k, &r) == 0 && r.match != TT_MATCH_EXACT) x->stale++;
    }
}

void tt_fleet_table_ident(tt_daemon *d, tt_fleet_ident *out) {
    ident_ctx x = {d, tt_daemon_gpu(d), tt_daemon_rev(d), 0, 0};
    tt_index_each(d->index, ident_one, &x);
    tt__hash_hex(x.sum, out->checksum);
    out->stale = x.stale;
    out->last_import_at = d->last_import_at;
}
