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
/* Decode keys across batches (docs/tuning.md): fast mode halves a decode
 * key down to CROSS_KEEP finalists, not 2 (the regret of two batches is
 * noisier than one median); ties of regret within CROSS_TIE (the timing's
 * noise) go to the fastest at the key's batch. */
#define CROSS_KEEP 4
#define CROSS_TIE 0.005

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

/* The element counts of r->in at r->in.B; -1 if the bytes would wrap. */
static int set_counts(keyrun *r) {
    long long bytes;
    if (r->in.B > 65535 || r->H > 65535 ||
        __builtin_mul_overflow((long long)r->in.B * r->H, (r->Lq > r->Lk ? r->Lq : r->Lk) * r->D * 2, &bytes))
        return -1;
    r->in.nq = (long long)r->in.B * r->H * r->Lq * r->D;
    r->in.nk = (long long)r->in.B * r->Hkv * r->Lk * r->D;
    r->in.nlse = (long long)r->in.B * r->H * r->Lq;
    return 0;
}

/*
 * Decode keys across batches (docs/tuning.md): a decode key is timed at
 * its own batch and at a second one across the split line
 * (tt_wcross_batch), every candidate at both; the search ranks by the
 * worst-case regret over the two and keeps the least (tt_wrobust).
 */
static int is_decode(const keyrun *r) { return tt__key_regime(&r->t->key) == TT_REGIME_DECODE; }

/* The other batch's inputs in, or back out; each candidate's numbers with them. */
static void swap_batch(keyrun *r, pool *p) {
    wk_inputs t = r->in;
    r->in = r->alt;
    r->alt = t;
    for (int i = 0; i < p->n; i++) {
        cand *c = &p->c[i];
        tt_wstats st = c->st;
        double t1 = c->t1_ms;
        tt_nvml_sample cond = c->cond;
        int busy = c->busy;
        c->st = c->alt.st;
        c->t1_ms = c->alt.t1_ms;
        c->cond = c->alt.cond;
        c->busy = c->alt.busy;
        c->alt.st = st;
        c->alt.t1_ms = t1;
        c->alt.cond = cond;
        c->alt.busy = busy;
    }
}

/* A decode key's second batch: its inputs and reference made, every live
 * candidate checked there (wrong at any batch is wrong: reported, out).
 * Without one (not a decode key, nothing across the line, or no memory
 * for it) r->alt.B stays 0 and the key is timed at its own batch alone. */
static int setup_second_batch(keyrun *r, pool *p) {
    if (!is_decode(r)) return RUN_OK;
    tt_wdims d = {.batch = r->in.B, .heads_q = r->H, .heads_kv = r->Hkv};
    int32_t b2 = tt_wcross_batch(&d, r->Lk, r->D, r->w->dev.limits.sm_count);
    if (b2 == 0) return RUN_OK;
    swap_batch(r, p);
    r->in.B = b2;
    r->err[0] = 0;
    if (set_counts(r) < 0 || tt__wk_alloc_bufs(r) < 0 || tt__wk_run_reference(r) < 0) {
        fprintf(stderr, "tiletune-worker: decode key not timed at batch %d: %s\n", (int)b2,
                r->err[0] ? r->err : "over the kernel's limits");
        tt__wk_free_inputs(r->w, &r->in); /* the second batch's only: the key's own are in r->alt */
        swap_batch(r, p);
        memset(&r->alt, 0, sizeof r->alt);
        return RUN_OK;
    }
    for (int i = 0; i < p->n; i++) {
        cand *c = &p->c[i];
        if (!c->live) continue;
        tt__wk_say_try(r, c);
        int x = tt__wk_check(r, c);
        if (x == RUN_DEAD) return x;
        if (x != RUN_OK) {
            if (x == RUN_SKIP)
                fprintf(stderr, "tiletune-worker: variant not run at batch %d: %s\n", (int)b2, r->err);
            c->live = 0;
        }
    }
    swap_batch(r, p);
    return RUN_OK;
}

/* One timing pass at the key's batch and, for a decode key, at its other. */
static int time_both(keyrun *r, pool *p, int shift, int slices) {
    int rc = time_interleaved(r, p, shift, slices);
    if (rc != RUN_OK || r->alt.B == 0) return rc;
    swap_batch(r, p);
    rc = time_interleaved(r, p, shift, slices);
    swap_batch(r, p);
    return rc;
}

/* What the search ranks by: the median at the key's batch, or a decode
 * key's worst-case regret over its two (-1: out). */
static int scores(const keyrun *r, const pool *p, double *score) {
    double ma = -1, mb = -1;
    int live = 0;
    for (int i = 0; i < p->n; i++) {
        const cand *c = &p->c[i];
        if (!c->live) continue;
        live++;
        if (ma < 0 || c->st.median_ms < ma) ma = c->st.median_ms;
        if (mb < 0 || c->alt.st.median_ms < mb) mb = c->alt.st.median_ms;
    }
    for (int i = 0; i < p->n; i++) {
        const cand *c = &p->c[i];
        if (!c->live) score[i] = -1;
        else if (r->alt.B == 0) score[i] = c->st.median_ms;
        else {
            double a = c->st.median_ms / ma, b = c->alt.st.median_ms / mb;
            score[i] = a > b ? a : b;
        }
    }
    return live;
}

/* A decode key's choice, before the live ones are reported ok: each live
 * candidate's timing at the other batch reported `skipped` with that
 * batch (history; the store compares a key's times as one batch's), the
 * least regret kept (tt_wrobust), and those faster than it at the key's
 * batch reported `skipped` there, so the store's rule (the fastest ok)
 * makes it the winner. */
static void keep_least_regret(keyrun *r, pool *p) {
    if (r->alt.B == 0) return;
    int n = p->n;
    double *a = calloc((size_t)n + 1, sizeof *a), *b = calloc((size_t)n + 1, sizeof *b);
    if (!a || !b) goto out;
    swap_batch(r, p);
    for (int i = 0; i < n; i++)
        if (p->c[i].live) tt__wk_say_timed(r, &p->c[i], "skipped");
    swap_batch(r, p);
    for (int i = 0; i < n; i++) {
        a[i] = p->c[i].live ? p->c[i].st.median_ms : -1;
        b[i] = p->c[i].live ? p->c[i].alt.st.median_ms : -1;
    }
    double ra, rb;
    int pick = tt_wrobust(a, b, n, CROSS_TIE, &ra, &rb), faster = 0;
    if (pick < 0) goto out;
    for (int i = 0; i < n; i++) {
        cand *c = &p->c[i];
        if (i != pick && c->live && a[i] <= a[pick]) {
            tt__wk_say_timed(r, c, "skipped");
            c->live = 0;
            faster++;
        }
    }
    fprintf(stderr,
            "tiletune-worker: decode key at batch %d and %d: kept %.3fx the best at %d and %.3fx at %d "
            "(%d faster at %d)\n",
            (int)r->in.B, (int)r->alt.B, ra, (int)r->in.B, rb, (int)r->alt.B, faster, (int)r->in.B);
out:
    free(a);
    free(b);
}

/* Every checked candidate timed with its full count in TIME_SLICES
 * interleaved slices; the RESULTs follow the last slice. After a dead
 * launch the modules stay: unloading waits for the GPU, and a hung kernel
 * never lets it finish. The worker exits next. */
static int run_exhaustive(keyrun *r, pool *p, int *nok) {
    int live, rc = check_all(r, p, &live);
    if (rc == RUN_OK && live > 0) rc = setup_second_batch(r, p);
    if (rc == RUN_OK && live > 0) rc = time_both(r, p, 0, TIME_SLICES);
    if (rc == RUN_DEAD) return rc;
    if (rc == RUN_OK && live > 0) keep_least_regret(r, p);
    say_live(r, p, nok);
    unload_all(p);
    return RUN_OK;
}

/* Successive halving (docs/tuning.md): the checked variants are timed with
 * 1/16 of their exhaustive repetitions (at least 2) in FAST_SLICES
 * interleaved slices; the best half, less any more than FAST_CUT slower
 * than the best, plus any within FAST_TIE of it, go on with twice the
 * repetitions, until two are left or the count would reach the exhaustive
 * one; the survivors are then timed like exhaustive's (TIME_SLICES slices
 * of the full count), so the winner's numbers are as good as an
 * exhaustive search's. A dropped variant's RESULT carries its last pass,
 * as status skipped: only the finalists compete for the winner. A decode
 * key is ranked by its worst-case regret over two batches (scores). */
static int run_fast(keyrun *r, pool *p, int *nok) {
    int n = p->n, live, shift = FAST_SHIFT, keep_n = is_decode(r) ? CROSS_KEEP : 2;
    double *med = calloc((size_t)n + 1, sizeof *med);
    int *keep = calloc((size_t)n + 1, sizeof *keep);
    int rc = RUN_SKIP;
    if (!med || !keep) goto out;
    rc = check_all(r, p, &live);
    if (rc == RUN_OK && live > 0) rc = setup_second_batch(r, p);
    if (rc == RUN_OK && live > 2) rc = time_both(r, p, shift, FAST_SLICES);
    while (rc == RUN_OK && scores(r, p, med) > keep_n) {
        live = tt_whalve(med, n, FAST_TIE, FAST_CUT, keep);
        for (int i = 0; i < n; i++)
            if (med[i] >= 0 && !keep[i]) {
                tt__wk_say_timed(r, &p->c[i], "skipped"); /* not a result the key can end on */
                p->c[i].live = 0;
                tt__kernel_unload(p->c[i].k);
                p->c[i].k = NULL;
            }
        if (live <= keep_n || --shift == 0) break;
        rc = time_both(r, p, shift, FAST_SLICES);
    }
    if (rc == RUN_OK) rc = time_both(r, p, 0, TIME_SLICES);
    if (rc == RUN_OK) keep_least_regret(r, p);
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
    r.in.B = dims.batch;
    r.H = dims.heads_q;
    r.Hkv = dims.heads_kv;
    /* The daemon takes batch up to 2^20 but the grid's y and z (heads,
     * batch) stop at 65535: every launch would fail and read as "no
     * correct variant". And B*H*L*D*2 bytes must not wrap. */
    int too_big = set_counts(&r) < 0;
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
                 (int)r.in.B, (int)r.H, (long long)(r.Lq > r.Lk ? r.Lq : r.Lk), (int)r.D);
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
