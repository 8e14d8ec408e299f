#include "common/proto.h"

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
#define FAIL(msg)       \
    do {                \
        *err = msg;     \
        return TT_ERR_PROTO; \
    } while (0)
    if (len > 0 && line[len - 1] == '\r') len--;
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
    while (*p == ' ') p++;
    if (!*p) FAIL("empty request");
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

static int in_list(const char *const *list, const char *s) {
    for (; list && *list; list++)
        if (same(*list, s)) return 1;
    return 0;
}

int tt__msg_check(const tt__msg *m, const char *const *allowed, const char *const *required,
                  char *err, size_t errlen) {
    for (int i = 0; i < m->nfields; i++)
        if (!in_list(allowed, m->f[i].key)) {
            snprintf(err, errlen, "unknown field '%s'", m->f[i].key);
            return TT_ERR_INVAL;
        }
    for (; required && *required; required++)
        if (!tt__msg_get(m, *required)) {
            snprintf(err, errlen, "missing field '%s'", *required);
            return TT_ERR_INVAL;
        }
    return 0;
}

int tt__parse_i64(const char *s, int64_t min, int64_t max, int64_t *out) {
    if (!s || !*s) return TT_ERR_INVAL;
    int neg = s[0] == '-';
    const char *d = s + neg;
    if (!*d) return TT_ERR_INVAL;
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
                     (int)key->head_dim, (int)key->causal, (long long)key->seqlen_q,
                     (long long)key->seqlen_k, group, key->gpu[0] ? " gpu=" : "", key->gpu,
                     key->rev[0] ? " rev=" : "", key->rev);
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

static const struct {
    const char *code;
    int status;
} err_codes[] = {
    {"proto", TT_ERR_PROTO},       {"verb", TT_ERR_PROTO},       {"field", TT_ERR_INVAL},
    {"range", TT_ERR_RANGE},       {"unsupported", TT_ERR_UNSUPPORTED}, {"toolong", TT_ERR_PROTO},
    {"busy", TT_ERR_BUSY},         {"permission", TT_ERR_PERM},  {"notfound", TT_ERR_NOTFOUND},
    {"db", TT_ERR_DB},             {"internal", TT_ERR_REMOTE},  {"timeout", TT_ERR_TIMEOUT},
    {"version", TT_ERR_VERSION},
};

int tt__err_from_code(const char *code) {
    for (size_t i = 0; i < sizeof err_codes / sizeof err_codes[0]; i++)
        if (strcmp(err_codes[i].code, code) == 0) return err_codes[i].status;
    return TT_ERR_REMOTE;
}
