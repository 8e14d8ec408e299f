#include "tuner/daemon/stats.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tuner/store/store.h"

const uint64_t tt_lookup_bucket_ns[TT_LOOKUP_BUCKETS] = {1000,  2500,   5000,   10000,   25000,
                                                         50000, 100000, 250000, 1000000, 10000000};

void tt_stats_observe_lookup(tt_stats *s, uint64_t ns) {
    int i = 0;
    while (i < TT_LOOKUP_BUCKETS && ns > tt_lookup_bucket_ns[i]) i++;
    s->lookup_hist[i]++;
    s->lookup_sum_ns += ns;
}

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
            tt_buf_printf(out, "# HELP tiletune_%s %s\n# TYPE tiletune_%s %s\n", f->name, f->help, f->name,
                          f->type);
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

/* One preformatted line (or block) of the body. */
static void line(body *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(body *b, const char *fmt, ...) {
    if (b->full) return;
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) return; /* labels are bounded hex ids: never */
    size_t before = b->out->len;
    tt_buf_printf(b->out, "%s", tmp);
    settle(b, before);
}

/* The conventional pair: tiletune_build_info{version,rev} 1 and the
 * unprefixed process_start_time_seconds. The text form keeps uptime. */
static void build_and_process(body *b, int prom, const tt_stats_gauges *g) {
    const char *rev = g->rev ? g->rev : "";
    if (!prom) {
        line(b, "start_time_seconds %lld\n", (long long)g->start_time_s);
        return;
    }
    line(b, "# HELP tiletune_build_info The daemon's version and kernel revision (value 1).\n"
            "# TYPE tiletune_build_info gauge\n");
    line(b, "tiletune_build_info{version=\"%s\",rev=\"%s\"} 1\n", TT_VERSION_STRING, rev);
    line(b, "# HELP process_start_time_seconds Start time of the process since the Unix epoch in seconds.\n"
            "# TYPE process_start_time_seconds gauge\n");
    line(b, "process_start_time_seconds %lld\n", (long long)g->start_time_s);
}

/* LOOKUP service time: a Prometheus histogram; the text form gives the
 * count, the sum and the cumulative bucket counts. */
static void lookup_histogram(body *b, int prom, const tt_stats *s) {
    uint64_t cum = 0;
    if (prom)
        line(b,
             "# HELP tiletune_lookup_duration_seconds Time to answer a LOOKUP, from its line to its reply.\n"
             "# TYPE tiletune_lookup_duration_seconds histogram\n");
    for (int i = 0; i <= TT_LOOKUP_BUCKETS; i++) {
        cum += s->lookup_hist[i];
        if (i == TT_LOOKUP_BUCKETS) {
            if (prom)
                line(b, "tiletune_lookup_duration_seconds_bucket{le=\"+Inf\"} %llu\n",
                     (unsigned long long)cum);
        } else if (prom) {
            line(b, "tiletune_lookup_duration_seconds_bucket{le=\"%g\"} %llu\n",
                 (double)tt_lookup_bucket_ns[i] / 1e9, (unsigned long long)cum);
        } else {
            line(b, "lookup_duration_le_%lluns %llu\n", (unsigned long long)tt_lookup_bucket_ns[i],
                 (unsigned long long)cum);
        }
    }
    if (prom) {
        line(b, "tiletune_lookup_duration_seconds_sum %.9f\n", (double)s->lookup_sum_ns / 1e9);
        line(b, "tiletune_lookup_duration_seconds_count %llu\n", (unsigned long long)cum);
    } else {
        line(b, "lookup_duration_count %llu\n", (unsigned long long)cum);
        line(b, "lookup_duration_sum_ns %llu\n", (unsigned long long)s->lookup_sum_ns);
    }
}

typedef struct group_ctx {
    body *b;
    int prom;
    const char *rev;
    int64_t stale;
} group_ctx;

static int on_group(void *ud, const char *gpu, const char *rev, int64_t n) {
    group_ctx *x = ud;
    int stale = x->rev && strcmp(rev, x->rev) != 0;
    if (stale) x->stale += n;
    if (x->prom)
        line(x->b, "tiletune_table_records{gpu=\"%s\",rev=\"%s\",stale=\"%d\"} %lld\n", gpu, rev, stale,
             (long long)n);
    else line(x->b, "table_records_%s_%s %lld\n", gpu, rev, (long long)n);
    return 0;
}

/* Winners in the database by GPU, kernel revision and staleness (another
 * revision than the daemon's), from one store query; a database error
 * leaves the family out rather than failing STATS. */
static void table_records(body *b, int prom, const tt_stats_gauges *g) {
    group_ctx x = {b, prom, g->rev, 0};
    if (prom)
        line(b, "# HELP tiletune_table_records Tuned winners in the database, by GPU, kernel revision and "
                "staleness (another revision than the daemon's).\n"
                "# TYPE tiletune_table_records gauge\n");
    tt_store_count_best_by(g->store, on_group, &x);
    if (!prom) line(b, "table_records_stale %lld\n", (long long)x.stale);
}

int tt_stats_format(const tt_stats *s, const tt_stats_gauges *g, int prom, tt_buf *out) {
    body b = {out, 0, 0};
    int hd;
    static const family requests = {"requests_total", "Requests received, by verb.", "counter", "verb"};
    static const family lookups = {"lookups_total", "Lookups answered, by match kind.", "counter", "match"};
    static const family errors = {"errors_total", "ERR replies, by code.", "counter", "code"};
    static const family accepted = {"connections_accepted_total", "Connections accepted.", "counter", NULL};
    static const family refused = {"connections_refused_total", "Connections refused at the connection cap.",
                                   "counter", NULL};
    static const family timedout = {"connections_timed_out_total", "Connections closed for idleness.",
                                    "counter", NULL};
    static const family open = {"connections_open", "Connections open now.", "gauge", NULL};
    static const family jobs = {"queue_jobs", "Tuning jobs in the persistent queue, by state.", "gauge",
                                "state"};
    static const family created = {"jobs_created_total", "Tuning jobs created since start.", "counter", NULL};
    static const family cancelled = {"jobs_cancelled_total", "Tuning jobs cancelled since start.", "counter",
                                     NULL};
    static const family meas = {"measurements_total", "Measurements received from workers.", "counter", NULL};
    static const family wstarts = {"worker_starts_total", "Measurement worker processes started.", "counter",
                                   NULL};
    static const family wfail = {"worker_failures_total", "Worker processes that died or were killed.",
                                 "counter", NULL};
    static const family records = {"records", "Tuned winners held in memory.", "gauge", NULL};
    static const family gpus = {"gpus", "GPUs reported by the measurement workers.", "gauge", NULL};
    static const family uptime = {"uptime_seconds", "Seconds since the daemon started.", "gauge", NULL};
    static const family stale = {
        "stale_keys", "Keys of this GPU whose only winner is of another kernel revision.", "gauge", NULL};
    static const family imported = {"last_import_timestamp_seconds",
                                    "When an import last changed the database (0: not since start).", "gauge",
                                    NULL};
    static const family table = {"table_info", "The served table's checksum (same table, same checksum).",
                                 "gauge", "checksum"};

    hd = 0;
    for (int i = 0; i < TT_VERB_COUNT; i++)
        emit(&b, prom, &requests, &hd, tt__verb_name((tt_verb)i), (long long)s->requests[i]);
    hd = 0;
    for (int i = 0; i < TT_MATCH_COUNT; i++)
        emit(&b, prom, &lookups, &hd, tt__match_word(i), (long long)s->lookups[i]);
    hd = 0;
    for (int i = 0; i < TT_ERRC_COUNT; i++)
        emit(&b, prom, &errors, &hd, tt__errc_name((tt_errc)i), (long long)s->errors[i]);
    const struct {
        const family *f;
        long long v;
    } single[] = {
        {&accepted, (long long)s->conn_accepted},
        {&refused, (long long)s->conn_refused},
        {&timedout, (long long)s->conn_timed_out},
        {&open, g->conn_open},
        {&created, (long long)s->jobs_created},
        {&cancelled, (long long)s->jobs_cancelled},
        {&meas, (long long)s->measurements},
        {&wstarts, (long long)s->worker_starts},
        {&wfail, (long long)s->worker_failures},
        {&records, g->records},
        {&gpus, g->gpus},
        {&uptime, g->uptime_s},
        {&stale, g->stale},
        {&imported, g->last_import_at},
    };
    for (size_t i = 0; i < sizeof single / sizeof single[0]; i++) {
        hd = 0;
        emit(&b, prom, single[i].f, &hd, NULL, single[i].v);
    }
    hd = 0;
    for (int i = 0; i < TT_JOB_STATE_COUNT; i++)
        emit(&b, prom, &jobs, &hd, tt__job_state_word(i), g->jobs[i]);
    hd = 0;
    if (g->table) emit(&b, prom, &table, &hd, g->table, 1);
    static const family restarts = {"worker_restarts_total",
                                    "Worker processes started again after a GPU's first.", "counter", NULL};
    hd = 0;
    emit(&b, prom, &restarts, &hd, NULL, (long long)s->worker_restarts);
    build_and_process(&b, prom, g);
    lookup_histogram(&b, prom, s);
    if (g->store) table_records(&b, prom, g);
    return b.lines;
}
