/*
 * The measuring side of tiletune-worker: one GPU, one key at a time
 * (docs/worker-protocol.md is the pipe protocol; docs/tuning.md the rules).
 *
 * For a key: enumerate the variant space (src/kernels/variants.h) minus the
 * AVOID list, compile the candidates on a pool of CPU threads while the GPU
 * measures those already compiled, fill the inputs once with random values,
 * compute the fp32 reference (sdpa_ref.cu) once, then per candidate: TRY,
 * poison the output, launch once and check it, time it with CUDA events,
 * RESULT. Every wait on the GPU has a deadline; a variant that faults or
 * overruns it leaves the context unusable, so the worker reports it and
 * the caller exits (the daemon restarts the worker, the variant in AVOID).
 *
 * Single-threaded use; the compile pool is internal.
 */
#ifndef TT_TUNER_WORKER_GPU_H
#define TT_TUNER_WORKER_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "tiletune.h"

typedef struct tt_worker_opts {
    int gpu;               /* CUDA device ordinal */
    const char *cache_dir; /* cubin cache; NULL: the default */
    int compile_threads;   /* <= 0: online CPUs - 1 (at least 1) */
    int launch_timeout_ms; /* one launch's limit (beyond its expected time); <= 0: 10000 */
    double budget_ms;      /* timed GPU time per variant (exhaustive); <= 0: 40 */
    int inject;            /* 1: add the fault-injection variants (TT_FAULT_INJECTION builds) */
} tt_worker_opts;

/* What HELLO says (docs/worker-protocol.md). */
typedef struct tt_worker_hello {
    int gpu_count; /* 0 without a driver */
    int has_gpu;   /* this worker's GPU is usable; the fields below are set */
    char name[128];
    int cc_major, cc_minor, sms;
    int64_t mem_bytes;
    char driver[64], cuda[32], nvrtc[32];
    char rev[TT_ID_MAX]; /* the kernel revision compiled; always set */
} tt_worker_hello;

typedef struct tt_worker tt_worker;

/*
 * Loads the driver, opens GPU opts->gpu and fills *hello. Without a usable
 * GPU returns TT_ERR_NOGPU with hello->has_gpu = 0 (gpu_count and rev still
 * set) and a message. *out is the caller's (tt_worker_close).
 */
int tt_worker_open(const tt_worker_opts *opts, tt_worker **out, tt_worker_hello *hello, char *err,
                   size_t errlen);
void tt_worker_close(tt_worker *w);

/* One MEASURE. */
typedef struct tt_wtask {
    int64_t id;
    tt_key_v2 key;
    int fast;             /* 1: successive halving; 0: exhaustive */
    int32_t batch, heads; /* 0: the benchmark's rule */
    const tt_config *avoid;
    int navoid;
} tt_wtask;

/* Lines for the daemon go through this (one protocol line, no '\n'). */
typedef void (*tt_wemit)(void *ud, const char *line);

/* The key was measured and DONE sent: the worker goes on. */
#define TT_WORKER_NEXT 0
/* A variant faulted or timed out (reported) or the context broke: exit so
 * the daemon restarts the worker on a fresh context. */
#define TT_WORKER_EXIT 1

int tt_worker_measure(tt_worker *w, const tt_wtask *t, tt_wemit emit, void *ud);

/* The worker's helper kernels (worker_check.cu: random fill, poison and
 * error checks) compiled by NVRTC for sm_`arch`; needs no GPU. *cubin is
 * malloc'ed (free()). */
int tt_worker_check_cubin(int arch, void **cubin, size_t *len, char *err, size_t errlen);

#endif
