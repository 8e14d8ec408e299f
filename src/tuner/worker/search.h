/*
 * The pure arithmetic of the measurement worker (tiletune-worker): timing
 * statistics, how a timing is sliced for interleaving, and the
 * successive-halving rule of the fast search mode.
 * No GPU, no I/O: unit-tested in tests/worker/.
 */
#ifndef TT_TUNER_WORKER_SEARCH_H
#define TT_TUNER_WORKER_SEARCH_H

#include <stddef.h>
#include <stdint.h>

#include "tiletune.h"

typedef struct tt_wstats {
    double median_ms, min_ms;
    double spread; /* (p80 - p20) / median */
    int reps;
} tt_wstats;

/* Statistics of `n` >= 1 launch times (ms). Sorts `t` in place. */
int tt_wstats_of(float *t, int n, tt_wstats *out);

/* TFLOP/s of one launch: 4·B·H·Lq·Lk·D / t, halved for causal (PyTorch's
 * top-left mask over a square problem computes about half the scores). */
double tt_wtflops(int64_t batch, int64_t heads, int64_t lq, int64_t lk, int64_t d, int causal, double ms);

/* The benchmark's problem rule for a key: 16384 tokens (batch·seqlen_q) and
 * heads·head_dim = 2048, at least one of each. A job's non-zero batch/heads
 * win. */
void tt_wproblem(int64_t seqlen_q, int32_t head_dim, int32_t job_batch, int32_t job_heads, int32_t *batch,
                 int32_t *heads);

/* The problem a key is timed at, per regime (docs/tuning.md). Prefill:
 * tt_wproblem, heads_kv = heads_q. Decode and chunk, as an inference
 * server runs them: 32 query heads (or the job's), heads_kv = heads_q /
 * group, batch 1..8 sized so the K/V cache is about 256 MB (or the
 * job's batch). heads_q is always heads_kv x group. */
typedef struct tt_wdims {
    int32_t batch, heads_q, heads_kv;
} tt_wdims;
void tt_wshape(const tt_key_v2 *key, int32_t job_batch, int32_t job_heads, tt_wdims *out);

/* Timed repetitions for one variant: enough launches to fill budget_ms
 * given one launch of t1_ms, within [min_reps, max_reps]. */
int tt_wreps(double t1_ms, double budget_ms, int min_reps, int max_reps);

/* Launches in slice s (0-based) of `slices` when a timing of `total`
 * launches is interleaved over them: as even as can be, the first
 * total % slices slices one more. A total under `slices` is raised to it
 * (every slice times at least once). 0 for s outside [0, slices). */
int tt_wslice(int total, int slices, int s);

/* The input set timed launch `i` (0-based) of a slice reads, of `nsets`
 * rotated: the slice's warm-up reads set 0 and each timed launch the set
 * after its predecessor's, so with two or more sets no timed launch finds
 * the previous launch's inputs in L2 (with one set, 0). */
int tt_wset(int i, int nsets);

/*
 * One round of successive halving. `median[i]` is candidate i's median
 * time, or a negative value for a candidate already out (it stays out).
 * keep[i] is set to 1 for a live candidate that is among the best
 * ceil(m/2) of the m live ones and (cut > 0) within `cut` of the best
 * (0.15 = 15% slower at most), and for any within `tie` of the best (a
 * variant at the noise level of the best is not dropped on a coin flip).
 * The best two are always kept. Returns how many are kept.
 */
int tt_whalve(const double *median, int n, double tie, double cut, int *keep);

/*
 * Decode keys across batches (docs/tuning.md, "Decode across batches"): a
 * key has no batch, and a decode schedule's best tile depends on how many
 * (batch, K/V head) units the grid has against the SMs. The finalists of a
 * decode key are timed again at a second batch, on the other side of that
 * line, and the key keeps the one with the least worst-case regret.
 *
 * tt_wcross_batch: the second batch for a key timed at `d` with `sms` SMs:
 * with fewer units than SMs (the keys are split), a wide batch of at least
 * 4 units an SM whose K and V stay within 2 GiB; with as many or more, one
 * sequence. 0 where it would not differ from d->batch.
 */
int32_t tt_wcross_batch(const tt_wdims *d, int64_t seqlen_k, int32_t head_dim, int sms);

/*
 * The least worst-case regret over two timings: a[i] and b[i] are
 * candidate i's medians at the two batches (negative: out). Candidate i's
 * regret is the larger of a[i] / min(a) and b[i] / min(b); returns the
 * index of the least, and among those within `tie` of it (0.005: half a
 * percent, the timing's noise) the fastest at a. -1 if none has both.
 * ra, rb (may be NULL): the kept one's time over the best at a and at b.
 */
int tt_wrobust(const double *a, const double *b, int n, double tie, double *ra, double *rb);

#endif
