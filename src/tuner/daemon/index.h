/*
 * The in-memory index of winners that answers LOOKUP: a hash table keyed by
 * the full key (gpu, rev, dtype, head_dim, causal, group, seqlen_q,
 * seqlen_k), plus, per (gpu, rev, dtype, head_dim, causal, regime), the
 * list of tuned keys for the nearest-match search. SQLite is the durable copy: the
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
int tt_index_put(tt_index *ix, const tt_key_v2 *key, const tt_config *cfg, double tflops);
/* Removes the winner of `key`; returns 1 if there was one, else 0. */
int tt_index_remove(tt_index *ix, const tt_key_v2 *key);
size_t tt_index_count(const tt_index *ix);
/* Calls fn for every winner, in no particular order. */
void tt_index_each(const tt_index *ix, void (*fn)(void *ud, const tt_key_v2 *key, const tt_config *cfg),
                   void *ud);
/* 1 if `key` has a winner under another kernel revision (a stale one). */
int tt_index_other_rev(const tt_index *ix, const tt_key_v2 *key);

/*
 * The answer for `key` (canonical, gpu and rev already resolved): the
 * exact winner, else the winner of the same gpu, rev, dtype, head_dim,
 * causal and regime (tt__key_regime: a decode key never gets a prefill
 * key's config) whose (seqlen_q, seqlen_k, group) is nearest in log space
 * (ties: the smaller seqlen_q, then seqlen_k, then group), else the
 * built-in default of the key's regime. Returns 0 or the status of tt_config_default for a
 * head_dim it does not know.
 */
int tt_index_lookup(const tt_index *ix, const tt_key_v2 *key, tt_lookup_result *out);

#endif
