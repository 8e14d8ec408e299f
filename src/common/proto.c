#include "common/proto.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/key.h"

/* Length of the UTF-8 sequence at p (at most n bytes), or 0 if invalid:
 * overlongs, surrogates and code points past U+10FFFF are invalid. */
static size_t utf8_len(const unsigned char *p, size_t n) {
    if (p[0] < 0x80) return 1;
    size_t len;
    uint32_t cp;
    if ((p[0] & 0xE0) == 0xC0) len = 2, cp = p[0] & 0x1F;
    else if ((p[0] & 0xF0) == 0xE0) len = 3, cp = p[0] & 0x0F;
    else if ((p[0] & 0xF8) == 0xF0) len = 4, cp = p[0] & 0x07;
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return 0;
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

/* strcmp() == 0 with the first byte compared inline: field names differ
 * in their first byte almost always, and the call was a tenth of the
 * daemon's CPU per LOOKUP (perf, 64 clients). */
static inline int same(const char *a, const char *b) { return a[0] == b[0] && strcmp(a, b) == 0; }

static int is_key_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

int tt__proto_parse(char *line, size_t len, tt__msg *out, const char **err) {
#define FAIL(msg)            \
    do {                     \
        *err = msg;          \
        return TT_ERR_PROTO; \
    } while (0)
    if (len > TT_LINE_MAX) FAIL("request line too long");
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)line[i];
        if (c == 0) FAIL("embedded NUL byte");
        if (c < 0x20 || c == 0x7f) FAIL("control character in request");
        size_t n = utf8_len((const unsigned char *)line + i, len - i);
        if (n == 0) FAIL("invalid UTF-8");
        i += n;
    }
    line[len] = '\0';
    memset(out, 0, sizeof *out);
    char *p = line;
    if (!*p) FAIL("empty request");
    if (*p == ' ') FAIL("space before the verb");
    out->verb = p;
    while (*p >= 'A' && *p <= 'Z') p++;
    if (p == out->verb || (*p && *p != ' ')) FAIL("verb must be upper-case letters");
    while (*p) {
        *p++ = '\0';
        while (*p == ' ') p++;
        if (!*p) break;
        char *key = p;
        while (is_key_char(*p)) p++;
        if (p == key || *p != '=') FAIL("field must be key=value");
        *p++ = '\0';
        char *value = p;
        while (*p && *p != ' ') p++;
        if (p == value) FAIL("field has an empty value");
        if (out->nfields == TT_FIELDS_MAX) FAIL("too many fields");
        for (int i = 0; i < out->nfields; i++)
            if (same(out->f[i].key, key)) FAIL("duplicate field");
        out->f[out->nfields].key = key;
        out->f[out->nfields].value = value;
        out->nfields++;
    }
    return 0;
#undef FAIL
}

const char *tt__msg_get(const tt__msg *m, const char *key) {
    for (int i = 0; i < m->nfields; i++)
        if (same(m->f[i].key, key)) return m->f[i].value;
    return NULL;
}

int tt__parse_i64(const char *s, int64_t min, int64_t max, int64_t *out) {
    if (!s || !*s) return TT_ERR_INVAL;
    int neg = s[0] == '-';
    const char *d = s + neg;
    if (!*d) return TT_ERR_INVAL;
    if (d[0] == '0' && (d[1] || neg)) return TT_ERR_INVAL; /* "007", "-0" */
    /* by hand rather than strtoll: strict digits only, and strtoll's
     * locale-aware set-up was 3% of a LOOKUP */
    uint64_t v = 0;
    int overflow = 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9') return TT_ERR_INVAL;
        if (v > (UINT64_MAX - 9) / 10) overflow = 1;
        else v = v * 10 + (uint64_t)(*d - '0');
    }
    if (overflow || v > (uint64_t)INT64_MAX + neg) return TT_ERR_RANGE;
    int64_t x = neg ? (int64_t)(0 - v) : (int64_t)v;
    if (x < min || x > max) return TT_ERR_RANGE;
    *out = x;
    return 0;
}

int tt__key_from_msg(const tt__msg *m, tt_key_v2 *out, char *err, size_t errlen) {
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    int64_t v;
    int rc;
    const char *s = tt__msg_get(m, "dtype");
    if (!s) goto missing_dtype;
    if ((rc = tt__dtype_parse(s, &k.dtype)) < 0) {
        snprintf(err, errlen, "unsupported dtype '%s' (fp16 or bf16)", s);
        return rc;
    }
    if (!(s = tt__msg_get(m, "hdim"))) {
        snprintf(err, errlen, "missing field 'hdim'");
        return TT_ERR_INVAL;
    }
    if ((rc = tt__parse_i64(s, 1, 1 << 20, &v)) < 0) {
        snprintf(err, errlen, "hdim '%s' is not a number in range", s);
        return rc;
    }
    k.head_dim = (int32_t)v;
    if ((s = tt__msg_get(m, "causal"))) {
        if ((rc = tt__parse_i64(s, 0, 2, &v)) < 0) {
            snprintf(err, errlen, "causal must be 0 (none), 1 (top-left) or 2 (bottom-right)");
            return rc;
        }
        k.causal = (int32_t)v;
    }
    k.group = 1;
    if ((s = tt__msg_get(m, "group"))) {
        if ((rc = tt__parse_i64(s, 1, TT_GROUP_MAX, &v)) < 0) {
            snprintf(err, errlen, "group '%s' is not a number in 1..%d", s, TT_GROUP_MAX);
            return rc;
        }
        k.group = (int32_t)v;
    }
    if (!(s = tt__msg_get(m, "seqlen_q"))) {
        snprintf(err, errlen, "missing field 'seqlen_q'");
        return TT_ERR_INVAL;
    }
    if ((rc = tt__parse_i64(s, 1, TT_SEQLEN_MAX, &v)) < 0) {
        snprintf(err, errlen, "seqlen_q '%s' is not a number in 1..%d", s, TT_SEQLEN_MAX);
        return rc;
    }
    k.seqlen_q = k.seqlen_k = v;
    if ((s = tt__msg_get(m, "seqlen_k"))) {
        if ((rc = tt__parse_i64(s, 1, TT_SEQLEN_MAX, &v)) < 0) {
            snprintf(err, errlen, "seqlen_k '%s' is not a number in 1..%d", s, TT_SEQLEN_MAX);
            return rc;
        }
        k.seqlen_k = v;
    }
    if ((s = tt__msg_get(m, "gpu"))) {
        if (!tt__is_hex_id(s)) {
            snprintf(err, errlen, "gpu must be a hex fingerprint");
            return TT_ERR_INVAL;
        }
        strcpy(k.gpu, s);
    }
    if ((s = tt__msg_get(m, "rev"))) {
        if (!tt__is_hex_id(s)) {
            snprintf(err, errlen, "rev must be a hex kernel revision");
            return TT_ERR_INVAL;
        }
        strcpy(k.rev, s);
    }
    if ((rc = tt__key_check(&k, err, errlen)) < 0) return rc;
    tt__key_canon(&k);
    *out = k;
    return 0;
missing_dtype:
    snprintf(err, errlen, "missing field 'dtype'");
    return TT_ERR_INVAL;
}

int tt__key_format(const tt_key_v2 *key, char *buf, size_t len) {
    const char *dt = tt__dtype_name(key->dtype);
    if (!dt) return TT_ERR_INVAL;
    /* group=1 is left out: the line stays what a daemon that predates
     * groups reads. */
    char group[24] = "";
    if (key->group > 1) snprintf(group, sizeof group, " group=%d", (int)key->group);
    int n = snprintf(buf, len, "dtype=%s hdim=%d causal=%d seqlen_q=%lld seqlen_k=%lld%s%s%s%s%s", dt,
                     (int)key->head_dim, (int)key->causal, (long long)key->seqlen_q, (long long)key->seqlen_k,
                     group, key->gpu[0] ? " gpu=" : "", key->gpu, key->rev[0] ? " rev=" : "", key->rev);
    if (n < 0 || (size_t)n >= len) return TT_ERR_RANGE;
    return n;
}

int tt__reply_err(char *line, const char **code, const char **message) {
    if (strncmp(line, "ERR ", 4) != 0) return TT_ERR_PROTO;
    char *c = line + 4;
    char *sp = strchr(c, ' ');
    if (sp) {
        *sp = '\0';
        *message = sp + 1;
    } else {
        *message = "";
    }
    if (!*c) return TT_ERR_PROTO;
    *code = c;
    return 0;
}

/* ---- field tables ---------------------------------------------------------------- */

static int fail_field(char *err, size_t errlen, int rc, const char *fmt, const char *name, const char *v) {
    snprintf(err, errlen, fmt, name, v);
    return rc;
}

static int fail_name(char *err, size_t errlen, int rc, const char *fmt, const char *name) {
    snprintf(err, errlen, fmt, name);
    return rc;
}

/* One comma-separated list item of `s` (NUL-terminated copy in item). */
static int list_items(const tt__fspec *f, const char *s, tt__ints *out, char *err, size_t errlen) {
    out->n = 0;
    char item[32];
    for (;;) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        if (out->n == TT_LIST_MAX) {
            snprintf(err, errlen, "%s has more than %d values", f->name, TT_LIST_MAX);
            return TT_ERR_RANGE;
        }
        if (len == 0 || len >= sizeof item) {
            snprintf(err, errlen, "%s has an empty or overlong value", f->name);
            return TT_ERR_RANGE;
        }
        memcpy(item, s, len);
        item[len] = '\0';
        if (f->type == TT_FT_DTYPES) {
            tt_dtype t;
            if (tt__dtype_parse(item, &t) < 0)
                return fail_field(err, errlen, TT_ERR_UNSUPPORTED, "unsupported %s '%s' (fp16 or bf16)",
                                  f->name, item);
            out->v[out->n++] = t;
        } else {
            int rc = tt__parse_i64(item, f->min, f->max, &out->v[out->n]);
            if (rc < 0) {
                snprintf(err, errlen, "%s value '%s' is %s", f->name, item,
                         rc == TT_ERR_INVAL ? "not a number" : "out of range");
                return TT_ERR_RANGE;
            }
            out->n++;
        }
        if (!comma) return 0;
        s = comma + 1;
    }
}

static int decode_one(const tt__fspec *f, const char *v, char *slot, char *err, size_t errlen) {
    int rc;
    switch (f->type) {
    case TT_FT_INT:
        if ((rc = tt__parse_i64(v, f->min, f->max, (int64_t *)(void *)slot)) == TT_ERR_INVAL)
            return fail_field(err, errlen, TT_ERR_RANGE, "%s '%s' is not a number", f->name, v);
        if (rc < 0) {
            snprintf(err, errlen, "%s '%s' is out of range %lld..%lld", f->name, v, (long long)f->min,
                     (long long)f->max);
            return TT_ERR_RANGE;
        }
        return 0;
    case TT_FT_HEX:
        if (!tt__is_hex_id(v))
            return fail_field(err, errlen, TT_ERR_INVAL, "%s '%.40s' must be 1..32 lower-case hex digits",
                              f->name, v);
        strcpy(slot, v);
        return 0;
    case TT_FT_DTYPE: {
        tt_dtype t;
        if (tt__dtype_parse(v, &t) < 0)
            return fail_field(err, errlen, TT_ERR_UNSUPPORTED, "unsupported %s '%.40s' (fp16 or bf16)",
                              f->name, v);
        *(int *)(void *)slot = (int)t;
        return 0;
    }
    case TT_FT_WORD:
        for (int i = 0; f->words[i]; i++)
            if (same(f->words[i], v)) {
                *(int *)(void *)slot = i;
                return 0;
            }
        {
            char set[128] = "";
            for (int i = 0; f->words[i]; i++)
                snprintf(set + strlen(set), sizeof set - strlen(set), "%s%s", i ? ", " : "", f->words[i]);
            snprintf(err, errlen, "%s must be one of %s", f->name, set);
        }
        return TT_ERR_UNSUPPORTED;
    case TT_FT_ENUM:
        if (f->parse(v, (int *)(void *)slot) < 0) {
            snprintf(err, errlen, "%s must be %s", f->name, f->words[0]);
            return TT_ERR_UNSUPPORTED;
        }
        return 0;
    case TT_FT_INTS:
    case TT_FT_DTYPES: return list_items(f, v, (tt__ints *)(void *)slot, err, errlen);
    case TT_FT_TEXT: *(const char **)(void *)slot = v; return 0;
    case TT_FT_REAL: {
        char *end;
        double d = strtod(v, &end);
        if (end == v || *end || !isfinite(d))
            return fail_field(err, errlen, TT_ERR_RANGE, "%s '%.40s' is not a finite number", f->name, v);
        if (d < (double)f->min || d > (double)f->max) {
            snprintf(err, errlen, "%s '%.40s' is out of range %lld..%lld", f->name, v, (long long)f->min,
                     (long long)f->max);
            return TT_ERR_RANGE;
        }
        *(double *)(void *)slot = d;
        return 0;
    }
    case TT_FT_CONFIG:
        if (tt_config_parse(v, (tt_config *)(void *)slot) < 0)
            return fail_field(err, errlen, TT_ERR_INVAL, "%s '%.200s' is not a variant's config", f->name, v);
        return 0;
    case TT_FT_PCT:
        rc = tt__pct_decode(v, slot, (size_t)f->max);
        if (rc == TT_ERR_RANGE) {
            snprintf(err, errlen, "%s is longer than %lld bytes", f->name, (long long)f->max - 1);
            return rc;
        }
        if (rc < 0)
            return fail_field(err, errlen, TT_ERR_INVAL, "%s '%.40s' has a '%%' without two hex digits",
                              f->name, v);
        return 0;
    }
    return TT_ERR_INVAL;
}

static void set_default(const tt__fspec *f, char *slot) {
    switch (f->type) {
    case TT_FT_INT: *(int64_t *)(void *)slot = f->def; break;
    case TT_FT_HEX:
    case TT_FT_PCT: slot[0] = '\0'; break;
    case TT_FT_DTYPE:
    case TT_FT_ENUM:
    case TT_FT_WORD: *(int *)(void *)slot = (int)f->def; break;
    case TT_FT_INTS:
    case TT_FT_DTYPES: ((tt__ints *)(void *)slot)->n = 0; break;
    case TT_FT_TEXT: *(const char **)(void *)slot = NULL; break;
    case TT_FT_REAL: *(double *)(void *)slot = (double)f->def; break;
    case TT_FT_CONFIG: memset(slot, 0, sizeof(tt_config)); break;
    }
}

void tt__fields_defaults(const tt__fspec *spec, int nspec, void *req) {
    for (int j = 0; j < nspec; j++) set_default(&spec[j], (char *)req + spec[j].off);
}

int tt__fields_decode(const tt__msg *m, const tt__fspec *spec, int nspec, void *req, uint32_t *present,
                      char *err, size_t errlen) {
    const char *val[32] = {0};
    uint32_t has = 0;
    if (nspec > 32) return TT_ERR_INVAL;
    for (int i = 0; i < m->nfields; i++) {
        int j = 0;
        while (j < nspec && !same(spec[j].name, m->f[i].key)) j++;
        if (j == nspec) {
            snprintf(err, errlen, "unknown field '%s'", m->f[i].key);
            return TT_ERR_INVAL;
        }
        val[j] = m->f[i].value;
        has |= 1u << j;
    }
    for (int j = 0; j < nspec; j++)
        if (spec[j].required && !val[j]) {
            snprintf(err, errlen, "missing field '%s'", spec[j].name);
            return TT_ERR_INVAL;
        }
    char *base = req;
    for (int j = 0; j < nspec; j++) {
        const tt__fspec *f = &spec[j];
        char *slot = base + f->off;
        if (val[j]) {
            int rc = decode_one(f, val[j], slot, err, errlen);
            if (rc < 0) return rc;
            continue;
        }
        set_default(f, slot);
    }
    *present = has;
    return 0;
}

/* The value of one field as text into val; the decoder's checks, so what
 * one end writes the other reads back. */
static int encode_one(const tt__fspec *f, const char *slot, char *val, size_t vlen, char *err,
                      size_t errlen) {
    switch (f->type) {
    case TT_FT_INT: {
        int64_t v = *(const int64_t *)(const void *)slot;
        if (v < f->min || v > f->max) {
            snprintf(err, errlen, "%s %lld is out of range %lld..%lld", f->name, (long long)v,
                     (long long)f->min, (long long)f->max);
            return TT_ERR_RANGE;
        }
        snprintf(val, vlen, "%lld", (long long)v);
        return 0;
    }
    case TT_FT_HEX:
        if (!tt__is_hex_id(slot))
            return fail_field(err, errlen, TT_ERR_INVAL, "%s '%.40s' must be 1..32 lower-case hex digits",
                              f->name, slot);
        snprintf(val, vlen, "%s", slot);
        return 0;
    case TT_FT_DTYPE: {
        const char *n = tt__dtype_name((tt_dtype) * (const int *)(const void *)slot);
        if (!n) return fail_name(err, errlen, TT_ERR_UNSUPPORTED, "%s is not a dtype", f->name);
        snprintf(val, vlen, "%s", n);
        return 0;
    }
    case TT_FT_WORD: {
        int w = *(const int *)(const void *)slot, n = 0;
        while (f->words[n]) n++;
        if (w < 0 || w >= n)
            return fail_name(err, errlen, TT_ERR_UNSUPPORTED, "%s is not one of its words", f->name);
        snprintf(val, vlen, "%s", f->words[w]);
        return 0;
    }
    case TT_FT_INTS:
    case TT_FT_DTYPES: {
        const tt__ints *l = (const tt__ints *)(const void *)slot;
        if (l->n < 1 || l->n > TT_LIST_MAX)
            return fail_name(err, errlen, TT_ERR_RANGE, "%s needs 1..64 values", f->name);
        size_t used = 0;
        for (int i = 0; i < l->n; i++) {
            char item[24];
            if (f->type == TT_FT_DTYPES) {
                const char *n = tt__dtype_name((tt_dtype)l->v[i]);
                if (!n)
                    return fail_name(err, errlen, TT_ERR_UNSUPPORTED, "%s has a value that is not a dtype",
                                     f->name);
                snprintf(item, sizeof item, "%s", n);
            } else {
                if (l->v[i] < f->min || l->v[i] > f->max)
                    return fail_name(err, errlen, TT_ERR_RANGE, "%s has a value out of range", f->name);
                snprintf(item, sizeof item, "%lld", (long long)l->v[i]);
            }
            int n = snprintf(val + used, vlen - used, "%s%s", i ? "," : "", item);
            if (n < 0 || (size_t)n >= vlen - used)
                return fail_name(err, errlen, TT_ERR_RANGE, "%s is too long", f->name);
            used += (size_t)n;
        }
        return 0;
    }
    case TT_FT_TEXT: {
        const char *t = *(const char *const *)(const void *)slot;
        size_t n = t ? strlen(t) : 0;
        if (n == 0) return fail_name(err, errlen, TT_ERR_INVAL, "%s is empty", f->name);
        for (size_t i = 0; i < n;) {
            size_t u = utf8_len((const unsigned char *)t + i, n - i);
            if ((unsigned char)t[i] <= ' ' || t[i] == 0x7f || u == 0)
                return fail_field(err, errlen, TT_ERR_INVAL, "%s '%.40s' is not one word of UTF-8 text",
                                  f->name, t);
            i += u;
        }
        if (n >= vlen) return fail_name(err, errlen, TT_ERR_RANGE, "%s is too long", f->name);
        memcpy(val, t, n + 1);
        return 0;
    }
    case TT_FT_REAL: {
        double d = *(const double *)(const void *)slot;
        if (!isfinite(d) || d < (double)f->min || d > (double)f->max) {
            snprintf(err, errlen, "%s %g is not a finite number in %lld..%lld", f->name, d, (long long)f->min,
                     (long long)f->max);
            return TT_ERR_RANGE;
        }
        snprintf(val, vlen, "%.6g", d);
        return 0;
    }
    case TT_FT_CONFIG:
        if (tt_config_format((const tt_config *)(const void *)slot, val, vlen) < 0)
            return fail_name(err, errlen, TT_ERR_RANGE, "%s is not a variant's config", f->name);
        return 0;
    case TT_FT_PCT: {
        size_t n = strnlen(slot, (size_t)f->max);
        if (n == 0) return fail_name(err, errlen, TT_ERR_INVAL, "%s is empty", f->name);
        if (n >= (size_t)f->max || 3 * n >= vlen)
            return fail_name(err, errlen, TT_ERR_RANGE, "%s is too long", f->name);
        tt__pct_encode(slot, val, vlen);
        return 0;
    }
    case TT_FT_ENUM: break;
    }
    return fail_name(err, errlen, TT_ERR_INVAL, "%s has a type the table cannot write", f->name);
}

int tt__fields_encode(const char *verb, const tt__fspec *spec, int nspec, const void *req, uint32_t present,
                      char *buf, size_t len, char *err, size_t errlen) {
    if (nspec > 32 || (nspec < 32 && present >> nspec)) {
        snprintf(err, errlen, "%s: a field that is not in its table", verb);
        return TT_ERR_INVAL;
    }
    char val[TT_LINE_MAX + 1];
    size_t used = strlen(verb);
    if (used >= len) goto toolong;
    memcpy(buf, verb, used + 1);
    for (int j = 0; j < nspec; j++) {
        const tt__fspec *f = &spec[j];
        if (!TT_HAS(present, j)) {
            if (f->required) {
                snprintf(err, errlen, "%s: missing field '%s'", verb, f->name);
                return TT_ERR_INVAL;
            }
            continue;
        }
        char ferr[200];
        int rc = encode_one(f, (const char *)req + f->off, val, sizeof val, ferr, sizeof ferr);
        if (rc < 0) {
            snprintf(err, errlen, "%s: %s", verb, ferr);
            return rc;
        }
        int n = snprintf(buf + used, len - used, " %s=%s", f->name, val);
        if (n < 0 || (size_t)n >= len - used) goto toolong;
        used += (size_t)n;
    }
    return (int)used;
toolong:
    snprintf(err, errlen, "%s: the line does not fit", verb);
    return TT_ERR_RANGE;
}

void tt__pct_encode(const char *in, char *out, size_t len) {
    size_t o = 0;
    if (!len) return;
    for (; *in && o + 4 < len; in++) {
        unsigned char c = (unsigned char)*in;
        if (c <= ' ' || c == '%' || c == '=' || c >= 0x7f)
            o += (size_t)snprintf(out + o, len - o, "%%%02X", c);
        else out[o++] = (char)c;
    }
    out[o] = '\0';
}

int tt__pct_decode(const char *in, char *out, size_t len) {
    size_t o = 0, i = 0;
    int rc = 0;
    if (!len) return TT_ERR_RANGE;
    for (; in[i] && o + 1 < len; i++) {
        unsigned hi, lo;
        if (in[i] == '%' && isxdigit((unsigned char)in[i + 1]) && isxdigit((unsigned char)in[i + 2]) &&
            sscanf(in + i + 1, "%1x%1x", &hi, &lo) == 2) {
            unsigned ch = hi * 16 + lo;
            out[o++] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
            i += 2;
        } else {
            if (in[i] == '%') rc = TT_ERR_INVAL;
            out[o++] = in[i];
        }
    }
    out[o] = '\0';
    if (in[i] && !rc) rc = TT_ERR_RANGE;
    /* Bytes that are not UTF-8 (a name cut mid-character too) would make
     * the export of its records one other nodes refuse: '?' as well. */
    for (size_t k = 0; k < o;) {
        size_t n = utf8_len((const unsigned char *)out + k, o - k);
        if (n == 0) out[k++] = '?';
        else k += n;
    }
    return rc;
}
