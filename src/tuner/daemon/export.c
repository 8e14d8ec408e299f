#include "tuner/daemon/export.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/key.h"
#include "tuner/daemon/log.h"
#include "tuner/fleet/record.h"

/* A SQLite snapshot bigger than this is not sent over the socket. */
#define SNAPSHOT_MAX (256 << 20)
/* Snapshot bytes per base64 body line (4000 characters). */
#define B64_CHUNK 3000
/* The thread hands its lines over in chunks of about this size. */
#define CHUNK 16384

struct tt_export {
    tt_hctx *x;
    uv_async_t async;
    void (*wake)(void *ud);
    int (*alive)(void *ud);
    void *wake_ud;
    /* the request */
    char gpu[TT_ID_MAX], rev[TT_ID_MAX];
    int all, sqlite;
    char db_path[4096];
    /* shared with the thread, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tt_buf q;
    int done, broken, cancel;
    int orphan;   /* its connection is gone: freed on the loop once the thread ends */
    tt_errc errc; /* TT_ERRC_COUNT: none */
    /* the thread's own */
    tt_buf chunk;
    int header_sent;
    pthread_t th;
    int started, counted;
    tt_export *next_pending;
};

/* Exports started and not finished, and those waiting for a thread: the
 * daemon has one loop, so these are the loop's. */
static int running;
static tt_export *pending_head, *pending_tail;

/* ---- the thread's side ----------------------------------------------------------------- */

/* Hands the chunk to the loop, waiting while the queue is full. 0, or -1
 * when cancelled. */
static int hand_over(tt_export *e) {
    pthread_mutex_lock(&e->mu);
    while (!e->cancel && e->q.len >= TT_EXPORT_QUEUE_MAX) pthread_cond_wait(&e->cv, &e->mu);
    int cancel = e->cancel;
    if (!cancel) {
        tt_buf_append(&e->q, e->chunk.data, e->chunk.len);
        if (e->q.oom) cancel = e->broken = 1;
    }
    pthread_mutex_unlock(&e->mu);
    tt_buf_reset(&e->chunk);
    uv_async_send(&e->async);
    return cancel ? -1 : 0;
}

static int emit(tt_export *e, const char *line, size_t len) {
    tt_buf_append(&e->chunk, line, len);
    if (e->chunk.oom) return -1;
    return e->chunk.len >= CHUNK ? hand_over(e) : 0;
}

/* The reply failed: an ERR if nothing was sent yet, else a broken body. */
static void fail(tt_export *e, tt_errc code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(tt_export *e, tt_errc code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&e->mu);
    if (!e->header_sent) {
        tt_buf_reset(&e->chunk);
        tt_buf_printf(&e->q, "ERR %s %s\n", tt__errc_name(code), msg);
        e->errc = code;
    } else {
        e->broken = 1;
    }
    pthread_mutex_unlock(&e->mu);
    if (e->header_sent) tt_warn("export cut short after its header: %s", msg);
}

typedef struct pass {
    tt_export *e;
    int format; /* 0: count, 1: write */
    tt_fleet_kind kind;
    int64_t n;
    tt_store *gst;     /* a second handle for the GPU rows (the iteration's may not be used) */
    tt_gpu_info *gpus; /* the rows met so far */
    size_t ngpus;
    int rc;
    tt_fleet_rec f;
    char line[TT_FLEET_LINE_MAX + 2];
} pass;

static int gpu_of(pass *p, const char *fp, tt_gpu_info *out) {
    for (size_t i = 0; i < p->ngpus; i++)
        if (strcmp(p->gpus[i].fingerprint, fp) == 0) {
            *out = p->gpus[i];
            return 0;
        }
    int rc = tt_store_get_gpu(p->gst, fp, out);
    if (rc < 0) return rc;
    tt_gpu_info *g = realloc(p->gpus, (p->ngpus + 1) * sizeof *g);
    if (!g) return TT_ERR_NOMEM;
    p->gpus = g;
    g[p->ngpus++] = *out;
    return 0;
}

static int on_record(void *ud, const tt_record *rec) {
    pass *p = ud;
    tt_export *e = p->e;
    if (__atomic_load_n(&e->cancel, __ATOMIC_RELAXED)) return TT_ERR_IO;
    if ((e->gpu[0] && strcmp(rec->key.gpu, e->gpu) != 0) || (e->rev[0] && strcmp(rec->key.rev, e->rev) != 0))
        return 0;
    if (!p->format) {
        p->n++;
        return 0;
    }
    memset(&p->f, 0, sizeof p->f);
    p->f.kind = p->kind;
    p->f.rec = *rec;
    int n = gpu_of(p, rec->key.gpu, &p->f.gpu);
    if (n == 0) n = tt_fleet_rec_format(&p->f, p->line, sizeof p->line - 1);
    if (n < 0) return p->rc = n;
    p->line[n++] = '\n';
    if (emit(e, p->line, (size_t)n) < 0) return TT_ERR_IO; /* cancelled */
    p->n++;
    return 0;
}

static int each(tt_store *st, pass *p) {
    p->kind = TT_FLEET_BEST;
    int rc = tt_store_each_best(st, on_record, p);
    if (rc == 0 && p->e->all) {
        p->kind = TT_FLEET_MEASUREMENT;
        rc = tt_store_each_measurement(st, p->e->gpu[0] ? p->e->gpu : NULL, on_record, p);
    }
    return rc;
}

/* The records in the snapshot: counted by SQLite without filters, else
 * by a pass that only counts. */
static int count(tt_store *st, pass *p) {
    if (p->e->gpu[0] || p->e->rev[0]) return each(st, p);
    int64_t best = 0, meas = 0;
    int rc = tt_store_count_best(st, &best);
    if (rc == 0 && p->e->all) rc = tt_store_count_measurements(st, &meas);
    p->n = best + meas;
    return rc;
}

static void export_json(tt_export *e, tt_store *st, tt_store *gst) {
    pass p;
    memset(&p, 0, sizeof p);
    p.e = e;
    p.gst = gst;
    int rc = tt_store_begin(st); /* one snapshot for the count and the lines */
    if (rc == 0) rc = count(st, &p);
    if (rc == TT_ERR_IO) goto out; /* cancelled */
    if (rc < 0) {
        fail(e, TT_ERRC_DB, "export: %s", rc == TT_ERR_NOMEM ? "out of memory" : tt_store_errmsg(st));
        goto out;
    }
    int64_t total = p.n;
    char head[128];
    int n = snprintf(head, sizeof head, "OK format=json records=%lld lines=%lld\n", (long long)total,
                     (long long)total);
    if (emit(e, head, (size_t)n) < 0) goto out;
    e->header_sent = 1;
    p.format = 1;
    p.n = 0;
    rc = each(st, &p);
    if (rc == TT_ERR_IO) goto out; /* cancelled */
    if (rc < 0 || p.n != total) {
        fail(e, TT_ERRC_INTERNAL, "export: record %lld cannot be written (%s)", (long long)p.n + 1,
             tt_strerror(p.rc < 0 ? p.rc : rc));
        goto out;
    }
out:
    tt_store_rollback(st);
    free(p.gpus);
}

static void export_sqlite(tt_export *e, tt_store *st) {
    char path[4200];
    unsigned char *data = NULL;
    FILE *f = NULL;
    snprintf(path, sizeof path, "%s.export-%d-%p", e->db_path, (int)getpid(), (void *)e);
    if (tt_store_snapshot(st, path) < 0) {
        fail(e, TT_ERRC_DB, "snapshot: %s", tt_store_errmsg(st));
        return;
    }
    long size = -1;
    if ((f = fopen(path, "rb")) && fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || size > SNAPSHOT_MAX) {
        if (size > SNAPSHOT_MAX)
            fail(e, TT_ERRC_RANGE, "the database snapshot is %ld bytes, over %d to send", size, SNAPSHOT_MAX);
        else fail(e, TT_ERRC_DB, "snapshot: cannot read it back");
        goto out;
    }
    rewind(f);
    data = malloc((size_t)size + 1);
    if (!data || fread(data, 1, (size_t)size, f) != (size_t)size) {
        fail(e, TT_ERRC_INTERNAL, "snapshot: cannot read it back");
        goto out;
    }
    unlink(path); /* read: nothing of it stays on disk while it streams */
    char head[128];
    size_t lines = ((size_t)size + B64_CHUNK - 1) / B64_CHUNK;
    int n = snprintf(head, sizeof head, "OK format=sqlite bytes=%ld lines=%zu\n", size, lines);
    if (emit(e, head, (size_t)n) < 0) goto out;
    e->header_sent = 1;
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t at = 0; at < (size_t)size; at += B64_CHUNK) {
        size_t end = at + B64_CHUNK < (size_t)size ? at + B64_CHUNK : (size_t)size;
        char line[B64_CHUNK / 3 * 4 + 8];
        size_t k = 0;
        for (size_t i = at; i < end; i += 3) {
            uint32_t v = (uint32_t)data[i] << 16;
            if (i + 1 < end) v |= (uint32_t)data[i + 1] << 8;
            if (i + 2 < end) v |= data[i + 2];
            line[k++] = a[v >> 18 & 63];
            line[k++] = a[v >> 12 & 63];
            line[k++] = i + 1 < end ? a[v >> 6 & 63] : '=';
            line[k++] = i + 2 < end ? a[v & 63] : '=';
        }
        line[k++] = '\n';
        if (emit(e, line, k) < 0) goto out;
    }
out:
    if (f) fclose(f);
    free(data);
    unlink(path);
}

static void *export_main(void *arg) {
    tt_export *e = arg;
    tt_store *st = NULL;
    char err[512];
    /* behind the loop for the CPU: lookups first (Linux: per thread) */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    tt_store *gst = NULL;
    if (tt_store_open_reader(e->db_path, &st, err, sizeof err) < 0 ||
        (!e->sqlite && tt_store_open_reader(e->db_path, &gst, err, sizeof err) < 0))
        fail(e, TT_ERRC_DB, "export: %s", err);
    else if (e->sqlite) export_sqlite(e, st);
    else export_json(e, st, gst);
    tt_store_close(gst);
    tt_store_close(st);
    if (e->chunk.len && !e->broken) hand_over(e);
    pthread_mutex_lock(&e->mu);
    e->done = 1;
    pthread_mutex_unlock(&e->mu);
    uv_async_send(&e->async);
    return NULL;
}

/* ---- the loop's side ------------------------------------------------------------------- */

static void start(tt_export *e) {
    running++;
    e->counted = 1;
    if (pthread_create(&e->th, NULL, export_main, e) != 0) {
        pthread_mutex_lock(&e->mu);
        tt_buf_printf(&e->q, "ERR internal cannot start the export\n");
        e->errc = TT_ERRC_INTERNAL;
        e->done = 1;
        pthread_mutex_unlock(&e->mu);
        uv_async_send(&e->async);
        return;
    }
    e->started = 1;
}

/* A thread ended (or an export left before starting one): the next
 * waiting export gets it. */
static void release(tt_export *e) {
    if (e->counted) {
        e->counted = 0;
        running--;
    }
    while (running < TT_EXPORT_THREADS && pending_head) {
        tt_export *n = pending_head;
        pending_head = n->next_pending;
        if (!pending_head) pending_tail = NULL;
        if (n->alive && !n->alive(n->wake_ud)) {
            /* its client hung up while it waited: no pass over the
             * database for nobody (the connection closes) */
            pthread_mutex_lock(&n->mu);
            n->done = n->broken = 1;
            pthread_mutex_unlock(&n->mu);
            uv_async_send(&n->async);
            continue;
        }
        start(n);
    }
}

static void on_closed(uv_handle_t *h);

/* The thread has ended or is about to (done is its last act): join it,
 * hand its slot on, close the handle (which frees the export). */
static void finish(tt_export *e) {
    if (e->started) pthread_join(e->th, NULL);
    e->started = 0;
    release(e);
    uv_close((uv_handle_t *)&e->async, on_closed);
}

static void on_async(uv_async_t *h) {
    tt_export *e = h->data;
    if (e->orphan) {
        pthread_mutex_lock(&e->mu);
        int done = e->done;
        pthread_mutex_unlock(&e->mu);
        if (done && !uv_is_closing((uv_handle_t *)&e->async)) finish(e);
        return;
    }
    if (e->wake) e->wake(e->wake_ud);
}

void tt_export_set_wake(tt_export *e, void (*wake)(void *ud), int (*alive)(void *ud), void *ud) {
    e->wake = wake;
    e->alive = alive;
    e->wake_ud = ud;
}

int tt_export_pull(tt_export *e, tt_buf *out) {
    pthread_mutex_lock(&e->mu);
    int was_full = e->q.len >= TT_EXPORT_QUEUE_MAX;
    tt_buf_append(out, e->q.data, e->q.len);
    tt_buf_reset(&e->q);
    int done = e->done, broken = e->broken;
    tt_errc errc = e->errc;
    if (was_full) pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (!done) return 0;
    if (errc != TT_ERRC_COUNT) {
        e->x->stats->errors[errc]++;
        e->errc = TT_ERRC_COUNT;
    }
    return broken ? -1 : 1;
}

static void on_closed(uv_handle_t *h) {
    tt_export *e = h->data;
    tt_buf_free(&e->q);
    tt_buf_free(&e->chunk);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

/* Never waits for the thread (that could hold the loop for a whole pass
 * over the database): a running one is told to stop and left to end; the
 * loop frees the export when it has (on_async). */
void tt_export_free(tt_export *e) {
    if (!e) return;
    /* out of the waiting list, if it is there */
    for (tt_export **p = &pending_head, *prev = NULL; *p; prev = *p, p = &(*p)->next_pending)
        if (*p == e) {
            *p = e->next_pending;
            if (pending_tail == e) pending_tail = prev;
            break;
        }
    int done = 1;
    if (e->started) {
        pthread_mutex_lock(&e->mu);
        __atomic_store_n(&e->cancel, 1, __ATOMIC_RELAXED);
        e->orphan = 1;
        done = e->done;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
    }
    if (done) finish(e);
}

#define ERR(code, ...) tt_handle_error(x, out, TT_ERRC_##code, __VA_ARGS__)

typedef struct req_export {
    char gpu[TT_ID_MAX], rev[TT_ID_MAX];
    int64_t all;
    int sqlite;
} req_export;
static const tt__fspec export_spec[] = {
    {"gpu", TT_FT_HEX, 0, 0, 0, 0, NULL, NULL, offsetof(req_export, gpu)},
    {"rev", TT_FT_HEX, 0, 0, 0, 0, NULL, NULL, offsetof(req_export, rev)},
    {"all", TT_FT_INT, 0, 0, 1, 0, NULL, NULL, offsetof(req_export, all)},
    {"format", TT_FT_WORD, 0, 0, 0, 0, (const char *const[]){"json", "sqlite", NULL}, NULL,
     offsetof(req_export, sqlite)},
};

void tt_handle_export(tt_hctx *x, tt_session *s, const tt__msg *m, tt_buf *out) {
    req_export r;
    uint32_t has;
    char err[256];
    int rc = tt__fields_decode(m, export_spec, (int)(sizeof export_spec / sizeof export_spec[0]), &r, &has,
                               err, sizeof err);
    if (rc < 0) {
        tt_handle_error(x, out, tt__errc_from_status(rc), "%s", err);
        return;
    }
    if (r.sqlite && (r.gpu[0] || r.rev[0] || r.all)) {
        ERR(FIELD, "format=sqlite copies the whole database: no gpu, rev or all");
        return;
    }
    /* The snapshot holds the job queue and every table, which the state
     * directory's mode keeps from other users: admins only. The record
     * tables (format=json) are what LOOKUP answers anyway. */
    if (r.sqlite && tt_need_admin(x, s, "EXPORT format=sqlite", out) < 0) return;
    if (!x->loop || !x->db_path) {
        ERR(INTERNAL, "export: no database to read");
        return;
    }
    tt_export *e = calloc(1, sizeof *e);
    if (!e || snprintf(e->db_path, sizeof e->db_path, "%s", x->db_path) >= (int)sizeof e->db_path) {
        free(e);
        ERR(INTERNAL, "export: out of memory");
        return;
    }
    e->x = x;
    memcpy(e->gpu, r.gpu, TT_ID_MAX);
    memcpy(e->rev, r.rev, TT_ID_MAX);
    e->all = (int)r.all;
    e->sqlite = r.sqlite;
    e->errc = TT_ERRC_COUNT;
    tt_buf_init(&e->q);
    tt_buf_init(&e->chunk);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    uv_async_init(x->loop, &e->async, on_async);
    e->async.data = e;
    s->export = e;
    if (running < TT_EXPORT_THREADS) start(e);
    else if (pending_tail) pending_tail = pending_tail->next_pending = e;
    else pending_head = pending_tail = e;
}
