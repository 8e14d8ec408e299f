/*
 * Family splitkv's host half beyond its descriptor (splitkv/family.c):
 * the built-in default and the split count, and the launcher behind
 * tt_sdpa_fwd_kvcache, tt_sdpa_fwd_varlen (their config chosen in
 * src/client/sdpa.c) and the family's launch hook (tt_sdpa_fwd and the
 * tuner's worker with a splitkv config: the dense layout).
 */
#ifndef TT_KERNELS_SPLITKV_SPLITKV_H
#define TT_KERNELS_SPLITKV_SPLITKV_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/launch.h"
#include "kernels/splitkv/params.h"
#include "kernels/variants.h"
#include "tiletune.h"

/* The kernel's merge entry (the main one is TT_SDPA_ENTRY). */
#define TT_SPLITKV_COMBINE_ENTRY "tt_splitkv_combine_kernel"

/* 1 for the head dims the family serves: 32, 64, 128, 256. */
int tt__splitkv_head_dim_ok(int64_t d);

/* Packed rows of a query block: seqlen_q x query heads per KV head. */
int64_t tt__splitkv_rows(int64_t seqlen_q, int64_t group);

/* A varlen batch in two row classes, each a launch on its own tile: the
 * short one of the sequences of at most class_rows packed rows, the rest
 * (the decode sequences of a batch with chunks in it kept off the chunks'
 * 128-row tile). 16 rows, the decode tile's: on the H200 the mixed batch
 * of bench/inference/decode.py ran 0.96x the sum of its dense runs so
 * (the short class's splits counted by the planner, its chunk on ws
 * alongside), 1.05x in one launch, and 1.18x with 64 rows before (its
 * speculative sequences on their 64-row tile too; docs/perf.md). Its
 * most query rows, where the batch's sequences splitkv keeps (keep_q
 * query rows at most) reach past them; else 0, one launch. The caller
 * keeps one launch where both classes' configs have the same tile. */
#define TT_SPLITKV_CLASS_ROWS 16
int64_t tt__splitkv_class_q(int64_t group, int64_t keep_q, int64_t class_rows);
/* class_rows as the launch runs it: TT_SPLITKV_CLASS_ROWS, or
 * $TILETUNE_SPLITKV_CLASS_ROWS (launch.c's A/B switches; 0: none). */
int64_t tt__splitkv_class_rows(void);

/* Pages of at least this many tokens keep a d128 decode's 128-key tile
 * (tt__splitkv_default_paged): two of the 4-warp tile's 8-row passes, one
 * page lookup for both. */
#define TT_SPLITKV_LONG_PAGE 16
/* long pages as the launch takes them: TT_SPLITKV_LONG_PAGE, or
 * $TILETUNE_SPLITKV_LONG_PAGE (launch.c's A/B switches). */
int64_t tt__splitkv_long_page(void);

/* Whether a contiguous cache's CTAs start their runs scattered (37c tiles
 * in, mainloop.cuh) on this device: where runs of a whole unit or half of
 * one stand a power of two apart, the H200 (a 6144-bit bus of six HBM3e
 * stacks) streamed them 0.3-0.9% faster so, the H100 SXM (5120 bits, five
 * HBM3 stacks) 0.4-2.3% slower (docs/perf.md). So only a bus this wide
 * scatters them; `forced` 0 or 1 (launch.c's A/B switch) decides instead,
 * -1 leaves it to the device. An unknown bus (0) walks from the start. */
#define TT_SPLITKV_ROTATE_BUS_BITS 6144
int tt__splitkv_rotates(const tt__device_limits *dev, int forced);
/* The default for a paged cache of `page_size` tokens a page from the
 * contiguous one: a decode tile with at most 3 stages at d128 (2 at other
 * head dims), and 64 keys at head_dim >= 128 on pages shorter than
 * long_page tokens (see splitkv/family.c). */
void tt__splitkv_default_paged(tt_config *c, int32_t head_dim, int64_t page_size, int64_t long_page);
/* The built-in default for `rows` packed rows (seqlen_q x group) and
 * seqlen_k on `dev` (NULL: sm_90's limits), for a call of `units` (batch x
 * K/V heads; 0: unknown, the key's row) over a contiguous cache or
 * (`paged`) before tt__splitkv_default_paged's own changes. */
int tt__splitkv_default(int64_t rows, int64_t seqlen_k, int32_t head_dim, const tt__device_limits *dev,
                        int64_t units, int paged, tt_config *out);

/* The split count a launch uses: from the config's split_ctas (0: as many
 * CTAs as fit on an SM), the SM count, `ctas` = sequences x KV heads x
 * query blocks and the most key tiles a CTA visits. `fit`: CTAs of the
 * variant one SM holds. */
int tt__splitkv_splits(const tt_config *c, int sm_count, int fit, int64_t ctas, int64_t max_tiles);

/* The dynamic shared memory a CTA needs when its split takes at most
 * `tiles_per_split` key tiles: the ring's slots past that many are never
 * filled, so a split of fewer tiles than the config's stages needs fewer
 * (never under the merge's tile). */
int64_t tt__splitkv_ring_smem(const tt_config *c, int32_t head_dim, int64_t tiles_per_split);

/* The balanced grid (splitkv/params.h) for `units` (sequence, KV head)
 * pairs of `tiles` key tiles each, one query block a sequence: *ctas CTAs,
 * one full wave of the same per-SM target as tt__splitkv_splits; returns
 * the most CTAs a unit spans (the merge's splits and the workspace's), or
 * 0 (and *ctas 0) where the split count's grid serves as well: one tile a
 * unit, or whole units a CTA. */
int tt__splitkv_balance(const tt_config *c, int sm_count, int fit, int64_t units, int64_t tiles, int *ctas);

/* Varlen: the key tiles a split takes, the same for every sequence, so a
 * sequence gets splits in proportion to its length; from the whole batch's
 * `work_tiles` (KV heads x its key tiles) and the same per-SM target as
 * tt__splitkv_splits. *splits: the grid's splits (the longest sequence's).
 * 0 (and *splits 1): no split. */
int tt__splitkv_split_tiles(const tt_config *c, int sm_count, int fit, int64_t work_tiles, int64_t max_tiles,
                            int *splits);
/* Varlen where every sequence is one query block (`batch` sequences of
 * total_k keys on heads_kv KV heads): the fewest tiles a split that keep
 * all CTAs to one wave, whatever the lengths, where batch x heads_kv
 * leaves room, else a wave's share of the tiles; *splits as above. */
int tt__splitkv_varlen_tiles(const tt_config *c, int sm_count, int fit, int64_t total_k, int64_t batch,
                             int64_t heads_kv, int64_t max_tiles, int *splits);
/* The CTA slots of one wave the split fills: the config's split target an
 * SM (at most the `fit` CTAs an SM holds) x sm_count. */
int64_t tt__splitkv_slots(const tt_config *c, int sm_count, int fit);

/* One KV-cache or varlen call, checked: its kernel parameters (all but the
 * split and the workspace), the device it runs on and what its config
 * choice needs. */
typedef struct tt__splitkv_target {
    tt_splitkv_params params;
    CUcontext ctx;
    tt__device_limits limits;
    tt_key key;       /* dtype, head_dim, causal, seqlen_q / seqlen_k (maxima) */
    int64_t rows_max; /* packed rows of the longest sequence: seqlen_q x group */
    int64_t total_k;  /* varlen: keys of the whole batch; 0: dense or KV cache */
} tt__splitkv_target;

int tt__splitkv_kvcache_target(const tt_sdpa_kvcache_args *a, tt__splitkv_target *t, char *err,
                               size_t errlen);
int tt__splitkv_varlen_target(const tt_sdpa_varlen_args *a, tt__splitkv_target *t, char *err, size_t errlen);

/* Runs `t` with `cfg` (a splitkv config, checked against the device) on
 * `stream` with the caller's workspace (`ws`, `ws_len`; NULL: the
 * library's). With `ws_bytes` non-NULL nothing runs: the bytes of
 * workspace the call needs are written there (0: none). */
int tt__splitkv_run(const tt__splitkv_target *t, const tt_config *cfg, void *ws, size_t ws_len, void *stream,
                    size_t *ws_bytes, char *err, size_t errlen);

/* tt_sdpa_fwd's dense parameters as the family's (GQA rows packed, no
 * pages, no split yet): TT_ERR_RANGE where the packed rows overflow. */
int tt__splitkv_params_dense(const tt_sdpa_params *d, tt_splitkv_params *out, char *err, size_t errlen);

/* The family's launch hook (tt__family.launch): tt_sdpa_fwd's dense
 * layout, a contiguous KV cache, with the library's workspace. */
int tt__splitkv_launch_dense(const tt__kernel *k, const tt_sdpa_params *p, void *stream, char *err,
                             size_t errlen);

#endif
