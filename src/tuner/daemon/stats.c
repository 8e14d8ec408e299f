#include "tuner/daemon/stats.h"

#include <string.h>

/* A metric family. `label` NULL: a single unlabelled sample. Text form
 * names are "<name>_<label value>" (or "<name>"). */
typedef struct family {
    const char *name, *help, *type, *label;
} family;

/* The body being written. An append that fails for lack of memory stops
 * the body there: what was written is whole lines, `lines` counts exactly
 * them, and no later (smaller) line can land after the gap, so the header's
 * lines=N always frames what is sent. */
typedef struct body {
    tt_buf *out;
    int lines, full;
} body;

/* After one tt_buf_printf that started at `before`: count its lines, or
 * stop the body if it wrote nothing. */
static void settle(body *b, size_t before) {
    if (b->out->len == before) {
        b->full = 1;
        return;
    }
    for (size_t i = before; i < b->out->len; i++) b->lines += b->out->data[i] == '\n';
}

/* One sample (and, first in its family, the # HELP and # TYPE lines) in
 * either form. */
static void emit(body *b, int prom, const family *f, int *header_done, const char *lv, long long v) {
    tt_buf *out = b->out;
    size_t before = out->len;
    if (b->full) return;
    if (prom) {
        if (!*header_done) {
            tt_buf_printf(out, "# HELP tiletune_%s %s\n# TYPE tiletune_%s %s\n", f->name, f->help,
                          f->name, f->type);
            settle(b, before);
            if (b->full) return;
            *header_done = 1;
            before = out->len;
        }
        if (f->label) tt_buf_printf(out, "tiletune_%s{%s=\"%s\"} %lld\n", f->name, f->label, lv, v);
        else tt_buf_printf(out, "tiletune_%s %lld\n", f->name, v);
        settle(b, before);
        return;
    }
    /* The text form drops Prometheus' _total suffix: "requests_lookup 3". */
    size_t n = strlen(f->name);
    if (n > 6 && strcmp(f->name + n - 6, "_total") == 0) n -= 6;
    if (f->label) tt_buf_printf(out, "%.*s_%s %lld\n", (int)n, f->name, lv, v);
    else tt_buf_printf(out, "%.*s %lld\n", (int)n, f->name, v);
    settle(b, before);
}

int tt_stats_format(const tt_stats *s, const tt_stats_gauges *g, int prom, tt_buf *out) {
    body b = {out, 0, 0};
    int hd;
    static const family requests = {"requests_total", "Requests received, by verb.", "counter", "verb"};
    static const family lookups = {"lookups_total", "Lookups answered, by match kind.", "counter", "match"};
    static const family errors = {"errors_total", "ERR replies, by code.", "counter", "code"};
    static const family accepted = {"connections_accepted_total", "Connections accepted.", "counter", NULL};
    static const family refused = {"connections_refused_total", "Connections refused at the connection cap.", "counter", NULL};
    static const family timedout = {"connections_timed_out_total", "Connections closed for idleness.", "counter", NULL};
    static const family open = {"connections_open", "Connections open now.", "gauge", NULL};
    static const family jobs = {"queue_jobs", "Tuning jobs in the persistent queue, by state.", "gauge", "state"};
    static const family created = {"jobs_created_total", "Tuning jobs created since start.", "counter", NULL};
    static const family cancelled = {"jobs_cancelled_total", "Tuning jobs cancelled since start.", "counter", NULL};
    static const family meas = {"measurements_total", "Measurements received from workers.", "counter", NULL};
    static const family wstarts = {"worker_starts_total", "Measurement worker processes started.", "counter", NULL};
    static const family wfail = {"worker_failures_total", "Worker processes that died or were killed.", "counter", NULL};
    static const family records = {"records", "Tuned winners held in memory.", "gauge", NULL};
    static const family gpus = {"gpus", "GPUs reported by the measurement workers.", "gauge", NULL};
    static const family uptime = {"uptime_seconds", "Seconds since the daemon started.", "gauge", NULL};

    hd = 0;
    for (int i = 0; i < TT_VERB_COUNT; i++) emit(&b, prom, &requests, &hd, tt__verb_name((tt_verb)i), (long long)s->requests[i]);
    hd = 0;
    for (int i = 0; i < TT_MATCH_COUNT; i++) emit(&b, prom, &lookups, &hd, tt__match_word(i), (long long)s->lookups[i]);
    hd = 0;
    for (int i = 0; i < TT_ERRC_COUNT; i++) emit(&b, prom, &errors, &hd, tt__errc_name((tt_errc)i), (long long)s->errors[i]);
    const struct {
        const family *f;
        long long v;
    } single[] = {
        {&accepted, (long long)s->conn_accepted}, {&refused, (long long)s->conn_refused},
        {&timedout, (long long)s->conn_timed_out}, {&open, g->conn_open},
        {&created, (long long)s->jobs_created}, {&cancelled, (long long)s->jobs_cancelled},
        {&meas, (long long)s->measurements}, {&wstarts, (long long)s->worker_starts},
        {&wfail, (long long)s->worker_failures}, {&records, g->records}, {&gpus, g->gpus},
        {&uptime, g->uptime_s},
    };
    for (size_t i = 0; i < sizeof single / sizeof single[0]; i++) {
        hd = 0;
        emit(&b, prom, single[i].f, &hd, NULL, single[i].v);
    }
    hd = 0;
    for (int i = 0; i < TT_JOB_STATE_COUNT; i++) emit(&b, prom, &jobs, &hd, tt__job_state_word(i), g->jobs[i]);
    return b.lines;
}
