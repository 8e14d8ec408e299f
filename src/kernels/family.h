/*
 * Kernel families: one descriptor a family, in one table. A family is one
 * device file (its mainloop over skeleton.cuh), one host descriptor
 * (<family>/family.c) and one row of tt__families (family.c); the variant
 * space (variants.c), the JIT (jit.c), the launcher (launch.c) and the
 * checks read everything family-specific from here. docs/kernels.md has
 * the recipe.
 */
#ifndef TT_KERNELS_FAMILY_H
#define TT_KERNELS_FAMILY_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/sdpa_params.h"
#include "kernels/variants.h"
#include "tiletune.h"

struct tt__kernel;

/* Knob indices and bits, in knobs.def order. */
enum {
#define TT_KNOB(name, macro, min, max, names) TT__KNOB_##name,
#include "common/knobs.def"
#undef TT_KNOB
    TT__KNOB_COUNT
};
#define TT__KNOB_BIT(name) (1u << TT__KNOB_##name)

#define TT__SPACE_VALUES_MAX 8
typedef struct tt__knob_values {
    int32_t n;
    int32_t v[TT__SPACE_VALUES_MAX];
} tt__knob_values;

/* A family's tuned space: the values of each knob it reads, one list per
 * knob of knobs.def (the `family` list unused). The space is their
 * product in knobs.def order, the last knob fastest, less what the shape
 * rules or the device refuse. */
typedef struct tt__family_space {
#define TT_KNOB(name, macro, min, max, names) tt__knob_values name;
#include "common/knobs.def"
#undef TT_KNOB
} tt__family_space;

/* A built-in default table: `arch` 0 is the portable table (valid on every
 * arch the family runs on), else the rows of that arch only. The rows live
 * in src/common/defaults.c: the daemon and the CLI answer defaults without
 * the kernels layer. */
typedef struct tt__family_defaults {
    int32_t arch;
    int (*lookup)(const tt_key_v2 *key, tt_config *out); /* 0 or TT_ERR_UNSUPPORTED */
} tt__family_defaults;

/* A device file of a family, embedded (tt_embed) and handed to NVRTC as a
 * named header. */
typedef struct tt__device_file {
    const char *name; /* its path under src/kernels: the header name */
    const char *text;
    const unsigned long *len;
} tt__device_file;
#define TT__FAMILY_FILES_MAX 4

/* What a family's launch adds to the plain one: kernel parameters after
 * the parameter struct (pointers into `buf`) and the grid. */
#define TT__LAUNCH_EXTRA_MAX 4
typedef struct tt__launch_extra {
    _Alignas(64) unsigned char buf[TT__LAUNCH_EXTRA_MAX * 128];
    void *params[TT__LAUNCH_EXTRA_MAX];
    int n;            /* parameters after the struct */
    unsigned grid[3]; /* preset to the plain grid */
} tt__launch_extra;

typedef struct tt__family {
    int32_t id;                 /* its value of the `family` knob */
    const char *name;           /* knobs.def's name for that value */
    int32_t arch_min, arch_max; /* compute capabilities it runs on */
    const char *arch_suffix;    /* NVRTC target suffix: "a" for sm_90a features, else "" */
    /* Its device files: [0] the mainloop (TT_MAINLOOP: it defines
     * tt_sdpa_fwd_kernel, over skeleton.cuh, which it includes, or over a
     * contract of its own), then headers it includes; a NULL name ends
     * the list. */
    tt__device_file files[TT__FAMILY_FILES_MAX];
    uint32_t reads;         /* TT__KNOB_BIT of each knob its code reads */
    tt_config pinned;       /* the value of each knob it does not read */
    tt__family_space space; /* the tuned values of each knob it reads */
    int32_t stages_min;     /* the fewest stages it takes: no choice, never pruned by seqlen */
    int32_t causal_max;     /* the masks its mainloop has: 1 top-left, 2 bottom-right too */
    /* Its shape rules for `c` at `head_dim` (pinned knobs, registers and
     * the device are checked by tt__variant_check): 0 or TT_ERR_INVAL. */
    int (*check)(const tt_config *c, int32_t head_dim, char *err, size_t errlen);
    /* Fragment registers a thread holds (accumulators and operands), and
     * the most a thread may hold with `c`'s CTA size: over it, ptxas
     * spills for sure, so such shapes are illegal rather than compiled to
     * be pruned. */
    int32_t (*registers)(const tt_config *c, int32_t head_dim);
    int32_t (*register_budget)(const tt_config *c);
    int64_t (*smem_bytes)(const tt_config *c, int32_t head_dim); /* dynamic, per CTA */
    int32_t (*threads)(const tt_config *c);                      /* per CTA */
    /* The shared memory carveout it asks for, percent of the SM's unified
     * L1 and shared memory (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT);
     * 0 leaves it to the driver. */
    int32_t smem_carveout;
    tt__family_defaults defaults[2]; /* arch 0 or 0-terminated */
    /* Launch specifics, NULL for the plain launch (the parameter struct
     * alone, grid (ceil(seqlen_q / block_m), heads_q, batch)): called in
     * the kernel's context, fills `x`; 0 or a negative code with a
     * message. */
    int (*launch_extra)(const tt__variant *v, const tt_sdpa_params *p, tt__launch_extra *x, char *err,
                        size_t errlen);
    /* 0 if the family's kernel cannot run `p` (strides it cannot take):
     * tt__sdpa_launch then runs the device's default of another family,
     * as it does for a causal mode over causal_max. NULL: it runs every
     * checked `p`. */
    int (*runs)(const tt_sdpa_params *p, int32_t causal);
    /* Knobs only its launch reads (a subset of `reads`): the JIT defines
     * no macro for them, so configs that differ only there are one
     * program, compiled once (splitkv's split_ctas). */
    uint32_t host_knobs;
    /* 0 if `c`, legal, is no candidate for `key` at GQA group `group`
     * (splitkv: tiles larger than the packed rows, seqlen_q x group,
     * need). NULL: every legal config is. */
    int (*useful)(const tt_config *c, const tt_key *key, int32_t group);
    /* A second entry of its program the launch needs (NULL: none); loaded
     * beside TT_SDPA_ENTRY into tt__kernel.fn2. */
    const char *entry2;
    /* Its own launch path, NULL for the plain one (launch_extra): for a
     * family whose kernel takes another parameter struct or runs as more
     * than one launch. splitkv: its own parameters (packed GQA rows,
     * pages, varlen offsets), a split count from the SM count, a
     * workspace for the partial results and, for larger tiles, the merge
     * kernel after the main one; launch_extra's one launch cannot say
     * that. Runs `p` with `k` on `stream`, entering k's context itself
     * (tt__ctx_enter); 0 or a negative code with a message. */
    int (*launch)(const struct tt__kernel *k, const tt_sdpa_params *p, void *stream, char *err,
                  size_t errlen);
} tt__family;

/* The table, indexed by family id (tt__families[i]->id == i). */
extern const tt__family *const tt__families[];
extern const size_t tt__family_count;

/* The family of `id`, NULL if there is none. */
const tt__family *tt__family_of(int32_t id);

/* Dynamic shared memory and threads of a config at a head dim, by its
 * family; -1 for an unknown family. */
int64_t tt__config_smem_bytes(const tt_config *c, int32_t head_dim);
int32_t tt__config_threads(const tt_config *c);

/* 0 if sm_`arch` runs family `f`, else TT_ERR_UNSUPPORTED with a message. */
int tt__family_check_arch(const tt__family *f, int32_t arch, char *err, size_t errlen);

/* The built-in default for `key` on sm_`arch`: the first family (table
 * order) with a table of that arch, else tt_config_default's portable one. */
int tt__config_default_arch(const tt_key_v2 *key, int32_t arch, tt_config *out);

#endif
