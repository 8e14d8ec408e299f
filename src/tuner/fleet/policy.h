/*
 * Merge policies: which of two winners of one key a fleet merge keeps
 * (docs/fleet.md). Pure ranking, no database: the CLI and the daemon's
 * IMPORT rank alike.
 */
#ifndef TT_TUNER_FLEET_POLICY_H
#define TT_TUNER_FLEET_POLICY_H

#include "tuner/store/record.h"

/* Relative width of a tie band: two times within one band are a near-tie.
 * Wider than the spread, (p80 - p20) / median, of a timing on an idle GPU,
 * so repeated runs of one config usually fall into one band. */
#define TT_FLEET_TIE 0.02

typedef enum tt_fleet_policy {
    TT_POLICY_FASTER = 0,
    TT_POLICY_NEWER = 1,
    TT_POLICY_FILL = 2,
} tt_fleet_policy;

int tt_fleet_policy_parse(const char *name, tt_fleet_policy *out); /* TT_ERR_INVAL */
const char *tt_fleet_policy_name(tt_fleet_policy p);

/* A winner's time per unit of work (ms per TFLOP of tt__sdpa_flops): what
 * `faster` compares, so a record timed at batch 1 and one timed at batch
 * 32 rank by their speed, not by the size of the problem they timed. */
double tt_fleet_time_per_work(const tt_record *r);

/* The order `policy` ranks two winners of one key by: < 0 if a is the
 * better, > 0 if b is, 0 if they are the same record (measurement id
 * aside). `fill` ranks like `faster`. */
int tt_fleet_better(const tt_record *a, const tt_record *b, tt_fleet_policy policy);

/* Adds one winner to a table's checksum: the sum of the FNV-1a 64 hashes
 * of each winner's key and config text, so it depends on the set of
 * winners, not on their order. Start from 0. */
uint64_t tt_fleet_table_sum_add(uint64_t sum, const tt_key_v2 *key, const tt_config *cfg);

#endif
