/*
 * tiletune-worker's pieces share one key's measurement state: the open GPU
 * (gpu.c), the candidates' compiles (kernels/pool.h), their checks and timings
 * (measure.c), the search over them (tune.c) and the lines to the daemon
 * (report.c). Private to src/tuner/worker/.
 */
#ifndef TT_TUNER_WORKER_RUN_H
#define TT_TUNER_WORKER_RUN_H

#include "common/pipe.h"
#include "kernels/cuda_api.h"
#include "kernels/jit.h"
#include "kernels/launch.h"
#include "kernels/pool.h"
#include "kernels/source.h"
#include "kernels/variants.h"
#include "tuner/worker/gpu.h"
#include "tuner/worker/nvml.h"
#include "tuner/worker/search.h"

#define MAX_REPS 200
#define MIN_REPS 10
#define CHECK_THREADS 256
#define MAX_ROTATE 8

/* Tolerances of ||O - O_ref|| / ||O_ref|| against the fp32 reference (whose
 * own output is rounded to the dtype): twice those the GPU tests hold the
 * kernel to against float64, so only a real bug fails. LSE absolute. */
#define TOL_FP16 4e-3
#define TOL_BF16 3e-2
#define TOL_LSE 2e-3

struct tt_worker {
    tt_worker_opts o;
    const tt__cuda *cu;
    tt__device dev;
    int has_dev;
    CUstream stream;
    CUevent ev[MAX_REPS + 1];
    int nev;
    CUmodule chk;
    CUfunction f_fill, f_bad, f_diff, f_lse;
    CUdeviceptr scratch;
    tt_nvml *nvml;
    const tt__source *src, *ref;
    int l2_bytes;
};

/* How a wait on the stream ended (tt__wk_wait_stream). */
enum { WAIT_OK = 0, WAIT_TIMEOUT = 1, WAIT_FAULT = 2 };
/* How a candidate's check or timing ended. */
enum { RUN_OK = 0, RUN_WRONG, RUN_SKIP, RUN_DEAD };

typedef struct cand {
    tt__variant v;
    const tt__cubin *cubin; /* the compile pool's, once compiled */
    tt__kernel *k;
    int out;      /* 1: reported (RESULT sent), no longer timed */
    int live;     /* checked and still in the search: timed by time_interleaved */
    tt_wstats st; /* the latest timing pass */
    double t1_ms; /* the checked launch, for the repetition count */
    /* A decode key's other batch: st, t1_ms, cond and busy there (tune.c
     * swaps them in while timing it) */
    struct {
        tt_wstats st;
        double t1_ms;
        tt_nvml_sample cond;
        int busy;
    } alt;
    double rel, lse_err;
    /* The current timing pass, gathered over its interleaved slices: */
    float t[MAX_REPS];   /* per-launch times */
    int nt, want;        /* launches so far, launches in all */
    int nt_slice;        /* nt when the current slice began (a busy slice is re-taken) */
    int busy;            /* a slice stayed busy after its re-takes */
    tt_nvml_sample cond; /* NVML right after the candidate's part of the last slice */
} cand;

/* A key's candidates and their compiles, c[i] the pool's item i. */
typedef struct pool {
    tt_worker *w;
    cand *c;
    int n;
    tt__pool *cp;
} pool;

/* A key's inputs, output and reference at one batch. A decode key holds
 * two (tune.c, "Decode across batches") and swaps them. */
typedef struct wk_inputs {
    int32_t B;
    long long nq, nk, nlse;
    int nrot; /* input sets rotated through while timing */
    CUdeviceptr q[MAX_ROTATE], k[MAX_ROTATE], v[MAX_ROTATE], o, lse, oref, lseref;
    int nplanes;
    long long plane_q[2], plane_lse[2]; /* element offsets of the checked (batch, head) planes */
} wk_inputs;

typedef struct keyrun {
    tt_worker *w;
    const tt_wtask *t;
    tt_wemit emit;
    void *ud;
    int32_t H, Hkv, D; /* H: query heads; Hkv: K/V heads, H / the key's group */
    int64_t Lq, Lk;
    int bf16;
    wk_inputs in;  /* the batch being timed */
    wk_inputs alt; /* a decode key's other batch (B 0: none) */
    char err[512];
    tt__cubin *refcb; /* the reference, compiled before the pool starts */
} keyrun;

/* gpu.c: the device */
double tt__wk_now_ms(void);
void tt__wk_sleep_ms(double ms);
/* Waits for the stream with a deadline: WAIT_OK, WAIT_TIMEOUT or
 * WAIT_FAULT (the context is now unusable). */
int tt__wk_wait_stream(tt_worker *w, double limit_ms, char *err, size_t errlen);
/* Launches one of the helper kernels (check.cu) over n elements. */
CUresult tt__wk_launch_helper(tt_worker *w, CUfunction f, long long n, void **args);
/* Loads the helper kernels once per worker. */
int tt__wk_load_check(tt_worker *w, char *err, size_t errlen);

/* measure.c: inputs, the reference, one candidate's check and timing */
/* r->in's buffers at r->in.B (its counts set); tt__wk_free_bufs frees
 * r->in's and r->alt's. */
int tt__wk_alloc_bufs(keyrun *r);
void tt__wk_free_bufs(keyrun *r);
/* One batch's buffers, its pointers zeroed. */
void tt__wk_free_inputs(tt_worker *w, wk_inputs *in);
int tt__wk_compile_reference(keyrun *r);
int tt__wk_run_reference(keyrun *r);
/* Loads, poisons, runs once and checks c against the reference: RUN_*. */
int tt__wk_check(keyrun *r, cand *c);
/* Appends `reps` timed launches to c->t: RUN_*. */
int tt__wk_time_part(keyrun *r, cand *c, int reps);

/* report.c: the lines to the daemon (docs/worker-protocol.md), written from
 * the pipe protocol's table (common/pipe.h). 0, or a negative status for
 * a message the table refuses (logged, not sent). */
int tt__wk_send(tt_wemit emit, void *ud, const tt__pipe_msg *m);
/* A line as text: read back by the table and sent as the table writes it,
 * so a field the table lacks is refused here, not by the daemon. */
int tt__wk_emitf(tt_wemit emit, void *ud, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* DONE for task id: done, or failed for `reason` (one word) if not NULL. */
int tt__wk_say_done(tt_wemit emit, void *ud, int64_t id, const char *reason);
void tt__wk_say_try(keyrun *r, const cand *c);
/* An empty RESULT of status (TT__N_MEAS_*), for the caller's own fields. */
void tt__wk_result(tt__pipe_msg *m, int status);
/* Adds the task, the candidate's config and compile report and the problem
 * timed to a RESULT, and sends it. */
void tt__wk_say_result(keyrun *r, const cand *c, tt__pipe_msg *m);
/* A timed candidate's RESULT (status ok or skipped); marks it reported. */
void tt__wk_say_timed(keyrun *r, cand *c, const char *status);
void tt__wk_say_ok(keyrun *r, cand *c);

#endif
