#include "tuner/fleet/merge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What this import already registered (GPU models, revisions): a table
 * has a handful of each, so a short list beats a hash. */
typedef struct seen {
    char (*ids)[TT_ID_MAX];
    size_t n, cap;
} seen;

static int seen_has(const seen *s, const char *id) {
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->ids[i], id) == 0) return 1;
    return 0;
}

static int seen_add(seen *s, const char *id) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        void *p = realloc(s->ids, cap * sizeof *s->ids);
        if (!p) return TT_ERR_NOMEM;
        s->ids = p;
        s->cap = cap;
    }
    snprintf(s->ids[s->n++], TT_ID_MAX, "%s", id);
    return 0;
}

/* Registers the record's GPU model unless the database knows it. A known
 * fingerprint describing another model is a collision: refused, never
 * merged under the other model's key. Returns 0, 1 (refused: reason in
 * why) or a database failure. */
static int ensure_gpu(tt_store *s, const tt_fleet_rec *f, seen *gpus, char *why, size_t whylen) {
    if (seen_has(gpus, f->gpu.fingerprint)) return 0;
    tt_gpu_info have;
    int rc = tt_store_get_gpu(s, f->gpu.fingerprint, &have);
    if (rc == TT_ERR_NOTFOUND) {
        rc = tt_store_put_gpu(s, &f->gpu);
        if (rc == TT_ERR_INVAL) {
            snprintf(why, whylen, "GPU model not accepted: %s", tt_store_errmsg(s));
            return 1;
        }
    } else if (rc == 0 && (strcmp(have.name, f->gpu.name) != 0 || have.cc_major != f->gpu.cc_major ||
                           have.cc_minor != f->gpu.cc_minor || have.sm_count != f->gpu.sm_count ||
                           (have.mem_bytes >> 20) != (f->gpu.mem_bytes >> 20))) {
        snprintf(why, whylen, "GPU fingerprint %s already names another model here (%s)", f->gpu.fingerprint,
                 have.name);
        return 1;
    }
    if (rc < 0) return rc;
    return seen_add(gpus, f->gpu.fingerprint);
}

static int ensure_rev(tt_store *s, const char *rev, seen *revs) {
    if (seen_has(revs, rev)) return 0;
    int rc = tt_store_put_rev(s, rev, NULL); /* keeps an existing row as it is */
    return rc < 0 ? rc : seen_add(revs, rev);
}

typedef struct keyref {
    const tt_key_v2 *k;
    size_t i;
} keyref;

static int keyref_cmp(const void *pa, const void *pb) {
    const keyref *a = pa, *b = pb;
    int c = strcmp(a->k->gpu, b->k->gpu);
    if (!c) c = strcmp(a->k->rev, b->k->rev);
    if (!c) c = tt_shard_key_cmp(a->k, b->k);
    if (!c) c = a->i < b->i ? -1 : a->i > b->i;
    return c;
}

/* Marks dup[i] for every winner whose key an earlier winner of the same
 * table holds: a table has one winner a key, and which of two a merge
 * kept would otherwise depend on their order in the file. */
static int find_duplicates(const tt_fleet_rec *recs, size_t n, char *dup) {
    keyref *refs = n ? malloc(n * sizeof *refs) : NULL;
    size_t m = 0;
    if (n && !refs) return TT_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        if (recs[i].kind == TT_FLEET_BEST) refs[m++] = (keyref){&recs[i].rec.key, i};
    if (m > 1) qsort(refs, m, sizeof *refs, keyref_cmp);
    for (size_t j = 1; j < m; j++)
        if (keyref_cmp(&(keyref){refs[j - 1].k, 0}, &(keyref){refs[j].k, 0}) == 0) dup[refs[j].i] = 1;
    free(refs);
    return 0;
}

int tt_fleet_merge(tt_store *s, const tt_fleet_rec *recs, size_t n, const tt_fleet_merge_opts *o,
                   tt_fleet_counts *counts, int *committed, char *err, size_t errlen) {
    tt_fleet_counts c;
    memset(&c, 0, sizeof c);
    seen gpus = {0}, revs = {0};
    size_t *changed = n ? malloc(n * sizeof *changed) : NULL;
    char *dup = n ? calloc(n, 1) : NULL;
    size_t nchanged = 0;
    char why[512];
    int rc;
    *committed = 0;
    if (n && (!changed || !dup || find_duplicates(recs, n, dup) < 0)) {
        snprintf(err, errlen, "out of memory");
        free(changed);
        free(dup);
        return TT_ERR_NOMEM;
    }
    if ((rc = tt_store_begin(s)) < 0) {
        snprintf(err, errlen, "%s", tt_store_errmsg(s));
        free(changed);
        free(dup);
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        const tt_fleet_rec *f = &recs[i];
        const tt_record *r = &f->rec;
        if (f->kind != TT_FLEET_BEST) {
            c.history++;
            continue;
        }
        why[0] = '\0';
        if (dup[i]) {
            c.rejected++;
            if (o->on_reject) o->on_reject(o->ud, i, "duplicate key: an earlier record of this table has it");
            continue;
        }
        rc = ensure_gpu(s, f, &gpus, why, sizeof why);
        if (rc == 0) rc = ensure_rev(s, r->key.rev, &revs);
        tt_record cur;
        int have = 0;
        if (rc == 0) {
            rc = tt_store_get_best(s, &r->key, &cur);
            have = rc == 0;
            if (rc == TT_ERR_NOTFOUND) rc = 0;
        }
        int take = 0;
        if (rc == 0) take = !have || (o->policy != TT_POLICY_FILL && tt_fleet_better(r, &cur, o->policy) < 0);
        if (rc == 0 && take) {
            rc = tt_store_put_best(s, r);
            if (rc == TT_ERR_INVAL || rc == TT_ERR_RANGE) {
                snprintf(why, sizeof why, "%s", tt_store_errmsg(s));
                rc = 1;
            }
        }
        if (rc == 1) {
            c.rejected++;
            if (o->on_reject) o->on_reject(o->ud, i, why);
            continue;
        }
        if (rc < 0) {
            snprintf(err, errlen, "record %zu: %s", i + 1, tt_store_errmsg(s));
            goto fail;
        }
        if (!take) c.kept++;
        else {
            if (have) c.replaced++;
            else c.added++;
            changed[nchanged++] = i;
        }
        if (o->local_rev && o->local_rev[0] && strcmp(r->key.rev, o->local_rev) != 0) c.stale++;
        if (o->local_gpu && o->local_gpu[0] && strcmp(r->key.gpu, o->local_gpu) != 0) c.foreign++;
    }
    if (o->dry_run || (o->strict && c.rejected > 0)) {
        tt_store_rollback(s);
    } else {
        if ((rc = tt_store_commit(s)) < 0) {
            snprintf(err, errlen, "commit: %s", tt_store_errmsg(s));
            goto fail;
        }
        *committed = 1;
        for (size_t k = 0; o->on_winner && k < nchanged; k++) o->on_winner(o->ud, &recs[changed[k]].rec);
    }
    *counts = c;
    free(changed);
    free(dup);
    free(gpus.ids);
    free(revs.ids);
    return 0;
fail:
    tt_store_rollback(s);
    free(changed);
    free(dup);
    free(gpus.ids);
    free(revs.ids);
    return rc;
}
