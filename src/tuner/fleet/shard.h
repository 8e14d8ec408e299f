/*
 * Splitting a tuning grid across n nodes (`tiletune tune --shard i/n`,
 * docs/fleet.md). A shard is a pure function of the requested grid: every
 * node that is given the same lists computes the same slices, so n nodes
 * tune disjoint parts whose union is the whole grid, and the merge of their
 * n exports equals the table of one node that tuned everything.
 *
 * The deal: the grid's keys are sorted by estimated work
 * (seqlen_q * seqlen_k * head_dim, halved for causal), ties by the
 * canonical key (dtype, head_dim, causal, seqlen_q, seqlen_k), duplicates
 * dropped, and dealt like cards in snake order: shard 1, 2, .., n, then
 * n, .., 2, 1, and so on. Shard sizes differ by at most one key, and the
 * expensive long-sequence keys spread over all shards instead of piling
 * onto the last one (a plain round-robin of a seqlen-sorted list gives
 * shard n every longest key). gpu and rev play no part: the grid is the
 * same on every node of a model.
 */
#ifndef TT_TUNER_FLEET_SHARD_H
#define TT_TUNER_FLEET_SHARD_H

#include <stddef.h>

#include "tiletune.h"

/* Most shards a grid may be split into. */
#define TT_SHARD_MAX 4096
/* "i/n" with 1 <= i <= n <= TT_SHARD_MAX, plus the NUL. */
#define TT_SHARD_TEXT_MAX 16

/* Parses "i/n" (decimal, no spaces). 0, or TT_ERR_INVAL / TT_ERR_RANGE
 * with a message in err (may be NULL). */
int tt_shard_parse(const char *text, int *index, int *count, char *err, size_t errlen);

/* The deal order of two grid keys: < 0 if a is dealt before b, 0 if they
 * are the same grid key (gpu and rev are ignored). */
int tt_shard_key_cmp(const tt_key_v2 *a, const tt_key_v2 *b);

/* Sorts keys[0..n) into deal order, drops duplicates, and keeps in place,
 * in deal order, the keys of shard `index` of `count` (1-based). Returns
 * how many were kept. */
size_t tt_shard_select(tt_key_v2 *keys, size_t n, int index, int count);

/* The shard (1-based) that position `pos` of the deal order goes to. */
int tt_shard_of_position(size_t pos, int count);

#endif
