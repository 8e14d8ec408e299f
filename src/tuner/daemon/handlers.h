/*
 * The request handlers: one function per verb of docs/protocol.md. Each
 * reads a parsed request and appends exactly one reply (plus its body
 * lines) to the connection's output. None blocks on tuning; LOOKUP touches
 * only memory.
 */
#ifndef TT_TUNER_HANDLERS_H
#define TT_TUNER_HANDLERS_H

#include <stddef.h>

#include "tuner/daemon/buf.h"
#include "tuner/daemon/daemon.h"
#include "tuner/daemon/stats.h"

enum { TT_HANDLE_OK = 0, TT_HANDLE_CLOSE = 1 };

/* Answers one request line (without its '\n'; modified in place).
 * Returns TT_HANDLE_CLOSE when the connection must close after the reply. */
int tt_handle_line(tt_daemon *d, tt_conn *c, char *line, size_t len, tt_buf *out);
/* Appends "ERR <code> <message>" and counts it. */
void tt_handle_error(tt_daemon *d, tt_buf *out, tt_errc code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
