/*
 * A blocking line connection to tiletuned in which every operation has a
 * deadline (an absolute CLOCK_MONOTONIC time in ns): connect, write and
 * read never wait past it. Used by libtiletune and by the CLI.
 *
 * Failures return a negative TT_ERR_* code and a one-line message in the
 * caller's `err` buffer (may be NULL). After a failed send or read the
 * connection is out of step with the daemon (a late reply may still come):
 * the caller must close it.
 */
#ifndef TT_CLIENT_CONN_H
#define TT_CLIENT_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "common/proto.h"
#include "tiletune.h"

#define TT_SOCKET_DEFAULT "/run/tiletune/tiletune.sock"
/* The longest reply or body line we accept; a STATUS or LOOKUP reply is a
 * few hundred bytes, Prometheus lines are shorter still. */
#define TT_REPLY_LINE_MAX 16384

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t tt__now_ns(void);
/* now + ms (ms <= 0: now). */
int64_t tt__deadline_after_ms(int ms);

/* The socket to use: `path` if non-NULL and non-empty, else
 * $TILETUNE_SOCKET if set and non-empty, else TT_SOCKET_DEFAULT. */
const char *tt__socket_path(const char *path);

typedef struct tt__conn tt__conn;

/* Connects to the daemon's Unix socket. TT_ERR_NODAEMON when nothing
 * listens there (the message carries the path and errno's text),
 * TT_ERR_TIMEOUT when the listen queue stayed full until the deadline,
 * TT_ERR_INVAL for a path longer than sun_path. */
int tt__conn_open(const char *path, int64_t deadline, tt__conn **out, char *err, size_t errlen);
/* Closes and frees; NULL is a no-op. */
void tt__conn_close(tt__conn *c);
/* The socket's fd; -1 once tt__conn_drop_fd ran. */
int tt__conn_fd(const tt__conn *c);
/* Closes the fd only (the struct stays for tt__conn_close): for a fork
 * child, which must not keep its parent's stream, in an atfork handler
 * where freeing is best avoided. */
void tt__conn_drop_fd(tt__conn *c);

/* Writes all `len` bytes (never raises SIGPIPE). */
int tt__conn_send(tt__conn *c, const char *buf, size_t len, int64_t deadline, char *err, size_t errlen);
/* Reads one line. *line points into the connection's buffer, NUL-ended,
 * without its "\n" (or "\r\n"); it stays valid until the next read. */
int tt__conn_read_line(tt__conn *c, char **line, size_t *len, int64_t deadline, char *err, size_t errlen);

/*
 * One parsed reply. For `OK`: status 0, msg holds the fields (verb "OK"),
 * `word` a leading bare word such as PING's "pong" (else ""), and `body`
 * the N lines of an `OK ... lines=N` reply. For `ERR <code> <message>`:
 * status is tt__err_from_code(code) (< 0), code and message point into the
 * reply. Everything points into memory the reply owns.
 */
typedef struct tt__reply {
    int status;
    char *head; /* the reply line, split in place */
    tt__msg msg;
    char word[32]; /* "" if none */
    const char *code, *message;
    int nbody;
    char **body;
} tt__reply;

/* Parses a reply line (taken over: `line` must be malloc'd and becomes
 * r->head). TT_ERR_PROTO if it is neither a valid OK nor ERR line. */
int tt__reply_parse(char *line, tt__reply *r);
/* Reads a reply line and, for `lines=N`, its N body lines. A reply that
 * is well-formed but `ERR` returns 0 with r->status < 0: only transport
 * and framing failures return < 0 (then *r is empty). */
int tt__conn_read_reply(tt__conn *c, tt__reply *r, int64_t deadline, char *err, size_t errlen);
/* Sends one request line (without its "\n") and reads its reply. */
int tt__conn_request(tt__conn *c, const char *request, tt__reply *r, int64_t deadline, char *err,
                     size_t errlen);
void tt__reply_free(tt__reply *r);

/* Fills *res from a LOOKUP reply's fields; TT_ERR_PROTO if any is
 * missing or implausible (an unknown match, a config out of the knobs'
 * ranges, seqlens out of range, tflops not a non-negative number). The
 * library and the CLI both judge replies by it. */
int tt__lookup_reply_parse(const tt__msg *m, tt_lookup_result *res);
/* Replaces control characters (C0, DEL, C1) in daemon text with '?', so
 * a daemon cannot send escape sequences to a terminal. */
void tt__sanitize_text(char *s);

#endif
