/*
 * tiletune: tuned scaled-dot-product attention, served by a daemon.
 *
 * One header for applications. Every function returns 0 (or a documented
 * positive status) on success and a negative TT_ERR_* code on failure;
 * tt_strerror() names the code. Out-parameters are written only on success.
 * The library never logs, never aborts and never blocks past the time-out
 * it was given. Handles are opaque; the caller owns what it opens and frees
 * it with the matching *_close/_free, which accept NULL.
 *
 * ABI: functions are never changed once released; new behaviour comes as a
 * new function (tt_x_v2). Structs that cross the ABI carry reserved space.
 */
#ifndef TILETUNE_H
#define TILETUNE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TT_VERSION_MAJOR 0
#define TT_VERSION_MINOR 1
#define TT_VERSION_PATCH 0
#define TT_VERSION_STRING "0.1.0"
/* Version of the daemon's line protocol (docs/protocol.md). */
#define TT_PROTOCOL_VERSION 1

#if defined(TT_BUILDING_LIBRARY)
#define TT_EXPORT __attribute__((visibility("default")))
#else
#define TT_EXPORT
#endif

/* ---- status codes ------------------------------------------------------ */

/* tt_lookup: the daemon could not be asked (down, slow, refused); the
 * result holds the built-in default and match == TT_MATCH_DEFAULT. */
#define TT_FALLBACK 1

enum {
    TT_OK = 0,
    TT_ERR_INVAL = -1,       /* an argument is invalid */
    TT_ERR_NOMEM = -2,       /* out of memory */
    TT_ERR_IO = -3,          /* a system call failed */
    TT_ERR_PROTO = -4,       /* the peer broke the protocol */
    TT_ERR_TIMEOUT = -5,     /* no answer within the time-out */
    TT_ERR_NODAEMON = -6,    /* the daemon cannot be reached */
    TT_ERR_UNSUPPORTED = -7, /* valid, but not supported (dtype, head_dim) */
    TT_ERR_NOGPU = -8,       /* no usable GPU or driver */
    TT_ERR_CUDA = -9,        /* the CUDA driver reported an error */
    TT_ERR_COMPILE = -10,    /* NVRTC could not compile a variant */
    TT_ERR_PERM = -11,       /* the daemon refused: not allowed */
    TT_ERR_BUSY = -12,       /* the daemon refused: too many connections */
    TT_ERR_NOTFOUND = -13,   /* no such job, record or file */
    TT_ERR_DB = -14,         /* the tuning database failed */
    TT_ERR_RANGE = -15,      /* a number is out of range */
    TT_ERR_CORRUPT = -16,    /* a file or cache entry is corrupt */
    TT_ERR_VERSION = -17,    /* made by a newer version of tiletune */
    TT_ERR_REMOTE = -18,     /* the daemon answered ERR (see its message) */
};

/* A static, never-NULL description of a status code. */
TT_EXPORT const char *tt_strerror(int code);

/* ---- configs: one schedule of the kernel -------------------------------- */

typedef enum tt_dtype { TT_DTYPE_FP16 = 0, TT_DTYPE_BF16 = 1 } tt_dtype;
/* mma: mma.sync, sm_80 and later; wgmma: Hopper warpgroup MMA, sm_90 only;
 * ws: Hopper warp-specialized (TMA, producer/consumer warpgroups), sm_90
 * only; splitkv: inference shapes (split-KV, packed GQA, small tiles, paged
 * and variable-length inputs), mma.sync, sm_80 and later (docs/kernels.md). */
typedef enum tt_family {
    TT_FAMILY_MMA = 0,
    TT_FAMILY_WGMMA = 1,
    TT_FAMILY_WS = 2,
    TT_FAMILY_SPLITKV = 3,
} tt_family;
typedef enum tt_layout { TT_LAYOUT_PAD = 0, TT_LAYOUT_SWIZZLE = 1 } tt_layout;

/*
 * The schedule knobs (src/common/knobs.def is the list; its comment says
 * what each is). A plain value: copy it freely.
 */
typedef struct tt_config {
    int32_t family;     /* tt_family */
    int32_t block_m;    /* query rows per CTA */
    int32_t block_n;    /* keys per K/V tile */
    int32_t warps;      /* warps per CTA */
    int32_t stages;     /* K/V tiles in flight (1 = no prefetch) */
    int32_t layout;     /* tt_layout of K/V/Q in shared memory */
    int32_t q_in_regs;  /* 1: Q fragments stay in registers */
    int32_t split_ctas; /* splitkv: target CTAs per SM the split count is
                           derived from at launch (0: one full wave) */
    int32_t reserved[8];
} tt_config;

/* Longest canonical text of a config, NUL included. */
#define TT_CONFIG_TEXT_MAX 160

/*
 * Canonical text: "family=mma,block_m=128,..." with every knob in the
 * order of knobs.def. Writes at most `len` bytes including the NUL;
 * returns the length written (without the NUL) or TT_ERR_RANGE if `len`
 * is too small.
 */
TT_EXPORT int tt_config_format(const tt_config *cfg, char *buf, size_t len);
/* Parses the canonical text (knobs in any order, each exactly once). */
TT_EXPORT int tt_config_parse(const char *text, tt_config *out);
/* 1 if the two configs have the same knobs, else 0. */
TT_EXPORT int tt_config_equal(const tt_config *a, const tt_config *b);

/* ---- keys and lookups ---------------------------------------------------- */

#define TT_ID_MAX 33 /* a GPU fingerprint or kernel revision: 32 hex + NUL */

/* Causal masks (tt_key.causal, tt_sdpa_args.causal). Top-left is
 * PyTorch's is_causal: query i sees keys j <= i. Bottom-right is
 * flash-attn's: query i sees keys j <= i + seqlen_k - seqlen_q (decode with
 * several query tokens, chunked prefill). They agree when the seqlens do. */
#define TT_CAUSAL_NONE 0
#define TT_CAUSAL_TOP_LEFT 1
#define TT_CAUSAL_BOTTOM_RIGHT 2

/* The released key: its GQA group is 1 (heads_q == heads_kv). New code
 * uses tt_key_v2 and the _v2 functions. */
typedef struct tt_key {
    tt_dtype dtype;
    int32_t head_dim; /* 32, 64, 96, 128 or 256 */
    int32_t causal;   /* TT_CAUSAL_*: 0 none, 1 top-left, 2 bottom-right (tt_sdpa_args) */
    int64_t seqlen_q; /* >= 1 */
    int64_t seqlen_k; /* >= 1 */
    /* GPU fingerprint (hex); "" = the daemon's own GPU. */
    char gpu[TT_ID_MAX];
    /* Kernel revision (hex); "" = this library's kernel source. */
    char rev[TT_ID_MAX];
} tt_key;

/*
 * A key with its GQA group: the query heads that share one K/V head
 * (heads_q / heads_kv). Kernels that pack a group's query rows into one
 * tile run decode and short queries fastest at a schedule that depends on
 * it, so it is part of what is tuned (docs/tuning.md). The fields up to
 * rev are tt_key's, in its order. Zero it before filling it in.
 */
typedef struct tt_key_v2 {
    tt_dtype dtype;
    int32_t head_dim;
    int32_t causal;
    int64_t seqlen_q;
    int64_t seqlen_k;
    char gpu[TT_ID_MAX];
    char rev[TT_ID_MAX];
    int32_t group;       /* 1..256; 0 reads as 1 */
    int32_t reserved[7]; /* must be 0 */
} tt_key_v2;

typedef enum tt_match {
    TT_MATCH_EXACT = 0,   /* tuned for this very key */
    TT_MATCH_NEAREST = 1, /* tuned for the nearest key of the same regime */
    TT_MATCH_DEFAULT = 2, /* nothing tuned: the built-in default */
} tt_match;

typedef struct tt_lookup_result {
    tt_config config;
    tt_match match;
    double tflops;    /* measured TFLOP/s of the record; 0 if none */
    int64_t seqlen_q; /* the key the record was tuned for */
    int64_t seqlen_k;
    int32_t group; /* its GQA group (0 from a daemon before groups: 1) */
    int32_t reserved32;
    int64_t reserved[3];
} tt_lookup_result;

/* The name of a match kind: "exact", "nearest", "default". */
TT_EXPORT const char *tt_match_name(tt_match m);

/* The built-in default config for a key (no daemon involved). */
TT_EXPORT int tt_config_default(const tt_key *key, tt_config *out);
TT_EXPORT int tt_config_default_v2(const tt_key_v2 *key, tt_config *out);

/* ---- the client ----------------------------------------------------------- */

typedef struct tt_client tt_client;

/*
 * Opens a client of the daemon at `socket_path` (NULL: $TILETUNE_SOCKET,
 * else /run/tiletune/tiletune.sock). Connects lazily: opening never fails
 * because the daemon is down. `timeout_ms` bounds every call (<= 0: 100).
 * Thread-safe: one client may be shared by all threads of a process.
 */
TT_EXPORT int tt_client_open(const char *socket_path, int timeout_ms, tt_client **out);
TT_EXPORT void tt_client_close(tt_client *c);

/*
 * The best config for `key`. Returns 0 with the daemon's answer (or a
 * cached copy of it), TT_FALLBACK with the built-in default when the
 * daemon could not be asked, or a negative code for an invalid key.
 */
TT_EXPORT int tt_lookup(tt_client *c, const tt_key *key, tt_lookup_result *out);
/* The same for a key with its GQA group; tt_lookup asks for group 1. */
TT_EXPORT int tt_lookup_v2(tt_client *c, const tt_key_v2 *key, tt_lookup_result *out);

/* Counters of one client since it was opened (cheap to read, approximate
 * while other threads are looking up). lookups = cache_hits +
 * daemon_answers + fallbacks + key_errors. */
typedef struct tt_client_stats {
    uint64_t cache_hits;     /* answered from the per-process cache */
    uint64_t daemon_answers; /* answered by the daemon (a round trip) */
    uint64_t fallbacks;      /* answered with the built-in default (TT_FALLBACK) */
    uint64_t connects;       /* connections made to the daemon */
    uint64_t failures;       /* failed attempts, each starting a back-off */
    uint64_t lookups;        /* tt_lookup calls on this client */
    uint64_t key_errors;     /* calls refused with a negative code (an invalid key) */
    int64_t last_failure;    /* TT_ERR_* of the latest failed attempt (why the
                                fallbacks since came); 0: none yet */
    uint64_t reserved[8];
} tt_client_stats;

TT_EXPORT int tt_client_get_stats(tt_client *c, tt_client_stats *out);

/* Drops the cached answers, so the next lookups ask the daemon (e.g. after
 * a tune). Answers of match exact are otherwise kept for the life of the
 * client; nearest and default ones expire after about a second. */
TT_EXPORT void tt_client_flush(tt_client *c);

/* ---- the kernel ------------------------------------------------------------ */

/*
 * Arguments of tt_sdpa_fwd: torch.nn.functional.scaled_dot_product_attention
 * on device memory. Tensors are [batch, heads, seqlen, head_dim] addressed
 * by strides in elements (batch, head, row); the last dimension is
 * contiguous, so a [batch, seqlen, heads, head_dim] tensor is passed as is
 * with its strides swapped. Pointers must be 16-byte aligned and every
 * stride a multiple of 8 elements. Zero the struct before filling it in:
 * reserved fields must be 0.
 */
typedef struct tt_sdpa_args {
    const void *q, *k, *v; /* device pointers, fp16 or bf16 */
    void *o;               /* output, the shape of q, same dtype */
    float *lse;            /* optional: log-sum-exp per row (natural log, scale
                              included), fp32 [batch, heads_q, seqlen_q] */
    int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3]; /* batch, head, row */
    int64_t lse_stride[2]; /* batch, head; {0, 0}: packed [batch, heads_q, seqlen_q] */
    int32_t dtype;         /* tt_dtype */
    int32_t causal;        /* 0: none; 1: query i sees keys j <= i (top-left,
                              PyTorch's is_causal); 2: j <= i + seqlen_k -
                              seqlen_q (bottom-right, flash-attn's): with
                              seqlen_q > seqlen_k the first rows see no key
                              and get O = 0, LSE = -inf */
    float scale;           /* softmax scale, > 0; 0: 1/sqrt(head_dim) */
    int32_t reserved0;
    /* The schedule: NULL = the tuned config for this key, asked from the
     * daemon (process-wide client, cached), else the built-in default. */
    const tt_config *config;
    void *stream; /* CUstream; NULL: the legacy default stream */
    int64_t reserved[8];
} tt_sdpa_args;

/*
 * Launches the SDPA forward kernel on a->stream (asynchronous, like any
 * kernel launch; the first call for a variant compiles or loads it from the
 * cubin cache and may take a second). Every argument is checked before any
 * launch: TT_ERR_INVAL (null or misaligned pointer, bad stride or size,
 * heads_q not a multiple of heads_kv, a config illegal for the head dim),
 * TT_ERR_UNSUPPORTED (dtype, head_dim), TT_ERR_RANGE (a config over the
 * device's shared memory, a size over the grid's limits), TT_ERR_NOGPU (no
 * driver or device), TT_ERR_COMPILE, TT_ERR_CUDA; a message in err.
 */
TT_EXPORT int tt_sdpa_fwd(const tt_sdpa_args *a, char *err, size_t errlen);

/* The kernel revision in use (hex): the hash of the embedded kernel source,
 * or of the file named by $TILETUNE_KERNEL_SOURCE. */
TT_EXPORT int tt_kernel_revision(char out[TT_ID_MAX]);

/*
 * The variant space for `key` on CUDA device `device`: the configs the
 * tuner measures, in table order, each compiled (or found in the cubin
 * cache) and checked to fit the device without register spills. Writes up
 * to `cap` configs and the space's size in *count (call with cap 0 to size
 * the array).
 */
TT_EXPORT int tt_sdpa_variants(const tt_key *key, int device, tt_config *out, size_t cap, size_t *count,
                               char *err, size_t errlen);

/* The same for a key with its GQA group: the packed-row families' tiles
 * follow seqlen_q x group (a decode token of group 4 is 4 rows), so this
 * is the space the tuner measures for a GQA key. A group outside 0..256
 * (0 reads as 1) is TT_ERR_RANGE, before the device is asked. */
TT_EXPORT int tt_sdpa_variants_v2(const tt_key_v2 *key, int device, tt_config *out, size_t cap, size_t *count,
                                  char *err, size_t errlen);

/*
 * The config tt_sdpa_fwd runs for `key` on CUDA device `device` when
 * nothing is tuned for it: the device's own built-in default for the
 * key's regime (sm_90: splitkv for decode, ws for prefill), else
 * tt_config_default's portable one. The _v2 form takes the GQA group,
 * which the decode and chunk defaults depend on (packed rows); the first
 * form is group 1.
 */
TT_EXPORT int tt_sdpa_default_config(const tt_key *key, int device, tt_config *out, char *err, size_t errlen);
TT_EXPORT int tt_sdpa_default_config_v2(const tt_key_v2 *key, int device, tt_config *out, char *err,
                                        size_t errlen);
/*
 * The config tt_sdpa_fwd runs with nothing tuned for a call of `batch`
 * sequences and `heads_q` query heads (either 0: unknown, as _v2): the key
 * has no batch, but a chunk's best family does. On sm_90 a chunk (17 or
 * more query tokens, seqlen_k >= 4 seqlen_q), or a group-1 decode over at
 * most 1024 keys, runs splitkv while its dense tiles (64 rows of one query
 * head) are fewer than the SMs, and a dense default (wgmma, or ws past 64
 * tokens) once they fill the GPU.
 */
TT_EXPORT int tt_sdpa_default_config_at(const tt_key_v2 *key, int device, int64_t batch, int64_t heads_q,
                                        tt_config *out, char *err, size_t errlen);

/* ---- inference: KV caches and variable-length batches ------------------------ */

/*
 * Both entry points below run family splitkv (config NULL: the tuned
 * splitkv config for the key if the daemon has one, else the built-in
 * default; a config of another family is refused). When the key range is
 * split across CTAs (few sequences x KV heads for the GPU), partial results
 * go to a workspace and a second kernel merges them. The workspace is
 * `workspace` (device memory, 256-byte aligned, `workspace_bytes` long) when
 * given; else the library's own buffer for (context, stream), grown as
 * needed and kept for the process. While the stream is being captured
 * into a CUDA graph a buffer large enough is used (and never freed: the
 * graph holds its address); without one, the graph allocates and frees its
 * own workspace at each replay (stream-ordered allocation nodes).
 * The *_workspace functions give the bytes a call needs (0: none).
 *
 * Device-side lengths and page numbers are trusted (checking them would
 * need a synchronization); lengths are clamped to the maxima passed here,
 * so a bad length gives a wrong row, never an out-of-bounds read of K/V
 * beyond seqlen_k rows.
 */

/* flash_attn_with_kvcache: q [batch, seqlen_q, heads_q, head_dim]; the cache
 * contiguous [batch, seqlen_k, heads_kv, head_dim] or paged [num_pages,
 * page_size, heads_kv, head_dim] with block_table [batch, max_pages]; all
 * by strides (batch, head, row; for a paged cache the first is the page
 * stride). Zero the struct before filling it in. With no config, a
 * contiguous cache and no cache_seqlens, the call runs where tt_sdpa_fwd
 * would run the same tensors (a dense family for a long chunk; then no
 * workspace), unless some row sees no key. */
typedef struct tt_sdpa_kvcache_args {
    const void *q;
    const void *k_cache, *v_cache;
    void *o;                      /* the shape of q, same dtype */
    float *lse;                   /* optional: [batch, heads_q, seqlen_q] by lse_stride */
    const int32_t *cache_seqlens; /* optional, device [batch]: keys of each sequence
                                     (<= seqlen_k); NULL: seqlen_k for all */
    const int32_t *block_table;   /* paged: device [batch, max_pages]; NULL: contiguous */
    int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    int64_t page_size;          /* paged: keys per page, a power of two >= 8 */
    int64_t num_pages;          /* paged: pages in k_cache / v_cache */
    int64_t max_pages;          /* paged: entries per block_table row (seqlen_k <= max_pages * page_size) */
    int64_t block_table_stride; /* paged: elements between rows; 0: max_pages */
    int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3]; /* batch (page), head, row */
    int64_t lse_stride[2]; /* batch, head; {0, 0}: packed [batch, heads_q, seqlen_q] */
    int32_t dtype;
    int32_t causal; /* 0; 1 top-left (PyTorch); 2 bottom-right: query i sees keys j <= i + Lk - Lq */
    float scale;    /* > 0; 0: 1/sqrt(head_dim) */
    int32_t reserved0;
    const tt_config *config;
    void *stream;
    void *workspace;
    size_t workspace_bytes;
    int64_t reserved[8];
} tt_sdpa_kvcache_args;

TT_EXPORT int tt_sdpa_fwd_kvcache(const tt_sdpa_kvcache_args *a, char *err, size_t errlen);
TT_EXPORT int tt_sdpa_fwd_kvcache_workspace(const tt_sdpa_kvcache_args *a, size_t *bytes, char *err,
                                            size_t errlen);

/* flash_attn_varlen_func: q [total_q, heads_q, head_dim], k/v [total_k,
 * heads_kv, head_dim]; sequence b is rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]
 * of q (device int32 [batch + 1], nondecreasing, from 0), likewise for k/v.
 * Strides (head, row). A sequence may be empty. With no config, sequences
 * long enough for the dense default's family (sm_90: more than 1024 query
 * rows x GQA group) run there in a second launch, alongside splitkv's: on
 * the library's side stream of `stream` (one per context and stream, made
 * to wait for `stream` first and joined back into it before the call
 * returns, so later work on `stream` sees every row; a stream capture
 * records the two as parallel branches; on the per-thread default
 * stream, or with TILETUNE_SIDE_STREAM=0 in the environment, one after
 * the other on `stream`). That launch reads whole key tiles, so rows of
 * k/v past cu_seqlens_k[batch] must hold finite values (they are
 * multiplied by 0). */
typedef struct tt_sdpa_varlen_args {
    const void *q, *k, *v;
    void *o;    /* the shape of q */
    float *lse; /* optional: [heads_q, total_q] by lse_stride */
    const int32_t *cu_seqlens_q, *cu_seqlens_k;
    int64_t batch, heads_q, heads_kv, total_q, total_k, max_seqlen_q, max_seqlen_k, head_dim;
    int64_t q_stride[2], k_stride[2], v_stride[2], o_stride[2]; /* head, row */
    int64_t lse_stride[2]; /* head, row; {0, 0}: packed [heads_q, total_q] */
    int32_t dtype;
    int32_t causal; /* 0, 1, 2 as above, per sequence */
    float scale;
    int32_t reserved0;
    const tt_config *config;
    void *stream;
    void *workspace;
    size_t workspace_bytes;
    int64_t reserved[8];
} tt_sdpa_varlen_args;

TT_EXPORT int tt_sdpa_fwd_varlen(const tt_sdpa_varlen_args *a, char *err, size_t errlen);
TT_EXPORT int tt_sdpa_fwd_varlen_workspace(const tt_sdpa_varlen_args *a, size_t *bytes, char *err,
                                           size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* TILETUNE_H */
