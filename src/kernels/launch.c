#include "kernels/launch.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_api.h"
#include "kernels/family.h"
#include "common/key.h"
#include "kernels/source.h"

/* grid.y and grid.z are heads and batch: the hardware caps both. */
#define GRID_YZ_MAX 65535
#define MAX_DEVICES 64

/* ---- devices ------------------------------------------------------------------ */

static int limits_of_device(const tt__cuda *cu, CUdevice dev, tt__device_limits *out, char *err,
                            size_t errlen) {
    int major = 0, minor = 0, smem = 0, sms = 0, bus = 0;
    CUresult r;
    if ((r = cu->DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)) ||
        (r = cu->DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)) ||
        (r = cu->DeviceGetAttribute(&smem, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev)) ||
        (r = cu->DeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)))
        return tt__cuda_fail(cu, r, "cuDeviceGetAttribute", err, errlen);
    /* only a launch's run order reads it (splitkv): a driver that cannot
     * say leaves it unknown rather than failing the device */
    if (cu->DeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, dev) != CUDA_SUCCESS)
        bus = 0;
    out->arch = major * 10 + minor;
    out->smem_optin = smem;
    out->sm_count = sms;
    out->mem_bus_bits = bus;
    return 0;
}

int tt__device_open(int ordinal, tt__device *out, char *err, size_t errlen) {
    const tt__cuda *cu;
    int rc = tt__cuda_get(&cu, err, errlen);
    if (rc < 0) return rc;
    if (ordinal < 0 || ordinal >= cu->device_count)
        return tt__fail(TT_ERR_NOGPU, err, errlen, "no CUDA device %d (the driver sees %d)", ordinal,
                        cu->device_count);
    tt__device d;
    memset(&d, 0, sizeof d);
    d.ordinal = ordinal;
    CUresult r;
    if ((r = cu->DeviceGet(&d.dev, ordinal))) return tt__cuda_fail(cu, r, "cuDeviceGet", err, errlen);
    if ((rc = limits_of_device(cu, d.dev, &d.limits, err, errlen)) < 0) return rc;
    if ((r = cu->DeviceGetName(d.name, (int)sizeof d.name, d.dev)))
        return tt__cuda_fail(cu, r, "cuDeviceGetName", err, errlen);
    if ((r = cu->DevicePrimaryCtxRetain(&d.ctx, d.dev)))
        return tt__cuda_fail(cu, r, "cuDevicePrimaryCtxRetain", err, errlen);
    *out = d;
    return 0;
}

void tt__device_close(tt__device *d) {
    const tt__cuda *cu;
    if (!d || !d->ctx || tt__cuda_get(&cu, NULL, 0) < 0) return;
    cu->DevicePrimaryCtxRelease(d->dev);
    d->ctx = NULL;
}

int tt__device_limits_of(CUcontext ctx, tt__device_limits *out, char *err, size_t errlen) {
    const tt__cuda *cu;
    int rc = tt__cuda_get(&cu, err, errlen);
    if (rc < 0) return rc;
    CUresult r;
    CUdevice dev;
    if ((r = cu->CtxPushCurrent(ctx))) return tt__cuda_fail(cu, r, "cuCtxPushCurrent", err, errlen);
    r = cu->CtxGetDevice(&dev);
    CUcontext popped;
    cu->CtxPopCurrent(&popped);
    if (r) return tt__cuda_fail(cu, r, "cuCtxGetDevice", err, errlen);
    return limits_of_device(cu, dev, out, err, errlen);
}

/* ---- modules ------------------------------------------------------------------- */

int tt__kernel_load(CUcontext ctx, const tt__cubin *cubin, const tt__variant *v, tt__kernel **out, char *err,
                    size_t errlen) {
    const tt__cuda *cu;
    int rc = tt__cuda_get(&cu, err, errlen);
    if (rc < 0) return rc;
    tt__kernel *k = calloc(1, sizeof *k);
    if (!k) return tt__fail(TT_ERR_NOMEM, err, errlen, "out of memory");
    k->ctx = ctx;
    k->variant = *v;
    k->report = cubin->report;
    k->smem = (int)tt__config_smem_bytes(&v->config, v->head_dim);
    k->threads = tt__config_threads(&v->config);
    CUresult r;
    CUcontext popped;
    if ((r = cu->CtxPushCurrent(ctx))) {
        free(k);
        return tt__cuda_fail(cu, r, "cuCtxPushCurrent", err, errlen);
    }
    if ((r = cu->ModuleLoadData(&k->module, cubin->data))) {
        rc = tt__cuda_fail(cu, r, "cuModuleLoadData", err, errlen);
        goto fail;
    }
    if ((r = cu->ModuleGetFunction(&k->fn, k->module, TT_SDPA_ENTRY))) {
        rc = tt__cuda_fail(cu, r, "cuModuleGetFunction(" TT_SDPA_ENTRY ")", err, errlen);
        goto fail;
    }
    const tt__family *f = tt__family_of(v->config.family);
    if (f && f->entry2 && (r = cu->ModuleGetFunction(&k->fn2, k->module, f->entry2))) {
        rc = tt__cuda_fail(cu, r, "cuModuleGetFunction (the family's second entry)", err, errlen);
        goto fail;
    }
    CUdevice dev;
    if ((r = cu->CtxGetDevice(&dev))) {
        rc = tt__cuda_fail(cu, r, "cuCtxGetDevice", err, errlen);
        goto fail;
    }
    if ((rc = limits_of_device(cu, dev, &k->limits, err, errlen)) < 0) goto fail;
    /* Above 48 KB a CTA gets dynamic shared memory only after opting in. */
    if ((r = cu->FuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k->smem))) {
        rc = tt__cuda_fail(cu, r, "cuFuncSetAttribute(max dynamic shared memory)", err, errlen);
        goto fail;
    }
    if (f && f->smem_carveout > 0 &&
        (r = cu->FuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                  f->smem_carveout))) {
        rc = tt__cuda_fail(cu, r, "cuFuncSetAttribute(preferred shared memory carveout)", err, errlen);
        goto fail;
    }
    cu->CtxPopCurrent(&popped);
    *out = k;
    return 0;
fail:
    if (k->module) cu->ModuleUnload(k->module);
    cu->CtxPopCurrent(&popped);
    free(k);
    return rc;
}

void tt__kernel_unload(tt__kernel *k) {
    const tt__cuda *cu;
    if (!k) return;
    if (tt__cuda_get(&cu, NULL, 0) == 0 && k->module && cu->CtxPushCurrent(k->ctx) == CUDA_SUCCESS) {
        CUcontext popped;
        cu->ModuleUnload(k->module);
        cu->CtxPopCurrent(&popped);
    }
    free(k);
}

typedef struct cached_kernel {
    struct cached_kernel *next;
    CUcontext ctx;
    char rev[TT_ID_MAX];
    tt__variant variant;
    tt__kernel *k;
} cached_kernel;

/* Hashed by (context, variant): every tt_sdpa_fwd call looks its kernel up
 * here, and a process that ran a sweep or serves many keys holds dozens to
 * hundreds of them (a list walked with a string compare per entry cost
 * ~0.01 us an entry per call on the H200's host). */
#define CACHE_BUCKETS 256
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static cached_kernel *cache_bucket[CACHE_BUCKETS];

/* Eight bytes a step: FNV-1a's byte loop over the 84-byte variant was a
 * chain of ~90 dependent multiplies, 0.1 us of every call. The bucket
 * only spreads this process's variants; nothing persists it. */
static size_t cache_hash(CUcontext ctx, const tt__variant *v) {
    const unsigned char *b = (const unsigned char *)v;
    uint64_t h = (uint64_t)(uintptr_t)ctx * UINT64_C(0x9e3779b97f4a7c15), w;
    size_t i = 0;
    for (; i + 8 <= sizeof *v; i += 8) {
        memcpy(&w, b + i, 8);
        h = (h ^ w) * UINT64_C(0x100000001b3);
    }
    for (; i < sizeof *v; i++) h = (h ^ b[i]) * UINT64_C(0x100000001b3);
    /* a product's low bits see only its operands' low bits: bring the
     * high ones (block_m, the knobs at odd offsets) down before the modulo */
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    return (size_t)(h % CACHE_BUCKETS);
}

static tt__kernel *cache_find(CUcontext ctx, const char *rev, const tt__variant *v) {
    for (cached_kernel *c = cache_bucket[cache_hash(ctx, v)]; c; c = c->next)
        if (c->ctx == ctx && memcmp(&c->variant, v, sizeof *v) == 0 && strcmp(c->rev, rev) == 0) return c->k;
    return NULL;
}

int tt__kernel_get(CUcontext ctx, const tt__jit_opts *jo, const tt__variant *v, const tt__kernel **out,
                   char *err, size_t errlen) {
    const tt__source *src = jo ? jo->source : NULL;
    int rc;
    if (!src && (rc = tt__source_default(&src, err, errlen)) < 0) return rc;
    /* compare variants bytewise: padding and reserved knobs zeroed */
    tt__variant key;
    memset(&key, 0, sizeof key);
    key.config = v->config;
    memset(key.config.reserved, 0, sizeof key.config.reserved);
    key.head_dim = v->head_dim;
    key.dtype = v->dtype;
    key.causal = v->causal;
    key.arch = v->arch;
    key.fault = v->fault;
    key.page_size = v->page_size;

    pthread_mutex_lock(&cache_lock);
    tt__kernel *k = cache_find(ctx, src->rev, &key);
    pthread_mutex_unlock(&cache_lock);
    if (k) {
        *out = k;
        return 0;
    }
    /* Compile and load outside the lock: a compile takes up to seconds and
     * other variants must not wait for it. Two threads that race on one
     * variant both load it; the loser unloads its copy. */
    tt__jit_opts o = jo ? *jo : (tt__jit_opts){0};
    o.source = src;
    tt__cubin *cubin = NULL;
    if ((rc = tt__jit_compile(&o, &key, &cubin, err, errlen)) < 0) return rc;
    rc = tt__kernel_load(ctx, cubin, &key, &k, err, errlen);
    tt__cubin_free(cubin);
    if (rc < 0) return rc;
    cached_kernel *node = calloc(1, sizeof *node);
    if (!node) {
        tt__kernel_unload(k);
        return tt__fail(TT_ERR_NOMEM, err, errlen, "out of memory");
    }
    pthread_mutex_lock(&cache_lock);
    tt__kernel *other = cache_find(ctx, src->rev, &key);
    if (!other) {
        node->ctx = ctx;
        memcpy(node->rev, src->rev, sizeof node->rev);
        node->variant = key;
        node->k = k;
        cached_kernel **b = &cache_bucket[cache_hash(ctx, &key)];
        node->next = *b;
        *b = node;
    }
    pthread_mutex_unlock(&cache_lock);
    if (other) {
        free(node);
        tt__kernel_unload(k);
        k = other;
    }
    *out = k;
    return 0;
}

/* ---- arguments -------------------------------------------------------------------- */

int tt__check_strides(const char *name, const int64_t s[3], char *err, size_t errlen) {
    static const char *const dim[3] = {"batch", "head", "row"};
    for (int i = 0; i < 3; i++) {
        if (s[i] < 0)
            return tt__fail(TT_ERR_INVAL, err, errlen, "%s %s stride %lld is negative", name, dim[i],
                            (long long)s[i]);
        /* 16-byte cp.async of every row needs each row to start 16-byte
         * aligned: 8 two-byte elements */
        if (s[i] % 8 != 0)
            return tt__fail(
                TT_ERR_INVAL, err, errlen,
                "%s %s stride %lld is not a multiple of 8 elements (rows must start 16-byte aligned)", name,
                dim[i], (long long)s[i]);
    }
    return 0;
}

/* The kernel forms element offsets b*s[0] + h*s[1] + row*s[2] in int64 and
 * byte addresses from them: the last element of a tensor must be
 * addressable without either wrapping. */
int tt__check_extent(const char *name, const void *ptr, const int64_t s[3], int64_t n0, int64_t n1,
                     int64_t n2, int64_t row_len, int64_t elem_bytes, char *err, size_t errlen) {
    const int64_t n[3] = {n0, n1, n2};
    int64_t end = row_len, t;
    for (int i = 0; i < 3; i++)
        if (__builtin_mul_overflow(n[i] - 1, s[i], &t) || __builtin_add_overflow(end, t, &end)) goto over;
    if (__builtin_mul_overflow(end, elem_bytes, &end) || (uint64_t)end > UINTPTR_MAX - (uintptr_t)ptr)
        goto over;
    return 0;
over:
    return tt__fail(TT_ERR_INVAL, err, errlen,
                    "%s: its strides and sizes address past the end of the 64-bit address space", name);
}

int tt__sdpa_params_from_args(const tt_sdpa_args *a, tt_sdpa_params *p, char *err, size_t errlen) {
#define FAIL(code, ...) return tt__fail(code, err, errlen, __VA_ARGS__)
    if (!a) FAIL(TT_ERR_INVAL, "no arguments");
    if (a->reserved0) FAIL(TT_ERR_INVAL, "reserved fields must be zero");
    for (size_t i = 0; i < sizeof a->reserved / sizeof a->reserved[0]; i++)
        if (a->reserved[i]) FAIL(TT_ERR_INVAL, "reserved fields must be zero");
    const struct {
        const char *name;
        const void *ptr;
    } ptrs[4] = {{"q", a->q}, {"k", a->k}, {"v", a->v}, {"o", a->o}};
    for (int i = 0; i < 4; i++) {
        if (!ptrs[i].ptr) FAIL(TT_ERR_INVAL, "%s is NULL", ptrs[i].name);
        if ((uintptr_t)ptrs[i].ptr % 16 != 0) FAIL(TT_ERR_INVAL, "%s is not 16-byte aligned", ptrs[i].name);
    }
    if (a->lse && (uintptr_t)a->lse % 4 != 0) FAIL(TT_ERR_INVAL, "lse is not 4-byte aligned");
    if (!tt__dtype_name((tt_dtype)a->dtype))
        FAIL(TT_ERR_UNSUPPORTED, "dtype %d is not fp16 (%d) or bf16 (%d)", (int)a->dtype, TT_DTYPE_FP16,
             TT_DTYPE_BF16);
    /* both bounds: a negative int64 can truncate to a supported int32 */
    if (a->head_dim < 1 || a->head_dim > INT32_MAX || !tt__head_dim_supported((int32_t)a->head_dim))
        FAIL(TT_ERR_UNSUPPORTED, "head_dim %lld is not supported (32, 64, 96, 128 or 256)",
             (long long)a->head_dim);
    const struct {
        const char *name;
        int64_t v, max;
    } sizes[5] = {{"batch", a->batch, GRID_YZ_MAX},
                  {"heads_q", a->heads_q, GRID_YZ_MAX},
                  {"heads_kv", a->heads_kv, GRID_YZ_MAX},
                  {"seqlen_q", a->seqlen_q, INT32_MAX},
                  {"seqlen_k", a->seqlen_k, INT32_MAX}};
    for (int i = 0; i < 5; i++) {
        if (sizes[i].v < 1)
            FAIL(TT_ERR_INVAL, "%s is %lld, must be >= 1", sizes[i].name, (long long)sizes[i].v);
        if (sizes[i].v > sizes[i].max)
            FAIL(TT_ERR_RANGE, "%s %lld is over the limit %lld", sizes[i].name, (long long)sizes[i].v,
                 (long long)sizes[i].max);
    }
    if (a->heads_q % a->heads_kv != 0)
        FAIL(TT_ERR_INVAL, "heads_q %lld is not a multiple of heads_kv %lld", (long long)a->heads_q,
             (long long)a->heads_kv);
    if (a->causal < 0 || a->causal > 2)
        FAIL(TT_ERR_INVAL, "causal is %d, must be 0 (none), 1 (top-left) or 2 (bottom-right)",
             (int)a->causal);
    /* the kernel takes the row max of raw scores and scales afterwards,
     * which is only right for a positive scale */
    if (!isfinite(a->scale) || a->scale < 0)
        FAIL(TT_ERR_INVAL, "scale %g must be finite and > 0 (0: 1/sqrt(head_dim))", (double)a->scale);
    int rc;
    if ((rc = tt__check_strides("q", a->q_stride, err, errlen)) < 0 ||
        (rc = tt__check_strides("k", a->k_stride, err, errlen)) < 0 ||
        (rc = tt__check_strides("v", a->v_stride, err, errlen)) < 0 ||
        (rc = tt__check_strides("o", a->o_stride, err, errlen)) < 0)
        return rc;
    if (a->o_stride[2] < a->head_dim)
        FAIL(TT_ERR_INVAL, "o row stride %lld is less than head_dim: output rows overlap",
             (long long)a->o_stride[2]);
    if (a->lse_stride[0] < 0 || a->lse_stride[1] < 0) FAIL(TT_ERR_INVAL, "lse strides are negative");
    const int packed_lse = a->lse_stride[0] == 0 && a->lse_stride[1] == 0;
    /* A stride of 0 over more than one batch or head (an expanded tensor):
     * several CTAs would write the same output, a race. */
    const struct {
        const char *name, *size;
        int64_t n, o_stride, lse_stride;
    } planes[2] = {{"batch", "batch", a->batch, a->o_stride[0], a->lse_stride[0]},
                   {"head", "heads_q", a->heads_q, a->o_stride[1], a->lse_stride[1]}};
    for (int i = 0; i < 2; i++) {
        if (planes[i].n > 1 && planes[i].o_stride == 0)
            FAIL(TT_ERR_INVAL, "o %s stride is 0 with %s %lld: outputs overlap", planes[i].name,
                 planes[i].size, (long long)planes[i].n);
        if (a->lse && !packed_lse && planes[i].n > 1 && planes[i].lse_stride == 0)
            FAIL(TT_ERR_INVAL, "lse %s stride is 0 with %s %lld: outputs overlap", planes[i].name,
                 planes[i].size, (long long)planes[i].n);
    }
    const int64_t lse_s[3] = {packed_lse ? a->heads_q * a->seqlen_q : a->lse_stride[0],
                              packed_lse ? a->seqlen_q : a->lse_stride[1], 1};
    if ((rc = tt__check_extent("q", a->q, a->q_stride, a->batch, a->heads_q, a->seqlen_q, a->head_dim, 2, err,
                               errlen)) < 0 ||
        (rc = tt__check_extent("k", a->k, a->k_stride, a->batch, a->heads_kv, a->seqlen_k, a->head_dim, 2,
                               err, errlen)) < 0 ||
        (rc = tt__check_extent("v", a->v, a->v_stride, a->batch, a->heads_kv, a->seqlen_k, a->head_dim, 2,
                               err, errlen)) < 0 ||
        (rc = tt__check_extent("o", a->o, a->o_stride, a->batch, a->heads_q, a->seqlen_q, a->head_dim, 2, err,
                               errlen)) < 0 ||
        (a->lse && (rc = tt__check_extent("lse", a->lse, lse_s, a->batch, a->heads_q, a->seqlen_q, 1, 4, err,
                                          errlen)) < 0))
        return rc;
    if (a->config) {
        char msg[200];
        if ((rc = tt__variant_check(a->config, (int32_t)a->head_dim, NULL, msg, sizeof msg)) < 0)
            FAIL(rc, "config invalid for head_dim %lld: %s", (long long)a->head_dim, msg);
    }
#undef FAIL
    tt_sdpa_params P;
    memset(&P, 0, sizeof P);
    P.q = a->q;
    P.k = a->k;
    P.v = a->v;
    P.o = a->o;
    P.lse = a->lse;
    P.q_batch_stride = a->q_stride[0], P.q_head_stride = a->q_stride[1], P.q_row_stride = a->q_stride[2];
    P.k_batch_stride = a->k_stride[0], P.k_head_stride = a->k_stride[1], P.k_row_stride = a->k_stride[2];
    P.v_batch_stride = a->v_stride[0], P.v_head_stride = a->v_stride[1], P.v_row_stride = a->v_stride[2];
    P.o_batch_stride = a->o_stride[0], P.o_head_stride = a->o_stride[1], P.o_row_stride = a->o_stride[2];
    P.lse_batch_stride = lse_s[0];
    P.lse_head_stride = lse_s[1];
    P.batch = (int)a->batch;
    P.heads_q = (int)a->heads_q;
    P.heads_kv = (int)a->heads_kv;
    P.seqlen_q = (int)a->seqlen_q;
    P.seqlen_k = (int)a->seqlen_k;
    P.scale = a->scale != 0.0f ? a->scale : (float)(1.0 / sqrt((double)a->head_dim));
    P.scale_log2 = (float)((double)P.scale * 1.4426950408889634);
    *p = P;
    return 0;
}

int tt__kernel_launch(const tt__kernel *k, const tt_sdpa_params *p, CUstream stream, char *err,
                      size_t errlen) {
    const tt__cuda *cu;
    int rc = tt__cuda_get(&cu, err, errlen);
    if (rc < 0) return rc;
    const tt__family *f = tt__family_of(k->variant.config.family);
    tt__launch_extra x;
    x.n = 0;
    /* in int64: seqlen_q may be INT32_MAX, and the rounding sum must not wrap */
    x.grid[0] =
        (unsigned)(((int64_t)p->seqlen_q + k->variant.config.block_m - 1) / k->variant.config.block_m);
    x.grid[1] = (unsigned)p->heads_q;
    x.grid[2] = (unsigned)p->batch;
    void *params[1 + TT__LAUNCH_EXTRA_MAX] = {(void *)p};
    /* a family with its own launch enters the kernel's context itself */
    if (f && f->launch) return f->launch(k, p, stream, err, errlen);
    int pushed;
    if ((rc = tt__ctx_enter(cu, k->ctx, &pushed, err, errlen)) < 0) return rc;
    if (f && f->launch_extra && (rc = f->launch_extra(&k->variant, p, &x, err, errlen)) < 0) {
        tt__ctx_leave(cu, pushed);
        return rc;
    }
    for (int i = 0; i < x.n && i < TT__LAUNCH_EXTRA_MAX; i++) params[1 + i] = x.params[i];
    CUresult r = cu->LaunchKernel(k->fn, x.grid[0], x.grid[1], x.grid[2], (unsigned)k->threads, 1, 1,
                                  (unsigned)k->smem, stream, params, NULL);
    tt__ctx_leave(cu, pushed);
    if (r) return tt__cuda_fail(cu, r, "cuLaunchKernel", err, errlen);
    return 0;
}

/* ---- tt_sdpa_fwd ---------------------------------------------------------------------- */

/* The context to launch in for memory on device `ordinal`: the calling
 * thread's current context when it is on that device (an application with
 * its own context), else the device's primary context (PyTorch and the
 * runtime API use it), retained once and kept for the process's life. */
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext primary_ctx[MAX_DEVICES];
static tt__device_limits primary_limits[MAX_DEVICES];

int tt__context_for(const tt__cuda *cu, int ordinal, CUcontext *ctx, tt__device_limits *lim, char *err,
                    size_t errlen) {
    if (ordinal < 0 || ordinal >= MAX_DEVICES || ordinal >= cu->device_count)
        return tt__fail(TT_ERR_NOGPU, err, errlen, "device %d is out of range", ordinal);
    CUdevice dev, cur_dev;
    CUresult r;
    CUcontext cur = NULL;
    int rc = 0;
    pthread_mutex_lock(&primary_lock);
    if (!primary_ctx[ordinal]) {
        if ((r = cu->DeviceGet(&dev, ordinal))) rc = tt__cuda_fail(cu, r, "cuDeviceGet", err, errlen);
        else if ((rc = limits_of_device(cu, dev, &primary_limits[ordinal], err, errlen)) == 0 &&
                 (r = cu->DevicePrimaryCtxRetain(&primary_ctx[ordinal], dev)))
            rc = tt__cuda_fail(cu, r, "cuDevicePrimaryCtxRetain", err, errlen);
    }
    *ctx = primary_ctx[ordinal];
    *lim = primary_limits[ordinal];
    pthread_mutex_unlock(&primary_lock);
    if (rc < 0) return rc;
    /* the primary context current (PyTorch's case) needs no more questions */
    if (cu->CtxGetCurrent(&cur) != CUDA_SUCCESS || !cur || cur == *ctx) return 0;
    if (cu->DeviceGet(&dev, ordinal) == CUDA_SUCCESS && cu->CtxGetDevice(&cur_dev) == CUDA_SUCCESS &&
        cur_dev == dev)
        *ctx = cur;
    return 0;
}

static int device_of_pointer(const tt__cuda *cu, const char *name, const void *ptr, int *ordinal, char *err,
                             size_t errlen) {
    int ord = -1;
    CUresult r =
        cu->PointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)(uintptr_t)ptr);
    if (r != CUDA_SUCCESS || ord < 0)
        return tt__fail(TT_ERR_INVAL, err, errlen, "%s is not CUDA device memory", name);
    *ordinal = ord;
    return 0;
}

int tt__device_of_pointers(const tt__cuda *cu, const void *const *ptrs, const char *const *names, int n,
                           int *ordinal, char *err, size_t errlen) {
    int rc, ord = -1, other = -1;
    if ((rc = device_of_pointer(cu, names[0], ptrs[0], &ord, err, errlen)) < 0) return rc;
    for (int i = 1; i < n; i++) {
        /* a pointer asked about already (K and V at one packed tensor's
         * base, q and o in place) answers the same: ~0.07 us a query */
        int seen = !ptrs[i];
        for (int j = 0; j < i && !seen; j++) seen = ptrs[j] == ptrs[i];
        if (seen) continue;
        if ((rc = device_of_pointer(cu, names[i], ptrs[i], &other, err, errlen)) < 0) return rc;
        if (other != ord)
            return tt__fail(TT_ERR_INVAL, err, errlen, "%s is on device %d, %s on device %d", names[i], other,
                            names[0], ord);
    }
    *ordinal = ord;
    return 0;
}

/* The default run on this device: its arch's row, else the portable one; a
 * device with less shared memory than that needs (sm_86's 99 KB at
 * head_dim 256) gets the first schedule of the space that fits. */
void tt__sdpa_key_of(const tt_sdpa_args *a, tt_key_v2 *key) {
    memset(key, 0, sizeof *key);
    key->dtype = (tt_dtype)a->dtype;
    key->head_dim = (int32_t)a->head_dim;
    key->causal = a->causal;
    key->seqlen_q = a->seqlen_q;
    key->seqlen_k = a->seqlen_k;
    /* tuned per GQA group: kernels that pack a group's rows differ by it
     * (the launcher checked heads_q is a multiple of heads_kv) */
    const int64_t group = a->heads_kv > 0 ? a->heads_q / a->heads_kv : 1;
    key->group = group >= 1 && group <= TT_GROUP_MAX ? (int32_t)group : 1;
    tt__key_canon(key); /* bottom-right with Lq == Lk is top-left; prefill has no group */
}

int tt__sdpa_device_default(const tt_key_v2 *key, const tt__device_limits *lim, tt_config *out, char *err,
                            size_t errlen) {
    tt_config c;
    int rc;
    if (tt__config_default_arch(key, lim->arch, &c) == 0 &&
        tt__variant_check(&c, key->head_dim, lim, NULL, 0) == 0) {
        *out = c;
        return 0;
    }
    tt_key k1;
    tt__key_to_v1(key, &k1);
    tt__space_entry *e = NULL;
    size_t n = 0;
    if ((rc = tt__space_enumerate(&k1, lim, 0, NULL, 1, &e, &n, err, errlen)) < 0) return rc;
    if (n == 0) {
        free(e);
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen,
                        "no schedule of head_dim %d fits this device's %d bytes of shared memory",
                        (int)key->head_dim, (int)lim->smem_optin);
    }
    *out = e[0].variant.config;
    free(e);
    return 0;
}

int tt__sdpa_device_default_at(const tt_key_v2 *key, const tt__device_limits *lim, int64_t batch,
                               int64_t heads_q, tt_config *out, char *err, size_t errlen) {
    int rc = tt__sdpa_device_default(key, lim, out, err, errlen);
    if (rc < 0 || out->family != TT_FAMILY_SPLITKV || batch <= 0 || heads_q <= 0) return rc;
    /* The key has no batch, but whether splitting the keys pays does: with
     * a 64-row block of one query head a CTA, a chunk that gives three SMs
     * in four one already fills the GPU, and the dense families' tensor
     * path beats splitkv's mma.sync there; fewer CTAs leave SMs that only
     * split keys reach. On the H200's inference grid, 64-token chunks: 128
     * CTAs (batch 4 x 32 heads) ran wgmma 0.98-1.4x splitkv's time, 64 CTAs
     * 1.5-2.3x. No more CTAs than SMs: one wave even of a tile that takes a
     * whole SM (defaults.c, chunk_one_wave_sm90). Speculative decode of
     * fewer units than half a wave takes its row by units first: over few
     * keys, 16 tokens of group 4 ran the dense row 1.18-1.20x the 32-row
     * tile's time on the H100 (defaults.c, splitkv_sm90_spec_units). */
    const int64_t group = key->group > 1 ? key->group : 1;
    const int64_t units = batch * (heads_q / group > 0 ? heads_q / group : 1);
    const int64_t packed = key->seqlen_q * group;
    tt_config w;
    if (packed > 16 &&
        tt__config_default_splitkv_units(lim->arch, packed, key->seqlen_k, key->head_dim, units,
                                         lim->sm_count, 0, &w) == 0 &&
        tt__variant_check(&w, key->head_dim, lim, NULL, 0) == 0) {
        *out = w;
        return 0;
    }
    const double ctas =
        (double)batch * (double)heads_q * (double)((key->seqlen_q + 63) / 64); /* no overflow */
    if (4 * ctas >= 3.0 * lim->sm_count) {
        tt_config d;
        if (tt__config_default_dense_filled(key, lim->arch, ctas <= lim->sm_count, &d) == 0 &&
            tt__variant_check(&d, key->head_dim, lim, NULL, 0) == 0)
            *out = d;
    }
    if (out->family != TT_FAMILY_SPLITKV) return 0;
    /* more (batch, K/V head) units than a wave: the row that fits two or
     * three CTAs an SM (defaults.c, splitkv_sm90_wide); few over a short
     * cache: the 64-key row (splitkv_sm90_few_units); past 16 rows it
     * answered above */
    if (packed <= 16 &&
        tt__config_default_splitkv_units(lim->arch, packed, key->seqlen_k, key->head_dim, units,
                                         lim->sm_count, 0, &w) == 0 &&
        tt__variant_check(&w, key->head_dim, lim, NULL, 0) == 0)
        *out = w;
    return 0;
}

int tt__sdpa_target_of(const tt_sdpa_args *a, tt__sdpa_target *t, char *err, size_t errlen) {
    int rc = tt__sdpa_params_from_args(a, &t->params, err, errlen);
    if (rc < 0) return rc;
    const tt__cuda *cu;
    if ((rc = tt__cuda_get(&cu, err, errlen)) < 0) return rc;
    const void *const ptrs[5] = {a->q, a->k, a->v, a->o, a->lse};
    static const char *const names[5] = {"q", "k", "v", "o", "lse"};
    int ord = -1;
    if ((rc = tt__device_of_pointers(cu, ptrs, names, 5, &ord, err, errlen)) < 0) return rc;
    return tt__context_for(cu, ord, &t->ctx, &t->limits, err, errlen);
}

int tt__sdpa_launch(const tt__sdpa_target *t, const tt_sdpa_args *a, const tt_config *cfg, char *err,
                    size_t errlen) {
    int rc;
    tt_config fallback;
    const tt__family *f = tt__family_of(cfg->family);
    if (f && ((f->runs && !f->runs(&t->params, a->causal)) || a->causal > f->causal_max)) {
        /* e.g. strides the ws kernel's copy engine cannot take, or a mask
         * its mainloop does not have: this device's default of another
         * family serves the call rather than a refusal */
        tt_key_v2 key;
        tt__sdpa_key_of(a, &key);
        if ((tt__sdpa_device_default(&key, &t->limits, &fallback, NULL, 0) < 0 ||
             fallback.family == cfg->family) &&
            (rc = tt__config_default_other(&key, t->limits.arch, cfg->family, &fallback)) < 0)
            return tt__fail(rc, err, errlen, "no schedule of another family for these strides");
        cfg = &fallback;
    }
    const tt__kernel *k;
    if ((rc = tt__kernel_for_config(t->ctx, &t->limits, cfg, (int32_t)a->head_dim, (tt_dtype)a->dtype,
                                    a->causal, 0, &k, err, errlen)) < 0)
        return rc;
    return tt__kernel_launch(k, &t->params, (CUstream)a->stream, err, errlen);
}

int tt__kernel_for_config(CUcontext ctx, const tt__device_limits *lim, const tt_config *cfg, int32_t head_dim,
                          tt_dtype dtype, int32_t causal, int32_t page_size, const tt__kernel **out,
                          char *err, size_t errlen) {
    char msg[200];
    int rc;
    if ((rc = tt__variant_check(cfg, head_dim, lim, msg, sizeof msg)) < 0)
        return tt__fail(rc, err, errlen, "config invalid on this device (sm_%d): %s", (int)lim->arch, msg);
    tt__variant v;
    memset(&v, 0, sizeof v);
    v.config = *cfg;
    v.head_dim = head_dim;
    v.dtype = dtype;
    v.causal = causal;
    v.arch = lim->arch;
    v.page_size = page_size;
    const tt__kernel *k;
    if ((rc = tt__kernel_get(ctx, NULL, &v, &k, err, errlen)) < 0) return rc;
    if ((long)k->report.static_smem + k->smem > lim->smem_optin)
        return tt__fail(TT_ERR_RANGE, err, errlen,
                        "variant needs %ld bytes of shared memory, the device allows %d",
                        (long)k->report.static_smem + k->smem, (int)lim->smem_optin);
    *out = k;
    return 0;
}

/* The limits of CUDA device `device` (its primary context made ready). */
static int limits_of(int device, tt__device_limits *lim, char *err, size_t errlen) {
    const tt__cuda *cu;
    int rc = tt__cuda_get(&cu, err, errlen);
    if (rc < 0) return rc;
    CUcontext ctx;
    return tt__context_for(cu, device, &ctx, lim, err, errlen);
}

/* A v2 key's group: 0 (read as 1) to TT_GROUP_MAX. */
static int check_group(const tt_key_v2 *key, char *err, size_t errlen) {
    if (key->group < 0 || key->group > TT_GROUP_MAX)
        return tt__fail(TT_ERR_RANGE, err, errlen, "group %d out of range 0..%d", (int)key->group,
                        TT_GROUP_MAX);
    return 0;
}

int tt_sdpa_variants(const tt_key *key, int device, tt_config *out, size_t cap, size_t *count, char *err,
                     size_t errlen) {
    if (!key) return tt__fail(TT_ERR_INVAL, err, errlen, "missing argument");
    tt_key_v2 k2;
    tt__key_from_v1(key, &k2);
    return tt_sdpa_variants_v2(&k2, device, out, cap, count, err, errlen);
}

int tt_sdpa_variants_v2(const tt_key_v2 *key, int device, tt_config *out, size_t cap, size_t *count,
                        char *err, size_t errlen) {
    if (!key || !count || (cap && !out)) return tt__fail(TT_ERR_INVAL, err, errlen, "missing argument");
    /* the key's own faults before the device's: they hold on any machine */
    int rc = check_group(key, err, errlen);
    if (rc < 0) return rc;
    tt__device_limits lim;
    if ((rc = limits_of(device, &lim, err, errlen)) < 0) return rc;
    tt_key k1;
    tt__key_to_v1(key, &k1);
    tt__space_entry *e = NULL;
    size_t n = 0;
    if ((rc = tt__space_enumerate_group(&k1, key->group, &lim, TT_SPACE_COMPILE, NULL, 0, &e, &n, err,
                                        errlen)) < 0)
        return rc;
    for (size_t i = 0; i < n && i < cap; i++) out[i] = e[i].variant.config;
    free(e);
    *count = n;
    return 0;
}

int tt_sdpa_default_config(const tt_key *key, int device, tt_config *out, char *err, size_t errlen) {
    if (!key || !out) return tt__fail(TT_ERR_INVAL, err, errlen, "missing argument");
    tt_key_v2 k2;
    tt__key_from_v1(key, &k2);
    return tt_sdpa_default_config_v2(&k2, device, out, err, errlen);
}

int tt_sdpa_default_config_v2(const tt_key_v2 *key, int device, tt_config *out, char *err, size_t errlen) {
    return tt_sdpa_default_config_at(key, device, 0, 0, out, err, errlen);
}

int tt_sdpa_default_config_at(const tt_key_v2 *key, int device, int64_t batch, int64_t heads_q,
                              tt_config *out, char *err, size_t errlen) {
    if (!key || !out) return tt__fail(TT_ERR_INVAL, err, errlen, "missing argument");
    int rc = check_group(key, err, errlen);
    if (rc < 0) return rc;
    if (!tt__head_dim_supported(key->head_dim))
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen, "unsupported head_dim %d", (int)key->head_dim);
    if (!tt__dtype_name(key->dtype))
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen, "unsupported dtype %d", (int)key->dtype);
    if (batch < 0 || heads_q < 0)
        return tt__fail(TT_ERR_INVAL, err, errlen, "batch %lld and heads_q %lld must be >= 0 (0: unknown)",
                        (long long)batch, (long long)heads_q);
    tt__device_limits lim;
    if ((rc = limits_of(device, &lim, err, errlen)) < 0) return rc;
    return tt__sdpa_device_default_at(key, &lim, batch, heads_q, out, err, errlen);
}
