/*
 * Compiles EVERY variant of the space with NVRTC, for sm_80 and sm_90 and
 * every head_dim x dtype x causal (bottom-right causal in bf16 only; family
 * splitkv in bf16 bottom-right only, each program once: its split target
 * is a host-only knob), and
 * checks each one's ptxas report: it compiles (a compile error fails the test: the space and the source's
 * rules disagree), registers <= 255, shared memory as the contract's
 * formula says and within the arch's opt-in limit, and no variant that
 * spills is kept. Runs on the CPU, in CI: NVRTC needs no GPU.
 *
 * TT_SPACE_ARCHS="90" (env) narrows the archs for a quick local run, and
 * TT_SPACE_FAMILY="splitkv" the families.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda_api.h"
#include "kernels/family.h"
#include "tt_test.h"
#include "kernels/variants.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

TEST(every_variant_compiles_for_sm80_and_sm90) {
    const tt__nvrtc *nv;
    char err[512];
    if (tt__nvrtc_get(&nv, err, sizeof err) < 0) TT_SKIP("%s", err);
    const char *archs_env = getenv("TT_SPACE_ARCHS"), *fam_env = getenv("TT_SPACE_FAMILY");
    int archs[2] = {80, 90}, n_archs = 2;
    if (archs_env && *archs_env) {
        archs[0] = atoi(archs_env);
        n_archs = 1;
    }
    static const int hds[5] = {32, 64, 96, 128, 256};
    /* no disk cache: every variant is really compiled, every run */
    tt__jit_opts jo = {.no_cache = 1};
    int failures = 0, compiled = 0, kept_total = 0, spilled_total = 0;
    double t0 = now_s();
    for (int ai = 0; ai < n_archs; ai++) {
        tt__device_limits dev;
        ASSERT_OK(tt__device_limits_nominal(archs[ai], &dev));
        for (int hi = 0; hi < 5; hi++)
            for (int dt = 0; dt < 2; dt++)
                for (int causal = 0; causal < 3; causal++) {
                    /* bottom-right (2) differs from top-left only in the
                     * diagonal's shift: one dtype keeps the test's time */
                    if (causal == 2 && dt == 0) continue;
                    tt_key key;
                    memset(&key, 0, sizeof key);
                    key.head_dim = hds[hi];
                    key.dtype = (tt_dtype)dt;
                    key.causal = causal;
                    tt__space_entry *e = NULL;
                    size_t n = 0;
                    ASSERT_OK(tt__space_enumerate(&key, &dev, 0, &jo, 0, &e, &n, err, sizeof err));
                    /* splitkv in bf16 bottom-right only (its widest mask;
                     * the dtype changes the MMA's type alone): its space
                     * is every tile shape at an unknown seqlen_q, and
                     * each combination would add ~70 compiles */
                    if (!(dt == 1 && causal == 2)) {
                        size_t w = 0;
                        for (size_t i = 0; i < n; i++)
                            if (e[i].variant.config.family != TT_FAMILY_SPLITKV) e[w++] = e[i];
                        n = w;
                    }
                    if (fam_env && *fam_env) {
                        size_t w = 0;
                        for (size_t i = 0; i < n; i++)
                            if (strcmp(tt__family_of(e[i].variant.config.family)->name, fam_env) == 0)
                                e[w++] = e[i];
                        n = w;
                        if (n == 0) {
                            free(e);
                            continue;
                        }
                    }
                    ASSERT_OK(tt__space_compile(e, &n, &dev, TT_SPACE_KEEP_INVALID, &jo, 0, err, sizeof err));
                    ASSERT(n > 0);
                    int kept = 0;
                    for (size_t i = 0; i < n; i++) {
                        const tt__variant *v = &e[i].variant;
                        const tt__report *r = &e[i].report;
                        char cfg[TT_CONFIG_TEXT_MAX];
                        tt_config_format(&v->config, cfg, sizeof cfg);
                        compiled++;
                        if (e[i].status == TT_VARIANT_COMPILE_ERROR) {
                            printf("COMPILE ERROR sm_%d d%d dt%d causal%d %s: %.200s\n", archs[ai], hds[hi],
                                   dt, causal, cfg, e[i].error);
                            failures++;
                            continue;
                        }
                        if (r->registers < 1 || r->registers > 255) {
                            printf("REGISTERS %d sm_%d d%d %s\n", r->registers, archs[ai], hds[hi], cfg);
                            failures++;
                        }
                        long smem = (long)tt__config_smem_bytes(&v->config, v->head_dim);
                        if (r->dynamic_smem != smem || r->static_smem + r->dynamic_smem > dev.smem_optin) {
                            printf("SMEM %d+%d (formula %ld, limit %d) sm_%d d%d %s\n", r->static_smem,
                                   r->dynamic_smem, smem, dev.smem_optin, archs[ai], hds[hi], cfg);
                            failures++;
                        }
                        if (r->threads != v->config.warps * 32) failures++;
                        if (e[i].status == TT_VARIANT_SPILLS) {
                            spilled_total++;
                            printf("spills (dropped): sm_%d d%d dt%d causal%d %s: %d regs, %d B stores\n",
                                   archs[ai], hds[hi], dt, causal, cfg, r->registers, r->spill_stores);
                            continue;
                        }
                        if (e[i].status == TT_VARIANT_OK) {
                            if (r->spill_stores || r->spill_loads) failures++;
                            kept++;
                        }
                    }
                    if (kept == 0) {
                        printf("EMPTY SPACE sm_%d d%d dt%d causal%d\n", archs[ai], hds[hi], dt, causal);
                        failures++;
                    }
                    kept_total += kept;
                    if (dt == 0 && causal == 0)
                        printf("sm_%d d%-3d: %zu candidates, %d kept\n", archs[ai], hds[hi], n, kept);
                    free(e);
                }
    }
    printf("%d variants compiled in %.1f s (%d kept, %d dropped for spills), %d failures\n", compiled,
           now_s() - t0, kept_total, spilled_total, failures);
    ASSERT_EQ(failures, 0);
}

TT_TEST_MAIN()
