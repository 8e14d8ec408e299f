/*
 * libtiletune's per-process cache of lookup answers: a fixed-size,
 * set-associative table keyed by the full tt_key_v2. Readers take no lock
 * (each slot is a seqlock), so a hit costs a hash, a few loads and a copy
 * and never waits for a writer or for a thread stuck on the socket;
 * writers serialize on the cache's own mutex. Bounded: a full set evicts
 * its oldest entry. Entries carry an expiry time (0 = never).
 */
#ifndef TT_CLIENT_CACHE_H
#define TT_CLIENT_CACHE_H

#include <stdint.h>

#include "tiletune.h"

#define TT_CACHE_WAYS 4

typedef struct tt__cache tt__cache;

/* `entries` is rounded up to a power of two multiple of TT_CACHE_WAYS. */
int tt__cache_new(int entries, tt__cache **out);
void tt__cache_free(tt__cache *c);

/* 1 and *out on a hit whose expiry (if any) is after `now_ns`, else 0.
 * `now_ns` is read lazily: pass a function so hits on entries that never
 * expire skip the clock. */
int tt__cache_get(tt__cache *c, const tt_key_v2 *key, int64_t (*now_ns)(void), tt_lookup_result *out);
/* Inserts or replaces the entry of `key`. expires_ns 0: never expires. */
void tt__cache_put(tt__cache *c, const tt_key_v2 *key, const tt_lookup_result *res, int64_t expires_ns);
/* Drops every entry. */
void tt__cache_clear(tt__cache *c);
/* How many clears so far. An answer asked for before a clear must not land
 * in the cache after it: read the generation before asking, then put with
 * tt__cache_put_since, which drops the answer if a clear came in between. */
uint64_t tt__cache_generation(tt__cache *c);
void tt__cache_put_since(tt__cache *c, uint64_t generation, const tt_key_v2 *key, const tt_lookup_result *res,
                         int64_t expires_ns);

/* In a fork child, before anything else runs: the writer lock may have
 * been held by a thread the child does not have, and a slot that thread
 * was writing would stay odd (a miss) forever. Re-creates the lock and
 * empties such slots. */
void tt__cache_after_fork(tt__cache *c);

/* The hash of a key as the cache uses it (exposed for tests). */
uint64_t tt__cache_hash(const tt_key_v2 *key);

#endif
