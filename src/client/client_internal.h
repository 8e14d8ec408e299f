/* Knobs of tt_client that only tests turn: they shorten the waits so a
 * test of back-off and expiry runs in milliseconds. */
#ifndef TT_CLIENT_INTERNAL_H
#define TT_CLIENT_INTERNAL_H

#include "tiletune.h"

/* First back-off after a failure and its ceiling (doubling in between). */
void tt__client_set_backoff(tt_client *c, int min_ms, int max_ms);
/* How long nearest and default answers stay in the cache. */
void tt__client_set_ttl(tt_client *c, int ttl_ms);

/* The fd of the kept connection to the daemon, -1 if none. */
int tt__client_conn_fd(tt_client *c);

#endif
