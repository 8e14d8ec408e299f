/* Family splitkv's launch: the split count, the workspace of partial
 * results, the fused or separate merge, and the KV-cache and varlen
 * arguments. Its program is the one kernel source (sdpa.cu with
 * TT_MAINLOOP "splitkv/mainloop.cuh"), compiled and cached as every
 * family's is. */
#include "kernels/splitkv/splitkv.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/key.h"
#include "kernels/cuda_api.h"
#include "kernels/family.h"
#include "kernels/launch.h"

#define GRID_YZ_MAX 65535

/* CTAs of `k` one SM holds: shared memory (the SM has the opt-in limit
 * plus 1 KB, each CTA 1 KB reserved), registers (64 K, 256 per warp
 * granule), threads (2048). */
static int ctas_per_sm(const tt__kernel *k) {
    const int threads = k->threads, regs = (k->report.registers + 7) / 8 * 8;
    const long smem = (long)k->smem + k->report.static_smem + 1024;
    int fit = (int)((k->limits.smem_optin + 1024) / smem);
    const int by_regs = regs > 0 ? 65536 / (regs * threads) : fit;
    if (by_regs < fit) fit = by_regs;
    if (2048 / threads < fit) fit = 2048 / threads;
    return fit < 1 ? 1 : fit;
}

/* ---- the library's workspace, per (context, stream) ---------------------------- */

typedef struct wsbuf {
    struct wsbuf *next;
    CUcontext ctx;
    CUstream stream;
    CUdeviceptr ptr;
    size_t bytes;
    size_t ctr_cap; /* the first ctr_cap bytes: merge counters, always zero between launches */
    int captured;   /* a graph holds this address: never freed */
} wsbuf;

/* Held from finding the buffer to the last launch that uses it, so another
 * thread on the same stream cannot free it in between. */
static pthread_mutex_t ws_lock = PTHREAD_MUTEX_INITIALIZER;
static wsbuf *ws_head, *ws_retired;

#define MIB ((size_t)1 << 20)
#define ROUND_MIB(x) (((x) + MIB - 1) & ~(MIB - 1))

/* The (context, stream)'s buffer with at least ctr bytes of zeroed counters
 * at its start and parts bytes after them; 1 (nothing allocated) when the
 * stream is being captured and has no such buffer. The counter region has a fixed
 * place for the buffer's life (its kernels leave it zero), so no call's
 * partial results ever land where another call's counters are. */
static int ws_get_locked(const tt__cuda *cu, CUcontext ctx, CUstream stream, size_t ctr, size_t parts,
                         CUdeviceptr *out, size_t *ctr_cap, char *err, size_t errlen) {
    wsbuf *w = ws_head;
    while (w && !(w->ctx == ctx && w->stream == stream)) w = w->next;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = CUDA_SUCCESS;
    /* The legacy default stream (PyTorch's default) is never captured
     * itself, so it is not asked: on the H200's host the bench read split
     * calls up to 2.5 us slower there than on a stream of their own,
     * unsplit ones alike, and this query is the one driver call a split
     * adds. Under a global-mode capture elsewhere the launch on it fails
     * as before. */
    if (stream != NULL && stream != CU_STREAM_LEGACY && (r = cu->StreamIsCapturing(stream, &st)))
        return tt__cuda_fail(cu, r, "cuStreamIsCapturing", err, errlen);
    const int capturing = st != CU_STREAM_CAPTURE_STATUS_NONE;
    if (w && w->ctr_cap >= ctr && w->bytes - w->ctr_cap >= parts) {
        if (capturing) w->captured = 1;
        *out = w->ptr;
        *ctr_cap = w->ctr_cap;
        return 0;
    }
    if (capturing) return 1; /* the caller takes the graph's own memory */
    if (!w) {
        if (!(w = calloc(1, sizeof *w))) return tt__fail(TT_ERR_NOMEM, err, errlen, "out of memory");
        w->ctx = ctx;
        w->stream = stream;
        w->next = ws_head;
        ws_head = w;
    }
    if (w->ptr) {
        if (w->captured) {
            /* a graph may replay with this address: keep it for good */
            wsbuf *old = calloc(1, sizeof *old);
            if (!old) return tt__fail(TT_ERR_NOMEM, err, errlen, "out of memory");
            *old = *w;
            old->next = ws_retired;
            ws_retired = old;
        } else {
            /* launches queued on this stream may still read it */
            if ((r = cu->StreamSynchronize(stream)))
                return tt__cuda_fail(cu, r, "cuStreamSynchronize", err, errlen);
            cu->MemFree(w->ptr);
        }
        w->ptr = 0;
        w->bytes = w->ctr_cap = 0;
        w->captured = 0;
    }
    /* a quarter more, in whole MiB, so slowly growing batches do not
     * reallocate every call; counters for at least 64 K groups */
    const size_t cap = ROUND_MIB(ctr > (256u << 10) ? ctr + ctr / 4 : (256u << 10));
    const size_t want = cap + ROUND_MIB(parts + parts / 4);
    if ((r = cu->MemAlloc(&w->ptr, want))) {
        w->ptr = 0;
        return tt__cuda_fail(cu, r, "cuMemAlloc(split-KV workspace)", err, errlen);
    }
    if ((r = cu->MemsetD8(w->ptr, 0, cap))) {
        cu->MemFree(w->ptr);
        w->ptr = 0;
        return tt__cuda_fail(cu, r, "cuMemsetD8(split-KV counters)", err, errlen);
    }
    w->bytes = want;
    w->ctr_cap = cap;
    *out = w->ptr;
    *ctr_cap = cap;
    return 0;
}

/* The launch's A/B switches, read from the environment once:
 * - TILETUNE_SPLITKV_FUSED=0: the separate combine kernel instead of the
 *   merge inside the main kernel (its last split).
 * - TILETUNE_SPLITKV_BALANCE=1: the balanced grid (splitkv/params.h);
 *   correct on the H200 but not faster (within 2% at batch 8-64,
 *   1.07-1.45x slower at batch 1; docs/perf.md), so splits of whole units
 *   stay the default.
 * - TILETUNE_SPLITKV_VARLEN=host: varlen splits from the host's wave share
 *   of its estimate, every sequence counted as one query block, instead of
 *   the batch's work (the one-wave rule where every sequence is one query
 *   block, a planner on the device where some are several).
 * - TILETUNE_SPLITKV_TRIM=0: every stage's shared memory for a split of
 *   fewer tiles than the ring holds, instead of the slots it fills (one
 *   wave where two were, as a 4k-key decode split 32 ways on 16x128 s3
 *   d128 tiles: 70 KB a CTA, not 200; neutral on the H200, docs/perf.md).
 * - TILETUNE_SPLITKV_ROTATE=0 or 1: each CTA of a contiguous cache walks
 *   its run of tiles from the first (0), or starts 37c tiles in (1;
 *   params.h; at most two splits a unit), whatever the device
 *   (tt__splitkv_rotates decides where it is unset).
 * - TILETUNE_SPLITKV_CLASS_ROWS=R: a varlen batch's short class holds
 *   sequences of at most R packed rows (tt__splitkv_class_q); 0: one
 *   launch on one tile for all.
 * - TILETUNE_SPLITKV_PART_PLAN=0: a varlen launch of part of the batch
 *   whose sequences are one query block each takes its splits from the
 *   host's count of the whole batch's keys, not the planner's of its own.
 * - TILETUNE_SPLITKV_LONG_PAGE=P: pages of at least P tokens keep a d128
 *   decode's 128-key tile (tt__splitkv_default_paged). */
static pthread_once_t switches_once = PTHREAD_ONCE_INIT;
static int fused_merge = 1, balance_grid = 0, varlen_device = 1, trim_smem = 1, rotate_runs = -1,
           part_plan = 1;
static int64_t class_rows = TT_SPLITKV_CLASS_ROWS, long_page = TT_SPLITKV_LONG_PAGE;
static int env_is(const char *name, const char *value) {
    const char *e = getenv(name);
    return e && strcmp(e, value) == 0;
}
static void switches_read(void) {
    fused_merge = !env_is("TILETUNE_SPLITKV_FUSED", "0");
    balance_grid = env_is("TILETUNE_SPLITKV_BALANCE", "1");
    varlen_device = !env_is("TILETUNE_SPLITKV_VARLEN", "host");
    trim_smem = !env_is("TILETUNE_SPLITKV_TRIM", "0");
    rotate_runs = env_is("TILETUNE_SPLITKV_ROTATE", "0")   ? 0
                  : env_is("TILETUNE_SPLITKV_ROTATE", "1") ? 1
                                                           : -1;
    part_plan = !env_is("TILETUNE_SPLITKV_PART_PLAN", "0");
    const char *e = getenv("TILETUNE_SPLITKV_CLASS_ROWS");
    if (e && *e) class_rows = strtoll(e, NULL, 10);
    if ((e = getenv("TILETUNE_SPLITKV_LONG_PAGE")) && *e) long_page = strtoll(e, NULL, 10);
}

int64_t tt__splitkv_class_rows(void) {
    pthread_once(&switches_once, switches_read);
    return class_rows;
}

int64_t tt__splitkv_long_page(void) {
    pthread_once(&switches_once, switches_read);
    return long_page;
}

/* ---- the launch ------------------------------------------------------------------ */

/* One launch, planned: the kernel, its grid and the workspace it needs. */
typedef struct plan {
    tt_splitkv_params p;
    const tt__kernel *k;
    unsigned gx, gy, gz;
    size_t ws_bytes;  /* a caller's workspace: counters, then the parts */
    size_t ctr_bytes; /* merge counters (fused merge), 256-byte aligned */
    size_t parts;     /* o_part, then lse_part at lse_off */
    size_t lse_off;   /* bytes from o_part to lse_part */
    size_t slot_off;  /* split_slots > 0: bytes from o_part to split_tiles_out */
    unsigned smem;    /* dynamic shared memory of the main kernel's launch */
} plan;

/* The most CTAs, in waves of the SMs' slots, a varlen launch of part of the
 * batch spreads its splits over: its grid holds every sequence's splits,
 * most of them for sequences of the other part or past a short sequence's
 * count, which exit at once; 8 waves of 16x128 CTAs, one an SM, leave room
 * for 16 splits of 8 sequences x 8 KV heads. */
#define TT_SPLITKV_PART_WAVES 8

/* The page size the program for `p`'s cache is built for
 * (tt__variant.page_size): its pages' tokens, 0 for a contiguous cache. */
static int32_t program_page_size(const tt_splitkv_params *p) {
    return p->block_table ? (int32_t)1 << p->page_shift : 0;
}

/* The split and the workspace of `p` (all else filled) with loaded `k`;
 * rows_max: packed rows of the longest sequence. */
static int plan_for(const tt__kernel *k, const tt_splitkv_params *p, int64_t rows_max, int64_t total_k,
                    plan *pl, char *err, size_t errlen) {
    memset(pl, 0, sizeof *pl);
    /* a program without the call's copy path, or for pages of another
     * size, would read the wrong memory */
    const int32_t want = program_page_size(p);
    if (k->variant.page_size != want) {
        if (!want || !k->variant.page_size)
            return tt__fail(TT_ERR_INVAL, err, errlen, "the splitkv program for a %s KV cache got a %s one",
                            k->variant.page_size ? "paged" : "contiguous", want ? "paged" : "contiguous");
        return tt__fail(TT_ERR_INVAL, err, errlen,
                        "the splitkv program for pages of %d tokens got a cache of pages of %d",
                        (int)k->variant.page_size, (int)want);
    }
    pl->p = *p;
    pl->k = k;
    const tt_config *c = &k->variant.config;
    const int64_t qblocks = (rows_max + c->block_m - 1) / c->block_m;
    const int64_t max_tiles = ((int64_t)p->seqlen_k + c->block_n - 1) / c->block_n;
    int splits;
    const int fit = ctas_per_sm(k);
    pthread_once(&switches_once, switches_read);
    /* One query block a sequence, the same keys for all (a KV cache's
     * per-sequence lengths only shorten some units: their CTAs skip the
     * tiles past the end): the balanced grid, when it is one. */
    int bal_ctas = 0;
    /* the plan's to set, whatever the caller left */
    pl->p.bal_ctas = pl->p.bal_tiles = pl->p.split_slots = pl->p.plan = 0;
    pl->p.split_tiles_out = NULL;
    if (balance_grid && total_k == 0 && qblocks == 1 && c->block_m <= TT_SPLITKV_BAL_MAX_BM) {
        /* the tiles the kernel visits for the block's last row: top-left
         * causal stops at key seqlen_q - 1 */
        const int64_t kv_end =
            k->variant.causal == 1 && p->seqlen_q < p->seqlen_k ? p->seqlen_q : p->seqlen_k;
        const int64_t tiles = (kv_end + c->block_n - 1) / c->block_n;
        const int s = tt__splitkv_balance(c, k->limits.sm_count, fit, (int64_t)p->batch * p->heads_kv, tiles,
                                          &bal_ctas);
        if (s > 0) {
            splits = s;
            pl->p.bal_ctas = bal_ctas;
            pl->p.bal_tiles = (int)tiles;
        }
    }
    if (bal_ctas == 0) {
        if (total_k > 0) {
            /* varlen: the host knows the batch's keys, not each sequence's;
             * one tiles-per-split for all gives each its share of the
             * splits (each sequence counted as one query block of tiles) */
            const int part = p->seq_min_q > 0 || p->seq_max_q > 0 || p->dense_min_q > 0;
            const int64_t slots = tt__splitkv_slots(c, k->limits.sm_count, fit);
            const int64_t cap = TT_SPLITKV_PART_WAVES * slots / ((int64_t)p->batch * p->heads_kv);
            if (qblocks == 1 && varlen_device && part && part_plan && cap >= 2) {
                /* A launch of part of the batch (a row class, or what a
                 * dense family leaves): the batch's keys overcount its
                 * own (a decode class of four sequences counted the
                 * batch's chunks too and ran 56 CTAs on 132 SMs at 2.3
                 * TB/s, the H200), so the planner counts them on the
                 * device, with no floor but the grid's: room for the
                 * splits of every candidate (params.h: at most
                 * CANDIDATES - 1 by the longest unit, slots / heads_kv
                 * by the batch's work), within PART_WAVES waves of CTAs
                 * (the rest exit at once). A batch too large for two
                 * splits a unit in them keeps the host's count. */
                int64_t most = (slots + p->heads_kv - 1) / p->heads_kv;
                if (most < TT_SKV_CANDIDATES - 1) most = TT_SKV_CANDIDATES - 1;
                if (most > cap) most = cap;
                if (most > TT_SPLITKV_MAX_SPLITS) most = TT_SPLITKV_MAX_SPLITS;
                const int64_t least = (max_tiles + most - 1) / most;
                splits = (int)((max_tiles + least - 1) / least);
                pl->p.split_tiles = (int)least;
                if (splits > 1) pl->p.split_slots = (int)slots;
            } else if (qblocks == 1 && varlen_device) {
                /* every sequence one query block: the fewest tiles a split
                 * that keep the CTAs to one wave (a wave's share made 144
                 * CTAs of 132 slots for four decode sequences on the
                 * H200, 1.5x) */
                pl->p.split_tiles = tt__splitkv_varlen_tiles(c, k->limits.sm_count, fit, total_k, p->batch,
                                                             p->heads_kv, max_tiles, &splits);
            } else {
                const int64_t work =
                    (int64_t)p->heads_kv * ((total_k + c->block_n - 1) / c->block_n + p->batch);
                pl->p.split_tiles =
                    tt__splitkv_split_tiles(c, k->limits.sm_count, fit, work, max_tiles, &splits);
                /* That undercounts a sequence of several query blocks (a
                 * 512-token chunk alone: 16 splits of 8 tiles, 1.44x its
                 * dense run on the H200): a planner CTA counts the real
                 * work on the device and takes at least these tiles a
                 * split, so the grid's splits bound its own. */
                if (splits > 1 && varlen_device)
                    pl->p.split_slots = (int)tt__splitkv_slots(c, k->limits.sm_count, fit);
            }
        } else {
            splits = tt__splitkv_splits(c, k->limits.sm_count, fit, (int64_t)p->batch * p->heads_kv * qblocks,
                                        max_tiles);
        }
    }
    if (qblocks * splits > INT32_MAX)
        return tt__fail(TT_ERR_RANGE, err, errlen, "%lld query blocks x %d splits are over the grid's limit",
                        (long long)qblocks, splits);
    pl->p.splits = splits;
    /* Runs of a whole unit or half of one (batch 8-64 x 8 KV heads)
     * stream faster from scattered starts on some memory systems
     * (tt__splitkv_rotates); batch 1's 16 runs a unit (adjacent ranges of
     * one cache) were 0.2-0.8% slower on every one. Paged caches are not
     * runs of addresses. */
    pl->p.rotate = tt__splitkv_rotates(&k->limits, rotate_runs) && p->block_table == NULL && bal_ctas == 0 &&
                   splits <= 2;
    pl->smem = (unsigned)k->smem;
    if (trim_smem && bal_ctas == 0 && pl->p.split_slots == 0) {
        /* the most tiles any CTA's split takes: the host's fixed count, or
         * the device's ceil(tiles / splits) of a sequence, whose tiles are
         * never more than max_tiles (lengths are clamped to the maxima) */
        const int64_t tps = pl->p.split_tiles > 0 ? pl->p.split_tiles : (max_tiles + splits - 1) / splits;
        pl->smem = (unsigned)tt__splitkv_ring_smem(c, k->variant.head_dim, tps);
    }
    pl->gx = bal_ctas > 0 ? (unsigned)bal_ctas : (unsigned)(qblocks * splits);
    pl->gy = bal_ctas > 0 ? 1u : (unsigned)p->heads_kv;
    pl->gz = bal_ctas > 0 ? 1u : (unsigned)p->batch;
    pl->p.qblocks = (int)qblocks;
    if (splits > 1) {
        const size_t rows = (size_t)splits * (size_t)p->tokens * (size_t)p->heads_q;
        /* The last split merges its rows with its own warps: right for a
         * few rows (decode: one or two a warp saved the second launch, 3-9%
         * on the H200); for 32-64 rows the one CTA's serial merge cost up
         * to 2.7x (speculative decode, Lq 16), so those get the combine
         * kernel, a warp per row across the GPU. */
        const int64_t rows_cta = rows_max < c->block_m ? rows_max : c->block_m;
        if (fused_merge && rows_cta <= 2 * (int64_t)c->warps && c->block_m <= TT_SPLITKV_FUSED_MAX_BM)
            pl->ctr_bytes = ((size_t)p->batch * p->heads_kv * qblocks * 4 + 255) & ~(size_t)255;
        pl->lse_off = (rows * (size_t)k->variant.head_dim * 4 + 255) & ~(size_t)255;
        pl->parts = pl->lse_off + rows * 4;
        if (pl->p.split_slots > 0) {
            pl->slot_off = (pl->parts + 255) & ~(size_t)255;
            pl->parts = pl->slot_off + 256;
        }
        pl->ws_bytes = pl->ctr_bytes + pl->parts;
    }
    return 0;
}

static int launch_locked(const tt__cuda *cu, plan *pl, CUstream stream, char *err, size_t errlen) {
    void *params[1] = {&pl->p};
    CUresult r;
    if (pl->p.split_slots > 0) {
        /* the varlen planner: one CTA of the combine kernel's entry */
        tt_splitkv_params q = pl->p;
        q.plan = 1;
        void *qp[1] = {&q};
        if ((r = cu->LaunchKernel(pl->k->fn2, 1, 1, 1, 128, 1, 1, 0, stream, qp, NULL)))
            return tt__cuda_fail(cu, r, "cuLaunchKernel(varlen planner)", err, errlen);
    }
    r = cu->LaunchKernel(pl->k->fn, pl->gx, pl->gy, pl->gz, (unsigned)pl->k->threads, 1, 1, pl->smem, stream,
                         params, NULL);
    if (r) return tt__cuda_fail(cu, r, "cuLaunchKernel", err, errlen);
    if (pl->p.splits > 1 && !pl->p.counters) {
        const int64_t rows = (int64_t)pl->p.tokens * pl->p.heads_q;
        r = cu->LaunchKernel(pl->k->fn2, (unsigned)((rows + 3) / 4), 1, 1, 128, 1, 1, 0, stream, params,
                             NULL);
        if (r) return tt__cuda_fail(cu, r, "cuLaunchKernel(combine)", err, errlen);
    }
    return 0;
}

/* The plan's pointers into a workspace: counters at `base`, the parts
 * (O, LSE, the varlen planner's slot) from `parts`. */
static void place(plan *pl, CUdeviceptr base, CUdeviceptr parts) {
    pl->p.counters = pl->ctr_bytes ? (int *)(uintptr_t)base : NULL;
    pl->p.o_part = (float *)(uintptr_t)parts;
    pl->p.lse_part = (float *)(uintptr_t)(parts + pl->lse_off);
    if (pl->p.split_slots > 0) pl->p.split_tiles_out = (int *)(uintptr_t)(parts + pl->slot_off);
}

/* The plan under stream capture with the graph's own workspace: allocated,
 * its counters zeroed, the launch, freed, all in stream order. */
static int run_captured(const tt__cuda *cu, plan *pl, CUstream stream, char *err, size_t errlen) {
    CUdeviceptr base = 0;
    CUresult r = cu->MemAllocAsync(&base, pl->ws_bytes, stream);
    if (r) return tt__cuda_fail(cu, r, "cuMemAllocAsync(split-KV workspace, under capture)", err, errlen);
    int rc = 0;
    if (pl->ctr_bytes && (r = cu->MemsetD8Async(base, 0, pl->ctr_bytes, stream)))
        rc = tt__cuda_fail(cu, r, "cuMemsetD8Async(split-KV counters)", err, errlen);
    if (rc == 0) {
        place(pl, base, base + pl->ctr_bytes);
        rc = launch_locked(cu, pl, stream, err, errlen);
    }
    if ((r = cu->MemFreeAsync(base, stream)) && rc == 0)
        rc = tt__cuda_fail(cu, r, "cuMemFreeAsync(split-KV workspace)", err, errlen);
    return rc;
}

/* Runs the plan in its kernel's context, with the caller's workspace or
 * the library's. */
static int run_plan(plan *pl, void *ws, size_t ws_len, CUstream stream, char *err, size_t errlen) {
    const tt__cuda *cu;
    int rc = tt__cuda_get(&cu, err, errlen);
    if (rc < 0) return rc;
    const CUcontext ctx = pl->k->ctx;
    CUresult r;
    int pushed;
    if ((rc = tt__ctx_enter(cu, ctx, &pushed, err, errlen)) < 0) return rc;
    const int own = pl->ws_bytes > 0 && !ws;
    if (pl->ws_bytes > 0) {
        CUdeviceptr base = (CUdeviceptr)(uintptr_t)ws, parts;
        if (ws && ((uintptr_t)ws % 256 != 0 || ws_len < pl->ws_bytes)) {
            rc = tt__fail(TT_ERR_RANGE, err, errlen,
                          "workspace of %zu bytes at %p: this call needs %zu, 256-byte aligned", ws_len, ws,
                          pl->ws_bytes);
            goto out;
        }
        if (own) {
            size_t cap = 0;
            pthread_mutex_lock(&ws_lock);
            if ((rc = ws_get_locked(cu, ctx, stream, pl->ctr_bytes, pl->parts, &base, &cap, err, errlen)) <
                0) {
                pthread_mutex_unlock(&ws_lock);
                goto out;
            }
            if (rc == 1) {
                /* A first call under capture (torch captures on a stream of
                 * its own, so a warm-up elsewhere leaves this one without a
                 * buffer): the graph allocates, zeroes and frees the
                 * workspace itself at each replay (graph memory nodes). */
                pthread_mutex_unlock(&ws_lock);
                rc = run_captured(cu, pl, stream, err, errlen);
                goto out;
            }
            parts = base + cap;
        } else {
            parts = base + pl->ctr_bytes;
            /* a caller's buffer: its counters zeroed in stream order */
            if (pl->ctr_bytes && (r = cu->MemsetD8Async(base, 0, pl->ctr_bytes, stream))) {
                rc = tt__cuda_fail(cu, r, "cuMemsetD8Async(split-KV counters)", err, errlen);
                goto out;
            }
        }
        place(pl, base, parts);
    }
    rc = launch_locked(cu, pl, stream, err, errlen);
    if (own) pthread_mutex_unlock(&ws_lock);
out:
    tt__ctx_leave(cu, pushed);
    return rc;
}

int tt__splitkv_run(const tt__splitkv_target *t, const tt_config *cfg, void *ws, size_t ws_len, void *stream,
                    size_t *ws_bytes, char *err, size_t errlen) {
    int rc;
    if (cfg->family != TT_FAMILY_SPLITKV)
        return tt__fail(TT_ERR_INVAL, err, errlen,
                        "config family %d: the KV-cache and varlen entry points run family splitkv only",
                        (int)cfg->family);
    const tt__kernel *k;
    /* the program with the call's copy path: a paged cache's of its page
     * size, or a contiguous one's (splitkv/mainloop.cuh, TT_SKV_PAGED) */
    if ((rc = tt__kernel_for_config(t->ctx, &t->limits, cfg, t->key.head_dim, t->key.dtype, t->key.causal,
                                    program_page_size(&t->params), &k, err, errlen)) < 0)
        return rc;
    plan pl;
    if ((rc = plan_for(k, &t->params, t->rows_max, t->total_k, &pl, err, errlen)) < 0) return rc;
    if (ws_bytes) {
        *ws_bytes = pl.ws_bytes;
        return 0;
    }
    return run_plan(&pl, ws, ws_len, (CUstream)stream, err, errlen);
}

static void fill_scale(tt_splitkv_params *p, float scale, int64_t head_dim) {
    p->scale = scale != 0.0f ? scale : (float)(1.0 / sqrt((double)head_dim));
    p->scale_log2 = (float)((double)p->scale * 1.4426950408889634);
    p->lse_empty = INFINITY; /* the KV-cache and varlen entry points: flash-attn's convention */
}

int tt__splitkv_params_dense(const tt_sdpa_params *d, tt_splitkv_params *out, char *err, size_t errlen) {
    /* the dense layout is a contiguous KV cache: same strides, same meaning */
    const int64_t group = d->heads_q / d->heads_kv;
    if ((int64_t)d->batch * d->seqlen_q > INT32_MAX)
        return tt__fail(TT_ERR_RANGE, err, errlen, "batch x seqlen_q is over 2^31");
    if ((int64_t)d->seqlen_q * group > INT32_MAX)
        return tt__fail(TT_ERR_RANGE, err, errlen, "seqlen_q x query heads per KV head is too large");
    tt_splitkv_params p;
    memset(&p, 0, sizeof p);
    p.q = d->q;
    p.k = d->k;
    p.v = d->v;
    p.o = d->o;
    p.lse = d->lse;
    p.q_batch_stride = d->q_batch_stride, p.q_head_stride = d->q_head_stride,
    p.q_row_stride = d->q_row_stride;
    p.k_batch_stride = d->k_batch_stride, p.k_head_stride = d->k_head_stride,
    p.k_row_stride = d->k_row_stride;
    p.v_batch_stride = d->v_batch_stride, p.v_head_stride = d->v_head_stride,
    p.v_row_stride = d->v_row_stride;
    p.o_batch_stride = d->o_batch_stride, p.o_head_stride = d->o_head_stride,
    p.o_row_stride = d->o_row_stride;
    p.lse_batch_stride = d->lse_batch_stride, p.lse_head_stride = d->lse_head_stride, p.lse_row_stride = 1;
    p.batch = d->batch;
    p.heads_q = d->heads_q;
    p.heads_kv = d->heads_kv;
    p.group = (int)group;
    p.seqlen_q = d->seqlen_q;
    p.seqlen_k = d->seqlen_k;
    p.tokens = d->batch * d->seqlen_q;
    p.scale = d->scale;
    p.scale_log2 = d->scale_log2;
    p.lse_empty = -INFINITY; /* tt_sdpa_fwd's convention, as the dense families */
    *out = p;
    return 0;
}

int tt__splitkv_launch_dense(const tt__kernel *k, const tt_sdpa_params *d, void *stream, char *err,
                             size_t errlen) {
    tt_splitkv_params p;
    int rc = tt__splitkv_params_dense(d, &p, err, errlen);
    if (rc < 0) return rc;
    plan pl;
    if ((rc = plan_for(k, &p, (int64_t)p.seqlen_q * p.group, 0, &pl, err, errlen)) < 0) return rc;
    return run_plan(&pl, NULL, 0, (CUstream)stream, err, errlen);
}

/* ---- arguments -------------------------------------------------------------------- */

#define FAIL(code, ...) return tt__fail(code, err, errlen, __VA_ARGS__)

static int check_common(int64_t batch, int64_t heads_q, int64_t heads_kv, int64_t seqlen_q, int64_t seqlen_k,
                        int64_t head_dim, int32_t dtype, int32_t causal, float scale, int32_t reserved0,
                        const int64_t *reserved, char *err, size_t errlen) {
    if (reserved0) FAIL(TT_ERR_INVAL, "reserved fields must be zero");
    for (int i = 0; i < 8; i++)
        if (reserved[i]) FAIL(TT_ERR_INVAL, "reserved fields must be zero");
    if (!tt__dtype_name((tt_dtype)dtype))
        FAIL(TT_ERR_UNSUPPORTED, "dtype %d is not fp16 (%d) or bf16 (%d)", (int)dtype, TT_DTYPE_FP16,
             TT_DTYPE_BF16);
    if (!tt__splitkv_head_dim_ok(head_dim))
        FAIL(TT_ERR_UNSUPPORTED, "head_dim %lld: the inference kernels serve 32, 64, 128 and 256",
             (long long)head_dim);
    const struct {
        const char *name;
        int64_t v, min, max;
    } sizes[5] = {{"batch", batch, 1, GRID_YZ_MAX},
                  {"heads_q", heads_q, 1, INT32_MAX},
                  {"heads_kv", heads_kv, 1, GRID_YZ_MAX},
                  {"seqlen_q", seqlen_q, 1, INT32_MAX},
                  {"seqlen_k", seqlen_k, 1, INT32_MAX}};
    for (int i = 0; i < 5; i++) {
        if (sizes[i].v < sizes[i].min)
            FAIL(TT_ERR_INVAL, "%s is %lld, must be >= 1", sizes[i].name, (long long)sizes[i].v);
        if (sizes[i].v > sizes[i].max)
            FAIL(TT_ERR_RANGE, "%s %lld is over the limit %lld", sizes[i].name, (long long)sizes[i].v,
                 (long long)sizes[i].max);
    }
    if (heads_q % heads_kv != 0)
        FAIL(TT_ERR_INVAL, "heads_q %lld is not a multiple of heads_kv %lld", (long long)heads_q,
             (long long)heads_kv);
    if (seqlen_q * (heads_q / heads_kv) > INT32_MAX)
        FAIL(TT_ERR_RANGE, "seqlen_q x query heads per KV head is too large");
    if (causal < 0 || causal > 2)
        FAIL(TT_ERR_INVAL, "causal is %d, must be 0, 1 (top-left) or 2 (bottom-right)", (int)causal);
    if (!isfinite(scale) || scale < 0)
        FAIL(TT_ERR_INVAL, "scale %g must be finite and > 0 (0: 1/sqrt(head_dim))", (double)scale);
    return 0;
}

static int check_ptr(const char *name, const void *p, int align, int required, char *err, size_t errlen) {
    if (!p) {
        if (required) FAIL(TT_ERR_INVAL, "%s is NULL", name);
        return 0;
    }
    if ((uintptr_t)p % (uintptr_t)align != 0) FAIL(TT_ERR_INVAL, "%s is not %d-byte aligned", name, align);
    return 0;
}

/* A zero stride over more than one index of an output: CTAs would race. */
static int check_no_overlap(const char *name, const int64_t s[3], const int64_t n[3], int64_t head_dim,
                            char *err, size_t errlen) {
    static const char *const dim[3] = {"batch", "head", "row"};
    for (int i = 0; i < 3; i++)
        if (n[i] > 1 && s[i] == 0)
            FAIL(TT_ERR_INVAL, "%s %s stride is 0 with %lld of them: outputs overlap", name, dim[i],
                 (long long)n[i]);
    if (n[2] > 1 && s[2] < head_dim)
        FAIL(TT_ERR_INVAL, "%s row stride %lld is less than head_dim: output rows overlap", name,
             (long long)s[2]);
    return 0;
}

/* The launch-independent half of a call: the key its config choice uses,
 * then the one device all its tensors are on (the first names it) and the
 * context to launch in there. */
static int target_finish(tt__splitkv_target *t, const void *const ptrs[7], const char *const names[7],
                         int32_t dtype, int32_t causal, int64_t head_dim, int64_t group, int64_t lq,
                         int64_t lk, char *err, size_t errlen) {
    t->key.dtype = (tt_dtype)dtype;
    t->key.causal = causal;
    t->key.head_dim = (int32_t)head_dim;
    t->key.seqlen_q = lq;
    t->key.seqlen_k = lk;
    t->rows_max = tt__splitkv_rows(lq, group);
    const tt__cuda *cu;
    int rc = tt__cuda_get(&cu, err, errlen);
    if (rc < 0) return rc;
    int ord = -1;
    if ((rc = tt__device_of_pointers(cu, ptrs, names, 7, &ord, err, errlen)) < 0) return rc;
    return tt__context_for(cu, ord, &t->ctx, &t->limits, err, errlen);
}

int tt__splitkv_kvcache_target(const tt_sdpa_kvcache_args *a, tt__splitkv_target *t, char *err,
                               size_t errlen) {
    if (!a) FAIL(TT_ERR_INVAL, "no arguments");
    int rc;
    if ((rc = check_common(a->batch, a->heads_q, a->heads_kv, a->seqlen_q, a->seqlen_k, a->head_dim, a->dtype,
                           a->causal, a->scale, a->reserved0, a->reserved, err, errlen)) < 0)
        return rc;
    if ((rc = check_ptr("q", a->q, 16, 1, err, errlen)) < 0 ||
        (rc = check_ptr("k_cache", a->k_cache, 16, 1, err, errlen)) < 0 ||
        (rc = check_ptr("v_cache", a->v_cache, 16, 1, err, errlen)) < 0 ||
        (rc = check_ptr("o", a->o, 16, 1, err, errlen)) < 0 ||
        (rc = check_ptr("lse", a->lse, 4, 0, err, errlen)) < 0 ||
        (rc = check_ptr("cache_seqlens", a->cache_seqlens, 4, 0, err, errlen)) < 0 ||
        (rc = check_ptr("block_table", a->block_table, 4, 0, err, errlen)) < 0)
        return rc;
    const int paged = a->block_table != NULL;
    int64_t kv_n0 = a->batch, kv_n2 = a->seqlen_k, shift = 0, tstride = 0;
    if (paged) {
        if (a->page_size < 1 || a->page_size > (1 << 20) || (a->page_size & (a->page_size - 1)))
            FAIL(TT_ERR_INVAL, "page_size %lld is not a power of two in 1..2^20", (long long)a->page_size);
        if (a->num_pages < 1 || a->num_pages > INT32_MAX)
            FAIL(TT_ERR_INVAL, "num_pages %lld is out of range", (long long)a->num_pages);
        if (a->max_pages < 1 || a->max_pages > INT32_MAX)
            FAIL(TT_ERR_INVAL, "max_pages %lld is out of range", (long long)a->max_pages);
        if (a->seqlen_k > a->max_pages * a->page_size)
            FAIL(TT_ERR_INVAL, "seqlen_k %lld is more than max_pages x page_size = %lld",
                 (long long)a->seqlen_k, (long long)(a->max_pages * a->page_size));
        tstride = a->block_table_stride ? a->block_table_stride : a->max_pages;
        if (tstride < a->max_pages)
            FAIL(TT_ERR_INVAL, "block_table_stride %lld is less than max_pages", (long long)tstride);
        while ((1ll << shift) < a->page_size) shift++;
        kv_n0 = a->num_pages;
        kv_n2 = a->page_size;
    } else if (a->page_size || a->num_pages || a->max_pages || a->block_table_stride) {
        FAIL(TT_ERR_INVAL, "page_size, num_pages, max_pages and block_table_stride need a block_table");
    }
    if ((rc = tt__check_strides("q", a->q_stride, err, errlen)) < 0 ||
        (rc = tt__check_strides("k_cache", a->k_stride, err, errlen)) < 0 ||
        (rc = tt__check_strides("v_cache", a->v_stride, err, errlen)) < 0 ||
        (rc = tt__check_strides("o", a->o_stride, err, errlen)) < 0)
        return rc;
    if (a->lse_stride[0] < 0 || a->lse_stride[1] < 0) FAIL(TT_ERR_INVAL, "lse strides are negative");
    const int packed = a->lse_stride[0] == 0 && a->lse_stride[1] == 0;
    const int64_t lse_s[3] = {packed ? a->heads_q * a->seqlen_q : a->lse_stride[0],
                              packed ? a->seqlen_q : a->lse_stride[1], 1};
    const int64_t on[3] = {a->batch, a->heads_q, a->seqlen_q};
    if ((rc = check_no_overlap("o", a->o_stride, on, a->head_dim, err, errlen)) < 0) return rc;
    if (a->lse && !packed && ((a->batch > 1 && lse_s[0] == 0) || (a->heads_q > 1 && lse_s[1] == 0)))
        FAIL(TT_ERR_INVAL, "lse stride is 0 over more than one batch or head: outputs overlap");
    if ((rc = tt__check_extent("q", a->q, a->q_stride, a->batch, a->heads_q, a->seqlen_q, a->head_dim, 2, err,
                               errlen)) < 0 ||
        (rc = tt__check_extent("k_cache", a->k_cache, a->k_stride, kv_n0, a->heads_kv, kv_n2, a->head_dim, 2,
                               err, errlen)) < 0 ||
        (rc = tt__check_extent("v_cache", a->v_cache, a->v_stride, kv_n0, a->heads_kv, kv_n2, a->head_dim, 2,
                               err, errlen)) < 0 ||
        (rc = tt__check_extent("o", a->o, a->o_stride, a->batch, a->heads_q, a->seqlen_q, a->head_dim, 2, err,
                               errlen)) < 0 ||
        (a->lse && (rc = tt__check_extent("lse", a->lse, lse_s, a->batch, a->heads_q, a->seqlen_q, 1, 4, err,
                                          errlen)) < 0))
        return rc;
    if (a->batch * a->seqlen_q > INT32_MAX) FAIL(TT_ERR_RANGE, "batch x seqlen_q is over 2^31");

    const void *const ptrs[7] = {a->q,   a->k_cache,       a->v_cache,    a->o,
                                 a->lse, a->cache_seqlens, a->block_table};
    const char *const names[7] = {"q", "k_cache", "v_cache", "o", "lse", "cache_seqlens", "block_table"};

    memset(t, 0, sizeof *t);
    tt_splitkv_params *p = &t->params;
    p->q = a->q;
    p->k = a->k_cache;
    p->v = a->v_cache;
    p->o = a->o;
    p->lse = a->lse;
    p->block_table = a->block_table;
    p->seqlens_k = a->cache_seqlens;
    p->q_batch_stride = a->q_stride[0], p->q_head_stride = a->q_stride[1], p->q_row_stride = a->q_stride[2];
    p->k_batch_stride = a->k_stride[0], p->k_head_stride = a->k_stride[1], p->k_row_stride = a->k_stride[2];
    p->v_batch_stride = a->v_stride[0], p->v_head_stride = a->v_stride[1], p->v_row_stride = a->v_stride[2];
    p->o_batch_stride = a->o_stride[0], p->o_head_stride = a->o_stride[1], p->o_row_stride = a->o_stride[2];
    p->lse_batch_stride = lse_s[0], p->lse_head_stride = lse_s[1], p->lse_row_stride = 1;
    p->table_stride = tstride;
    p->batch = (int)a->batch;
    p->heads_q = (int)a->heads_q;
    p->heads_kv = (int)a->heads_kv;
    p->group = (int)(a->heads_q / a->heads_kv);
    p->seqlen_q = (int)a->seqlen_q;
    p->seqlen_k = (int)a->seqlen_k;
    p->page_shift = (int)shift;
    p->tokens = (int)(a->batch * a->seqlen_q);
    fill_scale(p, a->scale, a->head_dim);
    return target_finish(t, ptrs, names, a->dtype, a->causal, a->head_dim, a->heads_q / a->heads_kv,
                         a->seqlen_q, a->seqlen_k, err, errlen);
}

int tt__splitkv_varlen_target(const tt_sdpa_varlen_args *a, tt__splitkv_target *t, char *err, size_t errlen) {
    if (!a) FAIL(TT_ERR_INVAL, "no arguments");
    int rc;
    if ((rc = check_common(a->batch, a->heads_q, a->heads_kv, a->max_seqlen_q, a->max_seqlen_k, a->head_dim,
                           a->dtype, a->causal, a->scale, a->reserved0, a->reserved, err, errlen)) < 0)
        return rc;
    if ((rc = check_ptr("q", a->q, 16, 1, err, errlen)) < 0 ||
        (rc = check_ptr("k", a->k, 16, 1, err, errlen)) < 0 ||
        (rc = check_ptr("v", a->v, 16, 1, err, errlen)) < 0 ||
        (rc = check_ptr("o", a->o, 16, 1, err, errlen)) < 0 ||
        (rc = check_ptr("lse", a->lse, 4, 0, err, errlen)) < 0 ||
        (rc = check_ptr("cu_seqlens_q", a->cu_seqlens_q, 4, 1, err, errlen)) < 0 ||
        (rc = check_ptr("cu_seqlens_k", a->cu_seqlens_k, 4, 1, err, errlen)) < 0)
        return rc;
    if (a->total_q < 1 || a->total_q > INT32_MAX || a->total_k < 1 || a->total_k > INT32_MAX)
        FAIL(TT_ERR_INVAL, "total_q %lld and total_k %lld must be in 1..2^31-1", (long long)a->total_q,
             (long long)a->total_k);
    if (a->max_seqlen_q > a->total_q || a->max_seqlen_k > a->total_k)
        FAIL(TT_ERR_INVAL, "max_seqlen_q/k is more than total_q/k");
    const int64_t qs[3] = {0, a->q_stride[0], a->q_stride[1]}, ks[3] = {0, a->k_stride[0], a->k_stride[1]},
                  vs[3] = {0, a->v_stride[0], a->v_stride[1]}, os[3] = {0, a->o_stride[0], a->o_stride[1]};
    if ((rc = tt__check_strides("q", qs, err, errlen)) < 0 ||
        (rc = tt__check_strides("k", ks, err, errlen)) < 0 ||
        (rc = tt__check_strides("v", vs, err, errlen)) < 0 ||
        (rc = tt__check_strides("o", os, err, errlen)) < 0)
        return rc;
    if (a->lse_stride[0] < 0 || a->lse_stride[1] < 0) FAIL(TT_ERR_INVAL, "lse strides are negative");
    const int packed = a->lse_stride[0] == 0 && a->lse_stride[1] == 0;
    const int64_t lse_s[3] = {0, packed ? a->total_q : a->lse_stride[0], packed ? 1 : a->lse_stride[1]};
    const int64_t on[3] = {1, a->heads_q, a->total_q};
    if ((rc = check_no_overlap("o", os, on, a->head_dim, err, errlen)) < 0) return rc;
    if (a->lse && !packed && ((a->heads_q > 1 && lse_s[1] == 0) || (a->total_q > 1 && lse_s[2] == 0)))
        FAIL(TT_ERR_INVAL, "lse stride is 0 over more than one head or row: outputs overlap");
    if ((rc = tt__check_extent("q", a->q, qs, 1, a->heads_q, a->total_q, a->head_dim, 2, err, errlen)) < 0 ||
        (rc = tt__check_extent("k", a->k, ks, 1, a->heads_kv, a->total_k, a->head_dim, 2, err, errlen)) < 0 ||
        (rc = tt__check_extent("v", a->v, vs, 1, a->heads_kv, a->total_k, a->head_dim, 2, err, errlen)) < 0 ||
        (rc = tt__check_extent("o", a->o, os, 1, a->heads_q, a->total_q, a->head_dim, 2, err, errlen)) < 0 ||
        (a->lse &&
         (rc = tt__check_extent("lse", a->lse, lse_s, 1, a->heads_q, a->total_q, 1, 4, err, errlen)) < 0))
        return rc;

    const void *const ptrs[7] = {a->q, a->k, a->v, a->o, a->lse, a->cu_seqlens_q, a->cu_seqlens_k};
    const char *const names[7] = {"q", "k", "v", "o", "lse", "cu_seqlens_q", "cu_seqlens_k"};

    memset(t, 0, sizeof *t);
    tt_splitkv_params *p = &t->params;
    p->q = a->q;
    p->k = a->k;
    p->v = a->v;
    p->o = a->o;
    p->lse = a->lse;
    p->cu_seqlens_q = a->cu_seqlens_q;
    p->cu_seqlens_k = a->cu_seqlens_k;
    p->q_head_stride = a->q_stride[0], p->q_row_stride = a->q_stride[1];
    p->k_head_stride = a->k_stride[0], p->k_row_stride = a->k_stride[1];
    p->v_head_stride = a->v_stride[0], p->v_row_stride = a->v_stride[1];
    p->o_head_stride = a->o_stride[0], p->o_row_stride = a->o_stride[1];
    p->lse_head_stride = lse_s[1], p->lse_row_stride = lse_s[2];
    p->batch = (int)a->batch;
    p->heads_q = (int)a->heads_q;
    p->heads_kv = (int)a->heads_kv;
    p->group = (int)(a->heads_q / a->heads_kv);
    p->seqlen_q = (int)a->max_seqlen_q;
    p->seqlen_k = (int)a->max_seqlen_k;
    p->tokens = (int)a->total_q;
    fill_scale(p, a->scale, a->head_dim);
    t->total_k = a->total_k;
    return target_finish(t, ptrs, names, a->dtype, a->causal, a->head_dim, a->heads_q / a->heads_kv,
                         a->max_seqlen_q, a->max_seqlen_k, err, errlen);
}

#undef FAIL
