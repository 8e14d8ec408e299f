/*
 * Compiles one variant of the SDPA kernel to a CUBIN with NVRTC and keeps
 * it in the disk cache (cubin_cache.h).
 *
 * A variant is a config plus the problem's compile-time facts (head_dim,
 * dtype, causal) and the target arch. Its knobs become -D macros by walking
 * the knob list (src/common/knobs.def), so a knob added there reaches the
 * kernel without touching this file. The headers of the source
 * (tt__source_headers) are handed to NVRTC as named headers. The compile report (registers, spills, stack, static shared
 * memory) comes from ptxas' verbose log (-Xptxas=-v), which NVRTC 13 returns
 * as the program log; it is stored with the cubin so a cache hit has it too.
 *
 * Thread-safe: compiles run in parallel threads (NVRTC programs are
 * independent), there is no global lock.
 */
#ifndef TT_KERNELS_JIT_H
#define TT_KERNELS_JIT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/source.h"
#include "tiletune.h"

/* Fault injection (TT_FAULT_INJECT): compiled into the kernel only when the
 * library is built with TT_FAULT_INJECTION (test builds); the worker's
 * isolation tests use them. */
enum { TT_FAULT_NONE = 0, TT_FAULT_OOB_WRITE = 1, TT_FAULT_HANG = 2 };

typedef struct tt__variant {
    tt_config config;
    int32_t head_dim;
    tt_dtype dtype;
    int32_t causal;
    int32_t arch;  /* compute capability major*10 + minor: 80, 86, 89, 90 */
    int32_t fault; /* TT_FAULT_*; != 0 only in TT_FAULT_INJECTION builds */
    /* family splitkv: the tokens a page of the paged KV cache its program
     * reads (a power of two, 1..2^20), 0 the program for a contiguous one */
    int32_t page_size;
} tt__variant;

typedef struct tt__report {
    int32_t registers;    /* per thread */
    int32_t spill_stores; /* bytes */
    int32_t spill_loads;  /* bytes */
    int32_t stack_frame;  /* bytes per thread */
    int32_t static_smem;  /* bytes of __shared__ arrays */
    int32_t dynamic_smem; /* bytes, the family's smem_bytes of the variant */
    int32_t threads;      /* per CTA */
    int32_t from_cache;   /* 1: loaded from the disk cache */
    double compile_ms;    /* wall time of this compile; 0 from the cache */
} tt__report;

/* 1 if the report shows no spill and no stack frame: the only variants
 * the space keeps. */
int tt__report_clean(const tt__report *r);

typedef struct tt__cubin {
    void *data; /* the CUBIN image */
    size_t len;
    tt__report report;
    char key[17];        /* cache key (hex) */
    char rev[TT_ID_MAX]; /* kernel revision it was compiled from */
} tt__cubin;

typedef struct tt__jit_opts {
    const tt__source *source; /* NULL: tt__source_default() */
    const char *cache_dir;    /* NULL: see tt__cubin_cache_dir() */
    int no_cache;             /* 1: neither read nor write the disk cache */
} tt__jit_opts;

/* The kernel's entry point in every compiled module. */
#define TT_SDPA_ENTRY "tt_sdpa_fwd_kernel"

/*
 * Compiles (or loads from the cache) variant `v`. On success *out owns the
 * cubin (tt__cubin_free). TT_ERR_COMPILE with NVRTC's log (as much as fits
 * in err) when the source rejects the variant, e.g. a static_assert on an
 * illegal block shape. `opts` may be NULL. A cache that cannot be used is
 * not an error: the variant is compiled and not cached.
 */
int tt__jit_compile(const tt__jit_opts *opts, const tt__variant *v, tt__cubin **out, char *err,
                    size_t errlen);
void tt__cubin_free(tt__cubin *c);

/* The -D options of a variant as one line ("-DTT_FAMILY=0 -DTT_BLOCK_M=...")
 * for messages and the cache identity. Returns the length or TT_ERR_RANGE. */
int tt__jit_macros(const tt__variant *v, char *buf, size_t len);

/* Parses ptxas' verbose log for the entry TT_SDPA_ENTRY into the report's
 * registers/spills/stack/static_smem. Returns 0, or TT_ERR_NOTFOUND when the
 * log has no report for the entry. Exposed for its unit test. */
int tt__jit_parse_report(const char *log, tt__report *r);

#endif
