/*
 * The request handlers: one function per verb of docs/protocol.md. A line
 * is parsed (src/common/proto.c), the verb's field table checks it and
 * fills the verb's typed request, and only then does the handler run; it
 * appends exactly one reply (plus its body lines) to the output. None
 * blocks on tuning; LOOKUP touches only memory.
 *
 * The handlers see a narrow context, not the daemon: the index, the store,
 * the counters, the supervisor (may be NULL) and the serving GPU and
 * kernel revision, which the daemon keeps current when a worker says hello.
 * So they run in-process in unit tests (tests/daemon/test_handlers.c).
 */
#ifndef TT_TUNER_HANDLERS_H
#define TT_TUNER_HANDLERS_H

#include <stddef.h>
#include <stdint.h>

#include "tuner/daemon/auth.h"
#include "tuner/daemon/buf.h"
#include "tuner/daemon/index.h"
#include "tuner/daemon/stats.h"
#include "tuner/daemon/supervisor.h"
#include "tuner/store/store.h"

enum { TT_HANDLE_OK = 0, TT_HANDLE_CLOSE = 1 };

typedef struct tt_hctx {
    tt_index *index;
    tt_store *store;
    tt_stats *stats;
    const tt_auth *auth;
    tt_supervisor *sup;  /* NULL: no worker supervision (tests) */
    const char *db_path; /* for EXPORT format=sqlite's snapshot */
    int admin_group;     /* an admin group is configured (messages) */
    const int64_t *conn_open;
    uint64_t started_ms;    /* monotonic, for uptime */
    int64_t start_time_s;   /* Unix time the daemon started (metrics) */
    int64_t last_import_at; /* Unix time of the last committed IMPORT, 0: none */
    uv_loop_t *loop;        /* EXPORT's threads wake the loop */
    /* What a key without gpu=/rev= means: GPU 0's fingerprint ("" while no
     * worker with a GPU said hello) and the workers' kernel revision, else
     * the one built into the daemon. Set by tt_hctx_identity. */
    char gpu[TT_ID_MAX], rev[TT_ID_MAX];
    char builtin_rev[TT_ID_MAX];
    /* refused admin verbs: one log line a second, the rest counted */
    uint64_t refused_log_ms;
    int64_t refused_quiet;
} tt_hctx;

/* The handlers' view of one connection. */
typedef struct tt_session {
    tt_peer peer;
    int admin;                        /* -1: not asked yet */
    struct tt_fleet_body *fleet_body; /* an IMPORT body in progress */
    struct tt_export *export;         /* an EXPORT being streamed */
} tt_session;

/* Initializes a session for a peer (admin asked on first need). */
void tt_session_init(tt_session *s, const tt_peer *peer);
/* Frees what a session holds (an IMPORT body, an export). */
void tt_session_free(tt_session *s);
/* 1 if the peer may use changing verbs (asked once, then cached). */
int tt_session_is_admin(tt_hctx *x, tt_session *s);

/* The supervisor's revision and GPU changed ("" if none): what keys
 * without gpu=/rev= now mean. */
void tt_hctx_identity(tt_hctx *x, const char *rev, const char *gpu);

/* Milliseconds of the monotonic clock. */
uint64_t tt_hctx_now_ms(void);

/* Answers one request line (without its '\n'; modified in place).
 * Returns TT_HANDLE_CLOSE when the connection must close after the reply. */
int tt_handle_line(tt_hctx *x, tt_session *s, char *line, size_t len, tt_buf *out);
/* Appends "ERR <code> <message>" and counts it. */
void tt_handle_error(tt_hctx *x, tt_buf *out, tt_errc code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The permission check of changing verbs: 0, or ERR permission appended
 * (and logged, at most once a second). */
int tt_need_admin(tt_hctx *x, tt_session *s, const char *verb, tt_buf *out);

#endif
