/*
 * The worker pipe protocol (docs/worker-protocol.md) declared once: each
 * message's word and its fields (type, name, required, range, default),
 * from which come the message's typed struct, its field table
 * (tt__fspec, as the daemon's verbs declare theirs) and the bits that say
 * which fields a message carries. The worker and the daemon's supervisor
 * both write a message from its struct with tt__pipe_format and read a line
 * back into one with tt__pipe_parse, so neither end writes or reads a
 * field by hand, and a field either end does not declare never crosses.
 */
#ifndef TT_COMMON_PIPE_H
#define TT_COMMON_PIPE_H

#include <stddef.h>
#include <stdint.h>

#include "common/key.h"
#include "common/proto.h"
#include "common/wire.h"
#include "tiletune.h"

#define TT_PIPE_PROTO 1        /* HELLO proto= */
#define TT_PIPE_GPUS_MAX 64    /* HELLO gpu_count= */
#define TT_PIPE_AVOID_MAX 4096 /* MEASURE avoid= */
#define TT_PIPE_TEXT_MAX 128   /* free text (GPU name, versions), decoded, with its NUL */

/* The messages: X(UPPER, lower); the wire word is UPPER. */
#define TT_PIPE_MESSAGES(X) \
    X(HELLO, hello) X(TRY, try) X(RESULT, result) X(DONE, done) X(MEASURE, measure) X(AVOID, avoid)

/*
 * Each message's fields in wire order: F(m, TYPE, name, required, min,
 * max, default, words). TYPE is a tt__ftype without TT_FT_ (INT is an
 * int64_t, REAL a double, PCT a char[max], WORD an index in words); a
 * field's wire name is its C name.
 */

/* Worker -> daemon, first line. The GPU fields come only from a worker
 * with a usable GPU; with name, the daemon also needs cc_major, cc_minor,
 * sms and mem_bytes (tt__pipe_hello_gpu). */
#define TT_PIPE_FIELDS_hello(F, m)                             \
    F(m, INT, proto, 1, TT_PIPE_PROTO, TT_PIPE_PROTO, 0, NULL) \
    F(m, HEX, rev, 1, 0, 0, 0, NULL)                           \
    F(m, INT, gpu_count, 1, 0, TT_PIPE_GPUS_MAX, 0, NULL)      \
    F(m, INT, index, 0, 0, TT_PIPE_GPUS_MAX - 1, 0, NULL)      \
    F(m, PCT, name, 0, 0, TT_PIPE_TEXT_MAX, 0, NULL)           \
    F(m, INT, cc_major, 0, 1, 100, 0, NULL)                    \
    F(m, INT, cc_minor, 0, 0, 100, 0, NULL)                    \
    F(m, INT, sms, 0, 1, 100000, 0, NULL)                      \
    F(m, INT, mem_bytes, 0, 1, INT64_MAX, 0, NULL)             \
    F(m, PCT, driver, 0, 0, TT_PIPE_TEXT_MAX, 0, NULL)         \
    F(m, PCT, cuda, 0, 0, TT_PIPE_TEXT_MAX, 0, NULL)           \
    F(m, PCT, nvrtc, 0, 0, TT_PIPE_TEXT_MAX, 0, NULL)

/* Worker -> daemon: about to launch this variant. */
#define TT_PIPE_FIELDS_try(F, m)            \
    F(m, INT, id, 1, 0, INT64_MAX, 0, NULL) \
    F(m, CONFIG, config, 1, 0, 0, 0, NULL)

/* Worker -> daemon: one measurement. status is a tt_meas_status; ok needs
 * time_ms and tflops (tt__pipe_result_check). Optional numbers absent: -1,
 * tt_record's "not recorded". */
#define TT_PIPE_FIELDS_result(F, m)                     \
    F(m, INT, id, 1, 0, INT64_MAX, 0, NULL)             \
    F(m, WORD, status, 1, 0, 0, 0, tt__pipe_meas_words) \
    F(m, CONFIG, config, 1, 0, 0, 0, NULL)              \
    F(m, INT, batch, 0, 1, INT32_MAX, 0, NULL)          \
    F(m, INT, heads, 0, 1, INT32_MAX, 0, NULL)          \
    F(m, INT, regs, 0, 0, INT32_MAX, -1, NULL)          \
    F(m, INT, smem_bytes, 0, 0, INT32_MAX, -1, NULL)    \
    F(m, INT, spill_bytes, 0, 0, INT32_MAX, -1, NULL)   \
    F(m, REAL, time_ms, 0, 0, INT32_MAX, -1, NULL)      \
    F(m, REAL, tflops, 0, 0, INT32_MAX, -1, NULL)       \
    F(m, REAL, time_min_ms, 0, 0, INT32_MAX, -1, NULL)  \
    F(m, REAL, spread, 0, 0, INT32_MAX, -1, NULL)       \
    F(m, INT, reps, 0, 0, INT32_MAX, -1, NULL)          \
    F(m, INT, nonfinite, 0, 0, INT64_MAX, -1, NULL)     \
    F(m, REAL, rel_err, 0, 0, INT64_MAX, -1, NULL)      \
    F(m, REAL, lse_err, 0, 0, INT64_MAX, -1, NULL)      \
    F(m, INT, sm_clock_mhz, 0, 0, INT32_MAX, -1, NULL)  \
    F(m, INT, temp_c, 0, 0, INT32_MAX, -1, NULL)        \
    F(m, INT, busy, 0, 0, 1, -1, NULL)                  \
    F(m, TEXT, reason, 0, 0, 0, 0, NULL)

/* Worker -> daemon: the key is finished (status: TT_PIPE_KEY_*). */
#define TT_PIPE_FIELDS_done(F, m)                                      \
    F(m, INT, id, 1, 0, INT64_MAX, 0, NULL)                            \
    F(m, WORD, status, 0, 0, 0, TT_PIPE_KEY_DONE, tt__pipe_done_words) \
    F(m, TEXT, reason, 0, 0, 0, 0, NULL)

/* Daemon -> worker: measure one key (its fields as LOOKUP's; group only
 * over 1, seqlen_k absent: seqlen_q), then `avoid` AVOID lines. batch
 * and heads 0: the rule of the key's regime. mode: a tt_job_mode. */
#define TT_PIPE_FIELDS_measure(F, m)                                      \
    F(m, INT, id, 1, 0, INT64_MAX, 0, NULL)                               \
    F(m, INT, job, 0, 0, INT64_MAX, 0, NULL)                              \
    F(m, INT, seq, 0, 0, INT32_MAX, 0, NULL)                              \
    F(m, DTYPE, dtype, 1, 0, 0, 0, NULL)                                  \
    F(m, INT, hdim, 1, 1, 1 << 20, 0, NULL)                               \
    F(m, INT, causal, 0, 0, 2, 0, NULL)                                   \
    F(m, INT, seqlen_q, 1, 1, TT_SEQLEN_MAX, 0, NULL)                     \
    F(m, INT, seqlen_k, 0, 1, TT_SEQLEN_MAX, 0, NULL)                     \
    F(m, INT, group, 0, 1, TT_GROUP_MAX, 1, NULL)                         \
    F(m, HEX, gpu, 0, 0, 0, 0, NULL)                                      \
    F(m, HEX, rev, 0, 0, 0, 0, NULL)                                      \
    F(m, WORD, mode, 0, 0, 0, TT__N_MODE_EXHAUSTIVE, tt__pipe_mode_words) \
    F(m, INT, batch, 0, 0, 65535, 0, NULL)                                \
    F(m, INT, heads, 0, 0, 4096, 0, NULL)                                 \
    F(m, INT, avoid, 0, 0, TT_PIPE_AVOID_MAX, 0, NULL)

/* Daemon -> worker, after MEASURE: a variant not to run. */
#define TT_PIPE_FIELDS_avoid(F, m) F(m, CONFIG, config, 1, 0, 0, 0, NULL)

enum { TT_PIPE_KEY_DONE = 0, TT_PIPE_KEY_FAILED = 1 };
extern const char *const tt__pipe_meas_words[]; /* TT_WIRE_MEAS_STATUSES */
extern const char *const tt__pipe_mode_words[]; /* TT_WIRE_JOB_MODES */
extern const char *const tt__pipe_done_words[]; /* "done", "failed" */

#define TT__PIPE_CTYPE_INT(n) int64_t n
#define TT__PIPE_CTYPE_REAL(n) double n
#define TT__PIPE_CTYPE_HEX(n) char n[TT_ID_MAX]
#define TT__PIPE_CTYPE_PCT(n) char n[TT_PIPE_TEXT_MAX]
#define TT__PIPE_CTYPE_WORD(n) int n
#define TT__PIPE_CTYPE_DTYPE(n) int n
#define TT__PIPE_CTYPE_CONFIG(n) tt_config n
#define TT__PIPE_CTYPE_TEXT(n) const char *n /* points into the parsed line */
#define TT__PIPE_MEMBER(m, T, n, ...) TT__PIPE_CTYPE_##T(n);
#define TT__PIPE_BITNO(m, T, n, ...) TT_PF_##m##_##n,

/* tt__pipe_<m>: the message's struct; TT_PF_<m>_<field>: the field's bit
 * number in tt__pipe_msg.has. */
#define X(M, m)                                \
    typedef struct tt__pipe_##m {              \
        TT_PIPE_FIELDS_##m(TT__PIPE_MEMBER, m) \
    } tt__pipe_##m;                            \
    enum { TT_PIPE_FIELDS_##m(TT__PIPE_BITNO, m) TT_PF_##m##_COUNT };
TT_PIPE_MESSAGES(X)
#undef X

typedef enum tt__pipe_kind {
#define X(M, m) TT_PIPE_##M,
    TT_PIPE_MESSAGES(X)
#undef X
        TT_PIPE_KINDS,
    TT_PIPE_OTHER = TT_PIPE_KINDS, /* a verb this version does not have */
} tt__pipe_kind;

typedef struct tt__pipe_msg {
    tt__pipe_kind kind;
    uint32_t has; /* TT_PIPE_BIT(m, field): the field is carried */
    union {
#define X(M, m) tt__pipe_##m m;
        TT_PIPE_MESSAGES(X)
#undef X
    } u;
} tt__pipe_msg;

#define TT_PIPE_BIT(m, f) (1u << TT_PF_##m##_##f)
#define TT_PIPE_HAS(msg, m, f) (((msg)->has & TT_PIPE_BIT(m, f)) != 0)
/* Sets a number or word field and marks it carried. */
#define TT_PIPE_SET(msg, m, f, v) ((msg)->u.m.f = (v), (msg)->has |= TT_PIPE_BIT(m, f))
/* Copies text into a HEX or PCT field and marks it carried ("" leaves it out). */
#define TT_PIPE_SET_TEXT(msg, m, f, s) \
    tt__pipe_set_text((msg), (msg)->u.m.f, sizeof(msg)->u.m.f, TT_PIPE_BIT(m, f), (s))

/* An empty message of `kind`: every field at its default, none carried. */
void tt__pipe_init(tt__pipe_msg *m, tt__pipe_kind kind);
void tt__pipe_set_text(tt__pipe_msg *m, char *slot, size_t cap, uint32_t bit, const char *s);
/* "HELLO", ...; NULL for TT_PIPE_OTHER. */
const char *tt__pipe_word(tt__pipe_kind kind);
/* The field table of `kind` and its length (tests, docs). */
const tt__fspec *tt__pipe_spec(tt__pipe_kind kind, int *n);

/*
 * Writes message m as one line (no '\n') into buf: its word, then the
 * fields m->has marks, in table order. Refuses (a negative status, err
 * naming the field) a mark past the message's table, a required field
 * left out, a value its table would refuse, and a line over TT_LINE_MAX.
 * Returns the length.
 */
int tt__pipe_format(const tt__pipe_msg *m, char *buf, size_t len, char *err, size_t errlen);

/*
 * Reads one line (no '\n'; NULs are written into it, TEXT fields point
 * into it) into *m. Returns 0; TT_ERR_PROTO for a line that breaks the
 * grammar (m->kind TT_PIPE_OTHER); TT_ERR_NOTFOUND for a word this
 * version does not have (m->kind TT_PIPE_OTHER: a later version's line);
 * or, for a message its table refuses (a field not in it, a required one
 * missing, a value out of range, bad percent-encoding), the field's
 * status (TT_ERR_INVAL, TT_ERR_RANGE, TT_ERR_UNSUPPORTED) with m->kind
 * set. err says why.
 */
int tt__pipe_parse(char *line, size_t len, tt__pipe_msg *m, char *err, size_t errlen);

/* Where b, read back from a, differs from it: "kind", "has" or the first
 * field whose value is not a's (where a carries it; reals within `rel`
 * of each other, relatively) or not its default (where a does not);
 * NULL if nowhere. TEXT values compare as text. */
const char *tt__pipe_diff(const tt__pipe_msg *a, const tt__pipe_msg *b, double rel);

/* The `id` of a TRY, RESULT, DONE or MEASURE; -1 for the others. */
int64_t tt__pipe_task(const tt__pipe_msg *m);

/* MEASURE's key fields from a key (group and gpu/rev only when set). */
void tt__pipe_measure_set_key(tt__pipe_msg *m, const tt_key_v2 *key);
/* The key of a parsed MEASURE, checked (tt__key_check) and canonical. */
int tt__pipe_measure_key(const tt__pipe_msg *m, tt_key_v2 *out, char *err, size_t errlen);
/* A HELLO with name has the other fields that identify the GPU: 0, or
 * TT_ERR_INVAL naming the first missing. */
int tt__pipe_hello_gpu(const tt__pipe_msg *m, char *err, size_t errlen);
/* A RESULT with status ok carries time_ms and tflops: 0 or TT_ERR_INVAL. */
int tt__pipe_result_check(const tt__pipe_msg *m, char *err, size_t errlen);

#endif
