/*
 * Merging a tuning table into the database (tiletune import, docs/fleet.md):
 * every record of one import in one store transaction, under one of three
 * rules.
 *
 *   faster  keep the better record by a total order (tt_fleet_better):
 *           times in different TT_FLEET_TIE bands: the faster; in the same
 *           band (a near-tie, within measurement noise): the smaller
 *           canonical config text, then the remaining fields. Because it
 *           is a total order, the table after importing any set of files
 *           is the per-key best of their union with what was there, in
 *           whatever order they come: every node ends with the same table.
 *   newer   the later measured_at; equal times fall back to `faster`.
 *   fill    add keys that have no winner; never replace one.
 *
 * A record equal to the current winner changes nothing, so importing a
 * file twice leaves the database as the first import left it.
 */
#ifndef TT_TUNER_FLEET_MERGE_H
#define TT_TUNER_FLEET_MERGE_H

#include <stddef.h>
#include <stdint.h>

#include "tuner/fleet/policy.h"
#include "tuner/fleet/record.h"
#include "tuner/store/store.h"

typedef struct tt_fleet_counts {
    int64_t added;    /* keys that had no winner */
    int64_t replaced; /* winners replaced by a better record */
    int64_t kept;     /* records that lost to (or equal) the winner */
    int64_t rejected; /* records refused (reasons through on_reject) */
    int64_t stale;    /* merged records of another kernel revision */
    int64_t foreign;  /* merged records of another GPU model */
    int64_t history;  /* measurement records: validated, not merged */
} tt_fleet_counts;

typedef struct tt_fleet_merge_opts {
    tt_fleet_policy policy;
    int dry_run;           /* merge, count, then roll back */
    int strict;            /* one rejected record rolls back everything */
    const char *local_gpu; /* this node's fingerprint ("" / NULL: none) */
    const char *local_rev; /* the current kernel revision */
    /* Called for each refused record (its index in recs). May be NULL. */
    void (*on_reject)(void *ud, size_t i, const char *reason);
    /* Called after the commit for each key whose winner changed, in
     * order (a key may come more than once: the last call is its
     * winner). May be NULL. Must not call into the store. */
    void (*on_winner)(void *ud, const tt_record *winner);
    void *ud;
} tt_fleet_merge_opts;

/*
 * Merges recs[0..n) (parsed and validated by fleet_record) into `s` in one
 * transaction. *committed says whether it was committed (0 for a dry run,
 * or strict with a rejection). A database failure rolls everything back
 * and returns its status with the reason in err; a refused record is not
 * a failure.
 */
int tt_fleet_merge(tt_store *s, const tt_fleet_rec *recs, size_t n, const tt_fleet_merge_opts *o,
                   tt_fleet_counts *counts, int *committed, char *err, size_t errlen);

#endif
