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
 * Splits one line ("VERB key=value ...", without its '\n'; a trailing '\r'
 * is dropped) into a verb and fields, writing NULs into `line`. Rejects
 * lines over TT_LINE_MAX, embedded NUL, invalid UTF-8, control characters,
 * a verb not [A-Z]+, a field not key=value (key [a-z0-9_]+, value
 * non-empty), duplicate keys and more than TT_FIELDS_MAX fields.
 * Returns 0, or TT_ERR_PROTO with *err set to a static message.
 */
int tt__proto_parse(char *line, size_t len, tt__msg *out, const char **err);

/* The value of field `key`, or NULL. */
const char *tt__msg_get(const tt__msg *m, const char *key);

/* Every field is in `allowed` and every key in `required` is present (both
 * NULL-terminated lists; NULL = none). Else TT_ERR_INVAL and a message
 * naming the field. */
int tt__msg_check(const tt__msg *m, const char *const *allowed, const char *const *required,
                  char *err, size_t errlen);

/* Strict decimal integer within [min, max]: no sign but '-', no spaces,
 * no trailing junk. TT_ERR_INVAL if not a number, TT_ERR_RANGE if out. */
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

/* An "ERR <code> <message>" reply: points at the code word and the message
 * (both inside `line`, which gets a NUL after the code). 0 or TT_ERR_PROTO. */
int tt__reply_err(char *line, const char **code, const char **message);
/* The TT_ERR_* status a daemon error code word maps to. */
int tt__err_from_code(const char *code);

#endif
