/*
 * One client connection: reads request lines into a bounded buffer,
 * answers them in order, and writes the replies with back-pressure.
 *
 * - A line is at most TT_LINE_MAX bytes (+ "\r\n"); a longer one gets
 *   `ERR toolong` and the connection closes.
 * - Pipelined requests are answered in order: replies of one read are
 *   gathered into one write.
 * - Back-pressure: when more than OUT_HIGH bytes of replies wait for a
 *   client that does not read, the connection stops reading (and answering)
 *   until they drain below OUT_LOW; other clients are never held up.
 * - A half-written line just waits in its own buffer; an idle connection
 *   (no bytes for --idle-timeout) gets `ERR timeout` and is closed.
 * - Closing after a final reply: flush, shut down our side, then read and
 *   discard until the client closes (at most LINGER_MS), so the client
 *   reads the reply instead of a reset.
 */
#ifndef TT_TUNER_CONN_H
#define TT_TUNER_CONN_H

#include <uv.h>

#include "tuner/daemon/auth.h"
#include "tuner/daemon/daemon.h"

/* Accepts a pending connection of `server`: under the cap it is served,
 * beyond it answered `ERR busy` and closed. */
void tt_conn_accept(tt_daemon *d, uv_stream_t *server);
/* Shutdown: every connection flushes the replies it has made and closes. */
void tt_conn_close_all(tt_daemon *d);
/* Closes every connection now, replies written or not. */
void tt_conn_abort_all(tt_daemon *d);
/* 1 if the peer may use changing verbs (asked once, then cached). */
int tt_conn_is_admin(tt_conn *c);
const tt_peer *tt_conn_peer(const tt_conn *c);
/* The IMPORT whose body is arriving on `c` (handlers_fleet.c), or NULL;
 * freed with the connection. */
struct tt_fleet_body **tt_conn_fleet_body(tt_conn *c);

#endif
