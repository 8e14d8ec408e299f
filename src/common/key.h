/* Tuning keys: names of dtypes, the head dims we support, validation, the
 * regime of a key. */
#ifndef TT_COMMON_KEY_H
#define TT_COMMON_KEY_H

#include "tiletune.h"

/* Upper bound of a sequence length in a key: 16 Mi tokens. */
#define TT_SEQLEN_MAX (16 * 1024 * 1024)
/* Upper bound of a key's GQA group (heads_q / heads_kv). */
#define TT_GROUP_MAX 256

const char *tt__dtype_name(tt_dtype d); /* "fp16", "bf16", or NULL */
int tt__dtype_parse(const char *s, tt_dtype *out);
int tt__head_dim_supported(int32_t d); /* 1 for 32, 64, 96, 128, 256 */
/* 1 if s is a GPU fingerprint or kernel revision: 1..32 lowercase hex. */
int tt__is_hex_id(const char *s);
/* 0, or TT_ERR_UNSUPPORTED / TT_ERR_RANGE / TT_ERR_INVAL with a message.
 * The group must be 1..TT_GROUP_MAX, or 0, which reads as 1. */
int tt__key_check(const tt_key_v2 *key, char *err, size_t errlen);

/*
 * The regime of a key (docs/protocol.md): decode (seqlen_q <= 16: one or a
 * few query tokens, speculative decoding), chunk (a longer query over a
 * cache at least 4 times as long: chunked prefill), prefill (the rest:
 * square-ish training and prefill). Each has its own kernel schedules and
 * built-in default; a nearest match never crosses from one to another.
 */
typedef enum tt__regime {
    TT_REGIME_DECODE = 0,
    TT_REGIME_CHUNK = 1,
    TT_REGIME_PREFILL = 2,
} tt__regime;
#define TT_REGIME_DECODE_MAX_Q 16 /* seqlen_q of decode keys: 1..16 */
#define TT_REGIME_CHUNK_RATIO 4   /* chunk: seqlen_k >= 4 * seqlen_q */
tt__regime tt__key_regime(const tt_key_v2 *key);
const char *tt__regime_name(tt__regime r); /* "decode", "chunk", "prefill" */

/*
 * One key for one problem, so that equal problems share a tuning record:
 * group 0 reads as 1; prefill keys have group 1 (their kernels do not pack
 * a group's rows: heads are independent CTAs, the group changes nothing
 * they schedule); bottom-right causal with one query row is no mask, and
 * with seqlen_q == seqlen_k it is top-left's mask.
 */
void tt__key_canon(tt_key_v2 *key);
/* The released key as a v2 one (group 1), and back (group dropped). */
void tt__key_from_v1(const tt_key *k1, tt_key_v2 *out);
void tt__key_to_v1(const tt_key_v2 *key, tt_key *out);

/* The answer for a key with nothing tuned: the built-in default config,
 * match default, the key's own seqlens, no tflops (daemon and client). */
int tt__lookup_default(const tt_key_v2 *key, tt_lookup_result *out);
/* sm_90's own default rows for the key's regime (decode and short chunks:
 * family splitkv; prefill and long chunks: ws, wgmma for bottom-right
 * masks with seqlen_q > seqlen_k): 0, or TT_ERR_UNSUPPORTED for a key they do not cover. Family
 * ws's descriptor names this table; the default run on a device is the
 * kernels layer's tt__config_default_arch. */
int tt__config_default_sm90(const tt_key_v2 *key, tt_config *out);
/* A default of sm_`arch` of a family other than `not_family`, for a call
 * the default's family cannot take (ws and a stride its copy engine cannot
 * map): that arch's other dense rows (sm_90: ws, wgmma), else the portable
 * row; 0 or TT_ERR_UNSUPPORTED. */
int tt__config_default_other(const tt_key_v2 *key, int32_t arch, int32_t not_family, tt_config *out);
/* sm_`arch`'s dense default for a key whose call fills the GPU with dense
 * tiles (the caller knows the batch; the key does not): chunks, and decode
 * over few keys of group 1 or of 16 tokens. `one_wave`: the call's 64-row
 * blocks are no more than the SMs, so a tile that takes a whole SM still
 * runs in one wave (the longer-key rows where they were measured faster).
 * 0, or TT_ERR_UNSUPPORTED where the arch has none or the key is neither
 * (splitkv stays). */
int tt__config_default_dense_filled(const tt_key_v2 *key, int32_t arch, int one_wave, tt_config *out);
/* sm_`arch`'s splitkv row for a call of `units` (batch x K/V heads) on
 * `sm_count` SMs over `seqlen_k` keys, a paged cache or not, where the
 * units decide it: for the 16-row class (one query block), more than one
 * wave of one CTA an SM (defaults.c: splitkv_sm90_wide) or a quarter wave
 * or less over a short cache (splitkv_sm90_few_units); for 17-64 rows
 * over a contiguous cache, fewer than half a wave (splitkv_sm90_spec_units:
 * the tile a size down, two query blocks a unit). 0,
 * else TT_ERR_UNSUPPORTED (the row by packed rows stays). */
int tt__config_default_splitkv_units(int32_t arch, int64_t packed_rows, int64_t seqlen_k, int32_t head_dim,
                                     int64_t units, int sm_count, int paged, tt_config *out);
/* The most packed rows (seqlen_q x GQA group) a chunk key of sm_`arch`
 * runs on splitkv by default; past them a dense family's rows (sm_90:
 * 1024, then ws). No limit (INT64_MAX) where splitkv serves every chunk. A
 * varlen batch gives its sequences past it to that dense family. */
int64_t tt__config_chunk_splitkv_rows(int32_t arch);
/* The splitkv default of `arch` (90: sm_90's rows, else the portable
 * ones) for `packed_rows` (seqlen_q x GQA group) over `seqlen_k` keys (the
 * longest sequence's) at head_dim. */
int tt__config_default_splitkv(int32_t arch, int64_t packed_rows, int64_t seqlen_k, int32_t head_dim,
                               tt_config *out);
/*
 * The floating-point work of one attention forward, 4 * batch * heads *
 * pairs * head_dim, pairs being the (query, key) pairs computed. Causal
 * (1: top-left aligned, query i sees keys j <= i; 2: bottom-right, j <=
 * i + seqlen_k - seqlen_q): a square problem counts half the pairs, the
 * convention every FlashAttention figure uses; any other shape counts the
 * pairs its mask leaves. 0 for a non-positive size.
 */
double tt__sdpa_flops(int64_t batch, int64_t heads, int64_t seqlen_q, int64_t seqlen_k, int64_t head_dim,
                      int causal);

/*
 * The inference grid (docs/tuning.md): seqlen_q 1, 2, 4, 8, 16, 64, 512 x
 * seqlen_k 1k, 4k, 16k, 32k, 128k x GQA group 1, 4, 8 x head_dim 128, 64 x
 * bf16, fp16; causal bottom-right where seqlen_q > 1, none for one query
 * token. Keys that canonicalize alike appear once. Writes up to `cap` keys
 * (gpu and rev empty) and returns how many the grid has.
 */
size_t tt__inference_grid(tt_key_v2 *out, size_t cap);

#endif
