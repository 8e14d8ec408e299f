/* Tuning keys: names of dtypes, the head dims we support, validation. */
#ifndef TT_COMMON_KEY_H
#define TT_COMMON_KEY_H

#include "tiletune.h"

/* Upper bound of a sequence length in a key: 16 Mi tokens. */
#define TT_SEQLEN_MAX (16 * 1024 * 1024)

const char *tt__dtype_name(tt_dtype d); /* "fp16", "bf16", or NULL */
int tt__dtype_parse(const char *s, tt_dtype *out);
int tt__head_dim_supported(int32_t d); /* 1 for 32, 64, 96, 128, 256 */
/* 1 if s is a GPU fingerprint or kernel revision: 1..32 lowercase hex. */
int tt__is_hex_id(const char *s);
/* 0, or TT_ERR_UNSUPPORTED / TT_ERR_RANGE / TT_ERR_INVAL with a message. */
int tt__key_check(const tt_key *key, char *err, size_t errlen);
/* The answer for a key with nothing tuned: the built-in default config,
 * match default, the key's own seqlens, no tflops (daemon and client). */
int tt__lookup_default(const tt_key *key, tt_lookup_result *out);
/* The default for a device of compute capability `arch` (86 = sm_86): the
 * arch's own row where it has one (sm_90: family wgmma), else
 * tt_config_default's portable one. */
int tt__config_default_arch(const tt_key *key, int32_t arch, tt_config *out);
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

#endif
