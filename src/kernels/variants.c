#include "kernels/variants.h"

#include "kernels/splitkv.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "kernels/cuda_api.h"
#include "common/key.h"
#include "kernels/sdpa_params.h"

/*
 * THE tables of the space: docs/kernels.md ("The tuned space") and the H200
 * measurements behind them (docs/perf.md).
 *
 * Family mma (sm_80+). Why each knob is here:
 *   block_m x warps  (64, 4), (128, 4), (128, 8): one or two m16 tiles per
 *             warp. 128 rows is FA2's choice almost everywhere; 64 helps
 *             short and causal inputs (more CTAs, less diagonal waste).
 *   block_n   32/64/128 keys per tile: bigger tiles amortize the softmax
 *             rescale, smaller ones cut smem (d256) and registers.
 *   stages    1 (FA2's one K + one V buffer) or 2 (a full double buffer).
 * Fixed by measurement, still legal for an explicit config: layout swizzle
 * (padded rows 0.90-0.99x), Q from shared memory (Q in registers
 * 0.87-0.98x), no 3rd stage (0.84-0.96x), no 256-row CTAs, no block_n
 * 48/80/96 (never best). Each value doubles or halves the CI compile-all
 * test (~0.4 s a variant, x 5 head dims x 2 dtypes x 2 causal x 2 archs).
 *
 * Family wgmma (sm_90 only; head_dim 64, 128, 256). block_m is 64 rows a
 * warpgroup, so warps alone sets it:
 *   warps     4, 8, 12: one to three warpgroups. More warpgroups share each
 *             K/V tile (less load traffic a FLOP) and overlap one group's
 *             softmax with another's MMAs; fewer fit more CTAs on an SM.
 *   block_n   64/128/192: the N of S = Q K^T. Bigger amortizes the softmax
 *             bookkeeping and the per-tile barrier; register-bound at d256.
 *   stages    2: cp.async keeps one tile in flight under the MMAs
 *             (FlashAttention-3 uses 2 as well).
 * layout is the 128-byte swizzle (wgmma's), Q is read from shared memory.
 */
static const int32_t space_block_m[] = {64, 128};
static const int32_t space_block_n[] = {32, 64, 128};
static const int32_t space_warps[] = {4, 8};
static const int32_t space_stages[] = {1, 2};
static const int32_t space_layout[] = {TT_LAYOUT_SWIZZLE};
static const int32_t space_q_in_regs[] = {0};
static const int32_t wg_space_warps[] = {4, 8, 12};
static const int32_t wg_space_block_n[] = {64, 128, 192};
static const int32_t wg_space_stages[] = {2};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

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

/* sdpa.cu's #errors for family wgmma, mirrored. The accumulators a thread
 * holds (S: block_n / 2, O: head_dim / 2, P as 16-bit pairs: block_n / 4)
 * bound the register file: 255 a thread with up to 8 warps, 168 with 12
 * (one CTA of 384 threads in 64K registers); beyond that ptxas spills or
 * gives up, so such shapes are illegal rather than compiled to be pruned. */
static int wgmma_check(const tt_config *c, int32_t head_dim, const tt__device_limits *dev, char *err,
                       size_t errlen) {
    if (head_dim % 64 != 0)
        return tt__fail(TT_ERR_INVAL, err, errlen, "head_dim %d: the wgmma kernel takes 64, 128 or 256", (int)head_dim);
    if (c->warps != 4 && c->warps != 8 && c->warps != 12)
        return tt__fail(TT_ERR_INVAL, err, errlen, "warps=%d: the wgmma kernel takes 4, 8 or 12 (warpgroups of 4)",
                        (int)c->warps);
    if (c->block_m != 16 * c->warps)
        return tt__fail(TT_ERR_INVAL, err, errlen, "block_m=%d with %d warps: the wgmma kernel needs 64 rows a warpgroup (%d)",
                        (int)c->block_m, (int)c->warps, (int)(16 * c->warps));
    if (c->block_n % 64 != 0 || c->block_n > 256)
        return tt__fail(TT_ERR_INVAL, err, errlen, "block_n=%d: the wgmma kernel takes 64, 128, 192 or 256", (int)c->block_n);
    if (c->stages < 2)
        return tt__fail(TT_ERR_INVAL, err, errlen, "stages=%d: the wgmma kernel needs 2 or more", (int)c->stages);
    if (c->layout != TT_LAYOUT_SWIZZLE || c->q_in_regs != 0)
        return tt__fail(TT_ERR_INVAL, err, errlen, "the wgmma kernel takes layout=swizzle and q_in_regs=0");
    int acc = c->block_n / 2 + head_dim / 2 + c->block_n / 4;
    if (acc > (c->warps == 12 ? 168 : 232))
        return tt__fail(TT_ERR_INVAL, err, errlen,
                        "block_n=%d warps=%d at head_dim %d: %d accumulator registers a thread do not fit",
                        (int)c->block_n, (int)c->warps, (int)head_dim, acc);
    if (dev && dev->arch != 90)
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen, "sm_%d: the wgmma kernel runs on sm_90 only", (int)dev->arch);
    return 0;
}

/* sdpa.cu's #errors and static_assert for family mma, mirrored: each warp
 * owns 16 or 32 query rows (one or two m16 tiles); key tiles are whole k16
 * steps of P.V; the S and O accumulators (and Q fragments) fit 256
 * registers. */
static int mma_check(const tt_config *c, int32_t head_dim, const tt__device_limits *dev, char *err,
                     size_t errlen) {
    if (c->warps < 1 || c->warps > 16)
        return tt__fail(TT_ERR_INVAL, err, errlen, "warps=%d: the mma kernel takes 1..16", (int)c->warps);
    int mt = c->block_m / (16 * c->warps);
    if (c->block_m % (16 * c->warps) != 0 || (mt != 1 && mt != 2))
        return tt__fail(TT_ERR_INVAL, err, errlen,
                        "block_m=%d with %d warps: must be 16 or 32 rows per warp", (int)c->block_m,
                        (int)c->warps);
    if (c->block_n % 16 != 0 || c->block_n < 16 || c->block_n > 256)
        return tt__fail(TT_ERR_INVAL, err, errlen, "block_n=%d is not a multiple of 16 in 16..256", (int)c->block_n);
    if (mt * (c->block_n + head_dim) / 2 + (c->q_in_regs ? mt * head_dim / 4 : 0) > 256)
        return tt__fail(TT_ERR_INVAL, err, errlen,
                        "block_m=%d block_n=%d warps=%d%s at head_dim %d: the accumulators alone exceed 255 registers",
                        (int)c->block_m, (int)c->block_n, (int)c->warps, c->q_in_regs ? " q_in_regs" : "",
                        (int)head_dim);
    if (dev && dev->arch < 80)
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen, "sm_%d: the mma kernel needs sm_80 or later", (int)dev->arch);
    return 0;
}

int tt__variant_check(const tt_config *c, int32_t head_dim, const tt__device_limits *dev,
                      char *err, size_t errlen) {
    char msg[160];
    if (tt__config_check_ranges(c, msg, sizeof msg) < 0)
        return tt__fail(TT_ERR_INVAL, err, errlen, "config: %s", msg);
    if (!tt__head_dim_supported(head_dim))
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen, "unsupported head_dim %d", (int)head_dim);
    if (c->family == TT_FAMILY_SPLITKV) return tt__splitkv_check(c, head_dim, dev, err, errlen);
    if (c->family != TT_FAMILY_MMA && c->family != TT_FAMILY_WGMMA)
        return tt__fail(TT_ERR_INVAL, err, errlen, "family %d is not in this build", (int)c->family);
    int rc = c->family == TT_FAMILY_WGMMA ? wgmma_check(c, head_dim, dev, err, errlen)
                                          : mma_check(c, head_dim, dev, err, errlen);
    if (rc < 0 || !dev) return rc;
    long smem = TT_SDPA_SMEM_BYTES((long)c->family, (long)c->block_m, (long)c->block_n, (long)head_dim,
                                   (long)c->stages, c->layout);
    if (smem > dev->smem_optin)
        return tt__fail(TT_ERR_RANGE, err, errlen,
                        "needs %ld bytes of shared memory, the device allows %d per block", smem,
                        (int)dev->smem_optin);
    return 0;
}

/* More stages than K/V tiles buy nothing: prune them for short keys (not
 * the wgmma kernel's minimum of 2, which is no choice). */
static int useful_for_seqlen(const tt_config *c, const tt_key *key) {
    if (key->seqlen_k <= 0 || c->stages <= (c->family == TT_FAMILY_WGMMA ? 2 : 1)) return 1;
    /* rounded up without the sum that overflows for the largest seqlen_k */
    int64_t tiles = key->seqlen_k / c->block_n + (key->seqlen_k % c->block_n != 0);
    return tiles >= c->stages;
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

int tt__space_enumerate(const tt_key *key, const tt__device_limits *dev, unsigned flags,
                        const tt__jit_opts *jo, int threads, tt__space_entry **out, size_t *n,
                        char *err, size_t errlen) {
    if (!key || !dev || !out || !n) return tt__fail(TT_ERR_INVAL, err, errlen, "missing argument");
    if (!tt__head_dim_supported(key->head_dim))
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen, "unsupported head_dim %d", (int)key->head_dim);
    if (!tt__dtype_name(key->dtype))
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen, "unsupported dtype %d", (int)key->dtype);
    enum {
        N_MMA = COUNT(space_block_m) * COUNT(space_block_n) * COUNT(space_warps) * COUNT(space_stages) *
                COUNT(space_layout) * COUNT(space_q_in_regs),
        N_WGMMA = COUNT(wg_space_warps) * COUNT(wg_space_block_n) * COUNT(wg_space_stages),
    };
    tt_config cand[N_MMA + N_WGMMA];
    tt__space_entry *e = calloc(N_MMA + N_WGMMA, sizeof *e);
    if (!e) return tt__fail(TT_ERR_NOMEM, err, errlen, "out of memory");
    size_t k = 0;
    size_t nc = 0;
    for (size_t a = 0; a < COUNT(space_block_m); a++)
    for (size_t b = 0; b < COUNT(space_block_n); b++)
    for (size_t w = 0; w < COUNT(space_warps); w++)
    for (size_t s = 0; s < COUNT(space_stages); s++)
    for (size_t l = 0; l < COUNT(space_layout); l++)
    for (size_t q = 0; q < COUNT(space_q_in_regs); q++) {
        tt_config *c = &cand[nc++];
        memset(c, 0, sizeof *c);
        c->family = TT_FAMILY_MMA;
        c->block_m = space_block_m[a];
        c->block_n = space_block_n[b];
        c->warps = space_warps[w];
        c->stages = space_stages[s];
        c->layout = space_layout[l];
        c->q_in_regs = space_q_in_regs[q];
    }
    for (size_t w = 0; w < COUNT(wg_space_warps); w++)
    for (size_t b = 0; b < COUNT(wg_space_block_n); b++)
    for (size_t s = 0; s < COUNT(wg_space_stages); s++) {
        tt_config *c = &cand[nc++];
        memset(c, 0, sizeof *c);
        c->family = TT_FAMILY_WGMMA;
        c->block_m = 16 * wg_space_warps[w];
        c->block_n = wg_space_block_n[b];
        c->warps = wg_space_warps[w];
        c->stages = wg_space_stages[s];
        c->layout = TT_LAYOUT_SWIZZLE;
        c->q_in_regs = 0;
    }
    for (size_t i = 0; i < nc; i++) {
        const tt_config c = cand[i];
        if (tt__variant_check(&c, key->head_dim, dev, NULL, 0) < 0) continue;
        if (!useful_for_seqlen(&c, key)) continue;
        tt__space_entry *x = &e[k++];
        x->variant.config = c;
        x->variant.head_dim = key->head_dim;
        x->variant.dtype = key->dtype;
        x->variant.causal = key->causal ? 1 : 0;
        x->variant.arch = dev->arch;
        x->status = TT_VARIANT_UNCHECKED;
    }
    if (flags & TT_SPACE_COMPILE) {
        struct compile_job job = {e, jo, dev};
        tt__parallel_for(k, threads, compile_one, &job);
        if (!(flags & TT_SPACE_KEEP_INVALID)) {
            size_t kept = 0;
            for (size_t i = 0; i < k; i++)
                if (e[i].status == TT_VARIANT_OK) e[kept++] = e[i];
            k = kept;
        }
    }
    *out = e;
    *n = k;
    return 0;
}
