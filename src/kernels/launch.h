/*
 * Loading and launching compiled variants; the internal API of tt_sdpa_fwd
 * (src/client/sdpa.c, which chooses the config) and of the tuner's
 * measurement worker. The kernels layer asks no daemon: every launch here
 * takes its config explicitly.
 *
 * A worker's loop, per key:
 *   tt__device_open(ordinal, &dev)                     once per process
 *   tt__space_enumerate(&key, &dev.limits, ...)         the candidates
 *   tt__jit_compile(...) on CPU threads                 cubins + reports
 *   tt__kernel_load(dev.ctx, cubin, &variant, &k)       per candidate
 *   tt__sdpa_params_from_args(&args, &p, ...)           its own buffers
 *   tt__kernel_launch(k, &p, stream, ...)               timed with events
 *   tt__kernel_unload(k)
 * The reference: the same calls with jit opts {.source = tt__source_reference()}
 * and the config tt__reference_config() (source.h).
 */
#ifndef TT_KERNELS_LAUNCH_H
#define TT_KERNELS_LAUNCH_H

#include <cuda.h>
#include <stddef.h>

#include "kernels/cuda_api.h"
#include "kernels/jit.h"
#include "kernels/sdpa_params.h"
#include "tiletune.h"
#include "kernels/variants.h"

typedef struct tt__device {
    int ordinal;
    CUdevice dev;
    CUcontext ctx; /* the primary context, retained by tt__device_open */
    tt__device_limits limits;
    char name[128];
} tt__device;

/* Retains device `ordinal`'s primary context and reads its limits. */
int tt__device_open(int ordinal, tt__device *out, char *err, size_t errlen);
/* Releases the primary context; NULL is a no-op. */
void tt__device_close(tt__device *d);
/* The limits of the device that owns context `ctx`. */
int tt__device_limits_of(CUcontext ctx, tt__device_limits *out, char *err, size_t errlen);

/* A variant loaded into one context. */
typedef struct tt__kernel {
    CUcontext ctx;
    CUmodule module;
    CUfunction fn;
    tt__variant variant;
    CUfunction fn2; /* the family's second entry (tt__family.entry2), else NULL */
    tt__report report;
    int smem;                 /* dynamic shared memory per CTA, bytes */
    int threads;              /* per CTA */
    tt__device_limits limits; /* of ctx's device: a family's own launch sizes its grid by them */
} tt__kernel;

/* Loads `cubin` (compiled for `v`) into `ctx` and raises the function's
 * dynamic shared-memory limit. The caller owns *out (tt__kernel_unload). */
int tt__kernel_load(CUcontext ctx, const tt__cubin *cubin, const tt__variant *v, tt__kernel **out, char *err,
                    size_t errlen);
/* Unloads the module (pushing its context); NULL is a no-op. */
void tt__kernel_unload(tt__kernel *k);

/*
 * The process-wide module cache of tt_sdpa_fwd: the variant compiled with
 * `jo` (NULL: the default source and cache dir) and loaded into `ctx`, once
 * per (context, source revision, variant). The kernel belongs to the cache
 * and lives until exit. Thread-safe; compiles run outside its lock.
 */
int tt__kernel_get(CUcontext ctx, const tt__jit_opts *jo, const tt__variant *v, const tt__kernel **out,
                   char *err, size_t errlen);

/*
 * The loaded kernel of `cfg` for a problem on the device of `lim` (its
 * context `ctx`): the config checked against the device, the variant
 * compiled or taken from the module cache, its shared memory checked
 * against the device's. `page_size`: family splitkv's program for a paged
 * KV cache of pages that size (tt__variant.page_size), else 0. TT_ERR_*
 * with a message naming what failed.
 */
int tt__kernel_for_config(CUcontext ctx, const tt__device_limits *lim, const tt_config *cfg, int32_t head_dim,
                          tt_dtype dtype, int32_t causal, int32_t page_size, const tt__kernel **out,
                          char *err, size_t errlen);

/*
 * Checks `a` (everything that needs no GPU: pointers, alignment, sizes,
 * strides, dtype, head_dim, reserved fields, the config's shape rules) and
 * fills the kernel's parameters. TT_ERR_INVAL / TT_ERR_UNSUPPORTED /
 * TT_ERR_RANGE with a message.
 */
int tt__sdpa_params_from_args(const tt_sdpa_args *a, tt_sdpa_params *p, char *err, size_t errlen);

/* Launches `k` on `stream` in k's context (pushed for the call), by its
 * family's own launch path when it has one (tt__family.launch). The
 * params' head dim, dtype and causal flag must be the ones k was compiled
 * for: the caller made both from the same arguments. */
int tt__kernel_launch(const tt__kernel *k, const tt_sdpa_params *p, CUstream stream, char *err,
                      size_t errlen);

/* The context tt_sdpa_fwd launches in for memory on device `ordinal`
 * (the thread's current context on that device, else its primary one) and
 * the device's limits. */
int tt__context_for(const tt__cuda *cu, int ordinal, CUcontext *ctx, tt__device_limits *lim, char *err,
                    size_t errlen);
/* The one device ordinal of device pointers ptrs[0..n) (NULL ones are
 * skipped, ptrs[0] must be set): TT_ERR_INVAL naming the first that is not
 * device memory or is on another device than ptrs[0]. */
int tt__device_of_pointers(const tt__cuda *cu, const void *const *ptrs, const char *const *names, int n,
                           int *ordinal, char *err, size_t errlen);
/* Strides (batch, head, row) in elements: >= 0 and multiples of 8 (rows
 * start 16-byte aligned). */
int tt__check_strides(const char *name, const int64_t s[3], char *err, size_t errlen);
/* The last element of an n0 x n1 x n2 tensor of rows of row_len elements
 * is addressable from ptr without wrapping. */
int tt__check_extent(const char *name, const void *ptr, const int64_t s[3], int64_t n0, int64_t n1,
                     int64_t n2, int64_t row_len, int64_t elem_bytes, char *err, size_t errlen);

/* What one tt_sdpa_fwd call runs on: its checked parameters, the context
 * of the device that holds its tensors and that device's limits. */
typedef struct tt__sdpa_target {
    tt_sdpa_params params;
    CUcontext ctx;
    tt__device_limits limits;
} tt__sdpa_target;

/* Checks `a` (tt__sdpa_params_from_args), finds the one device all its
 * tensors are on and the context to launch in there. */
int tt__sdpa_target_of(const tt_sdpa_args *a, tt__sdpa_target *t, char *err, size_t errlen);

/* Runs `a` with `cfg` (a->config is not read) on `t` from
 * tt__sdpa_target_of(a): a config whose family cannot run these params
 * (tt__family.runs: the ws kernel's copy engine and some strides) becomes
 * the device's default of another family; the config is checked against
 * the device, the
 * variant compiled or taken from the module cache, and launched on
 * a->stream. */
int tt__sdpa_launch(const tt__sdpa_target *t, const tt_sdpa_args *a, const tt_config *cfg, char *err,
                    size_t errlen);

/* The config run on a device for `key` when nothing tuned applies: its arch's
 * built-in default, else the portable one, else (too little shared memory
 * for either) the first schedule of the space that fits. */
int tt__sdpa_device_default(const tt_key_v2 *key, const tt__device_limits *lim, tt_config *out, char *err,
                            size_t errlen);
/* The same for a call of `batch` x `heads_q` (0: unknown, the key's
 * default): a chunk (or a group-1 decode over few keys) whose dense tiles
 * fill the GPU runs the arch's dense default rather than splitkv
 * (tt__config_default_dense_filled). */
int tt__sdpa_device_default_at(const tt_key_v2 *key, const tt__device_limits *lim, int64_t batch,
                               int64_t heads_q, tt_config *out, char *err, size_t errlen);
/* The tuning key of a call (its GQA group included). */
void tt__sdpa_key_of(const tt_sdpa_args *a, tt_key_v2 *key);

#endif
