/*
 * `tiletune report`: a tuning table as one self-contained HTML page (inline
 * SVG charts and CSS, no script, no external asset, nothing fetched), for
 * people to look at. Per GPU model, dtype, head dim and causal mask: the
 * winner's TFLOP/s against seqlen beside the built-in default's and each
 * kernel family's best, tuned/default per key, the measurement spread;
 * failed and skipped variants, stale records, provenance (GPU, driver,
 * kernel revision, node). Given a second table, what changed.
 *
 * Every chart point is a <circle> carrying what it plots (data-series,
 * data-seqlen, data-value) inside an <svg> that states its axes
 * (data-x0/x1: log2 seqlen at the plot's left/right edge, data-y1: the
 * value at its top; data-left/right/top/bottom: the plot area in the
 * svg's own units), so a browser test can check where each point lands.
 */
#ifndef TT_CLIENT_REPORT_H
#define TT_CLIENT_REPORT_H

#include <stdio.h>

#include "tuner/fleet/record.h"

typedef struct tt_report_table {
    const char *name;         /* shown: a path, or "the node's table" */
    const tt_fleet_rec *recs; /* winners and (when present) measurements */
    size_t n;
    char current_rev[TT_ID_MAX]; /* "": the newest revision in the table */
    char node[TT_NAME_MAX];      /* "" if unknown */
    int64_t exported_at;         /* 0 if unknown */
} tt_report_table;

/* Writes the page for `a`, and what changed from `a` to `b` when `b` is
 * not NULL. 0, or TT_ERR_NOMEM / TT_ERR_IO. */
int tt_report_write(FILE *out, const tt_report_table *a, const tt_report_table *b);

#endif
