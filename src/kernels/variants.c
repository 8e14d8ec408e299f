#include "kernels/variants.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "kernels/cuda_api.h"
#include "common/key.h"
#include "kernels/family.h"

int tt__device_limits_nominal(int32_t arch, tt__device_limits *out) {
    if (!out) return TT_ERR_INVAL;
    tt__device_limits d = {arch, 0, 0};
    switch (arch) {
    case 80: d.smem_optin = 163 * 1024; d.sm_count = 108; break;
    case 86: case 87: case 89: d.smem_optin = 99 * 1024; break;
    case 90: d.smem_optin = 227 * 1024; d.sm_count = 132; break;
    default:
        if (arch < 80) return TT_ERR_UNSUPPORTED;
        d.smem_optin = 99 * 1024; /* the smallest of sm_80+: safe for unknown parts */
    }
    *out = d;
    return 0;
}

int tt__variant_check(const tt_config *c, int32_t head_dim, const tt__device_limits *dev,
                      char *err, size_t errlen) {
    char msg[160];
    if (tt__config_check_ranges(c, msg, sizeof msg) < 0)
        return tt__fail(TT_ERR_INVAL, err, errlen, "config: %s", msg);
    if (!tt__head_dim_supported(head_dim))
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen, "unsupported head_dim %d", (int)head_dim);
    const tt__family *f = tt__family_of(c->family);
    if (!f) return tt__fail(TT_ERR_INVAL, err, errlen, "family %d has no kernel", (int)c->family);
    int rc = f->check(c, head_dim, err, errlen);
    if (rc < 0) return rc;
    /* A knob the family does not read has one value: two configs that
     * differ only there would be one kernel compiled and timed twice. */
    for (int i = 0; i < tt__knob_count(); i++) {
        const tt__knob *k = tt__knob_at(i);
        if (i == TT__KNOB_family || (f->reads & (1u << i))) continue;
        if (tt__knob_get(k, c) != tt__knob_get(k, &f->pinned))
            return tt__fail(TT_ERR_INVAL, err, errlen, "%s=%d: the %s kernel does not read it, it takes %d",
                            k->name, (int)tt__knob_get(k, c), f->name, (int)tt__knob_get(k, &f->pinned));
    }
    int32_t regs = f->registers(c, head_dim), budget = f->register_budget(c);
    if (regs > budget)
        return tt__fail(TT_ERR_INVAL, err, errlen,
                        "block_m=%d block_n=%d warps=%d%s at head_dim %d: %d accumulator registers a thread "
                        "exceed 255 registers with the rest (the %s kernel's budget: %d)",
                        (int)c->block_m, (int)c->block_n, (int)c->warps, c->q_in_regs ? " q_in_regs" : "",
                        (int)head_dim, (int)regs, f->name, (int)budget);
    if (!dev) return 0;
    if ((rc = tt__family_check_arch(f, dev->arch, err, errlen)) < 0) return rc;
    int64_t smem = f->smem_bytes(c, head_dim);
    if (smem > dev->smem_optin)
        return tt__fail(TT_ERR_RANGE, err, errlen,
                        "needs %lld bytes of shared memory, the device allows %d per block", (long long)smem,
                        (int)dev->smem_optin);
    return 0;
}

/* More stages than K/V tiles buy nothing: prune them for short keys (not
 * a family's minimum, which is no choice). */
static int useful_for_seqlen(const tt__family *f, const tt_config *c, const tt_key *key) {
    if (key->seqlen_k <= 0 || c->stages <= f->stages_min) return 1;
    /* rounded up without the sum that overflows for the largest seqlen_k */
    int64_t tiles = key->seqlen_k / c->block_n + (key->seqlen_k % c->block_n != 0);
    return tiles >= c->stages;
}

/* The program a variant compiles to: its host-only knobs zeroed, every
 * byte that is not a field too (compared bytewise). */
static tt__variant program_of(const tt__variant *v) {
    tt__variant p;
    memset(&p, 0, sizeof p);
    p.config = v->config;
    memset(p.config.reserved, 0, sizeof p.config.reserved);
    const tt__family *f = tt__family_of(v->config.family);
    for (int i = 0; f && i < TT__KNOB_COUNT; i++)
        if (f->host_knobs & (1u << i)) tt__knob_set(tt__knob_at(i), &p.config, 0);
    p.head_dim = v->head_dim;
    p.dtype = v->dtype;
    p.causal = v->causal;
    p.arch = v->arch;
    p.fault = v->fault;
    return p;
}

struct compile_job {
    tt__space_entry *e;
    const tt__jit_opts *jo;
    const tt__device_limits *dev;
};

static void compile_one(size_t i, void *ctx) {
    struct compile_job *job = ctx;
    tt__space_entry *e = &job->e[i];
    tt__cubin *c = NULL;
    int rc = tt__jit_compile(job->jo, &e->variant, &c, e->error, sizeof e->error);
    if (rc < 0) {
        e->status = TT_VARIANT_COMPILE_ERROR;
        return;
    }
    e->report = c->report;
    tt__cubin_free(c);
    /* a stack frame is local memory too: a run-time indexed register array */
    if (!tt__report_clean(&e->report)) e->status = TT_VARIANT_SPILLS;
    else if ((long)e->report.static_smem + e->report.dynamic_smem > job->dev->smem_optin)
        e->status = TT_VARIANT_SMEM;
    else e->status = TT_VARIANT_OK;
}

struct pool {
    size_t n;
    atomic_size_t next;
    void (*fn)(size_t, void *);
    void *ctx;
};

static void *pool_worker(void *arg) {
    struct pool *p = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n) break;
        p->fn(i, p->ctx);
    }
    return NULL;
}

void tt__parallel_for(size_t n, int threads, void (*fn)(size_t i, void *ctx), void *ctx) {
    if (threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        threads = c > 0 ? (int)c : 1;
    }
    if ((size_t)threads > n) threads = (int)n;
    if (threads > 64) threads = 64;
    struct pool p = {n, 0, fn, ctx};
    pthread_t tid[64];
    int started = 0;
    for (int t = 1; t < threads; t++)
        if (pthread_create(&tid[started], NULL, pool_worker, &p) == 0) started++;
    pool_worker(&p); /* the caller works too, so threads that fail to start cost speed only */
    for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
}

_Static_assert(sizeof(tt__family_space) == TT__KNOB_COUNT * sizeof(tt__knob_values),
              "tt__family_space is one tt__knob_values a knob, in knobs.def order");

/* The values a family's space gives knob i: its list for a knob it reads,
 * else the pinned value alone. */
static const int32_t *knob_values(const tt__family *f, int i, int32_t *n, int32_t *one) {
    if (i == TT__KNOB_family) {
        *one = f->id;
        *n = 1;
        return one;
    }
    const tt__knob_values *l = (const tt__knob_values *)((const char *)&f->space + (size_t)i * sizeof *l);
    if ((f->reads & (1u << i)) && l->n > 0) {
        *n = l->n;
        return l->v;
    }
    *one = tt__knob_get(tt__knob_at(i), &f->pinned);
    *n = 1;
    return one;
}

static size_t family_space_size(const tt__family *f) {
    size_t n = 1;
    for (int i = 0; i < TT__KNOB_COUNT; i++) {
        int32_t ni, one;
        knob_values(f, i, &ni, &one);
        n *= (size_t)ni;
    }
    return n;
}

/* The index-th config of the product, knobs.def order, the last knob
 * fastest. */
static void family_space_at(const tt__family *f, size_t index, tt_config *c) {
    memset(c, 0, sizeof *c);
    for (int i = TT__KNOB_COUNT - 1; i >= 0; i--) {
        int32_t ni, one;
        const int32_t *v = knob_values(f, i, &ni, &one);
        tt__knob_set(tt__knob_at(i), c, v[index % (size_t)ni]);
        index /= (size_t)ni;
    }
}

int tt__space_compile(tt__space_entry *e, size_t *n, const tt__device_limits *dev, unsigned flags,
                      const tt__jit_opts *jo, int threads, char *err, size_t errlen) {
    size_t k = *n;
    /* Entries that differ only in knobs no macro carries are one
     * program: the first is compiled, the others take its result. */
    size_t *first = malloc((k ? k : 1) * sizeof *first), m = 0;
    tt__space_entry *uniq = calloc(k ? k : 1, sizeof *uniq);
    if (!first || !uniq) {
        free(first);
        free(uniq);
        return tt__fail(TT_ERR_NOMEM, err, errlen, "out of memory");
    }
    for (size_t i = 0; i < k; i++) {
        tt__variant a = program_of(&e[i].variant);
        size_t j = 0;
        while (j < m) {
            tt__variant b = program_of(&uniq[j].variant);
            if (memcmp(&a, &b, sizeof a) == 0) break;
            j++;
        }
        if (j == m) uniq[m++] = e[i];
        first[i] = j;
    }
    struct compile_job job = {uniq, jo, dev};
    tt__parallel_for(m, threads, compile_one, &job);
    for (size_t i = 0; i < k; i++) {
        const tt__space_entry *u = &uniq[first[i]];
        e[i].status = u->status;
        e[i].report = u->report;
        memcpy(e[i].error, u->error, sizeof e[i].error);
    }
    free(first);
    free(uniq);
    if (!(flags & TT_SPACE_KEEP_INVALID)) {
        size_t kept = 0;
        for (size_t i = 0; i < k; i++)
            if (e[i].status == TT_VARIANT_OK) e[kept++] = e[i];
        k = kept;
    }
    *n = k;
    return 0;
}

int tt__space_enumerate(const tt_key *key, const tt__device_limits *dev, unsigned flags,
                        const tt__jit_opts *jo, int threads, tt__space_entry **out, size_t *n,
                        char *err, size_t errlen) {
    return tt__space_enumerate_group(key, 1, dev, flags, jo, threads, out, n, err, errlen);
}

int tt__space_enumerate_group(const tt_key *key, int32_t group, const tt__device_limits *dev, unsigned flags,
                              const tt__jit_opts *jo, int threads, tt__space_entry **out, size_t *n,
                              char *err, size_t errlen) {
    if (!key || !dev || !out || !n) return tt__fail(TT_ERR_INVAL, err, errlen, "missing argument");
    if (!tt__head_dim_supported(key->head_dim))
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen, "unsupported head_dim %d", (int)key->head_dim);
    if (!tt__dtype_name(key->dtype))
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen, "unsupported dtype %d", (int)key->dtype);
    if (key->causal < 0 || key->causal > 2)
        return tt__fail(TT_ERR_INVAL, err, errlen, "causal %d: 0 (none), 1 (top-left) or 2 (bottom-right)",
                        (int)key->causal);
    size_t cap = 0;
    for (size_t fi = 0; fi < tt__family_count; fi++) cap += family_space_size(tt__families[fi]);
    tt__space_entry *e = calloc(cap ? cap : 1, sizeof *e);
    if (!e) return tt__fail(TT_ERR_NOMEM, err, errlen, "out of memory");
    size_t k = 0;
    for (size_t fi = 0; fi < tt__family_count; fi++) {
        const tt__family *f = tt__families[fi];
        size_t count = key->causal > f->causal_max ? 0 : family_space_size(f);
        for (size_t i = 0; i < count; i++) {
            tt_config c;
            family_space_at(f, i, &c);
            if (tt__variant_check(&c, key->head_dim, dev, NULL, 0) < 0) continue;
            if (!useful_for_seqlen(f, &c, key)) continue;
            if (f->useful && !f->useful(&c, key, group)) continue;
            tt__space_entry *x = &e[k++];
            x->variant.config = c;
            x->variant.head_dim = key->head_dim;
            x->variant.dtype = key->dtype;
            x->variant.causal = key->causal;
            x->variant.arch = dev->arch;
            x->status = TT_VARIANT_UNCHECKED;
        }
    }
    if ((flags & TT_SPACE_COMPILE) && tt__space_compile(e, &k, dev, flags, jo, threads, err, errlen) < 0) {
        free(e);
        return TT_ERR_NOMEM;
    }
    *out = e;
    *n = k;
    return 0;
}
