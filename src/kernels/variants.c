#include "kernels/variants.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "kernels/cuda_api.h"
#include "common/key.h"
#include "kernels/family.h"
#include "kernels/pool.h"

int tt__device_limits_nominal(int32_t arch, tt__device_limits *out) {
    if (!out) return TT_ERR_INVAL;
    tt__device_limits d = {.arch = arch};
    switch (arch) {
    /* clang-format off */
    case 80: d.smem_optin = 163 * 1024; d.sm_count = 108; break;
    case 86: case 87: case 89: d.smem_optin = 99 * 1024; break;
    case 90: d.smem_optin = 227 * 1024; d.sm_count = 132; break;
    /* clang-format on */
    default:
        if (arch < 80) return TT_ERR_UNSUPPORTED;
        d.smem_optin = 99 * 1024; /* the smallest of sm_80+: safe for unknown parts */
    }
    *out = d;
    return 0;
}

int tt__variant_check(const tt_config *c, int32_t head_dim, const tt__device_limits *dev, char *err,
                      size_t errlen) {
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

tt__variant_status tt__variant_check_report(const tt__report *r, const tt__device_limits *dev, char *err,
                                            size_t errlen) {
    /* a stack frame is local memory too: a run-time indexed register array */
    if (!tt__report_clean(r)) {
        tt__fail(0, err, errlen, "spills %d bytes, stack frame %d bytes",
                 (int)(r->spill_stores + r->spill_loads), (int)r->stack_frame);
        return TT_VARIANT_SPILLS;
    }
    if ((long)r->static_smem + r->dynamic_smem > dev->smem_optin) {
        tt__fail(0, err, errlen, "shared memory over the device limit");
        return TT_VARIANT_SMEM;
    }
    return TT_VARIANT_OK;
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
    tt__variant *v = malloc((k ? k : 1) * sizeof *v);
    if (!v) return tt__fail(TT_ERR_NOMEM, err, errlen, "out of memory");
    for (size_t i = 0; i < k; i++) v[i] = e[i].variant;
    if (threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        threads = c > 0 ? (int)c : 1;
    }
    /* the caller compiles too: one thread fewer */
    tt__pool_opts po = {.dev = *dev, .threads = threads - 1, .caller_compiles = 1};
    if (jo) po.jo = *jo;
    tt__pool *p = NULL;
    int rc = tt__pool_start(v, k, &po, &p, err, errlen);
    free(v);
    if (rc < 0) return rc;
    for (size_t i = 0; i < k; i++) {
        e[i].status = tt__pool_wait(p, i);
        e[i].report = *tt__pool_report(p, i);
        snprintf(e[i].error, sizeof e[i].error, "%s", tt__pool_error(p, i));
    }
    tt__pool_free(p);
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
                        const tt__jit_opts *jo, int threads, tt__space_entry **out, size_t *n, char *err,
                        size_t errlen) {
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
