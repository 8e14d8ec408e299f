#include "common/pipe.h"

#include <stdio.h>
#include <string.h>

const char *const tt__pipe_meas_words[] = {
#define X(e, s) s,
    TT_WIRE_MEAS_STATUSES(X)
#undef X
        NULL,
};
const char *const tt__pipe_mode_words[] = {
#define X(e, s) s,
    TT_WIRE_JOB_MODES(X)
#undef X
        NULL,
};
const char *const tt__pipe_done_words[] = {"done", "failed", NULL};

#define SPEC(m, T, n, req, lo, hi, dflt, words) \
    {#n, TT_FT_##T, req, lo, hi, dflt, words, NULL, offsetof(tt__pipe_##m, n)},
#define X(M, m)                                                        \
    static const tt__fspec spec_##m[] = {TT_PIPE_FIELDS_##m(SPEC, m)}; \
    _Static_assert(TT_PF_##m##_COUNT <= 32, #M " has at most 32 fields (a bit each)");
TT_PIPE_MESSAGES(X)
#undef X

static const struct {
    const char *word;
    const tt__fspec *spec;
    int n;
} messages[] = {
#define X(M, m) {#M, spec_##m, TT_PF_##m##_COUNT},
    TT_PIPE_MESSAGES(X)
#undef X
};

const char *tt__pipe_word(tt__pipe_kind kind) {
    return (unsigned)kind < TT_PIPE_KINDS ? messages[kind].word : NULL;
}

const tt__fspec *tt__pipe_spec(tt__pipe_kind kind, int *n) {
    if ((unsigned)kind >= TT_PIPE_KINDS) {
        *n = 0;
        return NULL;
    }
    *n = messages[kind].n;
    return messages[kind].spec;
}

void tt__pipe_init(tt__pipe_msg *m, tt__pipe_kind kind) {
    memset(m, 0, sizeof *m);
    m->kind = kind;
    if ((unsigned)kind < TT_PIPE_KINDS) tt__fields_defaults(messages[kind].spec, messages[kind].n, &m->u);
}

void tt__pipe_set_text(tt__pipe_msg *m, char *slot, size_t cap, uint32_t bit, const char *s) {
    snprintf(slot, cap, "%s", s ? s : "");
    if (slot[0]) m->has |= bit;
    else m->has &= ~bit;
}

int tt__pipe_format(const tt__pipe_msg *m, char *buf, size_t len, char *err, size_t errlen) {
    if ((unsigned)m->kind >= TT_PIPE_KINDS) {
        snprintf(err, errlen, "not a message of the worker pipe");
        return TT_ERR_INVAL;
    }
    /* A line the other end's reader takes: TT_LINE_MAX at most. */
    if (len > TT_LINE_MAX + 1) len = TT_LINE_MAX + 1;
    return tt__fields_encode(messages[m->kind].word, messages[m->kind].spec, messages[m->kind].n, &m->u,
                             m->has, buf, len, err, errlen);
}

int tt__pipe_parse(char *line, size_t len, tt__pipe_msg *m, char *err, size_t errlen) {
    tt__msg raw;
    const char *perr;
    memset(m, 0, sizeof *m);
    m->kind = TT_PIPE_OTHER;
    if (tt__proto_parse(line, len, &raw, &perr) < 0) {
        snprintf(err, errlen, "%s", perr);
        return TT_ERR_PROTO;
    }
    int k = 0;
    while (k < TT_PIPE_KINDS && strcmp(messages[k].word, raw.verb) != 0) k++;
    if (k == TT_PIPE_KINDS) {
        snprintf(err, errlen, "no message %.40s in protocol %d", raw.verb, TT_PIPE_PROTO);
        return TT_ERR_NOTFOUND;
    }
    m->kind = (tt__pipe_kind)k;
    char ferr[200];
    int rc = tt__fields_decode(&raw, messages[k].spec, messages[k].n, &m->u, &m->has, ferr, sizeof ferr);
    if (rc < 0) snprintf(err, errlen, "%s: %s", messages[k].word, ferr);
    return rc;
}

int64_t tt__pipe_task(const tt__pipe_msg *m) {
    switch (m->kind) {
    case TT_PIPE_TRY: return m->u.try.id;
    case TT_PIPE_RESULT: return m->u.result.id;
    case TT_PIPE_DONE: return m->u.done.id;
    case TT_PIPE_MEASURE: return m->u.measure.id;
    default: return -1;
    }
}

void tt__pipe_measure_set_key(tt__pipe_msg *m, const tt_key_v2 *key) {
    TT_PIPE_SET(m, measure, dtype, (int)key->dtype);
    TT_PIPE_SET(m, measure, hdim, key->head_dim);
    TT_PIPE_SET(m, measure, causal, key->causal);
    TT_PIPE_SET(m, measure, seqlen_q, key->seqlen_q);
    TT_PIPE_SET(m, measure, seqlen_k, key->seqlen_k);
    /* group=1 is left out, as LOOKUP's key text leaves it (tt__key_format) */
    if (key->group > 1) TT_PIPE_SET(m, measure, group, key->group);
    TT_PIPE_SET_TEXT(m, measure, gpu, key->gpu);
    TT_PIPE_SET_TEXT(m, measure, rev, key->rev);
}

int tt__pipe_measure_key(const tt__pipe_msg *m, tt_key_v2 *out, char *err, size_t errlen) {
    const tt__pipe_measure *r = &m->u.measure;
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    k.dtype = (tt_dtype)r->dtype;
    k.head_dim = (int32_t)r->hdim;
    k.causal = (int32_t)r->causal;
    k.seqlen_q = r->seqlen_q;
    k.seqlen_k = TT_PIPE_HAS(m, measure, seqlen_k) ? r->seqlen_k : r->seqlen_q;
    k.group = (int32_t)r->group;
    memcpy(k.gpu, r->gpu, sizeof k.gpu);
    memcpy(k.rev, r->rev, sizeof k.rev);
    int rc = tt__key_check(&k, err, errlen);
    if (rc < 0) return rc;
    tt__key_canon(&k);
    *out = k;
    return 0;
}

int tt__pipe_hello_gpu(const tt__pipe_msg *m, char *err, size_t errlen) {
    static const struct {
        uint32_t bit;
        const char *name;
    } need[] = {
        {TT_PIPE_BIT(hello, cc_major), "cc_major"},
        {TT_PIPE_BIT(hello, cc_minor), "cc_minor"},
        {TT_PIPE_BIT(hello, sms), "sms"},
        {TT_PIPE_BIT(hello, mem_bytes), "mem_bytes"},
    };
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!(m->has & need[i].bit)) {
            snprintf(err, errlen, "HELLO: a GPU's name without '%s'", need[i].name);
            return TT_ERR_INVAL;
        }
    return 0;
}

int tt__pipe_result_check(const tt__pipe_msg *m, char *err, size_t errlen) {
    if (m->u.result.status != TT__N_MEAS_OK) return 0;
    const char *missing = !TT_PIPE_HAS(m, result, time_ms)  ? "time_ms"
                          : !TT_PIPE_HAS(m, result, tflops) ? "tflops"
                                                            : NULL;
    if (!missing) return 0;
    snprintf(err, errlen, "RESULT: status=ok without '%s'", missing);
    return TT_ERR_INVAL;
}

/* One field of a and b, by its type. */
static int same_value(const tt__fspec *f, const char *x, const char *y, double rel) {
    switch (f->type) {
    case TT_FT_INT: return *(const int64_t *)(const void *)x == *(const int64_t *)(const void *)y;
    case TT_FT_REAL: {
        /* by hand: tt_common links into programs without libm */
        double p = *(const double *)(const void *)x, q = *(const double *)(const void *)y;
        double ap = p < 0 ? -p : p, aq = q < 0 ? -q : q, d = p > q ? p - q : q - p;
        return p == q || d <= rel * (ap > aq ? ap : aq);
    }
    case TT_FT_HEX:
    case TT_FT_PCT: return strcmp(x, y) == 0;
    case TT_FT_WORD:
    case TT_FT_DTYPE:
    case TT_FT_ENUM: return *(const int *)(const void *)x == *(const int *)(const void *)y;
    case TT_FT_CONFIG:
        return tt_config_equal((const tt_config *)(const void *)x, (const tt_config *)(const void *)y);
    case TT_FT_TEXT: {
        const char *s = *(const char *const *)(const void *)x, *t = *(const char *const *)(const void *)y;
        return s == t || (s && t && strcmp(s, t) == 0);
    }
    case TT_FT_INTS:
    case TT_FT_DTYPES: break; /* no lists on the pipe */
    }
    return 0;
}

const char *tt__pipe_diff(const tt__pipe_msg *a, const tt__pipe_msg *b, double rel) {
    if (a->kind != b->kind || (unsigned)a->kind >= TT_PIPE_KINDS) return "kind";
    if (a->has != b->has) return "has";
    tt__pipe_msg dflt;
    tt__pipe_init(&dflt, a->kind);
    const tt__fspec *spec = messages[a->kind].spec;
    for (int i = 0; i < messages[a->kind].n; i++) {
        const tt__pipe_msg *want = TT_HAS(a->has, i) ? a : &dflt;
        if (!same_value(&spec[i], (const char *)&want->u + spec[i].off, (const char *)&b->u + spec[i].off,
                        rel))
            return spec[i].name;
    }
    return NULL;
}
