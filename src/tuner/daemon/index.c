#include "tuner/daemon/index.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/key.h"

typedef struct entry {
    tt_key_v2 key;
    tt_config cfg;
    double tflops;
    double log_q, log_k, log_g;
    struct group *group;
    size_t group_pos; /* index in group->members */
} entry;

/* The keys one nearest search looks at: same GPU, revision, dtype, head
 * dim, causal and regime. */
typedef struct group {
    tt_key_v2 key; /* group_key(): the group's identity */
    entry **members;
    size_t n, cap;
} group;

/* Open addressing with linear probing and backward-shift deletion, so no
 * tombstones pile up as FORGET and re-tuning churn the table. */
typedef struct table {
    void **slots;
    size_t cap, n; /* cap a power of two */
} table;

struct tt_index {
    table entries;           /* of entry*, by full key */
    table groups;            /* of group*, by group key */
    char (*revs)[TT_ID_MAX]; /* every revision ever put: a handful */
    size_t nrevs;
};

static uint64_t key_hash(const tt_key_v2 *k) {
    uint64_t h = TT_HASH_INIT;
    h = tt__hash_str(h, k->gpu);
    h = tt__hash_str(h, k->rev);
    int32_t small[4] = {(int32_t)k->dtype, k->head_dim, k->causal, k->group};
    h = tt__hash_update(h, small, sizeof small);
    int64_t s[2] = {k->seqlen_q, k->seqlen_k};
    return tt__hash_update(h, s, sizeof s);
}

static int same_key(const tt_key_v2 *a, const tt_key_v2 *b) {
    return a->dtype == b->dtype && a->head_dim == b->head_dim && a->causal == b->causal &&
           a->group == b->group && a->seqlen_q == b->seqlen_q && a->seqlen_k == b->seqlen_k &&
           strcmp(a->gpu, b->gpu) == 0 && strcmp(a->rev, b->rev) == 0;
}

/* A group's identity as a key: its seqlens and GQA group are no part of
 * it, its regime is (kept in seqlen_q, which no real key has at 0). */
static tt_key_v2 group_key(const tt_key_v2 *key) {
    tt_key_v2 g = *key;
    g.seqlen_q = -1 - (int64_t)tt__key_regime(key);
    g.seqlen_k = 0;
    g.group = 0;
    return g;
}

static const tt_key_v2 *slot_key(void *p, int is_entry) {
    return is_entry ? &((entry *)p)->key : &((group *)p)->key;
}

/* The slot of `key`, or of the empty slot where it would go. */
static size_t probe(const table *t, const tt_key_v2 *key, int is_entry) {
    size_t mask = t->cap - 1;
    size_t i = (size_t)key_hash(key) & mask;
    while (t->slots[i]) {
        if (same_key(slot_key(t->slots[i], is_entry), key)) break;
        i = (i + 1) & mask;
    }
    return i;
}

static void *table_get(const table *t, const tt_key_v2 *key, int is_entry) {
    if (!t->cap) return NULL;
    return t->slots[probe(t, key, is_entry)];
}

static int table_insert(table *t, void *item, int is_entry) {
    if ((t->n + 1) * 4 > t->cap * 3) { /* keep the load under 3/4 */
        size_t cap = t->cap ? t->cap * 2 : 64;
        void **old = t->slots;
        size_t oldcap = t->cap;
        t->slots = calloc(cap, sizeof *t->slots);
        if (!t->slots) {
            t->slots = old;
            return TT_ERR_NOMEM;
        }
        t->cap = cap;
        for (size_t i = 0; i < oldcap; i++)
            if (old[i]) t->slots[probe(t, slot_key(old[i], is_entry), is_entry)] = old[i];
        free(old);
    }
    t->slots[probe(t, slot_key(item, is_entry), is_entry)] = item;
    t->n++;
    return 0;
}

static void table_delete(table *t, size_t i, int is_entry) {
    size_t mask = t->cap - 1;
    t->slots[i] = NULL;
    t->n--;
    /* Backward shift: move later members of the run into the hole when
     * their home slot does not lie cyclically in (hole, j]. */
    for (size_t j = (i + 1) & mask; t->slots[j]; j = (j + 1) & mask) {
        size_t home = (size_t)key_hash(slot_key(t->slots[j], is_entry)) & mask;
        int between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!between) {
            t->slots[i] = t->slots[j];
            t->slots[j] = NULL;
            i = j;
        }
    }
}

int tt_index_new(tt_index **out) {
    tt_index *ix = calloc(1, sizeof *ix);
    if (!ix) return TT_ERR_NOMEM;
    *out = ix;
    return 0;
}

void tt_index_free(tt_index *ix) {
    if (!ix) return;
    for (size_t i = 0; i < ix->entries.cap; i++) free(ix->entries.slots[i]);
    for (size_t i = 0; i < ix->groups.cap; i++) {
        group *g = ix->groups.slots[i];
        if (g) free(g->members);
        free(g);
    }
    free(ix->entries.slots);
    free(ix->groups.slots);
    free(ix->revs);
    free(ix);
}

size_t tt_index_count(const tt_index *ix) { return ix->entries.n; }

void tt_index_each(const tt_index *ix, void (*fn)(void *ud, const tt_key_v2 *key, const tt_config *cfg),
                   void *ud) {
    for (size_t i = 0; i < ix->entries.cap; i++) {
        const entry *e = ix->entries.slots[i];
        if (e) fn(ud, &e->key, &e->cfg);
    }
}

int tt_index_other_rev(const tt_index *ix, const tt_key_v2 *key) {
    if (!ix->entries.cap) return 0;
    tt_key_v2 k = *key;
    tt__key_canon(&k);
    for (size_t r = 0; r < ix->nrevs; r++) {
        if (strcmp(ix->revs[r], key->rev) == 0) continue;
        memcpy(k.rev, ix->revs[r], sizeof k.rev);
        if (table_get(&ix->entries, &k, 1)) return 1;
    }
    return 0;
}

int tt_index_put(tt_index *ix, const tt_key_v2 *key_in, const tt_config *cfg, double tflops) {
    if (!ix || !key_in || !cfg || !key_in->gpu[0] || !key_in->rev[0]) return TT_ERR_INVAL;
    tt_key_v2 canon = *key_in, *key = &canon;
    tt__key_canon(key);
    entry *e = table_get(&ix->entries, key, 1);
    if (e) {
        e->cfg = *cfg;
        e->tflops = tflops;
        return 0;
    }
    tt_key_v2 gk = group_key(key);
    group *g = table_get(&ix->groups, &gk, 0);
    int new_group = 0;
    if (!g) {
        size_t r = 0;
        while (r < ix->nrevs && strcmp(ix->revs[r], key->rev) != 0) r++;
        if (r == ix->nrevs) {
            char(*revs)[TT_ID_MAX] = realloc(ix->revs, (r + 1) * sizeof *revs);
            if (!revs) return TT_ERR_NOMEM;
            ix->revs = revs;
            snprintf(revs[ix->nrevs++], TT_ID_MAX, "%.*s", TT_ID_MAX - 1, key->rev);
        }
        if (!(g = calloc(1, sizeof *g))) return TT_ERR_NOMEM;
        g->key = gk;
        new_group = 1;
    }
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 8;
        entry **m = realloc(g->members, cap * sizeof *m);
        if (!m) goto nomem;
        g->members = m;
        g->cap = cap;
    }
    if (!(e = calloc(1, sizeof *e))) goto nomem;
    e->key = *key;
    e->cfg = *cfg;
    e->tflops = tflops;
    e->log_q = log((double)key->seqlen_q);
    e->log_k = log((double)key->seqlen_k);
    e->log_g = log((double)(key->group > 1 ? key->group : 1));
    if (table_insert(&ix->entries, e, 1) < 0) {
        free(e);
        goto nomem;
    }
    if (new_group && table_insert(&ix->groups, g, 0) < 0) {
        table_delete(&ix->entries, probe(&ix->entries, key, 1), 1);
        free(e);
        goto nomem;
    }
    e->group = g;
    e->group_pos = g->n;
    g->members[g->n++] = e;
    return 0;
nomem:
    if (new_group) {
        free(g->members);
        free(g);
    }
    return TT_ERR_NOMEM;
}

int tt_index_remove(tt_index *ix, const tt_key_v2 *key_in) {
    if (!ix->entries.cap) return 0;
    tt_key_v2 canon = *key_in, *key = &canon;
    tt__key_canon(key);
    size_t i = probe(&ix->entries, key, 1);
    entry *e = ix->entries.slots[i];
    if (!e) return 0;
    table_delete(&ix->entries, i, 1);
    group *g = e->group;
    g->members[e->group_pos] = g->members[--g->n];
    g->members[e->group_pos]->group_pos = e->group_pos;
    if (g->n == 0) {
        table_delete(&ix->groups, probe(&ix->groups, &g->key, 0), 0);
        free(g->members);
        free(g);
    }
    free(e);
    return 1;
}

static void answer(const entry *e, tt_match m, tt_lookup_result *out) {
    memset(out, 0, sizeof *out);
    out->config = e->cfg;
    out->match = m;
    out->tflops = e->tflops;
    out->seqlen_q = e->key.seqlen_q;
    out->seqlen_k = e->key.seqlen_k;
    out->group = e->key.group;
}

int tt_index_lookup(const tt_index *ix, const tt_key_v2 *key_in, tt_lookup_result *out) {
    tt_key_v2 canon = *key_in, *key = &canon;
    tt__key_canon(key);
    const entry *e = table_get(&ix->entries, key, 1);
    if (e) {
        answer(e, TT_MATCH_EXACT, out);
        return 0;
    }
    tt_key_v2 gk = group_key(key);
    const group *g = table_get(&ix->groups, &gk, 0);
    if (g && g->n) {
        double lq = log((double)key->seqlen_q), lk = log((double)key->seqlen_k);
        double lg = log((double)(key->group > 1 ? key->group : 1));
        const entry *best = NULL;
        double best_d = 0;
        for (size_t i = 0; i < g->n; i++) {
            const entry *c = g->members[i];
            double d = (c->log_q - lq) * (c->log_q - lq) + (c->log_k - lk) * (c->log_k - lk) +
                       (c->log_g - lg) * (c->log_g - lg);
            /* Distances within rounding are ties: 512 and 2048 are equally
             * near 1024, and the tie must break the same way every time. */
            int tie = best && fabs(d - best_d) <= 1e-9;
            if (!best || (!tie && d < best_d) ||
                (tie && (c->key.seqlen_q < best->key.seqlen_q ||
                         (c->key.seqlen_q == best->key.seqlen_q &&
                          (c->key.seqlen_k < best->key.seqlen_k ||
                           (c->key.seqlen_k == best->key.seqlen_k && c->key.group < best->key.group)))))) {
                best = c;
                best_d = d;
            }
        }
        answer(best, TT_MATCH_NEAREST, out);
        return 0;
    }
    return tt__lookup_default(key, out);
}
