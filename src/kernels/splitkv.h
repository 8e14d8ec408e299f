/*
 * Family splitkv: its host half. The descriptor (validity rules that
 * mirror splitkv.cu's #errors, shared memory, the variant space, the
 * built-in default) and the launcher behind tt_sdpa_fwd_kvcache,
 * tt_sdpa_fwd_varlen and tt_sdpa_fwd with a splitkv config.
 */
#ifndef TT_KERNELS_SPLITKV_H
#define TT_KERNELS_SPLITKV_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/splitkv_params.h"
#include "tiletune.h"
#include "kernels/variants.h"

/* The kernel's combine entry (the main one is TT_SDPA_ENTRY). */
#define TT_SPLITKV_COMBINE_ENTRY "tt_splitkv_combine_kernel"

/* The family's kernel source (splitkv_params.h + splitkv.cu), its own
 * revision; owned by the library. */
struct tt__source;
int tt__splitkv_source(const struct tt__source **out, char *err, size_t errlen);

/* 1 for the head dims the family serves: 32, 64, 128, 256. */
int tt__splitkv_head_dim_ok(int64_t d);

/* 0 if `c` (family splitkv) is legal for head_dim and fits `dev` (NULL:
 * shape rules only); TT_ERR_INVAL / TT_ERR_UNSUPPORTED / TT_ERR_RANGE. */
int tt__splitkv_check(const tt_config *c, int32_t head_dim, const tt__device_limits *dev, char *err,
                      size_t errlen);
/* Dynamic shared memory of a splitkv config, bytes. */
long tt__splitkv_smem(const tt_config *c, int32_t head_dim);

/* Packed rows of a query block: seqlen_q x query heads per KV head. */
int64_t tt__splitkv_rows(int64_t seqlen_q, int64_t group);

/* The built-in default for `rows` packed rows (seqlen_q x group) and
 * seqlen_k on `dev` (NULL: sm_90's limits). */
int tt__splitkv_default(int64_t rows, int64_t seqlen_k, int32_t head_dim, const tt__device_limits *dev,
                        tt_config *out);

/* The variant space for `rows` packed rows: the configs legal for head_dim
 * on dev, in table order. Writes up to cap, the size in *n. */
int tt__splitkv_space(int64_t rows, int32_t head_dim, const tt__device_limits *dev, tt_config *out,
                      size_t cap, size_t *n);

/* The split count a launch uses: from the config's split_ctas (0: as many
 * CTAs as fit on an SM), the SM count, `ctas` = sequences x KV heads x
 * query blocks and the most key tiles a CTA visits. `fit`: CTAs of the
 * variant one SM holds. */
int tt__splitkv_splits(const tt_config *c, int sm_count, int fit, int64_t ctas, int64_t max_tiles);

/* tt_sdpa_fwd's route for a splitkv config: the dense arguments, already
 * checked by tt__sdpa_params_from_args. */
int tt__splitkv_fwd_dense(const tt_sdpa_args *a, char *err, size_t errlen);

#endif
