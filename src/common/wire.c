#include "common/wire.h"

#include <string.h>

static const char *const verb_upper[] = {
#define X(v, s) #v,
    TT_WIRE_VERBS(X)
#undef X
};
/* clang-format off */
static const char *const verb_lower[] = {
#define X(v, s) s,
    TT_WIRE_VERBS(X)
#undef X
    "other",
};
/* clang-format on */
static const struct {
    const char *word;
    int status;
} errors[] = {
#define X(e, s, st) {s, st},
    TT_WIRE_ERRORS(X)
#undef X
};
static const char *const matches[] = {
#define X(e, s) s,
    TT_WIRE_MATCHES(X)
#undef X
};
static const char *const job_states[] = {
#define X(e, s) s,
    TT_WIRE_JOB_STATES(X)
#undef X
};

_Static_assert(sizeof verb_lower / sizeof verb_lower[0] == TT_VERB_COUNT, "one name per verb");
#define X(e, s) _Static_assert((int)TT__N_MATCH_##e == (int)TT_MATCH_##e, "TT_WIRE_MATCHES follows tt_match");
TT_WIRE_MATCHES(X)
#undef X

tt_verb tt__verb_find(const char *s) {
    for (int i = 0; i < TT_VERB_OTHER; i++)
        if (s[0] == verb_upper[i][0] && strcmp(s, verb_upper[i]) == 0) return (tt_verb)i;
    return TT_VERB_OTHER;
}

const char *tt__verb_name(tt_verb v) { return (unsigned)v < TT_VERB_COUNT ? verb_lower[v] : "other"; }

const char *tt__errc_name(tt_errc e) { return (unsigned)e < TT_ERRC_COUNT ? errors[e].word : "internal"; }

tt_errc tt__errc_from_status(int status) {
    for (int i = 0; i < TT_ERRC_COUNT; i++)
        if (errors[i].status == status && status != TT_ERR_REMOTE) return (tt_errc)i;
    return TT_ERRC_INTERNAL;
}

int tt__err_from_code(const char *code) {
    for (int i = 0; i < TT_ERRC_COUNT; i++)
        if (strcmp(errors[i].word, code) == 0) return errors[i].status;
    return TT_ERR_REMOTE;
}

const char *tt__match_word(int m) { return m >= 0 && m < TT_MATCH_COUNT ? matches[m] : NULL; }

const char *tt__job_state_word(int st) { return st >= 0 && st < TT_JOB_STATE_COUNT ? job_states[st] : NULL; }
