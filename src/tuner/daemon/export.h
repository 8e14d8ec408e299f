/*
 * EXPORT (docs/protocol.md, "Fleet tables"), streamed: the reply is made
 * off the event loop by a thread with its own read-only database handle
 * (one consistent snapshot), in chunks into a queue of at most
 * TT_EXPORT_QUEUE_MAX bytes, and handed to the connection as the client
 * drains it. A client that does not read holds one bounded queue and a
 * parked thread, never the loop; lookups keep their latency. At most
 * TT_EXPORT_THREADS exports run at once; later ones wait their turn.
 */
#ifndef TT_TUNER_EXPORT_H
#define TT_TUNER_EXPORT_H

#include <stddef.h>

#include "common/proto.h"
#include "tuner/daemon/buf.h"
#include "tuner/daemon/handlers.h"

#define TT_EXPORT_QUEUE_MAX (256 * 1024)
#define TT_EXPORT_THREADS 4

typedef struct tt_export tt_export;

/* EXPORT's request: s->export is set to a running export, or an ERR is
 * appended to out. */
void tt_handle_export(tt_hctx *x, tt_session *s, const tt__msg *m, tt_buf *out);
/* wake: called on the loop when more of the reply is ready (or it
 * ended). alive: whether the client is still there (asked before a
 * waiting export gets its thread; 0 drops it as broken). */
void tt_export_set_wake(tt_export *e, void (*wake)(void *ud), int (*alive)(void *ud), void *ud);
/* Moves the bytes ready into out. 0: more to come; 1: the reply is whole
 * (free the export); -1: it broke after its header was sent (free it and
 * close the connection: the body cannot be completed). */
int tt_export_pull(tt_export *e, tt_buf *out);
/* Stops the thread (at its next chunk) and frees the export; NULL no-op. */
void tt_export_free(tt_export *e);

#endif
