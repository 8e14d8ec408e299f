#include "tuner/daemon/handlers_fleet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

#define ERR(code, ...) tt_handle_error(x, out, TT_ERRC_##code, __VA_ARGS__)

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
        return tt__fail(TT_ERR_RANGE, err, errlen,
                        "%d registers a thread x %d warps do not fit the register file", (int)r->regs,
                        (int)r->config.warps);
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

static int parse_policy(const char *s, int *out) {
    tt_fleet_policy p;
    if (tt_fleet_policy_parse(s, &p) < 0) return TT_ERR_INVAL;
    *out = (int)p;
    return 0;
}

typedef struct req_import {
    int policy;
    int64_t dry_run, strict, lines;
} req_import;
static const tt__fspec import_spec[] = {
    {"policy", TT_FT_ENUM, 0, 0, 0, TT_POLICY_FASTER, (const char *const[]){"faster, newer or fill", NULL},
     parse_policy, offsetof(req_import, policy)},
    {"dry_run", TT_FT_INT, 0, 0, 1, 0, NULL, NULL, offsetof(req_import, dry_run)},
    {"strict", TT_FT_INT, 0, 0, 1, 0, NULL, NULL, offsetof(req_import, strict)},
    {"lines", TT_FT_INT, 1, 0, TT_FLEET_RECORDS_MAX, 0, NULL, NULL, offsetof(req_import, lines)},
};

int tt_handle_import(tt_hctx *x, tt_session *s, const tt__msg *m, tt_buf *out) {
    int64_t lines;
    /* lines=N first: without it the body that follows cannot be framed */
    const char *ls = tt__msg_get(m, "lines");
    if (!ls || tt__parse_i64(ls, 0, TT_FLEET_RECORDS_MAX, &lines) < 0) {
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
    req_import r;
    uint32_t has;
    char err[256];
    int rc;
    if (tt_need_admin(x, s, "IMPORT", out) < 0) {
        /* answered */
    } else if ((rc = tt__fields_decode(m, import_spec, (int)(sizeof import_spec / sizeof import_spec[0]), &r,
                                       &has, err, sizeof err)) < 0) {
        tt_handle_error(x, out, tt__errc_from_status(rc), "%s", err);
    } else {
        b->policy = (tt_fleet_policy)r.policy;
        b->dry_run = (int)r.dry_run;
        b->strict = (int)r.strict;
        b->discard = 0;
    }
    s->fleet_body = b;
    if (lines == 0) return tt_handle_import_line(x, s, NULL, 0, out);
    return TT_HANDLE_OK;
}

/* What the merge's callbacks need. */
typedef struct merge_ctx {
    tt_hctx *x;
    tt_fleet_body *b;
} merge_ctx;

static void on_reject(void *ud, size_t i, const char *reason) {
    tt_fleet_body *b = ((merge_ctx *)ud)->b;
    tt_buf_printf(&b->rejects, "record=%lld %s\n", (long long)b->line_of[i], reason);
    b->nrej++;
}

static void on_winner(void *ud, const tt_record *rec) {
    tt_hctx *x = ((merge_ctx *)ud)->x;
    if (tt_index_put(x->index, &rec->key, &rec->config, rec->tflops) < 0)
        tt_err("out of memory updating the index after an import");
}

/* The whole body is in: merge it and reply. */
static void finish_import(tt_hctx *x, tt_fleet_body *b, tt_buf *out) {
    tt_fleet_counts n;
    int committed = 0;
    char err[512];
    merge_ctx mx = {x, b};
    int64_t parse_rejects = b->nrej;
    tt_fleet_merge_opts o = {
        .policy = b->policy,
        /* strict with a record already refused: count what would have
         * happened, change nothing */
        .dry_run = b->dry_run || (b->strict && parse_rejects > 0),
        .strict = b->strict,
        .local_gpu = x->gpu,
        .local_rev = x->rev,
        .on_reject = on_reject,
        .on_winner = on_winner,
        .ud = &mx,
    };
    int rc = tt_fleet_merge(x->store, b->recs, b->n, &o, &n, &committed, err, sizeof err);
    if (rc < 0) {
        tt_handle_error(x, out, rc == TT_ERR_NOMEM ? TT_ERRC_INTERNAL : TT_ERRC_DB,
                        "import not merged, nothing changed: %s", err);
        return;
    }
    n.rejected += parse_rejects;
    if (committed) x->last_import_at = (int64_t)time(NULL);
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

int tt_handle_import_line(tt_hctx *x, tt_session *s, const char *line, size_t len, tt_buf *out) {
    tt_fleet_body *b = s->fleet_body;
    if (line) {
        b->remaining--;
        b->line_no++;
        if (!b->discard) {
            char err[512];
            if (grow(b) < 0) {
                /* Cannot keep the record: the import cannot be whole. */
                b->discard = 1;
                ERR(INTERNAL, "out of memory holding the import; nothing changed");
            } else if (tt_fleet_rec_parse(line, len, tt_fleet_daemon_config_rule, (int64_t)time(NULL),
                                          &b->recs[b->n], err, sizeof err) < 0) {
                tt_buf_printf(&b->rejects, "record=%lld %s\n", (long long)b->line_no, err);
                b->nrej++;
            } else {
                b->line_of[b->n++] = b->line_no;
            }
        }
    }
    if (b->remaining > 0) return TT_HANDLE_OK;
    if (!b->discard) finish_import(x, b, out);
    tt_fleet_body_free(b);
    s->fleet_body = NULL;
    return TT_HANDLE_OK;
}

/* ---- the table's identity (STATUS, STATS) ------------------------------------ */

typedef struct ident_ctx {
    tt_hctx *x;
    const char *gpu, *rev;
    uint64_t sum;
    int64_t stale;
} ident_ctx;

static void ident_one(void *ud, const tt_key_v2 *key, const tt_config *cfg) {
    ident_ctx *c = ud;
    c->sum = tt_fleet_table_sum_add(c->sum, key, cfg);
    /* stale: this GPU's winner of another revision with none of the
     * current one, which lookups answer with the default */
    if (c->gpu[0] && strcmp(key->gpu, c->gpu) == 0 && strcmp(key->rev, c->rev) != 0) {
        tt_key_v2 k = *key;
        snprintf(k.rev, sizeof k.rev, "%s", c->rev);
        tt_lookup_result r;
        if (tt_index_lookup(c->x->index, &k, &r) == 0 && r.match != TT_MATCH_EXACT) c->stale++;
    }
}

void tt_fleet_table_ident(tt_hctx *x, tt_fleet_ident *out) {
    ident_ctx c = {x, x->gpu, x->rev, 0, 0};
    tt_index_each(x->index, ident_one, &c);
    tt__hash_hex(c.sum, out->checksum);
    out->stale = c.stale;
    out->last_import_at = x->last_import_at;
}
