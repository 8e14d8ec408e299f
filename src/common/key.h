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
/* sm_90's own default rows (family wgmma): 0, or TT_ERR_UNSUPPORTED for a
 * key they do not cover. Family wgmma's descriptor names this table; the
 * default a device runs is the kernels layer's tt__config_default_arch. */
int tt__config_default_sm90(const tt_key *key, tt_config *out);

#endif
