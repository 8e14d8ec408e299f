/*
 * The compile pool: compiles a list of variants with NVRTC on CPU threads,
 * in list order, and checks each compiled program against a device's limits
 * (tt__variant_check_report). Its two users: the variant space
 * (tt__space_compile: the whole list, the caller compiling too) and the
 * worker (a key's candidates: the GPU thread waits for each in turn and
 * checks and times it while later ones compile).
 *
 * Variants that differ only in knobs no macro carries (a family's
 * host_knobs) are one program: it compiles once and its items share the
 * result, its cubin included. Programs start in the order of their first
 * item, so waiting for the items in order waits for no later compile.
 */
#ifndef TT_KERNELS_POOL_H
#define TT_KERNELS_POOL_H

#include <stddef.h>

#include "kernels/jit.h"
#include "kernels/variants.h"

/* More threads than this buy nothing: NVRTC takes a core for seconds. */
#define TT_POOL_MAX_THREADS 64

typedef struct tt__pool tt__pool;

typedef struct tt__pool_opts {
    tt__jit_opts jo;       /* source and cubin cache (zero: the defaults) */
    tt__device_limits dev; /* the limits a compiled program is checked against */
    int threads;           /* threads started, at most TT_POOL_MAX_THREADS; 0: the waiting caller compiles */
    int nice;              /* > 0: each thread lowers its own priority by this much */
    int caller_compiles;   /* 1: a waiting caller compiles the next program rather than sleep */
    int keep_cubins;       /* 1: keep each good program's cubin for tt__pool_cubin */
} tt__pool_opts;

/*
 * Starts compiling v[0..n) (copied). Threads that fail to start cost speed
 * only: with none, each wait compiles in the caller. TT_ERR_NOMEM.
 */
int tt__pool_start(const tt__variant *v, size_t n, const tt__pool_opts *o, tt__pool **out, char *err,
                   size_t errlen);

/*
 * Waits for item i's program: TT_VARIANT_OK, TT_VARIANT_COMPILE_ERROR,
 * TT_VARIANT_SPILLS or TT_VARIANT_SMEM; TT_VARIANT_UNCHECKED if the pool
 * was cancelled before it started (or i is out of range).
 */
tt__variant_status tt__pool_wait(tt__pool *p, size_t i);

/* Item i's outcome once compiled (after tt__pool_wait), valid until
 * tt__pool_free: the compile report (zero unless compiled), the message of a compile error
 * or a failed check ("" for none), the cubin (NULL unless TT_VARIANT_OK and
 * keep_cubins; shared by the items of one program, owned by the pool). */
const tt__report *tt__pool_report(tt__pool *p, size_t i);
const char *tt__pool_error(tt__pool *p, size_t i);
const tt__cubin *tt__pool_cubin(tt__pool *p, size_t i);

/* The distinct programs of the list: at most n. */
size_t tt__pool_programs(const tt__pool *p);

/* Nothing new starts; compiles under way finish. Waits return at once. */
void tt__pool_cancel(tt__pool *p);

/* Cancels, joins the threads and frees everything, the cubins too. */
void tt__pool_free(tt__pool *p);

#endif
