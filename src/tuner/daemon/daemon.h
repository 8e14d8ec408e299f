/*
 * The daemon's state, shared by its modules (listener, connections,
 * request handlers, main). Private to src/tuner/.
 */
#ifndef TT_TUNER_DAEMON_H
#define TT_TUNER_DAEMON_H

#include <stdint.h>
#include <uv.h>

#include "tuner/daemon/auth.h"
#include "tuner/daemon/handlers.h"
#include "tuner/daemon/index.h"
#include "tuner/daemon/listener.h"
#include "tuner/daemon/stats.h"
#include "tuner/store/store.h"
#include "tuner/daemon/supervisor.h"

typedef struct tt_daemon_opts {
    const char *socket_path;
    const char *db_path;
    const char *cache_dir;
    const char *worker_path; /* NULL: tiletune-worker next to the binary; "": none */
    const char *admin_group; /* NULL: none */
    int max_connections;     /* > 0 */
    int max_per_user;        /* served connections of one uid but root and ours; <= 0: a quarter */
    int admin_reserved;      /* slots only root and our uid may take; < 0: 1/64 of the cap */
    int idle_timeout_s;      /* > 0 */
    int worker_timeout_s;    /* silence limit of a measuring worker */
    /* SIGHUP: re-reads the settings into *o (admin_group, max_connections,
     * idle_timeout_s; the log level itself). 0, or -1 with the reason and
     * nothing changed. NULL: SIGHUP is ignored. */
    int (*reload)(void *ud, struct tt_daemon_opts *o, char *err, size_t errlen);
    void *reload_ud;
} tt_daemon_opts;

typedef struct tt_conn tt_conn;

typedef struct tt_daemon {
    uv_loop_t *loop;
    tt_daemon_opts opts;
    tt_store *store;
    tt_index *index;
    tt_supervisor *sup;
    tt_auth auth;
    tt_stats stats;
    tt_hctx hx; /* what the request handlers see */
    tt_listener listener;
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t watchdog, stop_timer;
    tt_conn *conns;        /* every live connection, refused ones included */
    int64_t conn_open;     /* accepted under the cap and not closed */
    int64_t conn_live;     /* every tt_conn not yet freed */
    int max_per_user;      /* in effect: opts' or its default (conn_limits) */
    int admin_reserved;    /* in effect, below the cap */
    uint64_t workers_seen; /* bit g: GPU g's worker has started once */
    int stopping, exit_code, sup_running;
} tt_daemon;

/* Runs the daemon until SIGTERM/SIGINT; returns the process exit code. */
int tt_daemon_run(const tt_daemon_opts *opts);

/* A connection closed (called by the connection module). */
void tt_daemon_conn_gone(tt_daemon *d);

#endif
