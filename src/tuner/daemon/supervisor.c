#include "tuner/daemon/supervisor.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/key.h"
#include "common/pipe.h"
#include "tuner/daemon/buf.h"
#include "tuner/daemon/log.h"

#define MAX_GPUS TT_PIPE_GPUS_MAX
#define LINE_CAP (TT_LINE_MAX + 2)
#define STOP_GRACE_MS 2000
/* After the worker exits, unread output may still sit in the pipe: give
 * EOF this long before closing the pipe anyway (a grandchild could hold
 * the write end open forever). */
#define EXIT_DRAIN_MS 500
#define PROBE_INTERVAL_MS 5000

typedef enum wstate {
    W_NONE,     /* no process, nothing scheduled */
    W_STARTING, /* spawned, waiting for HELLO */
    W_IDLE,     /* has a GPU, no key */
    W_BUSY,     /* measuring a key */
    W_NOGPU,    /* said it has no GPU; left to exit */
    W_BACKOFF,  /* died; waiting to be restarted */
} wstate;

enum { KILL_NONE, KILL_SILENCE, KILL_HELLO, KILL_PROTO, KILL_STOP };

typedef struct worker {
    tt_supervisor *sup;
    int index;
    wstate state;
    uv_process_t proc;
    uv_pipe_t in;  /* the worker's stdin: we write */
    uv_pipe_t out; /* the worker's stdout: we read */
    uv_timer_t timer;
    int handles; /* proc, in, out not yet closed */
    int exited, killed_for, out_closed;
    char line[LINE_CAP];
    size_t line_len;
    int has_gpu;
    int had_gpu; /* said HELLO with a GPU once: a later HELLO without one means it is lost */
    int lost;
    tt_gpu_info gpu;
    int has_claim;
    tt_job_claim claim;
    tt_key_v2 rkey; /* the claim's key with gpu and rev resolved */
    int64_t task;
    int crashes; /* of the worker while on this claim */
    int trying;  /* a TRY without its RESULT */
    tt_config try_cfg;
    /* The variant the worker died on, recorded once the restarted worker
     * says HELLO with its GPU: a GPU that fell off the bus killed the
     * worker, not the variant, and must not put the variant in AVOID. */
    int blame;
    tt_record blamed;
    int failures; /* consecutive; drives the back-off */
} worker;

struct tt_supervisor {
    uv_loop_t *loop;
    tt_store *store;
    tt_supervisor_opts opts;
    char *worker_path, *cache_dir;
    tt_supervisor_events ev;
    worker *w[MAX_GPUS];
    int nworkers;
    int no_gpu; /* the program is missing or GPU 0's worker found none */
    uint64_t last_probe_ms;
    int64_t next_task;
    char rev[TT_ID_MAX];
    char hostname[TT_NAME_MAX];
    int live; /* open handles of every worker, timers included */
    int stopping;
    void (*done)(void *);
    void *done_ud;
};

static void spawn(worker *w);
static void dispatch(worker *w);
static void maybe_done(tt_supervisor *s);
static void worker_gone(worker *w);
static void close_out(worker *w);

const char *tt_tuning_state_name(tt_tuning_state st) {
    switch (st) {
    case TT_TUNING_IDLE: return "idle";
    case TT_TUNING_RUNNING: return "running";
    case TT_TUNING_WAITING: return "waiting";
    }
    return "unknown";
}

int tt_supervisor_default_worker(char *buf, size_t len) {
    char exe[4096];
    size_t n = sizeof exe;
    if (uv_exepath(exe, &n) < 0) return TT_ERR_IO;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    int m = snprintf(buf, len, "%s/tiletune-worker", slash ? exe : ".");
    if (m < 0 || (size_t)m >= len) return TT_ERR_RANGE;
    return 0;
}

/* ---- handles ------------------------------------------------------------ */

static void on_closed(uv_handle_t *h) {
    worker *w = h->data;
    tt_supervisor *s = w->sup;
    s->live--;
    if (h != (uv_handle_t *)&w->timer) {
        w->handles--;
        if (w->handles == 0) worker_gone(w);
    }
    maybe_done(s);
}

static void close_handle(uv_handle_t *h) {
    if (!uv_is_closing(h)) uv_close(h, on_closed);
}

/* The claimed key as text, for the journal's KEY= field (static: one
 * log call at a time on the loop). */
static const char *claim_key(const worker *w) {
    static char buf[TT_LINE_MAX];
    if (tt__key_format(&w->claim.key, buf, sizeof buf) < 0) buf[0] = '\0';
    return buf;
}

static void timer_start(worker *w, uv_timer_cb cb, uint64_t ms) {
    uv_timer_stop(&w->timer);
    uv_timer_start(&w->timer, cb, ms, 0);
}

/* ---- writing to the worker ------------------------------------------------ */

typedef struct wreq {
    uv_write_t req;
    char *data;
} wreq;

static void on_written(uv_write_t *req, int status) {
    wreq *r = (wreq *)req;
    (void)status; /* a dead worker shows up as its exit */
    free(r->data);
    free(r);
}

static void send_buf(worker *w, tt_buf *b) {
    if (w->exited || uv_is_closing((uv_handle_t *)&w->in) || b->oom) {
        tt_buf_free(b);
        return;
    }
    wreq *r = malloc(sizeof *r);
    if (!r) {
        tt_buf_free(b);
        return;
    }
    size_t len;
    r->data = tt_buf_steal(b, &len);
    uv_buf_t ub = uv_buf_init(r->data, (unsigned)len);
    if (uv_write(&r->req, (uv_stream_t *)&w->in, &ub, 1, on_written) < 0) {
        free(r->data);
        free(r);
    }
}

/* ---- killing and dying ------------------------------------------------------ */

static void kill_worker(worker *w, int why, int sig) {
    if (w->exited) return;
    if (!w->killed_for) w->killed_for = why;
    uv_process_kill(&w->proc, sig);
}

static void on_timeout(uv_timer_t *t) {
    worker *w = t->data;
    if (w->sup->stopping) {
        kill_worker(w, KILL_STOP, SIGKILL);
        if (w->exited) close_out(w);
    } else if (w->state == W_STARTING) {
        tt_log_ev(TT_LOG_WARN, -1, w->index, NULL, "worker for GPU %d said no HELLO within %d s: killing it",
                  w->index, w->sup->opts.hello_timeout_s);
        kill_worker(w, KILL_HELLO, SIGKILL);
    } else if (w->state == W_BUSY) {
        tt_log_ev(TT_LOG_WARN, w->has_claim ? w->claim.job_id : -1, w->index,
                  w->has_claim ? claim_key(w) : NULL,
                  "worker for GPU %d silent for %d s while measuring: killing it", w->index,
                  w->sup->opts.measure_timeout_s);
        kill_worker(w, KILL_SILENCE, SIGKILL);
    }
}

static void on_backoff_done(uv_timer_t *t) {
    worker *w = t->data;
    if (!w->sup->stopping && w->state == W_BACKOFF) spawn(w);
}

static void close_out(worker *w) {
    if (!w->out_closed) {
        w->out_closed = 1;
        uv_read_stop((uv_stream_t *)&w->out);
        close_handle((uv_handle_t *)&w->out);
    }
}

static void on_drain_timeout(uv_timer_t *t) { close_out(t->data); }

static void on_proc_exit(uv_process_t *p, int64_t status, int sig) {
    worker *w = p->data;
    w->exited = 1;
    if (sig)
        tt_log_ev(w->sup->stopping ? TT_LOG_DEBUG : TT_LOG_WARN, -1, w->index, NULL,
                  "worker for GPU %d killed by signal %d", w->index, sig);
    else if (status)
        tt_log_ev(TT_LOG_WARN, -1, w->index, NULL, "worker for GPU %d exited with status %lld", w->index,
                  (long long)status);
    else tt_log_ev(TT_LOG_DEBUG, -1, w->index, NULL, "worker for GPU %d exited", w->index);
    close_handle((uv_handle_t *)&w->proc);
    close_handle((uv_handle_t *)&w->in);
    if (!w->out_closed) timer_start(w, on_drain_timeout, EXIT_DRAIN_MS);
}

static void record(worker *w, tt_record *r) {
    tt_supervisor *s = w->sup;
    int became = 0;
    int rc = tt_store_add_measurement(s->store, r, &became);
    if (rc < 0) {
        tt_err("storing a measurement failed: %s", tt_store_errmsg(s->store));
        return;
    }
    if (s->ev.on_measurement) s->ev.on_measurement(s->ev.ud, r, became);
}

static void finish_key(worker *w, tt_jkey_state st) {
    tt_supervisor *s = w->sup;
    int rc = tt_store_job_key_finish(s->store, w->claim.job_id, w->claim.seq, st);
    if (rc < 0 && rc != TT_ERR_NOTFOUND)
        tt_err("finishing key %d of job %lld failed: %s", w->claim.seq, (long long)w->claim.job_id,
               tt_store_errmsg(s->store));
    w->has_claim = 0;
    w->trying = 0;
}

/* Gives a claim the worker will not finish back to the queue: pending
 * again, or cancelled if its job was cancelled. Never leaves it `running`
 * in the store with nobody on it (JOBS would show it running forever). */
static void release_claim(worker *w, const char *why) {
    tt_supervisor *s = w->sup;
    int rc = tt_store_job_key_release(s->store, w->claim.job_id, w->claim.seq);
    if (rc < 0 && rc != TT_ERR_NOTFOUND)
        tt_err("giving back key %d of job %lld failed: %s", w->claim.seq, (long long)w->claim.job_id,
               tt_store_errmsg(s->store));
    else
        tt_info("key %d of job %lld given back to the queue: %s", w->claim.seq, (long long)w->claim.job_id,
                why);
    w->has_claim = 0;
    w->trying = 0;
}

/* A claim held across a restart (not being measured now) whose job was
 * cancelled meanwhile is dropped: it must not be handed out again. */
static void drop_if_cancelled(worker *w) {
    if (!w->has_claim || w->state == W_BUSY) return;
    tt_job_info j;
    int rc = tt_store_job_get(w->sup->store, w->claim.job_id, &j);
    if (rc < 0 && rc != TT_ERR_NOTFOUND) {
        tt_err("reading job %lld failed: %s", (long long)w->claim.job_id, tt_store_errmsg(w->sup->store));
        return;
    }
    if (rc == TT_ERR_NOTFOUND || j.state == TT_JOB_CANCELLED) release_claim(w, "its job was cancelled");
}

/* The restarted worker showed whether its GPU is still there: record the
 * variant it died on (gpu_there) or let it go. */
static void settle_blame(worker *w, int gpu_there) {
    if (!w->blame) return;
    w->blame = 0;
    if (gpu_there) {
        tt_warn("variant recorded as %s for the key of job %lld", tt_meas_status_name(w->blamed.status),
                (long long)w->claim.job_id);
        record(w, &w->blamed);
    } else {
        tt_log_ev(TT_LOG_WARN, -1, w->index, NULL,
                  "GPU %d's worker died on a variant, but the GPU is gone: the variant is not blamed",
                  w->index);
    }
}

static void dispatch_all(tt_supervisor *s) {
    for (int i = 0; i < s->nworkers; i++) dispatch(s->w[i]);
}

/* What a key without gpu=/rev= means may have changed: tell the daemon. */
static void identity_changed(tt_supervisor *s) {
    if (s->ev.on_identity) s->ev.on_identity(s->ev.ud, s->rev, tt_supervisor_gpu(s));
}

/* Every handle of a process is closed: account for the death, then
 * restart after the back-off, or stay down if the worker said it has no
 * GPU and left cleanly. */
static void worker_gone(worker *w) {
    tt_supervisor *s = w->sup;
    uv_timer_stop(&w->timer);
    int nogpu = w->state == W_NOGPU;
    int measuring = w->state == W_BUSY;
    w->has_gpu = 0;
    if (w->index == 0) identity_changed(s);
    if (s->ev.on_worker) s->ev.on_worker(s->ev.ud, w->index, 0, !nogpu && w->killed_for != KILL_STOP);
    if (s->stopping) {
        w->state = W_NONE;
        close_handle((uv_handle_t *)&w->timer);
        return;
    }
    if (nogpu) { /* said it has no GPU (or could not be started): stay down */
        w->state = W_NONE;
        /* A restart after a crash found the GPU gone: another worker (or
         * this one, when a probe finds the GPU again) takes the key. */
        if (w->has_claim) release_claim(w, "its worker found no GPU");
        dispatch_all(s);
        return;
    }
    w->state = W_BACKOFF;
    if (w->has_claim && !measuring) {
        /* Died before its HELLO: it never saw the key, so the key is not
         * to blame and waits, pending, for a worker that comes up. A
         * variant the worker died on before stays blamed: nothing showed
         * the GPU gone. */
        settle_blame(w, 1);
        release_claim(w, "its worker died before saying HELLO");
    } else if (w->has_claim) {
        w->crashes++;
        if (w->trying) {
            tt_record *r = &w->blamed;
            tt_record_init(r);
            r->key = w->rkey;
            r->config = w->try_cfg;
            r->batch = w->claim.batch;
            r->heads = w->claim.heads;
            r->status = w->killed_for == KILL_SILENCE ? TT_MEAS_TIMEOUT : TT_MEAS_FAULT;
            r->measured_at = (int64_t)time(NULL);
            snprintf(r->node, sizeof r->node, "%s", s->hostname);
            w->blame = 1;
        }
        w->trying = 0;
        drop_if_cancelled(w);
        if (w->has_claim && w->crashes >= s->opts.max_key_crashes) {
            tt_log_ev(TT_LOG_WARN, w->claim.job_id, w->index, claim_key(w),
                      "key %d of job %lld failed: its worker died %d times", w->claim.seq,
                      (long long)w->claim.job_id, w->crashes);
            finish_key(w, TT_JKEY_FAILED);
        }
    }
    w->failures++;
    int shift = w->failures - 1 < 16 ? w->failures - 1 : 16;
    uint64_t ms = (uint64_t)s->opts.backoff_min_ms << shift;
    if (ms > (uint64_t)s->opts.backoff_max_ms) ms = (uint64_t)s->opts.backoff_max_ms;
    tt_log_ev(TT_LOG_INFO, -1, w->index, NULL, "restarting the worker for GPU %d in %llu ms", w->index,
              (unsigned long long)ms);
    timer_start(w, on_backoff_done, ms);
    if (!w->has_claim) dispatch_all(s); /* a released key may go to another GPU */
}

/* ---- reading from the worker ------------------------------------------------ */

/* A line the pipe protocol's table refused (common/pipe.h): logged with
 * the worker, the key and why; the caller decides what it costs. */
static void refused(worker *w, const char *err) {
    tt_log_ev(TT_LOG_ERR, w->has_claim ? w->claim.job_id : -1, w->index, w->has_claim ? claim_key(w) : NULL,
              "worker for GPU %d: line refused (%s)", w->index, err);
}

static void on_hello(worker *w, const tt__pipe_msg *m) {
    tt_supervisor *s = w->sup;
    const tt__pipe_hello *h = &m->u.hello;
    char err[256];
    int count = (int)h->gpu_count;
    snprintf(s->rev, sizeof s->rev, "%s", h->rev);
    identity_changed(s);
    uv_timer_stop(&w->timer);
    if (w->index == 0) {
        s->no_gpu = count == 0;
        for (int i = s->nworkers; i < count; i++) {
            worker *n = calloc(1, sizeof *n);
            if (!n) break;
            n->sup = s;
            n->index = i;
            uv_timer_init(s->loop, &n->timer);
            n->timer.data = n;
            s->live++;
            s->w[s->nworkers++] = n;
            spawn(n);
        }
    }
    if (!TT_PIPE_HAS(m, hello, name)) {
        if (w->had_gpu && !w->lost)
            tt_log_ev(TT_LOG_ERR, -1, w->index, NULL,
                      "GPU %d is gone (its worker finds no GPU %d of %d): lost until a probe finds it; "
                      "the other GPUs go on",
                      w->index, w->index, count);
        else
            tt_log_ev(TT_LOG_INFO, -1, w->index, NULL,
                      "worker for GPU %d found no GPU (%d visible); tuning waits for a GPU", w->index, count);
        w->lost = w->had_gpu;
        settle_blame(w, 0);
        w->state = W_NOGPU;
        close_handle((uv_handle_t *)&w->in); /* EOF: the worker may leave */
        return;
    }
    if (tt__pipe_hello_gpu(m, err, sizeof err) < 0) {
        refused(w, err);
        kill_worker(w, KILL_PROTO, SIGKILL);
        return;
    }
    tt_gpu_info g;
    memset(&g, 0, sizeof g);
    _Static_assert(sizeof g.name >= sizeof h->name && sizeof g.driver >= sizeof h->driver, "GPU texts fit");
    snprintf(g.name, sizeof g.name, "%s", h->name);
    snprintf(g.driver, sizeof g.driver, "%s", h->driver);
    snprintf(g.cuda, sizeof g.cuda, "%s", h->cuda);
    snprintf(g.nvrtc, sizeof g.nvrtc, "%s", h->nvrtc);
    g.cc_major = (int32_t)h->cc_major;
    g.cc_minor = (int32_t)h->cc_minor;
    g.sm_count = (int32_t)h->sms;
    g.mem_bytes = h->mem_bytes;
    tt_gpu_fingerprint(g.name, g.cc_major, g.cc_minor, g.sm_count, g.mem_bytes, g.fingerprint);
    if (tt_store_put_gpu(s->store, &g) < 0 || tt_store_put_rev(s->store, h->rev, NULL) < 0) {
        tt_err("registering GPU %d in the database failed: %s", w->index, tt_store_errmsg(s->store));
        kill_worker(w, KILL_PROTO, SIGKILL);
        return;
    }
    w->gpu = g;
    w->has_gpu = 1;
    settle_blame(w, 1);
    if (w->lost) tt_log_ev(TT_LOG_INFO, -1, w->index, NULL, "GPU %d is back", w->index);
    w->had_gpu = 1;
    w->lost = 0;
    if (w->index == 0) identity_changed(s);
    w->state = W_IDLE;
    tt_log_ev(TT_LOG_INFO, -1, w->index, NULL,
              "worker for GPU %d ready: %s (sm_%d%d, fingerprint %s), kernel revision %s", w->index, g.name,
              g.cc_major, g.cc_minor, g.fingerprint, h->rev);
    dispatch(w);
}

static void on_result(worker *w, const tt__pipe_msg *m) {
    const tt__pipe_result *res = &m->u.result;
    char err[256];
    if (tt__pipe_result_check(m, err, sizeof err) < 0) {
        refused(w, err);
        return;
    }
    tt_record r;
    tt_record_init(&r);
    r.key = w->rkey;
    r.config = res->config;
    r.status = (tt_meas_status)res->status; /* TT_WIRE_MEAS_STATUSES: tt_meas_status's order */
    r.batch = TT_PIPE_HAS(m, result, batch) ? (int32_t)res->batch : w->claim.batch;
    r.heads = TT_PIPE_HAS(m, result, heads) ? (int32_t)res->heads : w->claim.heads;
    if (TT_PIPE_HAS(m, result, time_ms)) r.time_ms = res->time_ms;
    if (TT_PIPE_HAS(m, result, tflops)) r.tflops = res->tflops;
    if (TT_PIPE_HAS(m, result, time_min_ms)) r.time_min_ms = res->time_min_ms;
    if (TT_PIPE_HAS(m, result, spread)) r.spread = res->spread;
    /* the table's ranges hold each in an int32_t */
    if (TT_PIPE_HAS(m, result, reps)) r.reps = (int32_t)res->reps;
    if (TT_PIPE_HAS(m, result, sm_clock_mhz)) r.sm_clock_mhz = (int32_t)res->sm_clock_mhz;
    if (TT_PIPE_HAS(m, result, temp_c)) r.temp_c = (int32_t)res->temp_c;
    if (TT_PIPE_HAS(m, result, busy)) r.busy = (int32_t)res->busy;
    if (TT_PIPE_HAS(m, result, regs)) r.regs = (int32_t)res->regs;
    if (TT_PIPE_HAS(m, result, smem_bytes)) r.smem_bytes = (int32_t)res->smem_bytes;
    if (TT_PIPE_HAS(m, result, spill_bytes)) r.spill_bytes = (int32_t)res->spill_bytes;
    r.measured_at = (int64_t)time(NULL);
    snprintf(r.node, sizeof r.node, "%s", w->sup->hostname);
    if (w->trying && tt_config_equal(&w->try_cfg, &r.config)) w->trying = 0;
    record(w, &r);
}

static void on_line(worker *w, char *line, size_t len) {
    tt__pipe_msg m;
    char err[256];
    int rc = tt__pipe_parse(line, len, &m, err, sizeof err);
    if (rc == TT_ERR_PROTO) {
        tt_warn("worker for GPU %d broke the pipe protocol (%s): killing it", w->index, err);
        kill_worker(w, KILL_PROTO, SIGKILL);
        return;
    }
    if (rc == TT_ERR_NOTFOUND || m.kind == TT_PIPE_MEASURE || m.kind == TT_PIPE_AVOID) {
        /* a later version's progress line, or one the daemon sends */
        tt_debug("worker for GPU %d: unknown line ignored (%s)", w->index,
                 rc < 0 ? err : tt__pipe_word(m.kind));
        return;
    }
    if (m.kind == TT_PIPE_HELLO) {
        if (w->state != W_STARTING) return;
        if (rc < 0) {
            refused(w, err);
            kill_worker(w, KILL_PROTO, SIGKILL);
        } else {
            on_hello(w, &m);
        }
        return;
    }
    if (w->state != W_BUSY) {
        tt_debug("worker for GPU %d: %s outside a key ignored", w->index, tt__pipe_word(m.kind));
        return;
    }
    /* TRY, RESULT or DONE the table refused: nothing of it is believed,
     * not even its id. A RESULT or TRY lost is a variant not recorded; a
     * DONE lost leaves the worker silent until the silence limit. */
    if (rc < 0) {
        refused(w, err);
        return;
    }
    if (tt__pipe_task(&m) != w->task) {
        tt_debug("worker for GPU %d: %s for another task ignored", w->index, tt__pipe_word(m.kind));
        return;
    }
    /* Any line from the worker shows it is alive: the silence limit is
     * per line, so a long key is fine as long as variants come back. */
    timer_start(w, on_timeout, (uint64_t)w->sup->opts.measure_timeout_s * 1000);
    if (m.kind == TT_PIPE_TRY) {
        w->try_cfg = m.u.try.config;
        w->trying = 1;
    } else if (m.kind == TT_PIPE_RESULT) {
        on_result(w, &m);
    } else {
        int failed = m.u.done.status == TT_PIPE_KEY_FAILED;
        if (failed)
            tt_log_ev(TT_LOG_WARN, w->claim.job_id, w->index, claim_key(w),
                      "worker for GPU %d: key %d of job %lld failed: %s", w->index, w->claim.seq,
                      (long long)w->claim.job_id, m.u.done.reason ? m.u.done.reason : "no reason given");
        finish_key(w, failed ? TT_JKEY_FAILED : TT_JKEY_DONE);
        w->failures = 0;
        w->state = W_IDLE;
        uv_timer_stop(&w->timer);
        dispatch(w);
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    worker *w = h->data;
    (void)suggested;
    *buf = uv_buf_init(w->line + w->line_len, (unsigned)(sizeof w->line - w->line_len));
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
    worker *w = st->data;
    (void)buf;
    if (n < 0) {
        close_out(w);
        return;
    }
    w->line_len += (size_t)n;
    size_t start = 0;
    char *nl;
    while (!w->out_closed && (nl = memchr(w->line + start, '\n', w->line_len - start))) {
        size_t len = (size_t)(nl - (w->line + start));
        on_line(w, w->line + start, len);
        start += len + 1;
    }
    memmove(w->line, w->line + start, w->line_len - start);
    w->line_len -= start;
    if (w->line_len >= sizeof w->line) {
        tt_warn("worker for GPU %d wrote a line over %d bytes: killing it", w->index, TT_LINE_MAX);
        w->line_len = 0;
        kill_worker(w, KILL_PROTO, SIGKILL);
    }
}

/* ---- spawning and handing out keys ------------------------------------------- */

static void spawn(worker *w) {
    tt_supervisor *s = w->sup;
    w->state = W_NONE;
    if (!s->worker_path) {
        if (w->index == 0) s->no_gpu = 1;
        return;
    }
    char idx[16];
    snprintf(idx, sizeof idx, "%d", w->index);
    char *args[8];
    int a = 0;
    args[a++] = s->worker_path;
    args[a++] = "--gpu";
    args[a++] = idx;
    if (s->cache_dir) {
        args[a++] = "--cache-dir";
        args[a++] = s->cache_dir;
    }
    args[a] = NULL;
    uv_stdio_container_t stdio[3];
    uv_pipe_init(s->loop, &w->in, 0);
    uv_pipe_init(s->loop, &w->out, 0);
    w->in.data = w->out.data = w->proc.data = w;
    stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
    stdio[0].data.stream = (uv_stream_t *)&w->in;
    stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1].data.stream = (uv_stream_t *)&w->out;
    stdio[2].flags = UV_INHERIT_FD;
    stdio[2].data.fd = 2;
    uv_process_options_t o;
    memset(&o, 0, sizeof o);
    o.file = s->worker_path;
    o.args = args;
    o.exit_cb = on_proc_exit;
    o.stdio = stdio;
    o.stdio_count = 3;
    w->exited = w->killed_for = w->out_closed = 0;
    w->line_len = 0;
    w->has_gpu = 0;
    if (w->index == 0) identity_changed(s);
    w->handles = 3;
    s->live += 3;
    if (w->index == 0 || w->lost) s->last_probe_ms = uv_now(s->loop);
    int rc = uv_spawn(s->loop, &w->proc, &o);
    if (rc < 0) {
        /* The process handle is initialized even on failure: close it. */
        tt_log(s->no_gpu ? TT_LOG_DEBUG : TT_LOG_WARN,
               "cannot start the worker %s: %s; tuning waits for a GPU", s->worker_path, uv_strerror(rc));
        if (w->index == 0) s->no_gpu = 1;
        w->exited = 1;
        w->out_closed = 1;
        w->state = W_NOGPU; /* gone for good until the next probe */
        close_handle((uv_handle_t *)&w->proc);
        close_handle((uv_handle_t *)&w->in);
        close_handle((uv_handle_t *)&w->out);
        return;
    }
    w->state = W_STARTING;
    uv_read_start((uv_stream_t *)&w->out, on_alloc, on_read);
    timer_start(w, on_timeout, (uint64_t)s->opts.hello_timeout_s * 1000);
    tt_debug("started worker %s for GPU %d (pid %d)", s->worker_path, w->index, w->proc.pid);
    if (s->ev.on_worker) s->ev.on_worker(s->ev.ud, w->index, 1, 0);
}

typedef struct avoid_ctx {
    tt_buf *b;
    int n;
} avoid_ctx;

static int add_avoid(void *ud, const tt_config *cfg, tt_meas_status st) {
    avoid_ctx *a = ud;
    char line[TT_LINE_MAX + 1], err[256];
    (void)st;
    /* more than the protocol's limit: the rest are measured again (and
     * recorded failed again); the space is far smaller */
    if (a->n == TT_PIPE_AVOID_MAX) return 0;
    tt__pipe_msg m;
    tt__pipe_init(&m, TT_PIPE_AVOID);
    TT_PIPE_SET(&m, avoid, config, *cfg);
    if (tt__pipe_format(&m, line, sizeof line, err, sizeof err) < 0) {
        tt_warn("a failed variant left out of AVOID: %s", err);
        return 0;
    }
    tt_buf_printf(a->b, "%s\n", line);
    a->n++;
    return 0;
}

/* MEASURE for the worker's claim, then its AVOID lines. */
static int measure_lines(worker *w, tt_buf *out, char *err, size_t errlen) {
    tt_supervisor *s = w->sup;
    tt_buf avoid;
    tt_buf_init(&avoid);
    avoid_ctx a = {&avoid, 0};
    if (tt_store_failed_configs(s->store, &w->rkey, add_avoid, &a) < 0)
        tt_warn("reading failed variants: %s", tt_store_errmsg(s->store));
    tt__pipe_msg m;
    tt__pipe_init(&m, TT_PIPE_MEASURE);
    TT_PIPE_SET(&m, measure, id, w->task);
    TT_PIPE_SET(&m, measure, job, w->claim.job_id);
    TT_PIPE_SET(&m, measure, seq, w->claim.seq);
    tt__pipe_measure_set_key(&m, &w->rkey);
    TT_PIPE_SET(&m, measure, mode, (int)w->claim.mode);
    TT_PIPE_SET(&m, measure, batch, w->claim.batch);
    TT_PIPE_SET(&m, measure, heads, w->claim.heads);
    TT_PIPE_SET(&m, measure, avoid, a.n);
    char line[TT_LINE_MAX + 1];
    int rc = tt__pipe_format(&m, line, sizeof line, err, errlen);
    if (rc >= 0) {
        tt_buf_printf(out, "%s\n", line);
        if (avoid.len) tt_buf_append(out, avoid.data, avoid.len);
    }
    tt_buf_free(&avoid);
    return rc;
}

static void dispatch(worker *w) {
    tt_supervisor *s = w->sup;
    if (s->stopping) return;
    drop_if_cancelled(w);
    if (w->state != W_IDLE) return;
    for (;;) {
        if (!w->has_claim) {
            int rc = tt_store_job_next_key(s->store, w->gpu.fingerprint, &w->claim);
            if (rc == TT_ERR_NOTFOUND) return;
            if (rc < 0) {
                tt_err("claiming a job key failed: %s", tt_store_errmsg(s->store));
                return;
            }
            w->has_claim = 1;
            w->crashes = 0;
            w->rkey = w->claim.key;
            if (!w->rkey.gpu[0]) snprintf(w->rkey.gpu, sizeof w->rkey.gpu, "%s", w->gpu.fingerprint);
            if (!w->rkey.rev[0]) snprintf(w->rkey.rev, sizeof w->rkey.rev, "%s", s->rev);
        }
        w->trying = 0;
        w->task = ++s->next_task;
        tt_buf line;
        tt_buf_init(&line);
        char err[256];
        if (measure_lines(w, &line, err, sizeof err) >= 0) {
            send_buf(w, &line);
            break;
        }
        /* a key the protocol cannot carry (a store older than a range):
         * it fails, the next one is tried */
        tt_buf_free(&line);
        tt_log_ev(TT_LOG_ERR, w->claim.job_id, w->index, claim_key(w), "key %d of job %lld failed: %s",
                  w->claim.seq, (long long)w->claim.job_id, err);
        finish_key(w, TT_JKEY_FAILED);
    }
    w->state = W_BUSY;
    timer_start(w, on_timeout, (uint64_t)s->opts.measure_timeout_s * 1000);
    char key[256];
    tt__key_format(&w->rkey, key, sizeof key);
    tt_log_ev(TT_LOG_INFO, w->claim.job_id, w->index, key, "GPU %d: measuring %s (job %lld)", w->index, key,
              (long long)w->claim.job_id);
}

/* ---- the public side ------------------------------------------------------------ */

int tt_supervisor_start(uv_loop_t *loop, tt_store *store, const tt_supervisor_opts *opts,
                        const tt_supervisor_events *ev, tt_supervisor **out, char *err, size_t errlen) {
    tt_supervisor *s = calloc(1, sizeof *s);
    if (!s) goto nomem;
    s->loop = loop;
    s->store = store;
    s->opts = *opts;
    if (s->opts.measure_timeout_s <= 0) s->opts.measure_timeout_s = 300;
    if (s->opts.hello_timeout_s <= 0) s->opts.hello_timeout_s = 30;
    if (s->opts.backoff_min_ms <= 0) s->opts.backoff_min_ms = 500;
    if (s->opts.backoff_max_ms <= 0) s->opts.backoff_max_ms = 60000;
    if (s->opts.max_key_crashes <= 0) s->opts.max_key_crashes = 3;
    if (ev) s->ev = *ev;
    if (opts->worker_path && *opts->worker_path && !(s->worker_path = strdup(opts->worker_path))) goto nomem;
    if (opts->cache_dir && *opts->cache_dir && !(s->cache_dir = strdup(opts->cache_dir))) goto nomem;
    s->opts.worker_path = s->worker_path;
    s->opts.cache_dir = s->cache_dir;
    if (gethostname(s->hostname, sizeof s->hostname - 1) < 0) strcpy(s->hostname, "unknown");
    worker *w = calloc(1, sizeof *w);
    if (!w) goto nomem;
    w->sup = s;
    uv_timer_init(loop, &w->timer);
    w->timer.data = w;
    s->live++;
    s->w[s->nworkers++] = w;
    spawn(w);
    *out = s;
    return 0;
nomem:
    if (s) {
        free(s->worker_path);
        free(s->cache_dir);
        free(s);
    }
    snprintf(err, errlen, "out of memory");
    return TT_ERR_NOMEM;
}

void tt_supervisor_kick(tt_supervisor *s) {
    if (s->stopping) return;
    if (uv_now(s->loop) - s->last_probe_ms >= PROBE_INTERVAL_MS)
        for (int i = 0; i < s->nworkers; i++) {
            worker *w = s->w[i];
            /* maybe a GPU (or the worker program) is there now: GPU 0's
             * worker says how many there are, a lost one may be back */
            if (w->state == W_NONE && w->handles == 0 && (i == 0 || w->lost)) spawn(w);
        }
    dispatch_all(s);
}

int tt_supervisor_models(const tt_supervisor *s, char (*fps)[TT_ID_MAX], int cap) {
    int n = 0;
    for (int i = 0; i < s->nworkers; i++) {
        const worker *w = s->w[i];
        if (!w->has_gpu || (w->state != W_IDLE && w->state != W_BUSY)) continue;
        int seen = 0;
        for (int j = 0; j < n && !seen; j++) seen = strcmp(fps[j], w->gpu.fingerprint) == 0;
        if (!seen && n < cap) snprintf(fps[n++], TT_ID_MAX, "%s", w->gpu.fingerprint);
    }
    return n;
}

const char *tt_supervisor_gpu_state(const tt_supervisor *s, int i) {
    if (i < 0 || i >= s->nworkers) return NULL;
    const worker *w = s->w[i];
    if (w->lost) return "lost";
    switch (w->state) {
    case W_STARTING: return "starting";
    case W_IDLE: return "ready";
    case W_BUSY: return "busy";
    case W_BACKOFF: return "restarting";
    case W_NOGPU: return "no-gpu";
    case W_NONE: break;
    }
    return "none";
}

void tt_supervisor_get_status(const tt_supervisor *s, tt_supervisor_status *out) {
    memset(out, 0, sizeof *out);
    int starting = 0, backoff = 0;
    for (int i = 0; i < s->nworkers; i++) {
        const worker *w = s->w[i];
        if (w->state == W_IDLE || w->state == W_BUSY) out->gpus++;
        if (w->state == W_BUSY) out->busy++;
        if (w->state == W_STARTING) starting++;
        if (w->state == W_BACKOFF) backoff++;
        out->lost += w->lost;
    }
    char fps[MAX_GPUS][TT_ID_MAX];
    out->models = tt_supervisor_models(s, fps, MAX_GPUS);
    snprintf(out->rev, sizeof out->rev, "%s", s->rev);
    if (s->w[0]->has_gpu) snprintf(out->gpu, sizeof out->gpu, "%s", s->w[0]->gpu.fingerprint);
    out->reason = "none";
    if (out->busy) out->state = TT_TUNING_RUNNING;
    else if (out->gpus) out->state = TT_TUNING_IDLE;
    else {
        out->state = TT_TUNING_WAITING;
        out->reason = s->no_gpu ? "no-gpu" : starting ? "starting" : backoff ? "restarting" : "no-gpu";
    }
}

const char *tt_supervisor_rev(const tt_supervisor *s) { return s->rev; }

const char *tt_supervisor_gpu(const tt_supervisor *s) {
    return s->w[0]->has_gpu ? s->w[0]->gpu.fingerprint : "";
}

static void maybe_done(tt_supervisor *s) {
    if (!s->stopping || s->live > 0) return;
    void (*done)(void *) = s->done;
    void *ud = s->done_ud;
    for (int i = 0; i < s->nworkers; i++) free(s->w[i]);
    free(s->worker_path);
    free(s->cache_dir);
    free(s);
    if (done) done(ud);
}

void tt_supervisor_stop(tt_supervisor *s, void (*done)(void *ud), void *ud) {
    s->stopping = 1;
    s->done = done;
    s->done_ud = ud;
    for (int i = 0; i < s->nworkers; i++) {
        worker *w = s->w[i];
        uv_timer_stop(&w->timer);
        if (w->handles == 0) {
            close_handle((uv_handle_t *)&w->timer);
            continue;
        }
        close_handle((uv_handle_t *)&w->in); /* EOF asks the worker to leave */
        kill_worker(w, KILL_STOP, SIGTERM);
        timer_start(w, on_timeout, w->exited ? EXIT_DRAIN_MS : STOP_GRACE_MS);
    }
    maybe_done(s);
}
