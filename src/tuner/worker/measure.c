/* One key's inputs and reference, and one candidate's check and timing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuner/worker/run.h"

void tt__wk_free_inputs(tt_worker *w, wk_inputs *in) {
    const tt__cuda *cu = w->cu;
    CUdeviceptr *all[] = {&in->o, &in->lse, &in->oref, &in->lseref};
    for (int i = 0; i < MAX_ROTATE; i++) {
        CUdeviceptr *set[] = {&in->q[i], &in->k[i], &in->v[i]};
        for (int j = 0; j < 3; j++) {
            if (*set[j]) cu->MemFree(*set[j]);
            *set[j] = 0;
        }
    }
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (*all[i]) cu->MemFree(*all[i]);
        *all[i] = 0;
    }
}

void tt__wk_free_bufs(keyrun *r) {
    tt__wk_free_inputs(r->w, &r->in);
    tt__wk_free_inputs(r->w, &r->alt);
}

static tt_sdpa_params params_for(const keyrun *r, int set) {
    tt_sdpa_params p;
    memset(&p, 0, sizeof p);
    p.q = (const void *)(uintptr_t)r->in.q[set];
    p.k = (const void *)(uintptr_t)r->in.k[set];
    p.v = (const void *)(uintptr_t)r->in.v[set];
    p.o = (void *)(uintptr_t)r->in.o;
    p.lse = (float *)(uintptr_t)r->in.lse;
    p.q_row_stride = p.o_row_stride = p.k_row_stride = p.v_row_stride = r->D;
    p.q_head_stride = p.o_head_stride = r->Lq * r->D;
    p.k_head_stride = p.v_head_stride = r->Lk * r->D;
    p.q_batch_stride = p.o_batch_stride = (tt_i64)r->H * r->Lq * r->D;
    p.k_batch_stride = p.v_batch_stride = (tt_i64)r->Hkv * r->Lk * r->D;
    p.lse_head_stride = r->Lq;
    p.lse_batch_stride = (tt_i64)r->H * r->Lq;
    p.batch = r->in.B;
    p.heads_q = r->H;
    p.heads_kv = r->Hkv;
    p.seqlen_q = (int)r->Lq;
    p.seqlen_k = (int)r->Lk;
    p.scale = (float)(1.0 / sqrt((double)r->D));
    p.scale_log2 = (float)((double)p.scale * 1.4426950408889634);
    return p;
}

int tt__wk_alloc_bufs(keyrun *r) {
    tt_worker *w = r->w;
    const tt__cuda *cu = w->cu;
    CUresult e;
    /* The timed working set (Q, K, V, O) must not sit in L2 between
     * launches, or small problems look faster than they run in a model:
     * rotate through enough input sets to cover twice the L2. */
    long long set = 2 * (2 * r->in.nq + 2 * r->in.nk);
    long long want = w->l2_bytes > 0 ? (2LL * w->l2_bytes + set - 1) / set : 1;
    r->in.nrot = (int)(want < 1 ? 1 : want > MAX_ROTATE ? MAX_ROTATE : want);
    for (int i = 0; i < r->in.nrot; i++) {
        if ((e = cu->MemAlloc(&r->in.q[i], (size_t)r->in.nq * 2)) ||
            (e = cu->MemAlloc(&r->in.k[i], (size_t)r->in.nk * 2)) ||
            (e = cu->MemAlloc(&r->in.v[i], (size_t)r->in.nk * 2)))
            goto oom;
        int bf = r->bf16;
        CUdeviceptr bufs[3] = {r->in.q[i], r->in.k[i], r->in.v[i]};
        long long ns[3] = {r->in.nq, r->in.nk, r->in.nk};
        for (int j = 0; j < 3; j++) {
            unsigned seed = 0x51ed0000u + (unsigned)(i * 3 + j) * 0x1234567u;
            void *args[] = {&bufs[j], &ns[j], &seed, &bf};
            if ((e = tt__wk_launch_helper(w, w->f_fill, ns[j], args))) goto oom;
        }
    }
    if ((e = cu->MemAlloc(&r->in.o, (size_t)r->in.nq * 2)) ||
        (e = cu->MemAlloc(&r->in.lse, (size_t)r->in.nlse * 4)) ||
        (e = cu->MemAlloc(&r->in.oref, (size_t)(r->Lq * r->D * 2 * 2))) ||
        (e = cu->MemAlloc(&r->in.lseref, (size_t)(r->Lq * 4 * 2))))
        goto oom;
    return 0;
oom:
    tt__cuda_fail(cu, e, "allocating the inputs", r->err, sizeof r->err);
    return -1;
}

/* The fp32 reference on the checked planes: (batch 0, head 0) and (last
 * batch, last head). All rows of a plane are checked; checking every plane
 * would cost the slow reference B*H/2 times more on the largest keys. */
/* The reference kernel's variant for the key (its knobs are the
 * reference's own, see sdpa_ref.cu). */
static tt__variant reference_variant(const keyrun *r) {
    tt__variant v;
    memset(&v, 0, sizeof v);
    tt__reference_config(&v.config);
    v.head_dim = r->D;
    v.dtype = r->t->key.dtype;
    v.causal = r->t->key.causal;
    v.arch = r->w->dev.limits.arch;
    return v;
}

/* Compiled before the pool starts: a key whose reference cannot be built
 * fails before any variant is compiled for it. */
int tt__wk_compile_reference(keyrun *r) {
    tt_worker *w = r->w;
    tt__variant v = reference_variant(r);
    tt__jit_opts jo = {.source = w->ref, .cache_dir = w->o.cache_dir};
    return tt__jit_compile(&jo, &v, &r->refcb, r->err, sizeof r->err) < 0 ? -1 : 0;
}

int tt__wk_run_reference(keyrun *r) {
    tt_worker *w = r->w;
    tt__variant v = reference_variant(r);
    tt__kernel *k = NULL;
    /* r->refcb stays: a decode key runs the reference again at its second
     * batch (tune.c, cross_batch) */
    if (!r->refcb) return -1;
    int rc = tt__kernel_load(w->dev.ctx, r->refcb, &v, &k, r->err, sizeof r->err);
    if (rc < 0) return -1;
    r->in.nplanes = (int64_t)r->in.B * r->H > 1 ? 2 : 1;
    int planes[2][2] = {{0, 0}, {r->in.B - 1, r->H - 1}};
    for (int p = 0; p < r->in.nplanes && rc == 0; p++) {
        tt_sdpa_params P = params_for(r, 0);
        int b = planes[p][0], h = planes[p][1];
        r->in.plane_q[p] = ((long long)b * r->H + h) * r->Lq * r->D;
        r->in.plane_lse[p] = ((long long)b * r->H + h) * r->Lq;
        long long off_k = ((long long)b * r->Hkv + h / (r->H / r->Hkv)) * r->Lk * r->D;
        P.q = (const char *)P.q + r->in.plane_q[p] * 2;
        P.k = (const char *)P.k + off_k * 2;
        P.v = (const char *)P.v + off_k * 2;
        P.o = (char *)(uintptr_t)r->in.oref + (size_t)p * r->Lq * r->D * 2;
        P.lse = (float *)(uintptr_t)r->in.lseref + (size_t)p * r->Lq;
        P.batch = P.heads_q = P.heads_kv = 1;
        rc = tt__kernel_launch(k, &P, w->stream, r->err, sizeof r->err);
    }
    if (rc == 0) {
        /* The reference is slow by design: allow it a generous minute. */
        int ws = tt__wk_wait_stream(w, 60000 + w->o.launch_timeout_ms, r->err, sizeof r->err);
        if (ws != WAIT_OK) return -1; /* no unload: it would wait on the GPU */
    }
    tt__kernel_unload(k);
    return rc;
}

static int launch(keyrun *r, cand *c, int set) {
    tt_sdpa_params p = params_for(r, set);
    return tt__kernel_launch(c->k, &p, r->w->stream, r->err, sizeof r->err);
}

/* A wait that failed: report the variant and leave (the context is gone). */
static int dead(keyrun *r, cand *c, int ws) {
    tt__pipe_msg m;
    tt__wk_result(&m, ws == WAIT_TIMEOUT ? TT__N_MEAS_TIMEOUT : TT__N_MEAS_FAULT);
    TT_PIPE_SET(&m, result, reason, ws == WAIT_TIMEOUT ? "deadline" : "cuda-error");
    tt__wk_say_result(r, c, &m);
    fprintf(stderr, "tiletune-worker: variant %s: %s; leaving (the context is unusable)\n",
            ws == WAIT_TIMEOUT ? "timed out" : "faulted", r->err);
    c->out = 1;
    return RUN_DEAD;
}

/* Loads, poisons, runs once and checks c against the reference. */
int tt__wk_check(keyrun *r, cand *c) {
    tt_worker *w = r->w;
    const tt__cuda *cu = w->cu;
    if (!c->k && tt__kernel_load(w->dev.ctx, c->cubin, &c->v, &c->k, r->err, sizeof r->err) < 0)
        return RUN_SKIP;
    /* 0xff bytes are NaN in fp16, bf16 and fp32: an element the kernel
     * never writes stays NaN and is counted below. */
    CUresult e;
    if ((e = cu->MemsetD8Async(r->in.o, 0xff, (size_t)r->in.nq * 2, w->stream)) ||
        (e = cu->MemsetD8Async(r->in.lse, 0xff, (size_t)r->in.nlse * 4, w->stream)) ||
        (e = cu->MemsetD8Async(w->scratch, 0, 64, w->stream)) || (e = cu->EventRecord(w->ev[0], w->stream))) {
        tt__cuda_fail(cu, e, "poisoning the output", r->err, sizeof r->err);
        return dead(r, c, WAIT_FAULT);
    }
    if (launch(r, c, 0) < 0) return RUN_SKIP; /* a launch refused (resources): not run */
    cu->EventRecord(w->ev[1], w->stream);
    /* No estimate yet: the first launch gets the whole limit. */
    int ws = tt__wk_wait_stream(w, w->o.launch_timeout_ms, r->err, sizeof r->err);
    if (ws != WAIT_OK) return dead(r, c, ws);
    float ms = 0;
    cu->EventElapsedTime(&ms, w->ev[0], w->ev[1]);
    c->t1_ms = ms;
    CUdeviceptr sums = w->scratch, bad = w->scratch + 16, maxd = w->scratch + 24;
    int bf = r->bf16;
    CUdeviceptr nul = 0;
    void *a1[] = {&r->in.o, &r->in.nq, &bf, &bad};
    void *a2[] = {&r->in.lse, &nul, &r->in.nlse, &bad, &maxd};
    e = tt__wk_launch_helper(w, w->f_bad, r->in.nq, a1);
    if (!e) e = tt__wk_launch_helper(w, w->f_lse, r->in.nlse, a2);
    for (int p = 0; p < r->in.nplanes && !e; p++) {
        CUdeviceptr op = r->in.o + (CUdeviceptr)r->in.plane_q[p] * 2,
                    rp = r->in.oref + (CUdeviceptr)p * r->Lq * r->D * 2;
        CUdeviceptr lp = r->in.lse + (CUdeviceptr)r->in.plane_lse[p] * 4,
                    lrp = r->in.lseref + (CUdeviceptr)p * r->Lq * 4;
        long long n = r->Lq * r->D, nl = r->Lq;
        void *a3[] = {&op, &rp, &n, &bf, &sums};
        void *a4[] = {&lp, &lrp, &nl, &bad, &maxd};
        e = tt__wk_launch_helper(w, w->f_diff, n, a3);
        if (!e) e = tt__wk_launch_helper(w, w->f_lse, nl, a4);
    }
    if (e) {
        tt__cuda_fail(cu, e, "launching the check", r->err, sizeof r->err);
        return dead(r, c, WAIT_FAULT);
    }
    if ((ws = tt__wk_wait_stream(w, w->o.launch_timeout_ms, r->err, sizeof r->err)) != WAIT_OK)
        return dead(r, c, ws);
    unsigned char res[64];
    if ((e = cu->MemcpyDtoH(res, w->scratch, sizeof res))) {
        tt__cuda_fail(cu, e, "reading the check", r->err, sizeof r->err);
        return dead(r, c, WAIT_FAULT);
    }
    double s[2];
    unsigned long long nbad;
    unsigned md;
    memcpy(s, res, 16);
    memcpy(&nbad, res + 16, 8);
    memcpy(&md, res + 24, 4);
    float lse_err;
    memcpy(&lse_err, &md, 4);
    c->rel = s[1] > 0 ? sqrt(s[0] / s[1]) : (s[0] > 0 ? INFINITY : 0);
    c->lse_err = lse_err;
    double tol = r->bf16 ? TOL_BF16 : TOL_FP16;
    if (nbad == 0 && c->rel <= tol && lse_err <= TOL_LSE) return RUN_OK;
    tt__pipe_msg m;
    tt__wk_result(&m, TT__N_MEAS_WRONG);
    TT_PIPE_SET(&m, result, nonfinite, nbad > INT64_MAX ? INT64_MAX : (int64_t)nbad);
    /* inf or NaN (a reference of zeros, a NaN output) is left out */
    if (isfinite(c->rel)) TT_PIPE_SET(&m, result, rel_err, c->rel);
    if (isfinite(lse_err)) TT_PIPE_SET(&m, result, lse_err, lse_err);
    tt__wk_say_result(r, c, &m);
    c->out = 1;
    return RUN_WRONG;
}

/* Launches c `reps` times after one warm-up, rotating input sets, with an
 * event before each and after the last; appends the times to c->t. The
 * warm-up is per slice: the GPU has just run another candidate, and a
 * slice of 2 or 3 launches would otherwise carry that switch in its
 * median. The first timed launch reads the set after the warm-up's: on
 * the same set its inputs could still be in L2, a minimum no cold launch
 * reaches (split-KV at 8 sequences of 4 tokens over 1024 keys, d128, on
 * the H100, sets of 34 MB: minima 30-35% under medians whose p20 was
 * within 9% of them). */
int tt__wk_time_part(keyrun *r, cand *c, int reps) {
    tt_worker *w = r->w;
    const tt__cuda *cu = w->cu;
    if (reps > MAX_REPS - c->nt) reps = MAX_REPS - c->nt;
    if (reps < 1) return RUN_OK;
    if (launch(r, c, 0) < 0) return RUN_SKIP;
    for (int i = 0; i < reps; i++) {
        cu->EventRecord(w->ev[i], w->stream);
        if (launch(r, c, tt_wset(i, r->in.nrot)) < 0) return RUN_SKIP;
    }
    cu->EventRecord(w->ev[reps], w->stream);
    double expect = (reps + 1) * (c->t1_ms > 0 ? c->t1_ms : 1.0);
    int ws = tt__wk_wait_stream(w, w->o.launch_timeout_ms + 10 * expect, r->err, sizeof r->err);
    if (ws != WAIT_OK) return dead(r, c, ws);
    for (int i = 0; i < reps; i++) {
        float ms = 0;
        cu->EventElapsedTime(&ms, w->ev[i], w->ev[i + 1]);
        c->t[c->nt++] = ms;
    }
    return RUN_OK;
}
