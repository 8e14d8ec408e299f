/* The search over a key's variants (docs/tuning.md): every candidate
 * checked as its compile is ready, then timed interleaved, exhaustively or
 * by successive halving; and tt_worker_measure, which runs one key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/key.h"
#include "tuner/worker/run.h"

#define FAST_SHIFT 4   /* fast mode's first round: 1/16 of the exhaustive repetitions */
#define FAST_TIE 0.01  /* variants within 1% of the best survive a round */
#define FAST_CUT 0.15  /* ... and none more than 15% slower than the best does */
#define TIME_SLICES 4  /* a full-count timing pass is interleaved over this many slices */
#define FAST_SLICES 2  /* ... and a fast-mode round over this many */
#define BUSY_RETRIES 3 /* a busy slice is re-taken this many times */
#define BUSY_WAIT_MS 1000

static int exhaustive_reps(const keyrun *r, const cand *c) {
    return tt_wreps(c->t1_ms, r->w->o.budget_ms, MIN_REPS, MAX_REPS);
}

/* Fast mode's repetitions at halving depth `shift`: 1/2^shift of the
 * exhaustive count, at least 2; shift 0 is the exhaustive count. */
static int fast_reps(const keyrun *r, const cand *c, int shift) {
    int exh = exhaustive_reps(r, c), n = exh >> shift;
    return n < 2 ? (exh < 2 ? exh : 2) : n;
}

/*
 * One timing pass over every live candidate (docs/tuning.md, "Timing"):
 * each gets fast_reps(shift) launches, split over `slices` slices, and a
 * slice times every live candidate in turn. The H200's boost clock drifts
 * by 5% within seconds, so candidates timed one after the other are
 * compared at different clocks; interleaved, the drift hits all alike. A
 * candidate's statistics come from its launches of all slices.
 *
 * NVML is sampled before and after each slice (and after each candidate's
 * part of the last slice: its reported conditions); a slice during which
 * another process held the GPU is re-taken up to BUSY_RETRIES times, a
 * second apart, and then its candidates are reported busy. A launch
 * refused (RUN_SKIP) takes the candidate out of the pass (live = 0),
 * unreported; RUN_DEAD returns at once.
 */
static int time_interleaved(keyrun *r, pool *p, int shift, int slices) {
    tt_worker *w = r->w;
    int live = 0;
    for (int i = 0; i < p->n; i++) {
        cand *c = &p->c[i];
        if (!c->live) continue;
        live++;
        int want = fast_reps(r, c, shift);
        c->want = want < slices ? slices : want > MAX_REPS ? MAX_REPS : want;
        c->nt = 0;
        c->busy = 0;
    }
    for (int s = 0; s < slices && live > 0; s++) {
        int last = s == slices - 1;
        for (int attempt = 0;; attempt++) {
            tt_nvml_sample before, after;
            tt_nvml_sample_now(w->nvml, &before);
            int busy = before.processes > 1;
            for (int i = 0; i < p->n; i++) {
                cand *c = &p->c[i];
                if (!c->live) continue;
                c->nt_slice = c->nt;
                tt__wk_say_try(r, c);
                int x = tt__wk_time_part(r, c, tt_wslice(c->want, slices, s));
                if (x == RUN_DEAD) return x;
                if (x == RUN_SKIP) {
                    fprintf(stderr, "tiletune-worker: variant not run: %s\n", r->err);
                    c->live = 0;
                    continue;
                }
                if (last) {
                    tt_nvml_sample_now(w->nvml, &c->cond);
                    busy |= c->cond.processes > 1;
                }
            }
            tt_nvml_sample_now(w->nvml, &after);
            if (!(busy |= after.processes > 1)) break;
            if (attempt == BUSY_RETRIES) {
                for (int i = 0; i < p->n; i++) p->c[i].busy |= p->c[i].live;
                break;
            }
            fprintf(stderr, "tiletune-worker: the GPU is shared (%d compute processes); re-taking slice %d\n",
                    before.processes > after.processes ? before.processes : after.processes, s + 1);
            for (int i = 0; i < p->n; i++)
                if (p->c[i].live) p->c[i].nt = p->c[i].nt_slice;
            tt__wk_sleep_ms(BUSY_WAIT_MS);
        }
    }
    for (int i = 0; i < p->n; i++) {
        cand *c = &p->c[i];
        if (c->live && tt_wstats_of(c->t, c->nt, &c->st) < 0) c->live = 0; /* no launch: cannot happen */
    }
    return RUN_OK;
}

/* Builds the candidate list: the space minus AVOID, plus (fault builds,
 * --inject) the two faulty variants first so a test meets them early. */
static int candidates(keyrun *r, cand **out, int *n) {
    tt_worker *w = r->w;
    tt__space_entry *e = NULL;
    size_t ne = 0;
    tt_key k1;
    tt__key_to_v1(&r->t->key, &k1);
    if (tt__space_enumerate_group(&k1, r->t->key.group, &w->dev.limits, 0, NULL, 1, &e, &ne, r->err,
                                  sizeof r->err) < 0)
        return -1;
    cand *c = calloc(ne + 2, sizeof *c);
    if (!c) {
        free(e);
        snprintf(r->err, sizeof r->err, "out of memory");
        return -1;
    }
    int k = 0;
#ifdef TT_FAULT_INJECTION
    if (w->o.inject) {
        /* layout=pad is legal but never in the space: configs no real
         * variant has, so recording them failed hides nothing. */
        for (int f = TT_FAULT_OOB_WRITE; f <= TT_FAULT_HANG; f++) {
            tt__variant v;
            memset(&v, 0, sizeof v);
            v.config.family = TT_FAMILY_MMA;
            v.config.block_m = 64;
            v.config.block_n = 32;
            v.config.warps = 4;
            v.config.stages = 1;
            v.config.layout = TT_LAYOUT_PAD;
            v.config.q_in_regs = f == TT_FAULT_HANG;
            v.head_dim = r->D;
            v.dtype = r->t->key.dtype;
            v.causal = r->t->key.causal;
            v.arch = w->dev.limits.arch;
            v.fault = f;
            c[k++].v = v;
        }
    }
#endif
    for (size_t i = 0; i < ne; i++) c[k++].v = e[i].variant;
    free(e);
    int kept = 0;
    for (int i = 0; i < k; i++) {
        int avoided = 0;
        for (int a = 0; a < r->t->navoid && !avoided; a++)
            avoided = tt_config_equal(&c[i].v.config, &r->t->avoid[a]);
        if (!avoided) c[kept++] = c[i];
    }
    *out = c;
    *n = kept;
    return 0;
}

/* Starts compiling the candidates in order on the worker's compile threads;
 * the GPU checks each as soon as it is ready (check_all). */
static int start_compiles(keyrun *r, pool *p) {
    tt_worker *w = r->w;
    tt__variant *v = malloc((size_t)p->n * sizeof *v);
    if (!v) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return -1;
    }
    for (int i = 0; i < p->n; i++) v[i] = p->c[i].v;
    tt__pool_opts o = {
        .jo = {.source = w->src, .cache_dir = w->o.cache_dir},
        .dev = w->dev.limits,
        .threads = w->o.compile_threads,
        /* Compiles use every core but one; at nice 10 they yield to the
         * daemon answering lookups on the same node (docs/perf.md: lookup
         * p99 while tuning) and to the thread timing the GPU. */
        .nice = 10,
        .keep_cubins = 1, /* loaded by tt__wk_check */
    };
    int rc = tt__pool_start(v, (size_t)p->n, &o, &p->cp, r->err, sizeof r->err);
    free(v);
    return rc < 0 ? -1 : 0;
}

static void unload_all(pool *p) {
    for (int i = 0; i < p->n; i++) {
        tt__kernel_unload(p->c[i].k);
        p->c[i].k = NULL;
    }
}

/* Checks every candidate as soon as its compile is ready (the GPU checks
 * while the CPUs compile the rest). One that passes stays loaded and live
 * for the timing passes: a key's modules are all loaded at once, a few
 * dozen small cubins. Check failures are reported here (tt__wk_check()). */
static int check_all(keyrun *r, pool *p, int *live) {
    *live = 0;
    for (int i = 0; i < p->n; i++) {
        cand *c = &p->c[i];
        c->live = 0;
        if (tt__pool_wait(p->cp, (size_t)i) != TT_VARIANT_OK) continue;
        c->cubin = tt__pool_cubin(p->cp, (size_t)i);
        tt__wk_say_try(r, c);
        int x = tt__wk_check(r, c);
        if (x == RUN_DEAD) return x;
        if (x == RUN_OK) {
            c->live = 1;
            (*live)++;
            continue;
        }
        if (x == RUN_SKIP) fprintf(stderr, "tiletune-worker: variant not run: %s\n", r->err);
        tt__kernel_unload(c->k);
        c->k = NULL;
    }
    return RUN_OK;
}

static void say_live(keyrun *r, pool *p, int *nok) {
    for (int i = 0; i < p->n; i++)
        if (p->c[i].live) {
            tt__wk_say_ok(r, &p->c[i]);
            (*nok)++;
        }
}

/* Every checked candidate timed with its full count in TIME_SLICES
 * interleaved slices; the RESULTs follow the last slice. After a dead
 * launch the modules stay: unloading waits for the GPU, and a hung kernel
 * never lets it finish. The worker exits next. */
static int run_exhaustive(keyrun *r, pool *p, int *nok) {
    int live, rc = check_all(r, p, &live);
    if (rc == RUN_OK && live > 0) rc = time_interleaved(r, p, 0, TIME_SLICES);
    if (rc == RUN_DEAD) return rc;
    say_live(r, p, nok);
    unload_all(p);
    return RUN_OK;
}

/* med[i]: live candidate i's median of the last pass, -1 for the others.
 * Returns how many are live. */
static int medians(const pool *p, double *med) {
    int live = 0;
    for (int i = 0; i < p->n; i++) {
        med[i] = p->c[i].live ? p->c[i].st.median_ms : -1;
        live += p->c[i].live;
    }
    return live;
}

/* Successive halving (docs/tuning.md): the checked variants are timed with
 * 1/16 of their exhaustive repetitions (at least 2) in FAST_SLICES
 * interleaved slices; the best half, less any more than FAST_CUT slower
 * than the best, plus any within FAST_TIE of it, go on with twice the
 * repetitions, until two are left or the count would reach the exhaustive
 * one; the survivors are then timed like exhaustive's (TIME_SLICES slices
 * of the full count), so the winner's numbers are as good as an
 * exhaustive search's. A dropped variant's RESULT carries its last pass,
 * as status skipped: only the finalists compete for the winner. */
static int run_fast(keyrun *r, pool *p, int *nok) {
    int n = p->n, live, shift = FAST_SHIFT;
    double *med = calloc((size_t)n + 1, sizeof *med);
    int *keep = calloc((size_t)n + 1, sizeof *keep);
    int rc = RUN_SKIP;
    if (!med || !keep) goto out;
    rc = check_all(r, p, &live);
    if (rc == RUN_OK && live > 2) rc = time_interleaved(r, p, shift, FAST_SLICES);
    while (rc == RUN_OK && medians(p, med) > 2) {
        live = tt_whalve(med, n, FAST_TIE, FAST_CUT, keep);
        for (int i = 0; i < n; i++)
            if (med[i] >= 0 && !keep[i]) {
                tt__wk_say_timed(r, &p->c[i], "skipped"); /* not a result the key can end on */
                p->c[i].live = 0;
                tt__kernel_unload(p->c[i].k);
                p->c[i].k = NULL;
            }
        if (live <= 2 || --shift == 0) break;
        rc = time_interleaved(r, p, shift, FAST_SLICES);
    }
    if (rc == RUN_OK) rc = time_interleaved(r, p, 0, TIME_SLICES);
    if (rc == RUN_OK) say_live(r, p, nok);
out:
    if (rc != RUN_DEAD) unload_all(p); /* see run_exhaustive */
    free(med);
    free(keep);
    return rc;
}

int tt_worker_measure(tt_worker *w, const tt_wtask *t, tt_wemit emit, void *ud) {
    keyrun r;
    memset(&r, 0, sizeof r);
    r.w = w;
    r.t = t;
    r.emit = emit;
    r.ud = ud;
    r.D = t->key.head_dim;
    r.Lq = t->key.seqlen_q;
    r.Lk = t->key.seqlen_k;
    r.bf16 = t->key.dtype == TT_DTYPE_BF16;
    tt_wdims dims;
    tt_wshape(&t->key, t->batch, t->heads, &dims);
    r.B = dims.batch;
    r.H = dims.heads_q;
    r.Hkv = dims.heads_kv;
    /* The daemon takes batch up to 2^20 but the grid's y and z (heads,
     * batch) stop at 65535: every launch would fail and read as "no
     * correct variant". And B*H*L*D*2 bytes must not wrap. */
    long long bytes;
    int too_big = r.B > 65535 || r.H > 65535 ||
                  __builtin_mul_overflow((long long)r.B * r.H, (r.Lq > r.Lk ? r.Lq : r.Lk) * r.D * 2, &bytes);
    if (!too_big) {
        r.nq = (long long)r.B * r.H * r.Lq * r.D;
        r.nk = (long long)r.B * r.Hkv * r.Lk * r.D;
        r.nlse = (long long)r.B * r.H * r.Lq;
    }
    const char *fail = NULL;
    int rc = TT_WORKER_NEXT, nok = 0, ncand = 0;
    cand *c = NULL;
    pool p;
    memset(&p, 0, sizeof p);
    if (too_big) {
        fail = "problem-size";
        snprintf(r.err, sizeof r.err,
                 "batch %d x heads %d x seqlen %lld x head_dim %d is over the kernel's limits "
                 "(batch and heads at most 65535)",
                 (int)r.B, (int)r.H, (long long)(r.Lq > r.Lk ? r.Lq : r.Lk), (int)r.D);
        goto done;
    }
    if (t->key.rev[0] && strcmp(t->key.rev, w->src->rev) != 0) {
        fail = "rev-mismatch";
        snprintf(r.err, sizeof r.err, "the key is for kernel revision %s, this worker compiles %s",
                 t->key.rev, w->src->rev);
        goto done;
    }
    if (tt__wk_load_check(w, r.err, sizeof r.err) < 0) {
        fail = "check-kernels";
        goto done;
    }
    if (candidates(&r, &c, &ncand) < 0) {
        fail = "space";
        goto done;
    }
    if (ncand == 0) {
        fail = "no-variants";
        snprintf(r.err, sizeof r.err, "every variant of the space is in AVOID");
        goto done;
    }
    p.w = w;
    p.c = c;
    p.n = ncand;
    if (tt__wk_compile_reference(&r) < 0) {
        fail = "reference";
        goto done;
    }
    if (start_compiles(&r, &p) < 0) { /* compiles run while the inputs and the reference are made */
        fail = "memory";
        goto done;
    }
    double t0 = tt__wk_now_ms();
    if (tt__wk_alloc_bufs(&r) < 0) {
        fail = "memory";
        goto stop;
    }
    if (tt__wk_run_reference(&r) < 0) {
        fail = "reference";
        rc = TT_WORKER_EXIT; /* a reference that fails leaves the context in doubt */
        goto stop;
    }
    int x = t->fast ? run_fast(&r, &p, &nok) : run_exhaustive(&r, &p, &nok);
    if (x == RUN_DEAD) rc = TT_WORKER_EXIT;
    else if (nok == 0) {
        fail = "no-correct-variant";
        snprintf(r.err, sizeof r.err, "no variant of %d passed the check", ncand);
    }
    fprintf(stderr, "tiletune-worker: key %s/%d/%d/%lld: %d variants ok of %d in %.1f s\n",
            r.bf16 ? "bf16" : "fp16", (int)r.D, (int)t->key.causal, (long long)r.Lq, nok, ncand,
            (tt__wk_now_ms() - t0) / 1000);
stop:
    tt__pool_free(p.cp); /* the candidates' cubins with it */
done:
    tt__cubin_free(r.refcb);
    free(c);
    if (rc == TT_WORKER_NEXT || fail) tt__wk_free_bufs(&r);
    if (rc == TT_WORKER_EXIT && !fail) return rc; /* the daemon gives the key to the next worker */
    if (fail) {
        fprintf(stderr, "tiletune-worker: key failed (%s): %s\n", fail, r.err);
        tt__wk_emitf(emit, ud, "DONE id=%lld status=failed reason=%s", (long long)t->id, fail);
    } else {
        tt__wk_emitf(emit, ud, "DONE id=%lld status=done", (long long)t->id);
    }
    return rc;
}
