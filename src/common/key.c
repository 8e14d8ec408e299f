#include "common/key.h"

#include <stdio.h>
#include <string.h>

const char *tt__dtype_name(tt_dtype d) {
    switch (d) {
    case TT_DTYPE_FP16: return "fp16";
    case TT_DTYPE_BF16: return "bf16";
    }
    return NULL;
}

int tt__dtype_parse(const char *s, tt_dtype *out) {
    if (!s) return TT_ERR_INVAL;
    if (strcmp(s, "fp16") == 0) *out = TT_DTYPE_FP16;
    else if (strcmp(s, "bf16") == 0) *out = TT_DTYPE_BF16;
    else return TT_ERR_UNSUPPORTED;
    return 0;
}

int tt__head_dim_supported(int32_t d) { return d == 32 || d == 64 || d == 96 || d == 128 || d == 256; }

int tt__is_hex_id(const char *s) {
    size_t n = strnlen(s, TT_ID_MAX);
    if (n == 0 || n >= TT_ID_MAX) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

int tt__key_check(const tt_key_v2 *key, char *err, size_t errlen) {
#define FAIL(code, ...)                                        \
    do {                                                       \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__); \
        return code;                                           \
    } while (0)
    if (!key) FAIL(TT_ERR_INVAL, "no key");
    if (!tt__dtype_name(key->dtype)) FAIL(TT_ERR_UNSUPPORTED, "unsupported dtype %d", (int)key->dtype);
    if (!tt__head_dim_supported(key->head_dim))
        FAIL(TT_ERR_UNSUPPORTED, "unsupported head_dim %d (32, 64, 96, 128 or 256)", (int)key->head_dim);
    if (key->causal < TT_CAUSAL_NONE || key->causal > TT_CAUSAL_BOTTOM_RIGHT)
        FAIL(TT_ERR_RANGE, "causal must be 0 (none), 1 (top-left) or 2 (bottom-right)");
    if (key->group < 0 || key->group > TT_GROUP_MAX)
        FAIL(TT_ERR_RANGE, "group %d out of range 1..%d", (int)key->group, TT_GROUP_MAX);
    if (key->seqlen_q < 1 || key->seqlen_q > TT_SEQLEN_MAX)
        FAIL(TT_ERR_RANGE, "seqlen_q %lld out of range 1..%d", (long long)key->seqlen_q, TT_SEQLEN_MAX);
    if (key->seqlen_k < 1 || key->seqlen_k > TT_SEQLEN_MAX)
        FAIL(TT_ERR_RANGE, "seqlen_k %lld out of range 1..%d", (long long)key->seqlen_k, TT_SEQLEN_MAX);
    if (memchr(key->gpu, '\0', TT_ID_MAX) == NULL || (key->gpu[0] && !tt__is_hex_id(key->gpu)))
        FAIL(TT_ERR_INVAL, "gpu must be a hex fingerprint");
    if (memchr(key->rev, '\0', TT_ID_MAX) == NULL || (key->rev[0] && !tt__is_hex_id(key->rev)))
        FAIL(TT_ERR_INVAL, "rev must be a hex kernel revision");
    return 0;
#undef FAIL
}

int tt__lookup_default(const tt_key_v2 *key, tt_lookup_result *out) {
    tt_lookup_result r;
    memset(&r, 0, sizeof r);
    int rc = tt_config_default_v2(key, &r.config);
    if (rc < 0) return rc;
    r.match = TT_MATCH_DEFAULT;
    r.seqlen_q = key->seqlen_q;
    r.seqlen_k = key->seqlen_k;
    r.group = key->group > 1 ? key->group : 1;
    *out = r;
    return 0;
}

tt__regime tt__key_regime(const tt_key_v2 *key) {
    if (key->seqlen_q <= TT_REGIME_DECODE_MAX_Q) return TT_REGIME_DECODE;
    if (key->seqlen_k / TT_REGIME_CHUNK_RATIO >= key->seqlen_q) return TT_REGIME_CHUNK;
    return TT_REGIME_PREFILL;
}

const char *tt__regime_name(tt__regime r) {
    switch (r) {
    case TT_REGIME_DECODE: return "decode";
    case TT_REGIME_CHUNK: return "chunk";
    case TT_REGIME_PREFILL: return "prefill";
    }
    return "?";
}

void tt__key_canon(tt_key_v2 *key) {
    if (key->group == 0) key->group = 1;
    if (key->causal == TT_CAUSAL_BOTTOM_RIGHT) {
        if (key->seqlen_q == 1) key->causal = TT_CAUSAL_NONE;
        else if (key->seqlen_q == key->seqlen_k) key->causal = TT_CAUSAL_TOP_LEFT;
    }
    if (tt__key_regime(key) == TT_REGIME_PREFILL) key->group = 1;
}

void tt__key_from_v1(const tt_key *k1, tt_key_v2 *out) {
    memset(out, 0, sizeof *out);
    out->dtype = k1->dtype;
    out->head_dim = k1->head_dim;
    out->causal = k1->causal;
    out->seqlen_q = k1->seqlen_q;
    out->seqlen_k = k1->seqlen_k;
    memcpy(out->gpu, k1->gpu, sizeof out->gpu);
    memcpy(out->rev, k1->rev, sizeof out->rev);
    out->group = 1;
}

void tt__key_to_v1(const tt_key_v2 *key, tt_key *out) {
    memset(out, 0, sizeof *out);
    out->dtype = key->dtype;
    out->head_dim = key->head_dim;
    out->causal = key->causal;
    out->seqlen_q = key->seqlen_q;
    out->seqlen_k = key->seqlen_k;
    memcpy(out->gpu, key->gpu, sizeof out->gpu);
    memcpy(out->rev, key->rev, sizeof out->rev);
}

size_t tt__inference_grid(tt_key_v2 *out, size_t cap) {
    static const int64_t lq[] = {1, 2, 4, 8, 16, 64, 512};
    static const int64_t lk[] = {1024, 4096, 16384, 32768, 131072};
    static const int32_t groups[] = {1, 4, 8};
    static const int32_t hdims[] = {128, 64};
    static const tt_dtype dtypes[] = {TT_DTYPE_BF16, TT_DTYPE_FP16};
#define N_(a) (sizeof(a) / sizeof((a)[0]))
    size_t n = 0;
    for (size_t d = 0; d < N_(dtypes); d++)
        for (size_t h = 0; h < N_(hdims); h++)
            for (size_t q = 0; q < N_(lq); q++)
                for (size_t k = 0; k < N_(lk); k++)
                    for (size_t g = 0; g < N_(groups); g++) {
                        tt_key_v2 key;
                        memset(&key, 0, sizeof key);
                        key.dtype = dtypes[d];
                        key.head_dim = hdims[h];
                        key.seqlen_q = lq[q];
                        key.seqlen_k = lk[k];
                        key.causal = lq[q] > 1 ? TT_CAUSAL_BOTTOM_RIGHT : TT_CAUSAL_NONE;
                        key.group = groups[g];
                        tt__key_canon(&key);
                        /* A prefill key is the same for every group: keep
                         * the first (its group loop starts at 1). */
                        if (key.group != groups[g]) continue;
                        if (n < cap) out[n] = key;
                        n++;
                    }
#undef N_
    return n;
}

/* Pairs query i may see, summed over i, with min(max(i + 1 + shift, 0),
 * lk) in closed form: the rows before the mask reaches key 0 see none,
 * the diagonal band grows by one a row, the rest see every key. */
static double causal_pairs(int64_t lq, int64_t lk, int64_t shift) {
    double sum = 0;
    int64_t first = shift >= 0 ? 0 : -shift; /* first row that sees key 0 */
    if (first >= lq) return 0;
    int64_t full = lk - 1 - shift; /* first row that sees every key */
    if (full < first) full = first;
    if (full > lq) full = lq;
    /* rows first..full-1 see i + 1 + shift keys: an arithmetic series */
    double a = (double)(first + 1 + shift), b = (double)(full + shift);
    if (full > first) sum += (a + b) * (double)(full - first) / 2;
    sum += (double)(lq - full) * (double)lk;
    return sum;
}

double tt__sdpa_flops(int64_t batch, int64_t heads, int64_t seqlen_q, int64_t seqlen_k, int64_t head_dim,
                      int causal) {
    if (batch <= 0 || heads <= 0 || seqlen_q <= 0 || seqlen_k <= 0 || head_dim <= 0) return 0;
    double pairs = (double)seqlen_q * (double)seqlen_k;
    if (causal && seqlen_q == seqlen_k) pairs /= 2;
    else if (causal) pairs = causal_pairs(seqlen_q, seqlen_k, causal == 2 ? seqlen_k - seqlen_q : 0);
    return 4.0 * (double)batch * (double)heads * pairs * (double)head_dim;
}
