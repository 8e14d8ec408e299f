/*
 * The protocol's vocabulary, one list each (docs/protocol.md): request
 * verbs, ERR code words with the client-side status each maps to, LOOKUP
 * match kinds, job states, and the measurement statuses and job modes the
 * worker pipe carries (docs/worker-protocol.md). Every other table (the daemon's dispatch
 * and counters, the client's error mapping, the store's state names, the
 * STATS labels) is expanded from these, so a word is added in one place.
 */
#ifndef TT_COMMON_WIRE_H
#define TT_COMMON_WIRE_H

#include "tiletune.h"

/* Request verbs: X(ENUM_SUFFIX, "lower-case name"); the wire word is the
 * suffix itself. */
/* clang-format off */
#define TT_WIRE_VERBS(X)                                                                         \
    X(HELLO, "hello") X(PING, "ping") X(LOOKUP, "lookup") X(STATUS, "status") X(STATS, "stats")  \
    X(TUNE, "tune") X(JOBS, "jobs") X(CANCEL, "cancel") X(FORGET, "forget") X(IMPORT, "import")  \
    X(EXPORT, "export") X(JOB, "job")

/* ERR code words: X(ENUM_SUFFIX, "word", TT_ERR_* a client reports). The
 * daemon maps a handler's negative status to the first word listed with
 * that status ("proto" before "verb" and "toolong"), and anything else to
 * "internal". */
#define TT_WIRE_ERRORS(X)                                                                         \
    X(PROTO, "proto", TT_ERR_PROTO) X(VERB, "verb", TT_ERR_PROTO) X(FIELD, "field", TT_ERR_INVAL) \
    X(RANGE, "range", TT_ERR_RANGE) X(UNSUPPORTED, "unsupported", TT_ERR_UNSUPPORTED)             \
    X(TOOLONG, "toolong", TT_ERR_PROTO) X(BUSY, "busy", TT_ERR_BUSY)                              \
    X(PERMISSION, "permission", TT_ERR_PERM) X(NOTFOUND, "notfound", TT_ERR_NOTFOUND)             \
    X(DB, "db", TT_ERR_DB) X(TIMEOUT, "timeout", TT_ERR_TIMEOUT)                                  \
    X(VERSION, "version", TT_ERR_VERSION) X(INTERNAL, "internal", TT_ERR_REMOTE)

/* LOOKUP match kinds, in tt_match's order (include/tiletune.h). */
#define TT_WIRE_MATCHES(X) X(EXACT, "exact") X(NEAREST, "nearest") X(DEFAULT, "default")

/* Job states, in tt_job_state's order (src/tuner/store/record.h). */
#define TT_WIRE_JOB_STATES(X) \
    X(QUEUED, "queued") X(RUNNING, "running") X(DONE, "done") X(FAILED, "failed") X(CANCELLED, "cancelled")

/* Measurement statuses, in tt_meas_status's order (src/tuner/store/record.h). */
#define TT_WIRE_MEAS_STATUSES(X) \
    X(OK, "ok") X(WRONG, "wrong") X(FAULT, "fault") X(TIMEOUT, "timeout") X(SKIPPED, "skipped")

/* Job modes, in tt_job_mode's order. */
#define TT_WIRE_JOB_MODES(X) X(EXHAUSTIVE, "exhaustive") X(FAST, "fast")

typedef enum tt_verb {
#define X(v, s) TT_VERB_##v,
    TT_WIRE_VERBS(X)
#undef X
    TT_VERB_OTHER, /* a line whose verb is unknown (counted as "other") */
    TT_VERB_COUNT
} tt_verb;

typedef enum tt_errc {
#define X(e, s, st) TT_ERRC_##e,
    TT_WIRE_ERRORS(X)
#undef X
    TT_ERRC_COUNT
} tt_errc;

enum {
#define X(e, s) TT__N_MATCH_##e,
    TT_WIRE_MATCHES(X)
#undef X
    TT_MATCH_COUNT
};
enum {
#define X(e, s) TT__N_JOB_##e,
    TT_WIRE_JOB_STATES(X)
#undef X
    TT_JOB_STATE_COUNT
};
enum {
#define X(e, s) TT__N_MEAS_##e,
    TT_WIRE_MEAS_STATUSES(X)
#undef X
    TT_MEAS_STATUS_COUNT
};
enum {
#define X(e, s) TT__N_MODE_##e,
    TT_WIRE_JOB_MODES(X)
#undef X
    TT_JOB_MODE_COUNT
};
/* clang-format on */

/* The verb of an upper-case wire word, or TT_VERB_OTHER. */
tt_verb tt__verb_find(const char *s);
const char *tt__verb_name(tt_verb v); /* lower case: "lookup"; "other" */
const char *tt__errc_name(tt_errc e); /* the wire word: "range" */
/* The wire code for a negative TT_ERR_* status of a handler. */
tt_errc tt__errc_from_status(int status);
/* The TT_ERR_* status a client reports for a code word (TT_ERR_REMOTE for
 * a word it does not know). */
int tt__err_from_code(const char *code);
/* Names by number, NULL out of range. */
const char *tt__match_word(int m);
const char *tt__job_state_word(int st);

#endif
