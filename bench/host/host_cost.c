/*
 * Host time of tt_sdpa_fwd with a given config, and of the pieces a call is
 * made of, each timed alone in a loop on one GPU:
 *
 *   tt_host_bench [kernels_in_cache]
 *
 * The decode problem of bench/inference (GQA 32/8, d128, bf16, one query
 * token, 256 keys: the launch, not the GPU, is the cost), family splitkv,
 * with and without a split. `kernels_in_cache` other variants are loaded
 * first (a process that ran a sweep or serves many keys holds dozens):
 * the call's module lookup must not grow with them. Medians of 31 rounds
 * of 200 calls, the context synchronized between rounds (an unbounded
 * launch queue would block the host).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/key.h"
#include "kernels/cuda_api.h"
#include "kernels/family.h"
#include "kernels/launch.h"
#include "kernels/splitkv/params.h"
#include "kernels/splitkv/splitkv.h"
#include "tiletune.h"

#define ROUNDS 31
#define CALLS 200

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef void (*step_fn)(void *ctx);

/* Median microseconds per call of fn over ROUNDS rounds of CALLS calls. */
static double time_us(step_fn fn, void *ctx, const tt__cuda *cu) {
    double r[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) {
        const double t0 = now_us();
        for (int j = 0; j < CALLS; j++) fn(ctx);
        r[i] = (now_us() - t0) / CALLS;
        cu->CtxSynchronize(); /* every stream a step may use */
    }
    qsort(r, ROUNDS, sizeof r[0], cmp_d);
    return r[ROUNDS / 2];
}

typedef struct bench {
    const tt__cuda *cu;
    tt_sdpa_args a;
    tt__sdpa_target t;
    const tt__kernel *k;
    tt__variant v;
    CUstream s;
    CUcontext ctx;
    char err[512];
} bench;

static void full_call(void *p) {
    bench *b = p;
    if (tt_sdpa_fwd(&b->a, b->err, sizeof b->err) < 0) {
        fprintf(stderr, "tt_sdpa_fwd: %s\n", b->err);
        exit(1);
    }
}
static void target_of(void *p) {
    bench *b = p;
    tt__sdpa_target_of(&b->a, &b->t, b->err, sizeof b->err);
}
static void pointer_attr(void *p) {
    bench *b = p;
    int ord;
    b->cu->PointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)(uintptr_t)b->a.q);
}
static void ctx_current(void *p) {
    bench *b = p;
    CUcontext c;
    CUdevice d;
    b->cu->CtxGetCurrent(&c);
    b->cu->CtxGetDevice(&d);
}
static void push_pop(void *p) {
    bench *b = p;
    CUcontext c;
    b->cu->CtxPushCurrent(b->ctx);
    b->cu->CtxPopCurrent(&c);
}
static void capturing(void *p) {
    bench *b = p;
    CUstreamCaptureStatus st;
    b->cu->StreamIsCapturing(b->s, &st);
}
static void variant_check(void *p) {
    bench *b = p;
    tt__variant_check(b->a.config, 128, &b->t.limits, NULL, 0);
}
static void kernel_get(void *p) {
    bench *b = p;
    const tt__kernel *k;
    tt__kernel_get(b->t.ctx, NULL, &b->v, &k, b->err, sizeof b->err);
}
/* The driver's own floor: an empty kernel whose parameter block is as
 * large as the family's, launched on the same stream. */
static CUfunction empty_fn, empty8_fn;
static const tt__cuda *cu_of_bench;
static void empty_launch(void *p) {
    bench *b = p;
    static tt_splitkv_params blank;
    void *params[1] = {&blank};
    b->cu->LaunchKernel(empty_fn, 1, 1, 1, 32, 1, 1, 0, b->s, params, NULL);
}
/* ... and with one pointer for parameters: what the block's size costs */
static void empty8_launch(void *p) {
    bench *b = p;
    static unsigned long long one;
    void *params[1] = {&one};
    b->cu->LaunchKernel(empty8_fn, 1, 1, 1, 32, 1, 1, 0, b->s, params, NULL);
}
/* ... on a stream of another kind: what the caller's stream costs the
 * driver (PyTorch's default is the legacy default stream) */
static CUstream nonblocking_stream;
static void empty8_on(CUstream s) {
    static unsigned long long one;
    void *params[1] = {&one};
    cu_of_bench->LaunchKernel(empty8_fn, 1, 1, 1, 32, 1, 1, 0, s, params, NULL);
}
static void empty8_nonblocking(void *p) {
    (void)p;
    empty8_on(nonblocking_stream);
}
static void empty8_legacy(void *p) {
    (void)p;
    empty8_on(CU_STREAM_LEGACY);
}
static void empty8_per_thread(void *p) {
    (void)p;
    empty8_on(CU_STREAM_PER_THREAD);
}
static void kernel_launch(void *p) {
    bench *b = p;
    tt__kernel_launch(b->k, &b->t.params, b->s, b->err, sizeof b->err);
}
/* The driver's part of the family's launch: its own kernel, unsplit (no
 * workspace), parameters made once: what is left of the family's launch
 * above this is the plan and the workspace. */
static tt_splitkv_params unsplit;
static void unsplit_launch(void *p) {
    bench *b = p;
    void *params[1] = {&unsplit};
    b->cu->LaunchKernel(b->k->fn, 1, (unsigned)unsplit.heads_kv, (unsigned)unsplit.batch,
                        (unsigned)b->k->threads, 1, 1, (unsigned)b->k->smem, b->s, params, NULL);
}

int main(int argc, char **argv) {
    const int extra = argc > 1 ? atoi(argv[1]) : 0;
    bench b;
    memset(&b, 0, sizeof b);
    if (tt__cuda_get(&b.cu, b.err, sizeof b.err) < 0) {
        fprintf(stderr, "no GPU: %s\n", b.err);
        return 77;
    }
    const tt__cuda *cu = b.cu;
    tt__device_limits lim;
    if (tt__context_for(cu, 0, &b.ctx, &lim, b.err, sizeof b.err) < 0) {
        fprintf(stderr, "%s\n", b.err);
        return 1;
    }
    cu->CtxPushCurrent(b.ctx);
    cu->StreamCreate(&b.s, 0);
    cu->StreamCreate(&nonblocking_stream, CU_STREAM_NON_BLOCKING);
    cu_of_bench = cu;
    const int B = 1, HQ = 32, HKV = 8, LK = 256, D = 128;
    CUdeviceptr q, kv, o;
    cu->MemAlloc(&q, (size_t)B * HQ * D * 2);
    cu->MemAlloc(&kv, (size_t)B * HKV * LK * D * 2);
    cu->MemAlloc(&o, (size_t)B * HQ * D * 2);
    cu->MemsetD8(q, 0, (size_t)B * HQ * D * 2);
    cu->MemsetD8(kv, 0, (size_t)B * HKV * LK * D * 2);
    tt_sdpa_args *a = &b.a;
    a->q = (void *)(uintptr_t)q;
    a->k = a->v = (void *)(uintptr_t)kv;
    a->o = (void *)(uintptr_t)o;
    a->batch = B;
    a->heads_q = HQ;
    a->heads_kv = HKV;
    a->seqlen_q = 1;
    a->seqlen_k = LK;
    a->head_dim = D;
    a->dtype = TT_DTYPE_BF16;
    /* [B, H, L, D] */
    a->q_stride[0] = HQ * D, a->q_stride[1] = D, a->q_stride[2] = HQ * D;
    a->o_stride[0] = HQ * D, a->o_stride[1] = D, a->o_stride[2] = HQ * D;
    a->k_stride[0] = a->v_stride[0] = (int64_t)HKV * LK * D;
    a->k_stride[1] = a->v_stride[1] = (int64_t)LK * D;
    a->k_stride[2] = a->v_stride[2] = D;
    a->stream = b.s;
    tt_config cfg;
    if (tt_config_parse(
            "family=splitkv,block_m=16,block_n=64,warps=4,stages=2,layout=pad,q_in_regs=1,split_ctas=8",
            &cfg) < 0)
        return 1;
    a->config = &cfg;

    /* other variants in the module cache, as after a sweep */
    int loaded = 0;
    for (int bn = 64; bn <= 128 && loaded < extra; bn += 64)
        for (int st = 2; st <= 4 && loaded < extra; st++)
            for (int w = 4; w <= 8 && loaded < extra; w += 4)
                for (int dt = 0; dt < 2 && loaded < extra; dt++)
                    for (int c = 0; c < 3 && loaded < extra; c++) {
                        tt__variant v;
                        memset(&v, 0, sizeof v);
                        v.config = cfg;
                        v.config.block_n = bn;
                        v.config.stages = st;
                        v.config.warps = w;
                        v.head_dim = 64;
                        v.dtype = (tt_dtype)dt;
                        v.causal = c;
                        v.arch = lim.arch;
                        const tt__kernel *k;
                        if (tt__variant_check(&v.config, 64, &lim, NULL, 0) == 0 &&
                            tt__kernel_get(b.ctx, NULL, &v, &k, b.err, sizeof b.err) == 0)
                            loaded++;
                    }

    for (int i = 0; i < 50; i++) full_call(&b);
    cu->StreamSynchronize(b.s);
    if (tt__sdpa_target_of(a, &b.t, b.err, sizeof b.err) < 0) {
        fprintf(stderr, "%s\n", b.err);
        return 1;
    }
    b.v.config = cfg;
    b.v.head_dim = D;
    b.v.dtype = TT_DTYPE_BF16;
    b.v.arch = b.t.limits.arch;
    if (tt__kernel_get(b.t.ctx, NULL, &b.v, &b.k, b.err, sizeof b.err) < 0) {
        fprintf(stderr, "%s\n", b.err);
        return 1;
    }
    if (tt__splitkv_params_dense(&b.t.params, &unsplit, b.err, sizeof b.err) < 0) {
        fprintf(stderr, "%s\n", b.err);
        return 1;
    }
    unsplit.splits = 1;
    unsplit.qblocks = 1; /* 4 packed rows, one 16-row block */
    /* PTX the driver compiles at load: no NVRTC needed for an empty body */
    char ptx[512];
    snprintf(ptx, sizeof ptx,
             ".version 7.0\n.target sm_80\n.address_size 64\n"
             ".visible .entry tt_empty(.param .align 8 .b8 p[%zu]) { ret; }\n"
             ".visible .entry tt_empty8(.param .u64 p) { ret; }\n",
             sizeof(tt_splitkv_params));
    CUmodule empty_mod;
    if (cu->ModuleLoadData(&empty_mod, ptx) || cu->ModuleGetFunction(&empty_fn, empty_mod, "tt_empty") ||
        cu->ModuleGetFunction(&empty8_fn, empty_mod, "tt_empty8")) {
        fprintf(stderr, "could not load the empty kernel\n");
        return 1;
    }
    printf("host cost per call, us (median of %d x %d; %d other kernels loaded; parameters %zu bytes)\n",
           ROUNDS, CALLS, loaded, sizeof(tt_splitkv_params));
    const struct {
        const char *name;
        step_fn fn;
    } steps[] = {{"tt_sdpa_fwd, split (8 splits a KV head)", full_call},
                 {"  target: checks, pointer devices, context", target_of},
                 {"  one cuPointerGetAttribute", pointer_attr},
                 {"  cuCtxGetCurrent + cuCtxGetDevice", ctx_current},
                 {"  cuCtxPushCurrent + cuCtxPopCurrent", push_pop},
                 {"  cuStreamIsCapturing", capturing},
                 {"  tt__variant_check", variant_check},
                 {"  tt__kernel_get (cached)", kernel_get},
                 {"  the family's launch (plan, workspace, cuLaunchKernel)", kernel_launch},
                 {"  cuLaunchKernel alone: the family's kernel, unsplit", unsplit_launch},
                 {"cuLaunchKernel alone: an empty kernel, the same parameter bytes", empty_launch},
                 {"cuLaunchKernel alone: an empty kernel, 8 parameter bytes", empty8_launch},
                 {"  the same on a non-blocking stream", empty8_nonblocking},
                 {"  the same on the legacy default stream", empty8_legacy},
                 {"  the same on the per-thread default stream", empty8_per_thread}};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        printf("%-64s %7.2f\n", steps[i].name, time_us(steps[i].fn, &b, cu));
    cfg.split_ctas = 0;
    a->batch = 1;
    printf("%-64s %7.2f\n", "tt_sdpa_fwd, split target 0", time_us(full_call, &b, cu));
    CUcontext c;
    cu->CtxPopCurrent(&c);
    return 0;
}
