/* tt_sdpa_fwd and the inference entry points (tt_sdpa_fwd_kvcache,
 * tt_sdpa_fwd_varlen): the config choice (the caller's, else the daemon's
 * through one process-wide client, else the built-in default) over the
 * kernels layer's launchers, which take the config explicitly. Here, not in
 * src/kernels, so the kernels depend on nothing but src/common. */
#include <pthread.h>
#include <string.h>

#include "common/fail.h"
#include "common/key.h"
#include "kernels/family.h"
#include "kernels/launch.h"
#include "kernels/side_stream.h"
#include "kernels/splitkv/splitkv.h"
#include "tiletune.h"

/* One client for the whole process: its cache makes a repeated lookup cost
 * no round trip. A client that cannot be opened means: built-in defaults. */
static pthread_once_t client_once = PTHREAD_ONCE_INIT;
static tt_client *process_client;

static void client_open_once(void) {
    if (tt_client_open(NULL, 50, &process_client) < 0) process_client = NULL;
}

/* The daemon's tuned config for `key` (its revision set) through the
 * process's client, if it has one that runs on this device (of `family`
 * when >= 0): 1 with it in *out, else 0. The daemon tunes on the same GPU
 * model; a record from another model or an older schedule may not fit this
 * device: then the caller's default. A default answer (nothing tuned, or no
 * daemon) is the portable one; this device's own default is at least as
 * good. */
static int tuned_config(const tt_key_v2 *key, const tt__device_limits *lim, int32_t family, tt_config *out) {
    pthread_once(&client_once, client_open_once);
    tt_lookup_result res;
    if (!process_client || key->seqlen_q > TT_SEQLEN_MAX || key->seqlen_k > TT_SEQLEN_MAX ||
        tt_lookup_v2(process_client, key, &res) != 0 || res.match == TT_MATCH_DEFAULT ||
        (family >= 0 && res.config.family != family) ||
        tt__variant_check(&res.config, key->head_dim, lim, NULL, 0) < 0)
        return 0;
    *out = res.config;
    return 1;
}

static int choose_config(const tt_sdpa_args *a, const tt__device_limits *lim, tt_config *out, char *err,
                         size_t errlen) {
    tt_key_v2 k2;
    tt__sdpa_key_of(a, &k2);
    int rc;
    if ((rc = tt_kernel_revision(k2.rev)) < 0) return tt__fail(rc, err, errlen, "kernel source unavailable");
    if (tuned_config(&k2, lim, -1, out)) return 0;
    return tt__sdpa_device_default_at(&k2, lim, a->batch, a->heads_q, out, err, errlen);
}

int tt_sdpa_fwd(const tt_sdpa_args *a, char *err, size_t errlen) {
    tt__sdpa_target t;
    int rc = tt__sdpa_target_of(a, &t, err, errlen);
    if (rc < 0) return rc;
    if (a->config) return tt__sdpa_launch(&t, a, a->config, err, errlen);
    tt_config cfg;
    if ((rc = choose_config(a, &t.limits, &cfg, err, errlen)) < 0) return rc;
    return tt__sdpa_launch(&t, a, &cfg, err, errlen);
}

/* ---- inference: KV caches and variable-length batches (family splitkv;
 * a dense KV cache where tt_sdpa_fwd would run a dense family) ---- */

/* The caller's config, else a tuned splitkv record for the key, else the
 * built-in default for the call's packed rows. */
static int choose_splitkv(const tt__splitkv_target *t, const tt_config *given, tt_config *out, char *err,
                          size_t errlen) {
    if (given) {
        *out = *given;
        return 0;
    }
    /* tuned per GQA group: the kernel packs a group's rows */
    tt_key_v2 k2;
    tt__key_from_v1(&t->key, &k2);
    k2.group = t->params.group >= 1 && t->params.group <= TT_GROUP_MAX ? t->params.group : 1;
    if (tt_kernel_revision(k2.rev) == 0 && tuned_config(&k2, &t->limits, TT_FAMILY_SPLITKV, out)) return 0;
    if (tt__splitkv_default(t->rows_max, k2.seqlen_k, k2.head_dim, &t->limits,
                            (int64_t)t->params.batch * t->params.heads_kv, t->params.block_table != NULL,
                            out) < 0)
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen,
                        "no splitkv schedule of head_dim %d fits this device", (int)k2.head_dim);
    if (t->params.block_table)
        tt__splitkv_default_paged(out, k2.head_dim, (int64_t)1 << t->params.page_shift,
                                  tt__splitkv_long_page());
    return 0;
}

static int run_splitkv(const tt__splitkv_target *t, const tt_config *given, void *ws, size_t ws_len,
                       void *stream, size_t *ws_bytes, char *err, size_t errlen) {
    tt_config cfg;
    int rc = choose_splitkv(t, given, &cfg, err, errlen);
    if (rc < 0) return rc;
    return tt__splitkv_run(t, &cfg, ws, ws_len, stream, ws_bytes, err, errlen);
}

/* A contiguous cache without per-sequence lengths is tt_sdpa_fwd's dense
 * problem, strides and all. Where the config tt_sdpa_fwd would choose for
 * it is of a dense family (a chunk of many query rows: ws on sm_90, 2.3x
 * splitkv's mma tiles at 512 tokens over 8k-32k keys on the H200), the
 * call runs there: 1 with *cfg and *dt filled. Not with a caller's config
 * (a splitkv schedule to run), nor where a row can see no key: this entry
 * point gives such rows LSE +inf (flash-attn's), the dense families -inf.
 * Any failure of the probe leaves the call to splitkv, which reports it. */
static int dense_route(const tt_sdpa_kvcache_args *a, const tt__splitkv_target *t, tt_sdpa_args *d,
                       tt_config *cfg, tt__sdpa_target *dt) {
    if (a->config || a->block_table || a->cache_seqlens || a->seqlen_k < 1 ||
        (a->causal == 2 && a->seqlen_q > a->seqlen_k))
        return 0;
    *d = (tt_sdpa_args){.q = a->q,
                        .k = a->k_cache,
                        .v = a->v_cache,
                        .o = a->o,
                        .lse = a->lse,
                        .batch = a->batch,
                        .heads_q = a->heads_q,
                        .heads_kv = a->heads_kv,
                        .seqlen_q = a->seqlen_q,
                        .seqlen_k = a->seqlen_k,
                        .head_dim = a->head_dim,
                        .dtype = a->dtype,
                        .causal = a->causal,
                        .scale = a->scale,
                        .stream = a->stream};
    memcpy(d->q_stride, a->q_stride, sizeof d->q_stride);
    memcpy(d->k_stride, a->k_stride, sizeof d->k_stride);
    memcpy(d->v_stride, a->v_stride, sizeof d->v_stride);
    memcpy(d->o_stride, a->o_stride, sizeof d->o_stride);
    memcpy(d->lse_stride, a->lse_stride, sizeof d->lse_stride);
    char scratch[256];
    return choose_config(d, &t->limits, cfg, scratch, sizeof scratch) == 0 &&
           cfg->family != TT_FAMILY_SPLITKV && tt__sdpa_target_of(d, dt, scratch, sizeof scratch) == 0;
}

int tt_sdpa_fwd_kvcache(const tt_sdpa_kvcache_args *a, char *err, size_t errlen) {
    tt__splitkv_target t;
    int rc = tt__splitkv_kvcache_target(a, &t, err, errlen);
    if (rc < 0) return rc;
    tt_sdpa_args d;
    tt_config cfg;
    tt__sdpa_target dt;
    if (dense_route(a, &t, &d, &cfg, &dt)) return tt__sdpa_launch(&dt, &d, &cfg, err, errlen);
    return run_splitkv(&t, a->config, a->workspace, a->workspace_bytes, a->stream, NULL, err, errlen);
}

/* A varlen batch whose longest sequence has more packed rows than splitkv
 * runs a chunk of by default (1024 on sm_90: a 512-token chunk of group 4
 * ran 2.6x faster on ws than on splitkv's mma tiles, the H200): where the
 * config tt_sdpa_fwd would choose for the batch's longest sequence is of
 * family ws, its sequences past those rows (tt_varlen_dense_takes) run
 * there, one CTA a tile, in a launch of their own, and splitkv's launch
 * runs the rest on the config of the rows it keeps (*choice: the target as
 * its config is chosen). Not with a caller's config (a splitkv schedule to
 * run), nor where the copy engine cannot take the strides or the LSE rows
 * are not contiguous: then splitkv runs all of it. 1 with *dp and *dcfg
 * filled, t's dense_min_q set. */
static int varlen_route(const tt_sdpa_varlen_args *a, tt__splitkv_target *t, tt__splitkv_target *choice,
                        tt_sdpa_params *dp, tt_config *dcfg) {
    *choice = *t;
    const int64_t limit = tt__config_chunk_splitkv_rows(t->limits.arch), group = a->heads_q / a->heads_kv;
    const int packed_lse = a->lse_stride[0] == 0 && a->lse_stride[1] == 0;
    if (a->config || t->rows_max <= limit || (a->lse && !packed_lse && a->lse_stride[1] != 1)) return 0;
    const int64_t min_q = limit / group + 1;
    const tt_sdpa_args d = {.batch = a->batch,
                            .heads_q = a->heads_q,
                            .heads_kv = a->heads_kv,
                            .seqlen_q = a->max_seqlen_q,
                            .seqlen_k = a->max_seqlen_k,
                            .head_dim = a->head_dim,
                            .dtype = a->dtype,
                            .causal = a->causal};
    char scratch[256];
    if (choose_config(&d, &t->limits, dcfg, scratch, sizeof scratch) < 0 || dcfg->family != TT_FAMILY_WS)
        return 0;
    dcfg->q_in_regs = 0; /* one CTA a tile: a persistent CTA cannot skip another family's sequences */
    *dp = (tt_sdpa_params){.q = a->q,
                           .k = a->k,
                           .v = a->v,
                           .o = a->o,
                           .lse = a->lse,
                           .q_head_stride = a->q_stride[0],
                           .q_row_stride = a->q_stride[1],
                           .k_head_stride = a->k_stride[0],
                           .k_row_stride = a->k_stride[1],
                           .v_head_stride = a->v_stride[0],
                           .v_row_stride = a->v_stride[1],
                           .o_head_stride = a->o_stride[0],
                           .o_row_stride = a->o_stride[1],
                           .lse_head_stride = packed_lse ? a->total_q : a->lse_stride[0],
                           .batch = (int)a->batch,
                           .heads_q = (int)a->heads_q,
                           .heads_kv = (int)a->heads_kv,
                           .seqlen_q = (int)a->max_seqlen_q,
                           .seqlen_k = (int)a->max_seqlen_k,
                           .scale = t->params.scale,
                           .scale_log2 = t->params.scale_log2,
                           .cu_seqlens_q = a->cu_seqlens_q,
                           .cu_seqlens_k = a->cu_seqlens_k,
                           .total_q = (int)a->total_q,
                           .total_k = (int)a->total_k,
                           .varlen_min_q = (int)min_q};
    const tt__family *f = tt__family_of(TT_FAMILY_WS);
    if (!f || (f->runs && !f->runs(dp, a->causal))) return 0;
    t->params.dense_min_q = (int)min_q;
    /* splitkv keeps sequences of at most min_q - 1 tokens, and those
     * past it that the dense family does not take (its grid still covers
     * them: only the choice of its tile looks at the rows it keeps) */
    choice->key.seqlen_q = min_q - 1 < a->max_seqlen_q ? min_q - 1 : a->max_seqlen_q;
    choice->rows_max = tt__splitkv_rows(choice->key.seqlen_q, group);
    return 1;
}

/* splitkv's launches of a varlen batch: `t` on the config chosen for
 * `choice` (the rows it keeps), or, where the batch's short sequences
 * would share that tile with longer ones (tt__splitkv_class_q) and their
 * own class's config is a smaller tile, two launches: the short class on
 * its tile, the rest on choice's. Decode sequences on a chunk's 128-row
 * tile (two stages, one CTA an SM) stream their caches at a fraction of
 * the rate of their own 16-row tile (docs/perf.md). Not with a caller's
 * config. The number of launches in run[] / cfg[], or a negative error. */
static int row_classes(const tt_sdpa_varlen_args *a, const tt__splitkv_target *t,
                       const tt__splitkv_target *choice, tt__splitkv_target run[2], tt_config cfg[2],
                       char *err, size_t errlen) {
    int rc = choose_splitkv(choice, a->config, &cfg[0], err, errlen);
    if (rc < 0) return rc;
    run[0] = *t;
    const int64_t group = t->params.group,
                  short_q = a->config
                                ? 0
                                : tt__splitkv_class_q(group, choice->key.seqlen_q, tt__splitkv_class_rows());
    if (short_q == 0) return 1;
    tt__splitkv_target sc = *choice;
    sc.key.seqlen_q = short_q;
    sc.rows_max = tt__splitkv_rows(short_q, group);
    tt_config small;
    char scratch[256];
    if (choose_splitkv(&sc, NULL, &small, scratch, sizeof scratch) < 0 || small.block_m >= cfg[0].block_m)
        return 1;
    run[1] = *t;
    run[1].params.seq_min_q = (int)short_q + 1;
    run[0].params.seq_max_q = (int)short_q;
    run[0].rows_max = sc.rows_max;
    cfg[1] = cfg[0];
    cfg[0] = small;
    return 2;
}

/* splitkv's launches (row_classes) and the dense family's varlen launch
 * where there is one. That launch goes on the side stream of the caller's
 * (kernels/side_stream.h), so splitkv's, on the caller's, run alongside
 * it on the SMs its one wave of chunk tiles leaves free and in its tail
 * (3-4% of the mixed bench batch on the H200, docs/perf.md), queued
 * before them (after them it ran 1-2% slower there). With
 * ws_bytes: the workspace the call needs, the most of splitkv's launches'
 * (they run one after another on the stream, so they share it). */
static int run_varlen(const tt_sdpa_varlen_args *a, size_t *ws_bytes, char *err, size_t errlen) {
    tt__splitkv_target t, choice;
    int rc = tt__splitkv_varlen_target(a, &t, err, errlen);
    if (rc < 0) return rc;
    tt_sdpa_params dp;
    tt_config dcfg, cfg[2];
    const int dense = varlen_route(a, &t, &choice, &dp, &dcfg);
    tt__splitkv_target run[2];
    const int n = row_classes(a, &t, &choice, run, cfg, err, errlen);
    if (n < 0) return n;
    if (ws_bytes || a->workspace) {
        size_t most = 0;
        for (int c = 0; c < n; c++) {
            size_t bytes = 0;
            if ((rc = tt__splitkv_run(&run[c], &cfg[c], NULL, 0, NULL, &bytes, err, errlen)) < 0) return rc;
            if (bytes > most) most = bytes;
        }
        if (ws_bytes) {
            *ws_bytes = most; /* the dense family needs none */
            return 0;
        }
        /* refused before any launch: a later launch refusing the
         * workspace would leave the rows of the earlier ones written */
        if (most > 0 && ((uintptr_t)a->workspace % 256 != 0 || a->workspace_bytes < most))
            return tt__fail(TT_ERR_RANGE, err, errlen,
                            "workspace of %zu bytes at %p: this call needs %zu, 256-byte aligned",
                            a->workspace_bytes, a->workspace, most);
    }
    const CUstream stream = (CUstream)a->stream;
    const tt__cuda *cu = NULL;
    const tt__kernel *k = NULL;
    tt__side *side = NULL;
    CUstream ds = stream; /* the dense launch's stream */
    if (dense) {
        if ((rc = tt__kernel_for_config(t.ctx, &t.limits, &dcfg, (int32_t)a->head_dim, (tt_dtype)a->dtype,
                                        a->causal, 0, &k, err, errlen)) < 0)
            return rc;
        if ((rc = tt__cuda_get(&cu, err, errlen)) < 0 ||
            (rc = tt__side_fork(cu, t.ctx, stream, &side, &ds, err, errlen)) < 0)
            return rc;
        if (side) rc = tt__kernel_launch(k, &dp, ds, err, errlen);
    }
    for (int c = 0; c < n && rc >= 0; c++)
        rc =
            tt__splitkv_run(&run[c], &cfg[c], a->workspace, a->workspace_bytes, a->stream, NULL, err, errlen);
    if (dense && rc >= 0 && !side) rc = tt__kernel_launch(k, &dp, stream, err, errlen);
    if (side) {
        /* joined even where a launch failed: a capture with a branch left
         * unjoined could not end */
        char scratch[256];
        const int jrc = tt__side_join(cu, side, stream, scratch, sizeof scratch);
        if (rc >= 0 && jrc < 0) return tt__fail(jrc, err, errlen, "%s", scratch);
    }
    return rc < 0 ? rc : 0;
}

int tt_sdpa_fwd_varlen(const tt_sdpa_varlen_args *a, char *err, size_t errlen) {
    return run_varlen(a, NULL, err, errlen);
}

int tt_sdpa_fwd_kvcache_workspace(const tt_sdpa_kvcache_args *a, size_t *bytes, char *err, size_t errlen) {
    if (!bytes) return tt__fail(TT_ERR_INVAL, err, errlen, "bytes is NULL");
    tt__splitkv_target t;
    int rc = tt__splitkv_kvcache_target(a, &t, err, errlen);
    if (rc < 0) return rc;
    tt_sdpa_args d;
    tt_config cfg;
    tt__sdpa_target dt;
    if (dense_route(a, &t, &d, &cfg, &dt)) { /* the dense families split nothing */
        *bytes = 0;
        return 0;
    }
    return run_splitkv(&t, a->config, NULL, 0, NULL, bytes, err, errlen);
}

int tt_sdpa_fwd_varlen_workspace(const tt_sdpa_varlen_args *a, size_t *bytes, char *err, size_t errlen) {
    if (!bytes) return tt__fail(TT_ERR_INVAL, err, errlen, "bytes is NULL");
    return run_varlen(a, bytes, err, errlen);
}
