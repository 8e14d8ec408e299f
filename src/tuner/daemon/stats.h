/*
 * The daemon's counters and their two text forms (STATS): "name value"
 * lines, and the Prometheus text exposition format. Counters only grow;
 * gauges (open connections, jobs by state, records) are read when asked.
 */
#ifndef TT_TUNER_STATS_H
#define TT_TUNER_STATS_H

#include <stdint.h>

#include "tuner/daemon/buf.h"
#include "tiletune.h"

/* The request verbs; TT_VERB_OTHER counts lines whose verb is unknown. */
#define TT_VERBS(X) X(HELLO) X(PING) X(LOOKUP) X(STATUS) X(STATS) X(TUNE) X(JOBS) X(CANCEL) X(FORGET) X(IMPORT) X(EXPORT) X(JOB)
typedef enum tt_verb {
#define X(v) TT_VERB_##v,
    TT_VERBS(X)
#undef X
    TT_VERB_OTHER,
    TT_VERB_COUNT
} tt_verb;

/* The ERR codes of docs/protocol.md. */
#define TT_ERRCS(X)                                                                        \
    X(PROTO, "proto") X(VERB, "verb") X(FIELD, "field") X(RANGE, "range")                  \
    X(UNSUPPORTED, "unsupported") X(TOOLONG, "toolong") X(BUSY, "busy")                    \
    X(PERMISSION, "permission") X(NOTFOUND, "notfound") X(DB, "db") X(TIMEOUT, "timeout")  \
    X(VERSION, "version") X(INTERNAL, "internal")
typedef enum tt_errc {
#define X(e, s) TT_ERRC_##e,
    TT_ERRCS(X)
#undef X
    TT_ERRC_COUNT
} tt_errc;

tt_verb tt_verb_find(const char *s);
const char *tt_verb_name(tt_verb v); /* lower case: "lookup" */
const char *tt_errc_name(tt_errc e); /* the wire word: "range" */
/* The wire code for a negative TT_ERR_* status of a handler. */
tt_errc tt_errc_from_status(int status);

/* LOOKUP service time (parse, index, reply), upper bounds in ns of the
 * histogram's buckets; a last bucket takes the rest (+Inf). */
#define TT_LOOKUP_BUCKETS 10
extern const uint64_t tt_lookup_bucket_ns[TT_LOOKUP_BUCKETS];

typedef struct tt_stats {
    uint64_t requests[TT_VERB_COUNT];
    uint64_t lookups[3]; /* by tt_match */
    uint64_t errors[TT_ERRC_COUNT];
    uint64_t conn_accepted, conn_refused, conn_timed_out;
    uint64_t jobs_created, jobs_cancelled;
    uint64_t measurements, worker_starts, worker_failures;
    uint64_t worker_restarts; /* starts of a GPU's worker after its first */
    uint64_t lookup_hist[TT_LOOKUP_BUCKETS + 1], lookup_sum_ns;
} tt_stats;

/* One LOOKUP served in `ns`. */
void tt_stats_observe_lookup(tt_stats *s, uint64_t ns);

struct tt_store;

/* Gauges the daemon reads at the time of the request. */
typedef struct tt_stats_gauges {
    int64_t conn_open;
    int64_t records;
    int64_t uptime_s;
    int64_t jobs[5]; /* by tt_job_state: queued running done failed cancelled */
    int64_t gpus;
    int64_t stale;          /* this GPU's keys with only a stale winner */
    int64_t last_import_at; /* unix seconds, 0: none */
    const char *table;      /* the winners' checksum (hex) */
    /* build and process: tiletune_build_info{version,rev}, and
     * process_start_time_seconds (Unix time) */
    const char *rev;
    int64_t start_time_s;
    /* tiletune_table_records{gpu,rev,stale}: read from the store at the
     * time of the request; NULL leaves them out */
    struct tt_store *store;
} tt_stats_gauges;

/* Appends the body lines to `out` and returns how many there are. Out of
 * memory, the body stops at the first line that could not be added (out->oom
 * set): the count is still exactly the whole lines appended, so a reply
 * framed with it stays in step; the caller should answer ERR instead. */
int tt_stats_format(const tt_stats *s, const tt_stats_gauges *g, int prometheus, tt_buf *out);

#endif
