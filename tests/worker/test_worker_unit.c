/*
 * tiletune-worker's pure parts (worker_search.c): timing statistics, the
 * problem rule, repetition counts, interleaving slices, TFLOP/s, the
 * successive-halving rule; the lines it writes to the daemon, only
 * through the pipe protocol's table (report.c); and its helper kernels
 * (worker_check.cu) compiled by NVRTC for sm_80 and sm_90, which needs no
 * GPU.
 */
#include <math.h>
#include <stdlib.h>

#include "kernels/cuda_api.h"
#include "tt_test.h"
#include "tuner/worker/gpu.h"
#include "tuner/worker/run.h"
#include "tuner/worker/search.h"

#define NEAR(a, b, eps) ASSERT(fabs((double)(a) - (double)(b)) <= (eps))

TEST(stats_median_min_spread) {
    float t[] = {5, 1, 4, 2, 3};
    tt_wstats s;
    ASSERT_OK(tt_wstats_of(t, 5, &s));
    NEAR(s.median_ms, 3, 1e-9);
    NEAR(s.min_ms, 1, 1e-9);
    /* p80 = 4.2, p20 = 1.8 by linear interpolation */
    NEAR(s.spread, (4.2 - 1.8) / 3, 1e-6);
    ASSERT_EQ(s.reps, 5);
    float one[] = {2.5f};
    ASSERT_OK(tt_wstats_of(one, 1, &s));
    NEAR(s.median_ms, 2.5, 1e-9);
    NEAR(s.spread, 0, 1e-12);
    float even[] = {4, 1, 3, 2};
    ASSERT_OK(tt_wstats_of(even, 4, &s));
    NEAR(s.median_ms, 2.5, 1e-9);
    ASSERT(tt_wstats_of(t, 0, &s) < 0);
}

TEST(problem_rule_16384_tokens_2048_wide) {
    int32_t b, h;
    tt_wproblem(4096, 128, 0, 0, &b, &h);
    ASSERT_EQ(b, 4);
    ASSERT_EQ(h, 16);
    tt_wproblem(32768, 64, 0, 0, &b, &h); /* longer than the token budget: one sequence */
    ASSERT_EQ(b, 1);
    ASSERT_EQ(h, 32);
    tt_wproblem(128, 256, 0, 0, &b, &h);
    ASSERT_EQ(b, 128);
    ASSERT_EQ(h, 8);
    tt_wproblem(128, 256, 3, 5, &b, &h); /* the job's own */
    ASSERT_EQ(b, 3);
    ASSERT_EQ(h, 5);
}

TEST(inference_keys_are_timed_at_inference_batch_and_heads) {
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    k.head_dim = 128;
    tt_wdims d;
    /* prefill: the training rule, heads_kv = heads_q */
    k.seqlen_q = k.seqlen_k = 4096;
    k.group = 1;
    tt_wshape(&k, 0, 0, &d);
    ASSERT_EQ(d.batch, 4);
    ASSERT_EQ(d.heads_q, 16);
    ASSERT_EQ(d.heads_kv, 16);
    /* decode, GQA 4 over 128k: 32 query heads, 8 K/V heads; one sequence
     * of K/V is 512 MB already */
    k.seqlen_q = 1;
    k.seqlen_k = 131072;
    k.group = 4;
    tt_wshape(&k, 0, 0, &d);
    ASSERT_EQ(d.batch, 1);
    ASSERT_EQ(d.heads_q, 32);
    ASSERT_EQ(d.heads_kv, 8);
    /* 32k, group 8: 4 K/V heads x 32k x 128 x 2 x 2 B = 64 MB a sequence */
    k.seqlen_k = 32768;
    k.group = 8;
    tt_wshape(&k, 0, 0, &d);
    ASSERT_EQ(d.batch, 4);
    ASSERT_EQ(d.heads_kv, 4);
    /* short caches stop at 8 sequences, not at the 16k-token rule */
    k.seqlen_q = 8;
    k.seqlen_k = 1024;
    k.group = 1;
    tt_wshape(&k, 0, 0, &d);
    ASSERT_EQ(d.batch, 8);
    ASSERT_EQ(d.heads_q, 32);
    ASSERT_EQ(d.heads_kv, 32);
    /* chunked prefill is an inference shape too */
    k.seqlen_q = 512;
    k.seqlen_k = 32768;
    k.group = 4;
    tt_wshape(&k, 0, 0, &d);
    ASSERT_EQ(d.heads_q, 32);
    ASSERT_EQ(d.heads_kv, 8);
    ASSERT(d.batch >= 1 && d.batch <= 8);
    /* a job's batch and heads win; heads_q stays a multiple of the group */
    tt_wshape(&k, 3, 20, &d);
    ASSERT_EQ(d.batch, 3);
    ASSERT_EQ(d.heads_kv, 5);
    ASSERT_EQ(d.heads_q, 20);
    tt_wshape(&k, 0, 2, &d); /* fewer heads than the group: one K/V head */
    ASSERT_EQ(d.heads_kv, 1);
    ASSERT_EQ(d.heads_q, 4);
}

TEST(tflops_and_reps) {
    /* 4*4*16*4096*4096*128 flops in 1 ms */
    double f = 4.0 * 4 * 16 * 4096.0 * 4096 * 128;
    NEAR(tt_wtflops(4, 16, 4096, 4096, 128, 0, 1.0), f / 1e-3 / 1e12, 1e-9);
    NEAR(tt_wtflops(4, 16, 4096, 4096, 128, 1, 1.0), f / 2 / 1e-3 / 1e12, 1e-9);
    ASSERT_EQ(tt_wtflops(1, 1, 1, 1, 64, 0, 0), 0);
    ASSERT_EQ(tt_wreps(0.1, 40, 10, 200), 200);
    ASSERT_EQ(tt_wreps(1.0, 40, 10, 200), 40);
    ASSERT_EQ(tt_wreps(17.0, 40, 10, 200), 10);
}

TEST(slices_split_a_timing_evenly_and_never_empty) {
    /* 10 launches over 4 slices: 3 3 2 2 */
    int want[4] = {3, 3, 2, 2};
    for (int s = 0; s < 4; s++) ASSERT_EQ(tt_wslice(10, 4, s), want[s]);
    /* every split adds up to the total, each slice within one of the others */
    for (int slices = 1; slices <= 5; slices++)
        for (int total = slices; total <= 200; total++) {
            int sum = 0, lo = total, hi = 0;
            for (int s = 0; s < slices; s++) {
                int k = tt_wslice(total, slices, s);
                sum += k;
                lo = k < lo ? k : lo;
                hi = k > hi ? k : hi;
            }
            ASSERT_EQ(sum, total);
            ASSERT(lo >= 1 && hi - lo <= 1);
        }
    /* fewer launches than slices: one each, none empty */
    ASSERT_EQ(tt_wslice(2, 4, 3), 1);
    ASSERT_EQ(tt_wslice(0, 2, 0), 1);
    ASSERT_EQ(tt_wslice(0, 2, 1), 1);
    /* outside the slices, or no slices asked: all in one */
    ASSERT_EQ(tt_wslice(10, 4, 4), 0);
    ASSERT_EQ(tt_wslice(10, 4, -1), 0);
    ASSERT_EQ(tt_wslice(10, 0, 0), 10);
}

TEST(no_timed_launch_reads_the_set_its_predecessor_read) {
    /* the warm-up reads set 0; then 200 timed launches */
    for (int nsets = 2; nsets <= 8; nsets++) {
        int prev = 0, seen[8] = {0};
        for (int i = 0; i < 200; i++) {
            int s = tt_wset(i, nsets);
            ASSERT(s >= 0 && s < nsets);
            ASSERT(s != prev);
            seen[s]++;
            prev = s;
        }
        /* every set in turn: each read 200/nsets times, give or take one */
        for (int s = 0; s < nsets; s++) ASSERT(seen[s] >= 200 / nsets && seen[s] <= 200 / nsets + 1);
    }
    /* one set (a problem over twice the L2): nothing to rotate */
    for (int i = 0; i < 5; i++) ASSERT_EQ(tt_wset(i, 1), 0);
    ASSERT_EQ(tt_wset(3, 0), 0);
    ASSERT_EQ(tt_wset(-1, 4), 0);
}

TEST(halving_keeps_the_best_half_within_the_cut) {
    int keep[8];
    /* 6 live, 2 out: the best 3, but 1.40 is more than 15% over 1.0 */
    double m[8] = {1.0, 1.40, -1, 1.10, 2.0, 3.0, -1, 1.12};
    ASSERT_EQ(tt_whalve(m, 8, 0.01, 0.15, keep), 3);
    ASSERT(keep[0] && keep[3] && keep[7]);
    ASSERT(!keep[1] && !keep[2] && !keep[4] && !keep[5] && !keep[6]);
    /* without a cut: the best half */
    ASSERT_EQ(tt_whalve(m, 8, 0.01, 0, keep), 3);
    ASSERT(keep[0] && keep[3] && keep[7]);
    /* a tie at the noise level of the best survives beyond the half */
    double t[4] = {1.0, 1.005, 1.008, 2.0};
    ASSERT_EQ(tt_whalve(t, 4, 0.01, 0.15, keep), 3);
    ASSERT(keep[0] && keep[1] && keep[2] && !keep[3]);
    /* the best two always stay, however far apart */
    double f[3] = {1.0, 5.0, 9.0};
    ASSERT_EQ(tt_whalve(f, 3, 0.01, 0.15, keep), 2);
    ASSERT(keep[0] && keep[1] && !keep[2]);
    double none[2] = {-1, -1};
    ASSERT_EQ(tt_whalve(none, 2, 0.01, 0.15, keep), 0);
}

TEST(decode_second_batch_is_across_the_split_line) {
    /* 8 sequences x 8 K/V heads = 64 units on 132 SMs: split; the wide
     * batch fills 4 waves, 66 sequences (8k keys: 32 MB each, 2.1 GB; the
     * 2 GiB cap stops it at 64) */
    tt_wdims d = {.batch = 8, .heads_q = 32, .heads_kv = 8};
    ASSERT_EQ(tt_wcross_batch(&d, 1024, 128, 132), 66);
    ASSERT_EQ(tt_wcross_batch(&d, 8192, 128, 132), 64);
    /* a 128k cache: 512 MB a sequence, 4 fit in 2 GiB */
    d.batch = 1;
    ASSERT_EQ(tt_wcross_batch(&d, 131072, 128, 132), 4);
    /* already wide: batch 1 on the other side */
    d.batch = 64;
    ASSERT_EQ(tt_wcross_batch(&d, 8192, 128, 132), 1);
    /* MHA, 32 K/V heads x 8 = 256 units: wide, checked at one sequence */
    d = (tt_wdims){.batch = 8, .heads_q = 32, .heads_kv = 32};
    ASSERT_EQ(tt_wcross_batch(&d, 4096, 128, 132), 1);
    /* nothing to compare: one wide sequence, or a cap at the key's batch */
    d.batch = 1;
    d.heads_kv = 256;
    ASSERT_EQ(tt_wcross_batch(&d, 4096, 128, 132), 0);
    d = (tt_wdims){.batch = 4, .heads_q = 32, .heads_kv = 8};
    ASSERT_EQ(tt_wcross_batch(&d, 131072, 128, 132), 0);
    ASSERT_EQ(tt_wcross_batch(&d, 4096, 128, 0), 0); /* SMs unknown */
}

TEST(decode_keeps_the_least_worst_case_regret) {
    /* the fastest at the key's batch (0) runs 1.12x at the other; the
     * second is 1% behind at the first and the best at the second */
    double a[] = {1.00, 1.01, 1.05}, b[] = {11.2, 10.0, 10.3};
    ASSERT_EQ(tt_wrobust(a, b, 3, 0.005, NULL, NULL), 1);
    /* both within noise of the least regret: the fastest at a wins */
    double a2[] = {1.00, 1.01}, b2[] = {10.2, 10.0}; /* regrets 1.02 and 1.01 */
    ASSERT_EQ(tt_wrobust(a2, b2, 2, 0.01, NULL, NULL), 0);
    ASSERT_EQ(tt_wrobust(a2, b2, 2, 0, NULL, NULL), 1);
    /* one out at the second batch (wrong or not run) cannot be kept */
    double b3[] = {-1, 10.4, 10.0};
    ASSERT_EQ(tt_wrobust(a, b3, 3, 0.005, NULL, NULL), 1);
    double none[] = {-1, -1};
    ASSERT_EQ(tt_wrobust(a2, none, 2, 0.005, NULL, NULL), -1);
}

TEST(check_kernels_compile_for_sm80_and_sm90) {
    const tt__nvrtc *nv;
    char err[1024];
    if (tt__nvrtc_get(&nv, err, sizeof err) < 0) TT_SKIP("%s", err);
    int arch[] = {80, 90};
    for (int i = 0; i < 2; i++) {
        void *cubin = NULL;
        size_t len = 0;
        if (tt_worker_check_cubin(arch[i], &cubin, &len, err, sizeof err) < 0)
            TT_FAIL_AT("sm_%d: %s", arch[i], err);
        ASSERT(len > 1000);
        ASSERT(memcmp(cubin, "\177ELF", 4) == 0);
        free(cubin);
    }
}

typedef struct sink {
    int n;
    char last[TT_LINE_MAX + 1];
} sink;

static void collect(void *ud, const char *line) {
    sink *k = ud;
    k->n++;
    snprintf(k->last, sizeof k->last, "%s", line);
}

/* A line written as text still goes out only as the table writes it: a
 * field not in its message's table, a value out of it, or a word that is
 * no message never reaches the daemon. */
TEST(lines_to_the_daemon_go_only_through_the_table) {
    sink k = {0};
    ASSERT_OK(tt__wk_emitf(collect, &k, "DONE id=%lld status=failed reason=%s", 12LL, "space"));
    ASSERT_EQ(k.n, 1);
    ASSERT_STREQ(k.last, "DONE id=12 status=failed reason=space");
    ASSERT(tt__wk_emitf(collect, &k, "DONE id=%d status=done elapsed_s=3", 12) < 0);
    ASSERT(tt__wk_emitf(collect, &k, "DONE id=%d status=finished", 12) < 0);
    ASSERT(tt__wk_emitf(collect, &k, "PROGRESS id=%d", 12) < 0);
    ASSERT(tt__wk_emitf(collect, &k, "DONE id=%d reason=two words", 12) < 0);
    ASSERT_EQ(k.n, 1);
    ASSERT_OK(tt__wk_say_done(collect, &k, 13, NULL));
    ASSERT_STREQ(k.last, "DONE id=13 status=done");
    ASSERT_OK(tt__wk_say_done(collect, &k, 14, "no-correct-variant"));
    ASSERT_STREQ(k.last, "DONE id=14 status=failed reason=no-correct-variant");
    ASSERT(tt__wk_say_done(collect, &k, -1, NULL) < 0);
    ASSERT_EQ(k.n, 3);
}

TT_TEST_MAIN()
