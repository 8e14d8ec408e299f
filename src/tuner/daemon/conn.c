#include "tuner/daemon/conn.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "tuner/daemon/buf.h"
#include "tuner/daemon/export.h"
#include "tuner/daemon/handlers.h"
#include "tuner/daemon/log.h"
#include "common/proto.h"

#define IN_CAP (2 * TT_LINE_MAX)
#define OUT_HIGH (256 * 1024)
#define OUT_LOW (64 * 1024)
#define LINGER_MS 1000

struct tt_conn {
    uv_pipe_t pipe;
    uv_timer_t timer; /* idle time-out, then the linger limit */
    uv_shutdown_t shutdown;
    tt_daemon *d;
    tt_conn *prev, *next;
    tt_session sess;
    size_t in_len;
    /* loop time of the last bytes read or of reply bytes the client took,
     * for the idle timer */
    uint64_t last_read;
    size_t queued; /* reply bytes handed to uv_write, not yet written */
    unsigned reading : 1, paused : 1, finishing : 1, lingering : 1, closing : 1, refused : 1, eof : 1;
    int handles;
    char in[IN_CAP];
};

typedef struct wreq {
    uv_write_t req;
    tt_conn *c;
    size_t len;
    char *data;
} wreq;

static void conn_close(tt_conn *c);
static void conn_process(tt_conn *c);
static void on_export_wake(void *ud);
static int peer_alive(void *ud);
static void start_linger(tt_conn *c);
static void start_reading(tt_conn *c);
static void export_pump(tt_conn *c);

static void on_handle_closed(uv_handle_t *h) {
    tt_conn *c = h->data;
    if (--c->handles > 0) return;
    tt_daemon *d = c->d;
    free(c);
    tt_daemon_conn_gone(d);
}

static void conn_close(tt_conn *c) {
    if (c->closing) return;
    c->closing = 1;
    tt_session_free(&c->sess);
    if (c->prev) c->prev->next = c->next;
    else c->d->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    if (!c->refused) c->d->conn_open--;
    uv_close((uv_handle_t *)&c->pipe, on_handle_closed);
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

static void on_written(uv_write_t *req, int status) {
    wreq *w = (wreq *)req;
    tt_conn *c = w->c;
    c->queued -= w->len;
    free(w->data);
    free(w);
    if (c->closing) return;
    if (status < 0) {
        tt_debug("write to a client failed: %s", uv_strerror(status));
        conn_close(c);
        return;
    }
    c->last_read = uv_now(c->d->loop); /* the client is taking its replies */
    if (c->finishing) {
        if (c->queued == 0) start_linger(c);
        return;
    }
    if (c->sess.export) export_pump(c);
    else if (c->paused && c->queued < OUT_LOW) {
        c->paused = 0;
        conn_process(c);
    }
}

static void flush(tt_conn *c, tt_buf *out) {
    if (out->len == 0 || c->closing) {
        tt_buf_free(out);
        return;
    }
    /* Most replies fit the socket buffer: write them now. uv_write would
     * also get there, but its completion re-arms the fd in epoll (one
     * epoll_ctl per reply) and costs a request allocation. A paused
     * connection keeps uv_write: its completion is what resumes reading. */
    if (c->queued == 0 && !c->paused && !out->oom) {
        uv_buf_t b0 = uv_buf_init(out->data, (unsigned)out->len);
        int n = uv_try_write((uv_stream_t *)&c->pipe, &b0, 1);
        if (n == (int)out->len) {
            tt_buf_reset(out);
            tt_buf_free(out);
            return;
        }
        if (n > 0) {
            memmove(out->data, out->data + n, out->len - (size_t)n);
            out->len -= (size_t)n;
        }
    }
    wreq *w = malloc(sizeof *w);
    if (!w || out->oom) {
        free(w);
        tt_buf_free(out);
        tt_err("out of memory writing a reply: closing the connection");
        conn_close(c);
        return;
    }
    w->c = c;
    w->data = tt_buf_steal(out, &w->len);
    uv_buf_t b = uv_buf_init(w->data, (unsigned)w->len);
    c->queued += w->len;
    int rc = uv_write(&w->req, (uv_stream_t *)&c->pipe, &b, 1, on_written);
    if (rc < 0) {
        c->queued -= w->len;
        free(w->data);
        free(w);
        conn_close(c);
    }
}

static void on_linger_timeout(uv_timer_t *t) { conn_close(t->data); }

static void on_shutdown(uv_shutdown_t *req, int status) {
    tt_conn *c = req->data;
    if (status < 0 || c->eof) conn_close(c);
}

/* Our side is done: shut down the write half and drain what the client
 * still sends until it closes, so it reads our last reply, not a reset. */
static void start_linger(tt_conn *c) {
    if (c->lingering || c->closing) return;
    c->lingering = 1;
    uv_timer_stop(&c->timer);
    uv_timer_start(&c->timer, on_linger_timeout, LINGER_MS, 0);
    c->shutdown.data = c;
    if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->pipe, on_shutdown) < 0) {
        conn_close(c);
        return;
    }
    c->in_len = 0;
    c->paused = 0;
    start_reading(c);
}

/* Send `out` (the last replies) and close. */
static void finish(tt_conn *c, tt_buf *out) {
    c->finishing = 1;
    flush(c, out);
    if (!c->closing && c->queued == 0) start_linger(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    tt_conn *c = h->data;
    (void)suggested;
    if (c->lingering) c->in_len = 0; /* discarding */
    *buf = uv_buf_init(c->in + c->in_len, (unsigned)(IN_CAP - c->in_len));
}

static void stop_reading(tt_conn *c) {
    if (c->reading) uv_read_stop((uv_stream_t *)&c->pipe);
    c->reading = 0;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

static void start_reading(tt_conn *c) {
    if (!c->reading && !c->closing && uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) == 0)
        c->reading = 1;
}

static void toolong(tt_conn *c, tt_buf *out) {
    tt_handle_error(&c->d->hx, out, TT_ERRC_TOOLONG, "request line over 4096 bytes; closing");
    finish(c, out);
}

/* Answers every complete line in the buffer, in order, until the client
 * has too many unread replies. */
static void conn_process(tt_conn *c) {
    tt_buf out;
    tt_buf_init(&out);
    size_t pos = 0;
    while (!c->finishing && !c->closing) {
        if (c->sess.export) { /* the lines after an EXPORT wait for its reply */
            c->paused = 1;
            break;
        }
        char *nl = memchr(c->in + pos, '\n', c->in_len - pos);
        if (!nl) break;
        size_t len = (size_t)(nl - (c->in + pos));
        char *line = c->in + pos;
        pos += len + 1;
        /* LOOKUP's service time for the histogram: two clock reads on
         * the hot path, none on the others */
        int lookup = len > 7 && memcmp(line, "LOOKUP ", 7) == 0;
        uint64_t t0 = lookup ? uv_hrtime() : 0;
        int hr = tt_handle_line(&c->d->hx, &c->sess, line, len, &out);
        if (lookup) tt_stats_observe_lookup(&c->d->stats, uv_hrtime() - t0);
        if (hr == TT_HANDLE_CLOSE) {
            finish(c, &out);
            return;
        }
        if (c->queued + out.len > OUT_HIGH) {
            c->paused = 1;
            break;
        }
    }
    memmove(c->in, c->in + pos, c->in_len - pos);
    c->in_len -= pos;
    if (!c->paused && c->in_len > TT_LINE_MAX + 1) {
        toolong(c, &out);
        return;
    }
    flush(c, &out);
    if (c->closing) return;
    if (c->sess.export) {
        tt_export_set_wake(c->sess.export, on_export_wake, peer_alive, c);
        stop_reading(c);
        export_pump(c);
        return;
    }
    if (c->paused) stop_reading(c);
    else if (c->eof) finish(c, &out);
    else start_reading(c);
}

/* Hands the client what is ready of the export's reply, as far as it
 * takes it: more is pulled when the writes drain (on_written) or the
 * export's thread has more (on_export_wake). */
static void export_pump(tt_conn *c) {
    tt_export *e = c->sess.export;
    if (!e || c->closing || c->queued >= OUT_LOW) return;
    tt_buf out;
    tt_buf_init(&out);
    int rc = tt_export_pull(e, &out);
    flush(c, &out);
    if (rc == 0 || c->closing) return;
    tt_export_free(e);
    c->sess.export = NULL;
    if (rc < 0) { /* the body cannot be completed: the client sees EOF, not a short body */
        conn_close(c);
        return;
    }
    c->paused = 0;
    if (c->finishing) return;
    conn_process(c);
}

static void on_export_wake(void *ud) { export_pump(ud); }

/* 0 once the client has closed its socket (both directions: a client
 * that only shut down writing still reads its reply). */
static int peer_alive(void *ud) {
    tt_conn *c = ud;
    uv_os_fd_t fd;
    if (c->closing || uv_fileno((uv_handle_t *)&c->pipe, &fd) != 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return !(poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR)));
}

static void on_idle_timeout(uv_timer_t *t) {
    tt_conn *c = t->data;
    /* The timer is not re-armed on every read (uv_timer_again per request
     * was 2% of a LOOKUP): it fires one idle period after the last arming
     * and is armed again for the rest when the connection has read since. */
    uint64_t idle_ms = (uint64_t)c->d->opts.idle_timeout_s * 1000, now = uv_now(c->d->loop);
    if (now - c->last_read < idle_ms) {
        uv_timer_start(&c->timer, on_idle_timeout, idle_ms - (now - c->last_read), 0);
        return;
    }
    tt_buf out;
    tt_buf_init(&out);
    c->d->stats.conn_timed_out++;
    tt_debug("closing a connection idle for %d s", c->d->opts.idle_timeout_s);
    if (c->sess.export) { /* mid-reply: no ERR line can follow */
        conn_close(c);
        return;
    }
    tt_handle_error(&c->d->hx, &out, TT_ERRC_TIMEOUT, "idle for too long; closing");
    stop_reading(c);
    finish(c, &out);
    /* A client that reads nothing cannot take our reply: the linger
     * timer closes it anyway. */
    if (!c->lingering && !c->closing) uv_timer_start(&c->timer, on_linger_timeout, LINGER_MS, 0);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
    tt_conn *c = s->data;
    (void)buf;
    if (c->closing) return;
    if (n < 0) {
        stop_reading(c);
        if (n != UV_EOF || c->lingering || c->finishing) {
            conn_close(c);
            return;
        }
        /* The client sent all it will send: answer the complete lines
         * (done already, unless paused) and close once the replies are out. */
        c->eof = 1;
        if (!c->paused) {
            tt_buf out;
            tt_buf_init(&out);
            finish(c, &out);
        }
        return;
    }
    if (c->lingering || c->finishing) { /* our last reply is out or on its way */
        c->in_len = 0;
        return;
    }
    if (n == 0) return;
    c->in_len += (size_t)n;
    c->last_read = uv_now(c->d->loop);
    conn_process(c);
}

/* NULL if a connection of `p` may be served now, else why not. Root and
 * the daemon's own user may take the slots kept for admins and are not
 * held to the per-user cap (the admin group is not consulted here: that
 * may ask NSS, and accepting must not wait). */
static const char *admit(tt_daemon *d, const tt_peer *p) {
    if (d->stopping) return "shutting down";
    if (d->conn_open >= d->opts.max_connections) return "connection limit reached";
    if (p->known && (p->uid == 0 || p->uid == d->auth.self_uid)) return NULL;
    if (d->conn_open >= d->opts.max_connections - d->admin_reserved)
        return "connection limit reached (the rest are kept for admins)";
    int64_t mine = 0;
    for (tt_conn *o = d->conns; o; o = o->next)
        mine += !o->refused && !o->closing && o->sess.peer.known && o->sess.peer.uid == p->uid;
    if (mine > d->max_per_user) return "connection limit of your user reached";
    return NULL;
}

void tt_conn_accept(tt_daemon *d, uv_stream_t *server) {
    tt_conn *c = calloc(1, sizeof *c);
    if (!c) {
        tt_err("out of memory accepting a connection");
        return;
    }
    c->d = d;
    tt_session_init(&c->sess, NULL);
    uv_pipe_init(d->loop, &c->pipe, 0);
    uv_timer_init(d->loop, &c->timer);
    c->pipe.data = c->timer.data = c;
    c->handles = 2;
    d->conn_live++;
    c->next = d->conns;
    if (d->conns) d->conns->prev = c;
    d->conns = c;
    int rc = uv_accept(server, (uv_stream_t *)&c->pipe);
    if (rc < 0) {
        tt_warn("accept: %s", uv_strerror(rc));
        c->refused = 1;
        conn_close(c);
        return;
    }
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0) tt_peer_from_fd(fd, &c->sess.peer);
    const char *why = admit(d, &c->sess.peer);
    if (why) {
        c->refused = 1;
        d->stats.conn_refused++;
        tt_debug("refusing a connection of uid %d: %s (%lld open, cap %d)", (int)c->sess.peer.uid, why,
                 (long long)d->conn_open, d->opts.max_connections);
        tt_buf out;
        tt_buf_init(&out);
        tt_handle_error(&d->hx, &out, TT_ERRC_BUSY, "%s; closing", why);
        start_reading(c);
        finish(c, &out);
        return;
    }
    d->conn_open++;
    d->stats.conn_accepted++;
    c->last_read = uv_now(d->loop);
    uv_timer_start(&c->timer, on_idle_timeout, (uint64_t)d->opts.idle_timeout_s * 1000, 0);
    start_reading(c);
}

void tt_conn_close_all(tt_daemon *d) {
    tt_conn *next;
    for (tt_conn *c = d->conns; c; c = next) {
        next = c->next;
        if (c->finishing || c->closing) continue;
        stop_reading(c);
        tt_buf out;
        tt_buf_init(&out);
        finish(c, &out);
    }
}

void tt_conn_abort_all(tt_daemon *d) {
    while (d->conns) conn_close(d->conns);
}
