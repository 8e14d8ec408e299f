#include "tuner/daemon/daemon.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <systemd/sd-daemon.h>

#include "tuner/daemon/conn.h"
#include "tuner/daemon/log.h"
#include "tuner/daemon/rev.h"

/* Connections get this long to flush their last replies at shutdown. */
#define STOP_FLUSH_MS 3000

/* Until a worker says HELLO, the revision is the one built in here; the
 * workers' is authoritative because they compile what they measure. The
 * handlers keep a copy, so a LOOKUP does not ask the supervisor. */
static void on_identity(void *ud, const char *rev, const char *gpu) {
    tt_daemon *d = ud;
    tt_hctx_identity(&d->hx, rev, gpu);
}

static void close_if_open(uv_handle_t *h) {
    if (h->type != UV_UNKNOWN_HANDLE && !uv_is_closing(h)) uv_close(h, NULL);
}

/* The last step of a stop: connections and workers are gone. */
static void maybe_finish(tt_daemon *d) {
    if (!d->stopping || d->conn_live > 0 || d->sup_running) return;
    uv_timer_stop(&d->stop_timer);
    close_if_open((uv_handle_t *)&d->stop_timer);
    close_if_open((uv_handle_t *)&d->watchdog);
    close_if_open((uv_handle_t *)&d->sig_term);
    close_if_open((uv_handle_t *)&d->sig_int);
    close_if_open((uv_handle_t *)&d->sig_hup);
    tt_store_close(d->store);
    d->store = NULL;
    tt_info("stopped");
}

void tt_daemon_conn_gone(tt_daemon *d) {
    d->conn_live--;
    maybe_finish(d);
}

static void on_sup_stopped(void *ud) {
    tt_daemon *d = ud;
    d->sup = NULL;
    d->hx.sup = NULL;
    d->sup_running = 0;
    maybe_finish(d);
}

static void on_stop_timeout(uv_timer_t *t) {
    tt_daemon *d = t->data;
    tt_warn("clients did not take their last replies within %d ms: closing them", STOP_FLUSH_MS);
    tt_conn_abort_all(d);
}

static void stop(tt_daemon *d, const char *why) {
    if (d->stopping) return;
    d->stopping = 1;
    sd_notify(0, "STOPPING=1");
    tt_info("stopping (%s)", why);
    tt_listener_close(&d->listener);
    uv_timer_start(&d->stop_timer, on_stop_timeout, STOP_FLUSH_MS, 0);
    tt_conn_close_all(d);
    if (d->sup) tt_supervisor_stop(d->sup, on_sup_stopped, d);
    maybe_finish(d);
}

static void on_signal(uv_signal_t *h, int sig) { stop(h->data, sig == SIGTERM ? "SIGTERM" : "SIGINT"); }

static void raise_fd_limit(int conns);

/* The per-user cap and the admins' slots: as asked, or their defaults
 * from the cap (a quarter, 1/64), and below the cap. Again after a reload
 * changes the cap, so defaults follow it. */
static void conn_limits(tt_daemon *d) {
    const tt_daemon_opts *o = &d->opts;
    int cap = o->max_connections;
    d->max_per_user = o->max_per_user > 0 ? o->max_per_user : cap >= 4 ? cap / 4 : 1;
    d->admin_reserved = o->admin_reserved >= 0 ? o->admin_reserved : cap / 64;
    if (d->admin_reserved >= cap) d->admin_reserved = cap - 1;
}

/* systemctl reload: what can change without a restart takes effect; a
 * file that does not parse changes nothing. */
static void on_hup(uv_signal_t *h, int sig) {
    tt_daemon *d = h->data;
    char err[512];
    (void)sig;
    if (!d->opts.reload || d->stopping) return;
    sd_notify(0, "RELOADING=1");
    tt_daemon_opts o = d->opts;
    tt_auth a;
    if (d->opts.reload(d->opts.reload_ud, &o, err, sizeof err) < 0) {
        tt_err("reload refused, the settings stay: %s", err);
    } else if (tt_auth_init(&a, o.admin_group, err, sizeof err) < 0) {
        tt_err("reload: %s; the admin group stays", err);
    } else {
        d->auth = a;
        d->opts.admin_group = o.admin_group;
        d->hx.admin_group = o.admin_group != NULL;
        d->opts.max_connections = o.max_connections;
        d->opts.idle_timeout_s = o.idle_timeout_s;
        conn_limits(d);
        raise_fd_limit(o.max_connections);
        tt_info("reloaded: admin group %s, max connections %d, idle timeout %d s, log level %s",
                o.admin_group ? o.admin_group : "none", o.max_connections, o.idle_timeout_s,
                tt_log_level_name(tt__log_level));
    }
    sd_notify(0, "READY=1");
}

static void on_watchdog(uv_timer_t *t) {
    (void)t;
    sd_notify(0, "WATCHDOG=1");
}

static void on_connection(uv_stream_t *server, int status) {
    tt_daemon *d = server->data;
    if (status < 0) {
        tt_warn("accept: %s", uv_strerror(status));
        return;
    }
    tt_conn_accept(d, server);
}

static void on_measurement(void *ud, const tt_record *rec, int became_best) {
    tt_daemon *d = ud;
    d->stats.measurements++;
    if (!became_best) return;
    if (tt_index_put(d->index, &rec->key, &rec->config, rec->tflops) < 0)
        tt_err("out of memory updating the index");
}

static void on_worker(void *ud, int gpu, int started, int failed) {
    tt_daemon *d = ud;
    if (started) {
        uint64_t bit = gpu >= 0 && gpu < 64 ? 1ull << gpu : 0;
        if (bit && (d->workers_seen & bit)) d->stats.worker_restarts++;
        d->workers_seen |= bit;
        d->stats.worker_starts++;
    }
    if (failed) d->stats.worker_failures++;
}

static int load_best(void *ud, const tt_record *rec) {
    tt_daemon *d = ud;
    return tt_index_put(d->index, &rec->key, &rec->config, rec->tflops);
}

/* Room for every connection, the database, the workers' pipes. */
static void raise_fd_limit(int conns) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) return;
    rlim_t want = (rlim_t)conns + 256;
    if (rl.rlim_cur >= want) return;
    rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < want)
        tt_warn("file descriptor limit %llu is below the %d connections allowed",
                (unsigned long long)rl.rlim_cur, conns);
}

int tt_daemon_run(const tt_daemon_opts *opts) {
    static tt_daemon dm; /* one daemon per process; static keeps it off the stack */
    tt_daemon *d = &dm;
    char err[512];
    int rc;
    memset(d, 0, sizeof *d);
    d->opts = *opts;
    d->exit_code = 1;
    d->loop = uv_default_loop();
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit(opts->max_connections);
    tt_builtin_kernel_rev(d->hx.builtin_rev);
    tt_hctx_identity(&d->hx, "", "");
    conn_limits(d);
    if ((rc = tt_auth_init(&d->auth, opts->admin_group, err, sizeof err)) < 0) {
        tt_err("%s", err);
        return 1;
    }
    if ((rc = tt_store_open(opts->db_path, &d->store, err, sizeof err)) < 0) {
        tt_err("cannot open the tuning database %s: %s", opts->db_path, err);
        return 1;
    }
    int64_t requeued = 0;
    if (tt_store_job_recover(d->store, &requeued) < 0) {
        tt_err("recovering the job queue: %s", tt_store_errmsg(d->store));
        goto out;
    }
    if (requeued) tt_info("%lld interrupted job keys back in the queue", (long long)requeued);
    if (tt_index_new(&d->index) < 0 || tt_store_each_best(d->store, load_best, d) < 0) {
        tt_err("loading the winners: %s", tt_store_errmsg(d->store));
        goto out;
    }
    if (tt_listener_open(&d->listener, d->loop, opts->socket_path, 511, on_connection, d, err, sizeof err) <
        0) {
        tt_err("%s", err);
        goto out;
    }
    char worker[4096] = "";
    if (opts->worker_path) snprintf(worker, sizeof worker, "%s", opts->worker_path);
    else if (tt_supervisor_default_worker(worker, sizeof worker) < 0) worker[0] = '\0';
    tt_supervisor_opts so = {
        .worker_path = worker,
        .cache_dir = opts->cache_dir,
        .measure_timeout_s = opts->worker_timeout_s,
    };
    tt_supervisor_events ev = {
        .ud = d, .on_measurement = on_measurement, .on_worker = on_worker, .on_identity = on_identity};
    if (tt_supervisor_start(d->loop, d->store, &so, &ev, &d->sup, err, sizeof err) < 0) {
        tt_err("%s", err);
        goto out;
    }
    d->sup_running = 1;
    d->hx = (tt_hctx){
        .index = d->index,
        .store = d->store,
        .stats = &d->stats,
        .auth = &d->auth,
        .sup = d->sup,
        .db_path = opts->db_path,
        .admin_group = opts->admin_group != NULL,
        .conn_open = &d->conn_open,
        .started_ms = tt_hctx_now_ms(),
        .start_time_s = (int64_t)time(NULL),
        .loop = d->loop,
    };
    tt_builtin_kernel_rev(d->hx.builtin_rev);
    tt_hctx_identity(&d->hx, tt_supervisor_rev(d->sup), tt_supervisor_gpu(d->sup));
    uv_signal_init(d->loop, &d->sig_term);
    uv_signal_init(d->loop, &d->sig_int);
    d->sig_term.data = d->sig_int.data = d;
    uv_signal_start(&d->sig_term, on_signal, SIGTERM);
    uv_signal_start(&d->sig_int, on_signal, SIGINT);
    uv_signal_init(d->loop, &d->sig_hup);
    d->sig_hup.data = d;
    uv_signal_start(&d->sig_hup, on_hup, SIGHUP);
    uv_timer_init(d->loop, &d->stop_timer);
    d->stop_timer.data = d;
    uv_timer_init(d->loop, &d->watchdog);
    uint64_t wd_usec = 0;
    if (sd_watchdog_enabled(0, &wd_usec) > 0 && wd_usec > 0) {
        /* Pinged from the loop itself: a stuck loop stops the pings. */
        uv_timer_start(&d->watchdog, on_watchdog, wd_usec / 2000, wd_usec / 2000);
        uv_unref((uv_handle_t *)&d->watchdog);
    }
    tt_info("serving on %s%s, database %s, %zu records, kernel revision %s", opts->socket_path,
            d->listener.from_systemd ? " (socket from systemd)" : "", opts->db_path, tt_index_count(d->index),
            d->hx.builtin_rev);
    sd_notify(0, "READY=1\nSTATUS=serving lookups");
    d->exit_code = 0;
    uv_run(d->loop, UV_RUN_DEFAULT);
out:
    if (!d->stopping) {
        /* A start-up failure: nothing ran yet, close what was opened. */
        tt_listener_close(&d->listener);
        if (d->sup) {
            d->stopping = 1;
            tt_supervisor_stop(d->sup, on_sup_stopped, d);
        }
        uv_run(d->loop, UV_RUN_DEFAULT);
    }
    tt_store_close(d->store);
    tt_index_free(d->index);
    uv_loop_close(d->loop);
    return d->exit_code;
}
