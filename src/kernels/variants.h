/*
 * The variant space: every family's space (its descriptor in
 * kernels/family.h) enumerated for a key on a device, and the one check of
 * a config.
 *
 * Valid means: a block shape the family's device code accepts for the head
 * dim (its descriptor's rules, so an illegal shape is pruned here rather
 * than discovered by a compile error), the knobs it does not read at their
 * pinned values, its fragment registers within budget, an arch it runs on,
 * dynamic plus static shared memory within the device's opt-in limit, and,
 * once compiled, no register spills in ptxas' report. docs/kernels.md
 * explains the spaces and their size per head dim.
 */
#ifndef TT_KERNELS_VARIANTS_H
#define TT_KERNELS_VARIANTS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/jit.h"
#include "tiletune.h"

typedef struct tt__device_limits {
    int32_t arch;         /* compute capability major*10 + minor */
    int32_t smem_optin;   /* bytes of shared memory a CTA may opt in to */
    int32_t sm_count;     /* 0 if unknown */
    int32_t mem_bus_bits; /* the memory bus's width in bits (the H100 SXM's five
                             HBM3 stacks 5120, the H200's six HBM3e 6144);
                             0 if unknown */
} tt__device_limits;

/* The nominal limits of an arch (CUDA guide: sm_80 163 KB, sm_86/87/89
 * 99 KB, sm_90 227 KB), for compiling the space without a device. */
int tt__device_limits_nominal(int32_t arch, tt__device_limits *out);

/*
 * 0 if `cfg` is a schedule the kernel source supports for `head_dim` and
 * that fits `dev` (NULL: shape rules only). Else TT_ERR_INVAL (illegal
 * shape) or TT_ERR_RANGE (over a device limit) with a message.
 */
int tt__variant_check(const tt_config *cfg, int32_t head_dim, const tt__device_limits *dev, char *err,
                      size_t errlen);

typedef enum tt__variant_status {
    TT_VARIANT_OK = 0,
    TT_VARIANT_UNCHECKED = 1,     /* not compiled (no TT_SPACE_COMPILE; a cancelled pool) */
    TT_VARIANT_COMPILE_ERROR = 2, /* NVRTC rejected it */
    TT_VARIANT_SPILLS = 3,        /* ptxas spilled registers or needs a stack frame */
    TT_VARIANT_SMEM = 4,          /* static + dynamic smem over the limit */
} tt__variant_status;

/*
 * The check of a compiled variant, the same for the space and the worker:
 * TT_VARIANT_SPILLS if ptxas spilled or needs a stack frame ("spills N
 * bytes, stack frame N bytes"), TT_VARIANT_SMEM if static plus dynamic
 * shared memory is over dev's opt-in limit, else TT_VARIANT_OK. The
 * message goes to err (may be NULL).
 */
tt__variant_status tt__variant_check_report(const tt__report *r, const tt__device_limits *dev, char *err,
                                            size_t errlen);

typedef struct tt__space_entry {
    tt__variant variant;
    tt__variant_status status;
    tt__report report; /* valid once compiled */
    char error[256];   /* why it is not OK: the compile error's start, or the failed check */
} tt__space_entry;

enum {
    TT_SPACE_COMPILE = 1u << 0,      /* compile every candidate, drop spills and errors */
    TT_SPACE_KEEP_INVALID = 1u << 1, /* keep dropped entries, marked by status */
};

/*
 * Enumerates the space for `key` (dtype, head_dim, causal, seqlen_q,
 * seqlen_k; seqlen 0 = no seqlen pruning) on `dev`, in table order. With
 * TT_SPACE_COMPILE every candidate is compiled for dev->arch on `threads`
 * threads (<= 0: one per online CPU) through the cubin cache (`jo` may be
 * NULL) and the invalid ones are dropped unless TT_SPACE_KEEP_INVALID.
 * *out is malloc'ed (free()), *n its length.
 */
int tt__space_enumerate(const tt_key *key, const tt__device_limits *dev, unsigned flags,
                        const tt__jit_opts *jo, int threads, tt__space_entry **out, size_t *n, char *err,
                        size_t errlen);

/* The same for the key at GQA group `group` (query heads a K/V head; 0
 * reads as 1): families that pack a group's rows size their tiles by it. */
int tt__space_enumerate_group(const tt_key *key, int32_t group, const tt__device_limits *dev, unsigned flags,
                              const tt__jit_opts *jo, int threads, tt__space_entry **out, size_t *n,
                              char *err, size_t errlen);

/* The compile step of tt__space_enumerate on entries it returned (`*n` of
 * them; fewer after it without TT_SPACE_KEEP_INVALID), on the compile pool
 * (kernels/pool.h) with the caller compiling too: entries that differ only
 * in a family's host-only knobs are compiled once. A compile error's or a
 * failed check's message is in the entry's error. */
int tt__space_compile(tt__space_entry *e, size_t *n, const tt__device_limits *dev, unsigned flags,
                      const tt__jit_opts *jo, int threads, char *err, size_t errlen);

#endif
