/*
 * The daemon's counters and their two text forms (STATS): "name value"
 * lines, and the Prometheus text exposition format. Counters only grow;
 * gauges (open connections, jobs by state, records) are read when asked.
 */
#ifndef TT_TUNER_STATS_H
#define TT_TUNER_STATS_H

#include <stdint.h>

#include "common/wire.h"
#include "tuner/daemon/buf.h"
#include "tiletune.h"

typedef struct tt_stats {
    uint64_t requests[TT_VERB_COUNT];
    uint64_t lookups[TT_MATCH_COUNT];
    uint64_t errors[TT_ERRC_COUNT];
    uint64_t conn_accepted, conn_refused, conn_timed_out;
    uint64_t jobs_created, jobs_cancelled;
    uint64_t measurements, worker_starts, worker_failures;
} tt_stats;

/* Gauges the daemon reads at the time of the request. */
typedef struct tt_stats_gauges {
    int64_t conn_open;
    int64_t records;
    int64_t uptime_s;
    int64_t jobs[TT_JOB_STATE_COUNT]; /* by tt_job_state */
    int64_t gpus;
} tt_stats_gauges;

/* Appends the body lines to `out` and returns how many there are. Out of
 * memory, the body stops at the first line that could not be added (out->oom
 * set): the count is still exactly the whole lines appended, so a reply
 * framed with it stays in step; the caller should answer ERR instead. */
int tt_stats_format(const tt_stats *s, const tt_stats_gauges *g, int prometheus, tt_buf *out);

#endif
