#include "tuner/worker/search.h"

#include <stdlib.h>

#include "common/key.h"
#include "tiletune.h"

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* The value at quantile q of sorted t[0..n) (linear interpolation). */
static double quantile(const float *t, int n, double q) {
    double pos = q * (n - 1);
    int lo = (int)pos;
    if (lo >= n - 1) return t[n - 1];
    double f = pos - lo;
    return t[lo] * (1 - f) + t[lo + 1] * f;
}

int tt_wstats_of(float *t, int n, tt_wstats *out) {
    if (!t || n < 1 || !out) return TT_ERR_INVAL;
    qsort(t, (size_t)n, sizeof *t, cmp_float);
    tt_wstats s;
    s.median_ms = quantile(t, n, 0.5);
    s.min_ms = t[0];
    s.spread = s.median_ms > 0 ? (quantile(t, n, 0.8) - quantile(t, n, 0.2)) / s.median_ms : 0;
    s.reps = n;
    *out = s;
    return 0;
}

double tt_wtflops(int64_t batch, int64_t heads, int64_t lq, int64_t lk, int64_t d, int causal, double ms) {
    if (ms <= 0) return 0;
    return tt__sdpa_flops(batch, heads, lq, lk, d, causal) / (ms * 1e-3) / 1e12;
}

void tt_wproblem(int64_t seqlen_q, int32_t head_dim, int32_t job_batch, int32_t job_heads, int32_t *batch,
                 int32_t *heads) {
    int64_t b = seqlen_q > 0 ? 16384 / seqlen_q : 1;
    int32_t h = head_dim > 0 ? 2048 / head_dim : 1;
    *batch = job_batch > 0 ? job_batch : (int32_t)(b < 1 ? 1 : b);
    *heads = job_heads > 0 ? job_heads : (h < 1 ? 1 : h);
}

/* Inference keys: a model's 32 query heads, batch sized so K and V
 * together are about this many bytes (a cache bigger than L2, as a server
 * holds), at most INFER_BATCH_MAX sequences. */
#define INFER_HEADS_Q 32
#define INFER_KV_BYTES (256LL << 20)
#define INFER_BATCH_MAX 8

void tt_wshape(const tt_key_v2 *key, int32_t job_batch, int32_t job_heads, tt_wdims *out) {
    int32_t g = key->group > 1 ? key->group : 1;
    tt__regime reg = tt__key_regime(key);
    if (reg == TT_REGIME_PREFILL) {
        tt_wproblem(key->seqlen_q, key->head_dim, job_batch, job_heads, &out->batch, &out->heads_q);
        /* a prefill key is canonically group 1; a job's heads may not
         * divide by another */
        out->heads_kv = out->heads_q % g == 0 ? out->heads_q / g : out->heads_q;
        return;
    }
    int32_t hq = job_heads > 0 ? job_heads : INFER_HEADS_Q;
    int32_t hkv = hq / g > 0 ? hq / g : 1;
    out->heads_kv = hkv;
    out->heads_q = hkv * g;
    if (job_batch > 0) {
        out->batch = job_batch;
        return;
    }
    /* K and V: 2 tensors x heads_kv x seqlen_k x head_dim x 2 bytes. */
    long long per_seq = 4LL * hkv * key->seqlen_k * (key->head_dim > 0 ? key->head_dim : 1);
    long long b = INFER_KV_BYTES / (per_seq > 0 ? per_seq : 1);
    out->batch = (int32_t)(b < 1 ? 1 : b > INFER_BATCH_MAX ? INFER_BATCH_MAX : b);
}

int tt_wreps(double t1_ms, double budget_ms, int min_reps, int max_reps) {
    if (t1_ms <= 0) return max_reps;
    double r = budget_ms / t1_ms;
    if (r < min_reps) return min_reps;
    if (r > max_reps) return max_reps;
    return (int)r;
}

int tt_whalve(const double *median, int n, double tie, double cut, int *keep) {
    int live = 0;
    double best = -1;
    for (int i = 0; i < n; i++) {
        keep[i] = 0;
        if (median[i] < 0) continue;
        live++;
        if (best < 0 || median[i] < best) best = median[i];
    }
    if (live == 0) return 0;
    int want = (live + 1) / 2, kept = 0;
    for (int i = 0; i < n; i++) {
        if (median[i] < 0) continue;
        /* rank: how many live ones are strictly faster (ties share a rank) */
        int faster = 0;
        for (int j = 0; j < n; j++)
            if (median[j] >= 0 && median[j] < median[i]) faster++;
        int in_half = faster < want && (cut <= 0 || median[i] <= best * (1 + cut));
        if (in_half || faster < 2 || median[i] <= best * (1 + tie)) {
            keep[i] = 1;
            kept++;
        }
    }
    return kept;
}

int tt_wslice(int total, int slices, int s) {
    if (slices < 1) slices = 1;
    if (s < 0 || s >= slices) return 0;
    if (total < slices) total = slices;
    return total / slices + (s < total % slices);
}

int tt_wset(int i, int nsets) {
    if (nsets < 2 || i < 0) return 0;
    return (i + 1) % nsets;
}

/* The wide batch: enough (batch, K/V head) units for CROSS_WAVES waves of
 * one CTA an SM, so nothing is split and the tile alone decides; its K
 * and V (2 tensors of 2-byte elements) at most CROSS_KV_BYTES, which the
 * worker allocates once (no rotation: it is far over L2). */
#define CROSS_WAVES 4
#define CROSS_KV_BYTES (2LL << 30)

int32_t tt_wcross_batch(const tt_wdims *d, int64_t seqlen_k, int32_t head_dim, int sms) {
    if (!d || d->batch < 1 || d->heads_kv < 1 || sms < 1) return 0;
    if ((int64_t)d->batch * d->heads_kv >= sms) return d->batch > 1 ? 1 : 0;
    long long want = ((long long)CROSS_WAVES * sms + d->heads_kv - 1) / d->heads_kv;
    long long per_seq = 4LL * d->heads_kv * (seqlen_k > 0 ? seqlen_k : 1) * (head_dim > 0 ? head_dim : 1);
    long long cap = CROSS_KV_BYTES / per_seq;
    long long b = want < cap ? want : cap;
    if (b > 65535) b = 65535;
    return b > d->batch ? (int32_t)b : 0;
}

int tt_wrobust(const double *a, const double *b, int n, double tie, double *ra, double *rb) {
    double ma = -1, mb = -1;
    for (int i = 0; i < n; i++) {
        if (a[i] <= 0 || b[i] <= 0) continue;
        if (ma < 0 || a[i] < ma) ma = a[i];
        if (mb < 0 || b[i] < mb) mb = b[i];
    }
    if (ma < 0) return -1;
    double least = -1;
    for (int i = 0; i < n; i++) {
        if (a[i] <= 0 || b[i] <= 0) continue;
        double ra = a[i] / ma, rb = b[i] / mb, r = ra > rb ? ra : rb;
        if (least < 0 || r < least) least = r;
    }
    int pick = -1;
    for (int i = 0; i < n; i++) {
        if (a[i] <= 0 || b[i] <= 0) continue;
        double ra = a[i] / ma, rb = b[i] / mb, r = ra > rb ? ra : rb;
        if (r <= least * (1 + tie) && (pick < 0 || a[i] < a[pick])) pick = i;
    }
    if (ra) *ra = a[pick] / ma;
    if (rb) *rb = b[pick] / mb;
    return pick;
}
