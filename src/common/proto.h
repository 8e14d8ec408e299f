/*
 * The line protocol's grammar (docs/protocol.md), shared by the daemon,
 * which parses requests, and the client and CLI, which build requests and
 * parse replies. Parsing is in place and allocates nothing.
 */
#ifndef TT_COMMON_PROTO_H
#define TT_COMMON_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "tiletune.h"

#define TT_LINE_MAX 4096 /* bytes of a request line, '\n' excluded */
#define TT_FIELDS_MAX 32

typedef struct tt__field {
    const char *key;
    const char *value;
} tt__field;

typedef struct tt__msg {
    const char *verb;
    int nfields;
    tt__field f[TT_FIELDS_MAX];
} tt__msg;

/*
 * Splits one line ("VERB key=value ...", without its '\n' and the '\r'
 * before it, which the reader drops) into a verb and fields, writing NULs
 * into `line`. Rejects
 * lines over TT_LINE_MAX, embedded NUL, invalid UTF-8, control characters
 * (a second '\r' too), anything before the verb, a verb not [A-Z]+, a field not key=value (key [a-z0-9_]+, value
 * non-empty), duplicate keys and more than TT_FIELDS_MAX fields.
 * Returns 0, or TT_ERR_PROTO with *err set to a static message.
 */
int tt__proto_parse(char *line, size_t len, tt__msg *out, const char **err);

/* The value of field `key`, or NULL. */
const char *tt__msg_get(const tt__msg *m, const char *key);

/*
 * A verb's fields, declared once: name, type, range, required, default,
 * and where the value goes in the verb's request struct. tt__fields_decode
 * checks a parsed request against the table and fills the struct, so a
 * handler reads typed values and never the raw fields.
 */
#define TT_LIST_MAX 64 /* values of one list field */

typedef enum tt__ftype {
    TT_FT_INT,    /* int64_t in [min, max]; absent: def */
    TT_FT_HEX,    /* char[TT_ID_MAX]: 1..32 lower-case hex digits; absent: "" */
    TT_FT_DTYPE,  /* int (tt_dtype): fp16 or bf16 */
    TT_FT_WORD,   /* int: the index of the value in `words`; absent: def */
    TT_FT_ENUM,   /* int: what `parse` makes of it (< 0: not one); absent: def */
    TT_FT_INTS,   /* tt__ints: comma-separated int64_t in [min, max] */
    TT_FT_DTYPES, /* tt__ints of tt_dtype values */
    TT_FT_TEXT,   /* const char *: the value as sent (NULL when absent) */
    TT_FT_REAL,   /* double: finite, in [min, max]; absent: def; written %.6g */
    TT_FT_CONFIG, /* tt_config: tt_config_parse / tt_config_format */
    TT_FT_PCT,    /* char[max]: free text, percent-encoded on the wire (tt__pct_*); absent: "" */
} tt__ftype;

typedef struct tt__ints {
    int n;
    int64_t v[TT_LIST_MAX];
} tt__ints;

typedef struct tt__fspec {
    const char *name;
    tt__ftype type;
    int required;
    int64_t min, max, def;
    const char *const *words; /* TT_FT_WORD (NULL-terminated); TT_FT_ENUM: words[0] names the set */
    int (*parse)(const char *s, int *out); /* TT_FT_ENUM */
    size_t off;                            /* offsetof the value in the request struct */
} tt__fspec;

/* Field `i` of the table was present: bit i of the mask. */
#define TT_HAS(mask, i) (((mask) >> (i)) & 1u)

/*
 * Fills `req` from `m` by the table (at most 32 fields). Checks, in this
 * order: every field is in the table (TT_ERR_INVAL, "unknown field"),
 * every required one is present (TT_ERR_INVAL), then each value in table
 * order: a number that is not one or out of range, or a bad list item
 * (TT_ERR_RANGE), a hex id that is not one (TT_ERR_INVAL), a dtype or word
 * not in its set (TT_ERR_UNSUPPORTED). The message names the field.
 * *present gets a bit per table entry that was sent.
 */
int tt__fields_decode(const tt__msg *m, const tt__fspec *spec, int nspec, void *req, uint32_t *present,
                      char *err, size_t errlen);

/* Every field of `req` at its default, as if none were sent. */
void tt__fields_defaults(const tt__fspec *spec, int nspec, void *req);

/*
 * The inverse: writes "VERB f=v ..." with the fields of `req` whose bit is
 * set in `present`, in table order (no '\n'). Refuses, with the field
 * named: a bit past the table or a required field left out
 * (TT_ERR_INVAL), a value the decoder would refuse (out of range, not of
 * its type, empty text: TT_ERR_RANGE or TT_ERR_INVAL), TT_FT_ENUM (no
 * inverse), and a line that does not fit (TT_ERR_RANGE). Returns the
 * length.
 */
int tt__fields_encode(const char *verb, const tt__fspec *spec, int nspec, const void *req, uint32_t present,
                      char *buf, size_t len, char *err, size_t errlen);

/* Strict decimal integer within [min, max], as docs/protocol.md writes a
 * number: "0" or an optional '-' and digits without a leading zero (no
 * "+", "-0", "007", spaces or trailing junk). TT_ERR_INVAL if not a
 * number, TT_ERR_RANGE if out. */
int tt__parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);

/* A key from LOOKUP-style fields: dtype, hdim, causal (0, 1, 2; default
 * 0), seqlen_q, seqlen_k (default seqlen_q), group (default 1), gpu and
 * rev (default ""), canonical (tt__key_canon). The message names the bad
 * field. Unknown fields are the caller's check. */
int tt__key_from_msg(const tt__msg *m, tt_key_v2 *out, char *err, size_t errlen);
/* The same fields as text: "dtype=fp16 hdim=128 causal=0 seqlen_q=.. seqlen_k=..
 * [group=..] [gpu=..] [rev=..]" (group only when over 1). Returns the
 * length or TT_ERR_RANGE. */
int tt__key_format(const tt_key_v2 *key, char *buf, size_t len);

/* Percent-encoding of free text (GPU names, versions) in a field value:
 * bytes <= ' ', '%', '=' and >= 0x7f become %XX. Writes at most len bytes
 * with the NUL (text that does not fit is cut at a whole character). */
void tt__pct_encode(const char *in, char *out, size_t len);
/* The inverse; a control character decoded (%0A, %00) becomes '?': it
 * would otherwise be stored, exported, and refused by every other node.
 * Bytes that are not UTF-8 become '?' too. Returns 0, TT_ERR_INVAL for a
 * '%' without two hex digits after it (kept as it is), TT_ERR_RANGE for
 * text cut to fit. */
int tt__pct_decode(const char *in, char *out, size_t len);

/* An "ERR <code> <message>" reply: points at the code word and the message
 * (both inside `line`, which gets a NUL after the code). 0 or TT_ERR_PROTO. */
int tt__reply_err(char *line, const char **code, const char **message);

#endif
