#include "client/cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* What a slot holds, viewed as words so readers can copy it with relaxed
 * atomic loads: the classic seqlock read of plain memory would be a data
 * race in C11 (and a report under TSan); relaxed atomics compile to the
 * same plain moves on x86-64 and arm64. */
typedef struct ckey { /* tt_key_v2 without its reserved space */
    int32_t dtype, head_dim, causal, group;
    int64_t seqlen_q, seqlen_k;
    char gpu[TT_ID_MAX], rev[TT_ID_MAX];
} ckey;
typedef struct payload {
    ckey key;
    tt_lookup_result res;
} payload;
#define PAYLOAD_WORDS ((sizeof(payload) + 7) / 8)

typedef union payload_words {
    payload p;
    uint64_t w[PAYLOAD_WORDS];
} payload_words;

/* 256 bytes: a hit reads the header line and then the payload. seq is
 * odd while a writer is inside; hash 0 marks an empty slot. */
typedef struct slot {
    _Atomic uint64_t seq;
    _Atomic uint64_t hash;
    _Atomic int64_t expires;
    _Atomic uint64_t w[PAYLOAD_WORDS];
} slot;
_Static_assert(sizeof(slot) == 256, "a slot is four cache lines");

struct tt__cache {
    pthread_mutex_t wlock; /* writers only */
    uint64_t set_mask;
    uint64_t clock;              /* insertion stamps, under wlock */
    _Atomic uint64_t generation; /* clears so far; written under wlock */
    uint64_t *stamp;
    slot *slots;
};

int tt__cache_new(int entries, tt__cache **out) {
    if (!out || entries < 1) return TT_ERR_INVAL;
    uint64_t sets = 1;
    while (sets * TT_CACHE_WAYS < (uint64_t)entries) sets <<= 1;
    tt__cache *c = calloc(1, sizeof *c);
    if (!c) return TT_ERR_NOMEM;
    c->slots = aligned_alloc(64, sets * TT_CACHE_WAYS * sizeof(slot));
    c->stamp = calloc(sets * TT_CACHE_WAYS, sizeof *c->stamp);
    if (!c->slots || !c->stamp || pthread_mutex_init(&c->wlock, NULL) != 0) {
        free(c->slots);
        free(c->stamp);
        free(c);
        return TT_ERR_NOMEM;
    }
    for (uint64_t i = 0; i < sets * TT_CACHE_WAYS; i++) {
        slot *s = &c->slots[i];
        atomic_init(&s->seq, 0);
        atomic_init(&s->hash, 0);
        atomic_init(&s->expires, 0);
        for (size_t j = 0; j < PAYLOAD_WORDS; j++) atomic_init(&s->w[j], 0);
    }
    atomic_init(&c->generation, 0);
    c->set_mask = sets - 1;
    *out = c;
    return 0;
}

void tt__cache_free(tt__cache *c) {
    if (!c) return;
    pthread_mutex_destroy(&c->wlock);
    free(c->slots);
    free(c->stamp);
    free(c);
}

static uint64_t mix(uint64_t h) { /* murmur3's finalizer */
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h *= UINT64_C(0xc4ceb9fe1a85ec53);
    h ^= h >> 33;
    return h;
}

/* Numeric fields only, a few multiplies: the gpu and rev ids are left to
 * the key comparison. A process asks about one GPU and kernel revision
 * (at most a few), so they barely spread keys, and walking their 2x16
 * bytes byte by byte cost ~40 ns of a ~100 ns hit (bench/lookup). */
uint64_t tt__cache_hash(const tt_key_v2 *k) {
    uint64_t h = (uint64_t)(uint32_t)k->dtype | (uint64_t)(uint32_t)k->head_dim << 8 |
                 (uint64_t)(uint32_t)k->causal << 40 | (uint64_t)(uint32_t)k->group << 48;
    h = mix(h ^ (uint64_t)k->seqlen_q * UINT64_C(0x9e3779b97f4a7c15));
    h = mix(h ^ (uint64_t)k->seqlen_k);
    return h | 1; /* 0 means an empty slot */
}

/* The first slot of a hash's set: from the high bits, since bit 0 is forced. */
static uint64_t set_of(const tt__cache *c, uint64_t h) { return ((h >> 32) & c->set_mask) * TT_CACHE_WAYS; }

static uint64_t nslots(const tt__cache *c) { return (c->set_mask + 1) * TT_CACHE_WAYS; }

static int key_equal(const ckey *a, const tt_key_v2 *b) {
    return a->dtype == (int32_t)b->dtype && a->head_dim == b->head_dim && a->causal == b->causal &&
           a->group == b->group && a->seqlen_q == b->seqlen_q && a->seqlen_k == b->seqlen_k &&
           strncmp(a->gpu, b->gpu, TT_ID_MAX) == 0 && strncmp(a->rev, b->rev, TT_ID_MAX) == 0;
}

int tt__cache_get(tt__cache *c, const tt_key_v2 *key, int64_t (*now_ns)(void), tt_lookup_result *out) {
    uint64_t h = tt__cache_hash(key);
    slot *set = &c->slots[set_of(c, h)];
    for (int i = 0; i < TT_CACHE_WAYS; i++) {
        slot *s = &set[i];
        uint64_t s1 = atomic_load_explicit(&s->seq, memory_order_acquire);
        if (s1 & 1) continue; /* a writer is inside: treat as a miss */
        if (atomic_load_explicit(&s->hash, memory_order_relaxed) != h) continue;
        int64_t exp = atomic_load_explicit(&s->expires, memory_order_relaxed);
        payload_words pw;
        for (size_t j = 0; j < PAYLOAD_WORDS; j++)
            pw.w[j] = atomic_load_explicit(&s->w[j], memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&s->seq, memory_order_relaxed) != s1) continue;
        if (!key_equal(&pw.p.key, key)) continue;
        if (exp != 0 && now_ns() >= exp) return 0;
        *out = pw.p.res;
        return 1;
    }
    return 0;
}

static void slot_write(slot *s, uint64_t hash, int64_t expires, const payload_words *pw) {
    uint64_t q = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, q + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&s->hash, hash, memory_order_relaxed);
    atomic_store_explicit(&s->expires, expires, memory_order_relaxed);
    if (pw)
        for (size_t j = 0; j < PAYLOAD_WORDS; j++)
            atomic_store_explicit(&s->w[j], pw->w[j], memory_order_relaxed);
    /* seq only grows (never back to 0), so a reader cannot mistake a slot
     * rewritten during its copy for the one it started with. */
    atomic_store_explicit(&s->seq, q + 2, memory_order_release);
}

static void put(tt__cache *c, const uint64_t *generation, const tt_key_v2 *key, const tt_lookup_result *res,
                int64_t expires_ns) {
    payload_words pw;
    memset(&pw, 0, sizeof pw);
    /* Copy field by field so the stored key has no stray bytes after the
     * ids' NULs (compare stays strncmp-based anyway). */
    pw.p.key.dtype = key->dtype;
    pw.p.key.head_dim = key->head_dim;
    pw.p.key.causal = key->causal;
    pw.p.key.group = key->group;
    pw.p.key.seqlen_q = key->seqlen_q;
    pw.p.key.seqlen_k = key->seqlen_k;
    memcpy(pw.p.key.gpu, key->gpu, strnlen(key->gpu, TT_ID_MAX - 1));
    memcpy(pw.p.key.rev, key->rev, strnlen(key->rev, TT_ID_MAX - 1));
    pw.p.res = *res;
    uint64_t h = tt__cache_hash(key);
    uint64_t base = set_of(c, h);

    pthread_mutex_lock(&c->wlock);
    if (generation && *generation != atomic_load_explicit(&c->generation, memory_order_relaxed)) {
        pthread_mutex_unlock(&c->wlock); /* cleared since the answer was asked for */
        return;
    }
    int victim = -1;
    for (int i = 0; i < TT_CACHE_WAYS && victim < 0; i++) {
        slot *s = &c->slots[base + i];
        if (atomic_load_explicit(&s->hash, memory_order_relaxed) != h) continue;
        payload_words cur;
        for (size_t j = 0; j < PAYLOAD_WORDS; j++)
            cur.w[j] = atomic_load_explicit(&s->w[j], memory_order_relaxed);
        if (key_equal(&cur.p.key, key)) victim = i;
    }
    for (int i = 0; i < TT_CACHE_WAYS && victim < 0; i++)
        if (atomic_load_explicit(&c->slots[base + i].hash, memory_order_relaxed) == 0) victim = i;
    if (victim < 0) { /* the oldest entry of the set goes */
        victim = 0;
        for (int i = 1; i < TT_CACHE_WAYS; i++)
            if (c->stamp[base + i] < c->stamp[base + victim]) victim = i;
    }
    c->stamp[base + victim] = ++c->clock;
    slot_write(&c->slots[base + victim], h, expires_ns, &pw);
    pthread_mutex_unlock(&c->wlock);
}

void tt__cache_put(tt__cache *c, const tt_key_v2 *key, const tt_lookup_result *res, int64_t expires_ns) {
    put(c, NULL, key, res, expires_ns);
}

void tt__cache_put_since(tt__cache *c, uint64_t generation, const tt_key_v2 *key, const tt_lookup_result *res,
                         int64_t expires_ns) {
    put(c, &generation, key, res, expires_ns);
}

uint64_t tt__cache_generation(tt__cache *c) {
    return atomic_load_explicit(&c->generation, memory_order_acquire);
}

void tt__cache_clear(tt__cache *c) {
    pthread_mutex_lock(&c->wlock);
    atomic_fetch_add_explicit(&c->generation, 1, memory_order_release);
    for (uint64_t i = 0; i < nslots(c); i++)
        if (atomic_load_explicit(&c->slots[i].hash, memory_order_relaxed) != 0)
            slot_write(&c->slots[i], 0, 0, NULL);
    pthread_mutex_unlock(&c->wlock);
}

void tt__cache_after_fork(tt__cache *c) {
    pthread_mutex_init(&c->wlock, NULL); /* the old one may be held by a thread that is gone */
    for (uint64_t i = 0; i < nslots(c); i++) {
        slot *s = &c->slots[i];
        uint64_t q = atomic_load_explicit(&s->seq, memory_order_relaxed);
        if (!(q & 1)) continue;
        atomic_store_explicit(&s->hash, 0, memory_order_relaxed);
        atomic_store_explicit(&s->seq, q + 1, memory_order_relaxed); /* done, and empty */
    }
}
