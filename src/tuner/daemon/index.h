/*
 * The in-memory index of winners that answers LOOKUP: a hash table keyed by
 * the full key (gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k),
 * plus, per (gpu, rev, dtype, head_dim, causal) group, the list of tuned
 * seqlens for the nearest-match search. SQLite is the durable copy: the
 * daemon loads the index from the store at start and updates it whenever
 * it writes a winner, so a lookup never touches the disk.
 *
 * Not thread-safe: the daemon uses it from its event loop only.
 */
#ifndef TT_TUNER_INDEX_H
#define TT_TUNER_INDEX_H

#include <stddef.h>

#include "tiletune.h"

typedef struct tt_index tt_index;

int tt_index_new(tt_index **out);
void tt_index_free(tt_index *ix); /* NULL is a no-op */

/* Inserts or replaces the winner of `key` (gpu and rev non-empty). */
int tt_index_put(tt_index *ix, const tt_key *key, const tt_config *cfg, double tflops);
/* Removes the winner of `key`; returns 1 if there was one, else 0. */
int tt_index_remove(tt_index *ix, const tt_key *key);
size_t tt_index_count(const tt_index *ix);
/* Calls fn for every winner, in no particular order. */
void tt_index_each(const tt_index *ix, void (*fn)(void *ud, const tt_key *key, const tt_config *cfg), void *ud);
/* 1 if `key` has a winner under another kernel revision (a stale one). */
int tt_index_other_rev(const tt_index *ix, const tt_key *key);

/*
 * The answer for `key` (gpu and rev already resolved): the exact winner,
 * else the winner of the same group whose (seqlen_q, seqlen_k) is nearest
 * in log space (ties: the smaller seqlen_q, then seqlen_k), else the
 * built-in default. Returns 0 or the status of tt_config_default for a
 * head_dim it does not know.
 */
int tt_index_lookup(const tt_index *ix, const tt_key *key, tt_lookup_result *out);

#endif
