#include "tuner/worker/gpu.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cuda_api.h"
#include "kernels/jit.h"
#include "common/key.h"
#include "kernels/launch.h"
#include "kernels/source.h"
#include "kernels/variants.h"
#include "tuner/worker/nvml.h"
#include "tuner/worker/search.h"

extern const char tt_worker_check_source[];

#define MAX_REPS 200
#define MIN_REPS 10
#define FAST_SHIFT 4     /* fast mode's first round: 1/16 of the exhaustive repetitions */
#define FAST_TIE 0.01    /* variants within 1% of the best survive a round */
#define FAST_CUT 0.15    /* ... and none more than 15% slower than the best does */
#define TIME_SLICES 4    /* a full-count timing pass is interleaved over this many slices */
#define FAST_SLICES 2    /* ... and a fast-mode round over this many */
#define BUSY_RETRIES 3   /* a busy slice is re-taken this many times */
#define BUSY_WAIT_MS 1000
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

/* ---- small helpers ---------------------------------------------------------------- */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(double ms) {
    struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000) * 1e6)};
    nanosleep(&ts, NULL);
}

static void emitf(tt_wemit emit, void *ud, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void emitf(tt_wemit emit, void *ud, const char *fmt, ...) {
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    emit(ud, line);
}

/* Waits for the stream with a deadline. 0 done; 1 past the deadline; 2 the
 * stream failed (a fault: the context is now unusable). Polls rather than
 * blocks: a blocking sync on a kernel that never ends never returns. */
enum { WAIT_OK = 0, WAIT_TIMEOUT = 1, WAIT_FAULT = 2 };
static int wait_stream(tt_worker *w, double limit_ms, char *err, size_t errlen) {
    double start = now_ms(), deadline = start + limit_ms;
    for (;;) {
        CUresult r = w->cu->StreamQuery(w->stream);
        if (r == CUDA_SUCCESS) return WAIT_OK;
        if (r != CUDA_ERROR_NOT_READY) {
            tt__cuda_fail(w->cu, r, "the stream", err, errlen);
            return WAIT_FAULT;
        }
        double t = now_ms();
        if (t > deadline) {
            snprintf(err, errlen, "still running after %.0f ms", t - start);
            return WAIT_TIMEOUT;
        }
        /* spin for the first millisecond (short kernels), then nap */
        if (t - start < 1.0) sched_yield();
        else sleep_ms(0.1);
    }
}

static unsigned grid_for(const tt_worker *w, long long n) {
    long long b = (n + CHECK_THREADS - 1) / CHECK_THREADS, cap = (long long)w->dev.limits.sm_count * 8;
    if (cap < 1) cap = 256;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

static CUresult launch_helper(tt_worker *w, CUfunction f, long long n, void **args) {
    return w->cu->LaunchKernel(f, grid_for(w, n), 1, 1, CHECK_THREADS, 1, 1, 0, w->stream, args, NULL);
}

/* ---- opening ------------------------------------------------------------------------- */

static void version_text(int v, char *buf, size_t len) {
    snprintf(buf, len, "%d.%d", v / 1000, v % 1000 / 10);
}

int tt_worker_open(const tt_worker_opts *opts, tt_worker **out, tt_worker_hello *hello, char *err,
                   size_t errlen) {
    memset(hello, 0, sizeof *hello);
    const tt__source *src;
    int rc = tt__source_default(&src, err, errlen);
    if (rc < 0) return rc;
    snprintf(hello->rev, sizeof hello->rev, "%s", src->rev);
    const tt__cuda *cu;
    if ((rc = tt__cuda_get(&cu, err, errlen)) < 0) return rc == TT_ERR_NOGPU ? rc : TT_ERR_NOGPU;
    hello->gpu_count = cu->device_count;
    if (opts->gpu < 0 || opts->gpu >= cu->device_count)
        return tt__fail(TT_ERR_NOGPU, err, errlen, "no CUDA device %d (%d visible)", opts->gpu,
                        cu->device_count);
    const tt__nvrtc *nv;
    if ((rc = tt__nvrtc_get(&nv, err, errlen)) < 0) return TT_ERR_NOGPU; /* cannot compile: cannot tune */
    tt_worker *w = calloc(1, sizeof *w);
    if (!w) return tt__fail(TT_ERR_NOMEM, err, errlen, "out of memory");
    w->o = *opts;
    if (w->o.launch_timeout_ms <= 0) w->o.launch_timeout_ms = 10000;
    if (w->o.budget_ms <= 0) w->o.budget_ms = 40;
    if (w->o.compile_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        w->o.compile_threads = c > 1 ? (int)c - 1 : 1;
    }
    w->cu = cu;
    w->src = src;
    if ((rc = tt__source_reference(&w->ref, err, errlen)) < 0) goto fail;
    if ((rc = tt__device_open(opts->gpu, &w->dev, err, errlen)) < 0) goto fail;
    w->has_dev = 1;
    CUresult r;
    int v = 0;
    if ((r = cu->CtxPushCurrent(w->dev.ctx))) {
        rc = tt__cuda_fail(cu, r, "cuCtxPushCurrent", err, errlen);
        goto fail;
    }
    size_t mem = 0;
    cu->DeviceTotalMem(&mem, w->dev.dev);
    cu->DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, w->dev.dev);
    w->l2_bytes = v;
    /* A blocking stream (flags 0): the synchronous copies of the check
     * results order after it. */
    if ((r = cu->StreamCreate(&w->stream, 0))) {
        rc = tt__cuda_fail(cu, r, "cuStreamCreate", err, errlen);
        goto fail;
    }
    for (w->nev = 0; w->nev <= MAX_REPS; w->nev++)
        if ((r = cu->EventCreate(&w->ev[w->nev], CU_EVENT_DEFAULT))) {
            rc = tt__cuda_fail(cu, r, "cuEventCreate", err, errlen);
            goto fail;
        }
    if ((r = cu->MemAlloc(&w->scratch, 64))) {
        rc = tt__cuda_fail(cu, r, "cuMemAlloc", err, errlen);
        goto fail;
    }
    /* NVML names the board by PCI bus id, which CUDA's ordinal need not
     * follow; the driver table lacks the call, so look it up here. */
    char bus[32] = "";
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib) {
        CUresult (*busid)(char *, int, CUdevice) =
            (CUresult(*)(char *, int, CUdevice))dlsym(lib, "cuDeviceGetPCIBusId");
        if (!busid || busid(bus, (int)sizeof bus, w->dev.dev) != CUDA_SUCCESS) bus[0] = '\0';
        dlclose(lib);
    }
    w->nvml = tt_nvml_open(bus, opts->gpu);

    hello->has_gpu = 1;
    snprintf(hello->name, sizeof hello->name, "%s", w->dev.name);
    hello->cc_major = w->dev.limits.arch / 10;
    hello->cc_minor = w->dev.limits.arch % 10;
    hello->sms = w->dev.limits.sm_count;
    hello->mem_bytes = (int64_t)mem;
    if (tt_nvml_driver_version(w->nvml, hello->driver, sizeof hello->driver) < 0)
        version_text(cu->driver_version, hello->driver, sizeof hello->driver);
    version_text(CUDA_VERSION, hello->cuda, sizeof hello->cuda);
    snprintf(hello->nvrtc, sizeof hello->nvrtc, "%d.%d", nv->major, nv->minor);
    *out = w;
    return 0;
fail:
    tt_worker_close(w);
    return rc < 0 ? rc : TT_ERR_CUDA;
}

void tt_worker_close(tt_worker *w) {
    if (!w) return;
    if (w->has_dev) {
        for (int i = 0; i < w->nev; i++) w->cu->EventDestroy(w->ev[i]);
        if (w->scratch) w->cu->MemFree(w->scratch);
        if (w->chk) w->cu->ModuleUnload(w->chk);
        if (w->stream) w->cu->StreamDestroy(w->stream);
        tt__device_close(&w->dev);
    }
    tt_nvml_close(w->nvml);
    free(w);
}

int tt_worker_check_cubin(int arch, void **cubin, size_t *len, char *err, size_t errlen) {
    const tt__nvrtc *nv;
    int rc = tt__nvrtc_get(&nv, err, errlen);
    if (rc < 0) return rc;
    nvrtcProgram prog;
    if (nv->CreateProgram(&prog, tt_worker_check_source, "worker_check.cu", 0, NULL, NULL) != NVRTC_SUCCESS)
        return tt__fail(TT_ERR_COMPILE, err, errlen, "nvrtcCreateProgram failed");
    char a[32];
    snprintf(a, sizeof a, "-arch=sm_%d", arch);
    const char *flags[] = {a, "-std=c++17"};
    void *out = NULL;
    size_t n = 0;
    if (nv->CompileProgram(prog, 2, flags) != NVRTC_SUCCESS) {
        size_t ll = 0;
        nv->GetProgramLogSize(prog, &ll);
        char *log = malloc(ll + 1);
        if (log && nv->GetProgramLog(prog, log) == NVRTC_SUCCESS)
            tt__fail(TT_ERR_COMPILE, err, errlen, "worker_check.cu: %s", log);
        else tt__fail(TT_ERR_COMPILE, err, errlen, "worker_check.cu does not compile");
        free(log);
        nv->DestroyProgram(&prog);
        return TT_ERR_COMPILE;
    }
    if (nv->GetCUBINSize(prog, &n) != NVRTC_SUCCESS || !(out = malloc(n)) || nv->GetCUBIN(prog, out) != NVRTC_SUCCESS) {
        free(out);
        nv->DestroyProgram(&prog);
        return tt__fail(TT_ERR_COMPILE, err, errlen, "no CUBIN for worker_check.cu");
    }
    nv->DestroyProgram(&prog);
    *cubin = out;
    *len = n;
    return 0;
}

/* The helper kernels, compiled once per worker. */
static int load_check(tt_worker *w, char *err, size_t errlen) {
    if (w->chk) return 0;
    void *cubin = NULL;
    size_t len = 0;
    int rc = tt_worker_check_cubin((int)w->dev.limits.arch, &cubin, &len, err, errlen);
    if (rc < 0) return rc;
    CUresult r = w->cu->ModuleLoadData(&w->chk, cubin);
    free(cubin);
    if (r) return tt__cuda_fail(w->cu, r, "cuModuleLoadData(worker_check)", err, errlen);
    if ((r = w->cu->ModuleGetFunction(&w->f_fill, w->chk, "tt_fill")) ||
        (r = w->cu->ModuleGetFunction(&w->f_bad, w->chk, "tt_count_bad")) ||
        (r = w->cu->ModuleGetFunction(&w->f_diff, w->chk, "tt_diff")) ||
        (r = w->cu->ModuleGetFunction(&w->f_lse, w->chk, "tt_lse")))
        return tt__cuda_fail(w->cu, r, "cuModuleGetFunction(worker_check)", err, errlen);
    return 0;
}

/* ---- the compile pool ----------------------------------------------------------------- */

enum { C_PENDING = 0, C_OK, C_COMPILE_ERROR, C_INVALID };

typedef struct cand {
    tt__variant v;
    int state;
    tt__cubin *cubin;
    char why[256];
    tt__kernel *k;
    int out;       /* 1: reported (RESULT sent), no longer timed */
    int live;      /* checked and still in the search: timed by time_interleaved */
    tt_wstats st;  /* the latest timing pass */
    double t1_ms;  /* the checked launch, for the repetition count */
    double rel, lse_err;
    /* The current timing pass, gathered over its interleaved slices: */
    float t[MAX_REPS]; /* per-launch times */
    int nt, want;      /* launches so far, launches in all */
    int nt_slice;      /* nt when the current slice began (a busy slice is re-taken) */
    int busy;          /* a slice stayed busy after its re-takes */
    tt_nvml_sample cond; /* NVML right after the candidate's part of the last slice */
} cand;

typedef struct pool {
    tt_worker *w;
    cand *c;
    int n, next;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t tid[64];
    int nthreads;
} pool;

static void *compile_thread(void *arg) {
    pool *p = arg;
    /* Compiles use every core but one; at nice 10 they yield to the daemon
     * answering lookups on the same node (docs/perf.md: lookup p99 while
     * tuning) and to the thread timing the GPU. Linux nices threads one by
     * one; failing to is harmless. */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    tt__jit_opts jo = {.source = p->w->src, .cache_dir = p->w->o.cache_dir};
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int i = p->next < p->n ? p->next++ : -1;
        pthread_mutex_unlock(&p->mu);
        if (i < 0) return NULL;
        cand *c = &p->c[i];
        tt__cubin *cb = NULL;
        int st = C_OK;
        if (tt__jit_compile(&jo, &c->v, &cb, c->why, sizeof c->why) < 0) st = C_COMPILE_ERROR;
        else if (!tt__report_clean(&cb->report)) {
            snprintf(c->why, sizeof c->why, "spills %d bytes, stack frame %d bytes",
                         (int)(cb->report.spill_stores + cb->report.spill_loads), (int)cb->report.stack_frame);
            st = C_INVALID;
        } else if ((long)cb->report.static_smem + cb->report.dynamic_smem > p->w->dev.limits.smem_optin) {
            snprintf(c->why, sizeof c->why, "shared memory over the device limit");
            st = C_INVALID;
        }
        if (st != C_OK) {
            tt__cubin_free(cb);
            cb = NULL;
        }
        pthread_mutex_lock(&p->mu);
        c->cubin = cb;
        c->state = st;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

static void pool_start(pool *p) {
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    int t = p->w->o.compile_threads;
    if (t > p->n) t = p->n;
    if (t > 64) t = 64;
    for (p->nthreads = 0; p->nthreads < t; p->nthreads++)
        if (pthread_create(&p->tid[p->nthreads], NULL, compile_thread, p) != 0) break;
}

static int pool_wait(pool *p, int i) {
    pthread_mutex_lock(&p->mu);
    while (p->c[i].state == C_PENDING) {
        if (p->nthreads == 0) { /* no thread could start: compile here */
            pthread_mutex_unlock(&p->mu);
            compile_thread(p);
            pthread_mutex_lock(&p->mu);
            continue;
        }
        pthread_cond_wait(&p->cv, &p->mu);
    }
    int st = p->c[i].state;
    pthread_mutex_unlock(&p->mu);
    return st;
}

static void pool_stop(pool *p) {
    pthread_mutex_lock(&p->mu);
    p->next = p->n; /* nothing new starts */
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nthreads; i++) pthread_join(p->tid[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
}

/* ---- one key ------------------------------------------------------------------------------ */

typedef struct keyrun {
    tt_worker *w;
    const tt_wtask *t;
    tt_wemit emit;
    void *ud;
    int32_t B, H, D;
    int64_t Lq, Lk;
    int bf16;
    long long nq, nk, nlse;
    int nrot;                       /* input sets rotated through while timing */
    CUdeviceptr q[MAX_ROTATE], k[MAX_ROTATE], v[MAX_ROTATE], o, lse, oref, lseref;
    int nplanes;
    long long plane_q[2], plane_lse[2]; /* element offsets of the checked (batch, head) planes */
    char err[512];
    tt__cubin *refcb; /* the reference, compiled before the pool starts */
} keyrun;

static void free_bufs(keyrun *r) {
    const tt__cuda *cu = r->w->cu;
    CUdeviceptr *all[] = {&r->o, &r->lse, &r->oref, &r->lseref};
    for (int i = 0; i < MAX_ROTATE; i++) {
        if (r->q[i]) cu->MemFree(r->q[i]);
        if (r->k[i]) cu->MemFree(r->k[i]);
        if (r->v[i]) cu->MemFree(r->v[i]);
    }
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (*all[i]) cu->MemFree(*all[i]);
}

static tt_sdpa_params params_for(const keyrun *r, int set) {
    tt_sdpa_params p;
    memset(&p, 0, sizeof p);
    p.q = (const void *)(uintptr_t)r->q[set];
    p.k = (const void *)(uintptr_t)r->k[set];
    p.v = (const void *)(uintptr_t)r->v[set];
    p.o = (void *)(uintptr_t)r->o;
    p.lse = (float *)(uintptr_t)r->lse;
    p.q_row_stride = p.o_row_stride = p.k_row_stride = p.v_row_stride = r->D;
    p.q_head_stride = p.o_head_stride = r->Lq * r->D;
    p.k_head_stride = p.v_head_stride = r->Lk * r->D;
    p.q_batch_stride = p.o_batch_stride = (tt_i64)r->H * r->Lq * r->D;
    p.k_batch_stride = p.v_batch_stride = (tt_i64)r->H * r->Lk * r->D;
    p.lse_head_stride = r->Lq;
    p.lse_batch_stride = (tt_i64)r->H * r->Lq;
    p.batch = r->B;
    p.heads_q = p.heads_kv = r->H;
    p.seqlen_q = (int)r->Lq;
    p.seqlen_k = (int)r->Lk;
    p.scale = (float)(1.0 / sqrt((double)r->D));
    p.scale_log2 = (float)((double)p.scale * 1.4426950408889634);
    return p;
}

static int alloc_bufs(keyrun *r) {
    tt_worker *w = r->w;
    const tt__cuda *cu = w->cu;
    CUresult e;
    /* The timed working set (Q, K, V, O) must not sit in L2 between
     * launches, or small problems look faster than they run in a model:
     * rotate through enough input sets to cover twice the L2. */
    long long set = 2 * (2 * r->nq + 2 * r->nk);
    long long want = w->l2_bytes > 0 ? (2LL * w->l2_bytes + set - 1) / set : 1;
    r->nrot = (int)(want < 1 ? 1 : want > MAX_ROTATE ? MAX_ROTATE : want);
    for (int i = 0; i < r->nrot; i++) {
        if ((e = cu->MemAlloc(&r->q[i], (size_t)r->nq * 2)) || (e = cu->MemAlloc(&r->k[i], (size_t)r->nk * 2)) ||
            (e = cu->MemAlloc(&r->v[i], (size_t)r->nk * 2)))
            goto oom;
        int bf = r->bf16;
        CUdeviceptr bufs[3] = {r->q[i], r->k[i], r->v[i]};
        long long ns[3] = {r->nq, r->nk, r->nk};
        for (int j = 0; j < 3; j++) {
            unsigned seed = 0x51ed0000u + (unsigned)(i * 3 + j) * 0x1234567u;
            void *args[] = {&bufs[j], &ns[j], &seed, &bf};
            if ((e = launch_helper(w, w->f_fill, ns[j], args))) goto oom;
        }
    }
    if ((e = cu->MemAlloc(&r->o, (size_t)r->nq * 2)) || (e = cu->MemAlloc(&r->lse, (size_t)r->nlse * 4)) ||
        (e = cu->MemAlloc(&r->oref, (size_t)(r->Lq * r->D * 2 * 2))) ||
        (e = cu->MemAlloc(&r->lseref, (size_t)(r->Lq * 4 * 2))))
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
    v.causal = r->t->key.causal ? 1 : 0;
    v.arch = r->w->dev.limits.arch;
    return v;
}

/* Compiled before the pool starts: a key whose reference cannot be built
 * fails before any variant is compiled for it. */
static int compile_reference(keyrun *r) {
    tt_worker *w = r->w;
    tt__variant v = reference_variant(r);
    tt__jit_opts jo = {.source = w->ref, .cache_dir = w->o.cache_dir};
    return tt__jit_compile(&jo, &v, &r->refcb, r->err, sizeof r->err) < 0 ? -1 : 0;
}

static int run_reference(keyrun *r) {
    tt_worker *w = r->w;
    tt__variant v = reference_variant(r);
    tt__cubin *cb = r->refcb;
    r->refcb = NULL;
    tt__kernel *k = NULL;
    if (!cb) return -1;
    int rc = tt__kernel_load(w->dev.ctx, cb, &v, &k, r->err, sizeof r->err);
    tt__cubin_free(cb);
    if (rc < 0) return -1;
    r->nplanes = (int64_t)r->B * r->H > 1 ? 2 : 1;
    int planes[2][2] = {{0, 0}, {r->B - 1, r->H - 1}};
    for (int p = 0; p < r->nplanes && rc == 0; p++) {
        tt_sdpa_params P = params_for(r, 0);
        int b = planes[p][0], h = planes[p][1];
        r->plane_q[p] = ((long long)b * r->H + h) * r->Lq * r->D;
        r->plane_lse[p] = ((long long)b * r->H + h) * r->Lq;
        long long off_k = ((long long)b * r->H + h) * r->Lk * r->D;
        P.q = (const char *)P.q + r->plane_q[p] * 2;
        P.k = (const char *)P.k + off_k * 2;
        P.v = (const char *)P.v + off_k * 2;
        P.o = (char *)(uintptr_t)r->oref + (size_t)p * r->Lq * r->D * 2;
        P.lse = (float *)(uintptr_t)r->lseref + (size_t)p * r->Lq;
        P.batch = P.heads_q = P.heads_kv = 1;
        rc = tt__kernel_launch(k, &P, w->stream, r->err, sizeof r->err);
    }
    if (rc == 0) {
        /* The reference is slow by design: allow it a generous minute. */
        int ws = wait_stream(w, 60000 + w->o.launch_timeout_ms, r->err, sizeof r->err);
        if (ws != WAIT_OK) return -1; /* no unload: it would wait on the GPU */
    }
    tt__kernel_unload(k);
    return rc;
}

static void report_fields(const cand *c, char *buf, size_t len) {
    const tt__report *rp = c->cubin ? &c->cubin->report : c->k ? &c->k->report : NULL;
    if (!rp) {
        buf[0] = '\0';
        return;
    }
    snprintf(buf, len, " regs=%d smem_bytes=%d spill_bytes=%d", (int)rp->registers,
             (int)(rp->static_smem + rp->dynamic_smem), (int)(rp->spill_stores + rp->spill_loads));
}

static void say_try(keyrun *r, const cand *c) {
    char cfg[TT_CONFIG_TEXT_MAX];
    tt_config_format(&c->v.config, cfg, sizeof cfg);
    emitf(r->emit, r->ud, "TRY id=%lld config=%s", (long long)r->t->id, cfg);
}

static void say_status(keyrun *r, const cand *c, const char *status, const char *extra) {
    char cfg[TT_CONFIG_TEXT_MAX], rep[96];
    tt_config_format(&c->v.config, cfg, sizeof cfg);
    report_fields(c, rep, sizeof rep);
    emitf(r->emit, r->ud, "RESULT id=%lld status=%s config=%s batch=%d heads=%d%s%s", (long long)r->t->id,
          status, cfg, (int)r->B, (int)r->H, rep, extra ? extra : "");
}

/* Launches c once on input set `set`. */
static int launch(keyrun *r, cand *c, int set) {
    tt_sdpa_params p = params_for(r, set);
    return tt__kernel_launch(c->k, &p, r->w->stream, r->err, sizeof r->err);
}

enum { RUN_OK = 0, RUN_WRONG, RUN_SKIP, RUN_DEAD };

/* A wait that failed: report the variant and leave (the context is gone). */
static int dead(keyrun *r, cand *c, int ws) {
    char extra[600];
    snprintf(extra, sizeof extra, " reason=%s", ws == WAIT_TIMEOUT ? "deadline" : "cuda-error");
    say_status(r, c, ws == WAIT_TIMEOUT ? "timeout" : "fault", extra);
    fprintf(stderr, "tiletune-worker: variant %s: %s; leaving (the context is unusable)\n",
            ws == WAIT_TIMEOUT ? "timed out" : "faulted", r->err);
    c->out = 1;
    return RUN_DEAD;
}

/* Loads, poisons, runs once and checks c against the reference. */
static int check(keyrun *r, cand *c) {
    tt_worker *w = r->w;
    const tt__cuda *cu = w->cu;
    if (!c->k && tt__kernel_load(w->dev.ctx, c->cubin, &c->v, &c->k, r->err, sizeof r->err) < 0) return RUN_SKIP;
    /* 0xff bytes are NaN in fp16, bf16 and fp32: an element the kernel
     * never writes stays NaN and is counted below. */
    CUresult e;
    if ((e = cu->MemsetD8Async(r->o, 0xff, (size_t)r->nq * 2, w->stream)) ||
        (e = cu->MemsetD8Async(r->lse, 0xff, (size_t)r->nlse * 4, w->stream)) ||
        (e = cu->MemsetD8Async(w->scratch, 0, 64, w->stream)) ||
        (e = cu->EventRecord(w->ev[0], w->stream))) {
        tt__cuda_fail(cu, e, "poisoning the output", r->err, sizeof r->err);
        return dead(r, c, WAIT_FAULT);
    }
    if (launch(r, c, 0) < 0) return RUN_SKIP; /* a launch refused (resources): not run */
    cu->EventRecord(w->ev[1], w->stream);
    /* No estimate yet: the first launch gets the whole limit. */
    int ws = wait_stream(w, w->o.launch_timeout_ms, r->err, sizeof r->err);
    if (ws != WAIT_OK) return dead(r, c, ws);
    float ms = 0;
    cu->EventElapsedTime(&ms, w->ev[0], w->ev[1]);
    c->t1_ms = ms;
    CUdeviceptr sums = w->scratch, bad = w->scratch + 16, maxd = w->scratch + 24;
    int bf = r->bf16;
    CUdeviceptr nul = 0;
    void *a1[] = {&r->o, &r->nq, &bf, &bad};
    void *a2[] = {&r->lse, &nul, &r->nlse, &bad, &maxd};
    e = launch_helper(w, w->f_bad, r->nq, a1);
    if (!e) e = launch_helper(w, w->f_lse, r->nlse, a2);
    for (int p = 0; p < r->nplanes && !e; p++) {
        CUdeviceptr op = r->o + (CUdeviceptr)r->plane_q[p] * 2, rp = r->oref + (CUdeviceptr)p * r->Lq * r->D * 2;
        CUdeviceptr lp = r->lse + (CUdeviceptr)r->plane_lse[p] * 4, lrp = r->lseref + (CUdeviceptr)p * r->Lq * 4;
        long long n = r->Lq * r->D, nl = r->Lq;
        void *a3[] = {&op, &rp, &n, &bf, &sums};
        void *a4[] = {&lp, &lrp, &nl, &bad, &maxd};
        e = launch_helper(w, w->f_diff, n, a3);
        if (!e) e = launch_helper(w, w->f_lse, nl, a4);
    }
    if (e) {
        tt__cuda_fail(cu, e, "launching the check", r->err, sizeof r->err);
        return dead(r, c, WAIT_FAULT);
    }
    if ((ws = wait_stream(w, w->o.launch_timeout_ms, r->err, sizeof r->err)) != WAIT_OK) return dead(r, c, ws);
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
    char extra[160];
    snprintf(extra, sizeof extra, " nonfinite=%llu rel_err=%.3g lse_err=%.3g", nbad, c->rel, (double)lse_err);
    say_status(r, c, "wrong", extra);
    c->out = 1;
    return RUN_WRONG;
}

/* Launches c `reps` times after one warm-up, rotating input sets, with an
 * event before each and after the last; appends the times to c->t. The
 * warm-up is per slice: the GPU has just run another candidate, and a
 * slice of 2 or 3 launches would otherwise carry that switch in its
 * median. */
static int time_part(keyrun *r, cand *c, int reps) {
    tt_worker *w = r->w;
    const tt__cuda *cu = w->cu;
    if (reps > MAX_REPS - c->nt) reps = MAX_REPS - c->nt;
    if (reps < 1) return RUN_OK;
    if (launch(r, c, 0) < 0) return RUN_SKIP;
    for (int i = 0; i < reps; i++) {
        cu->EventRecord(w->ev[i], w->stream);
        if (launch(r, c, i % r->nrot) < 0) return RUN_SKIP;
    }
    cu->EventRecord(w->ev[reps], w->stream);
    double expect = (reps + 1) * (c->t1_ms > 0 ? c->t1_ms : 1.0);
    int ws = wait_stream(w, w->o.launch_timeout_ms + 10 * expect, r->err, sizeof r->err);
    if (ws != WAIT_OK) return dead(r, c, ws);
    for (int i = 0; i < reps; i++) {
        float ms = 0;
        cu->EventElapsedTime(&ms, w->ev[i], w->ev[i + 1]);
        c->t[c->nt++] = ms;
    }
    return RUN_OK;
}

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
                say_try(r, c);
                int x = time_part(r, c, tt_wslice(c->want, slices, s));
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
            sleep_ms(BUSY_WAIT_MS);
        }
    }
    for (int i = 0; i < p->n; i++) {
        cand *c = &p->c[i];
        if (c->live && tt_wstats_of(c->t, c->nt, &c->st) < 0) c->live = 0; /* no launch: cannot happen */
    }
    return RUN_OK;
}

/* A timed variant's RESULT: status ok, or skipped for one the fast search
 * dropped after a partial timing (its numbers are kept as history, but
 * a few launches in an early round, at that moment's boost clock, must
 * not beat the finalists' full timing as the key's winner). */
static void say_timed(keyrun *r, cand *c, const char *status) {
    const tt_nvml_sample *cond = &c->cond;
    char extra[256];
    int n = snprintf(extra, sizeof extra, " time_ms=%.6g tflops=%.4g time_min_ms=%.6g spread=%.4g reps=%d rel_err=%.3g",
                     c->st.median_ms,
                     tt_wtflops(r->B, r->H, r->Lq, r->Lk, r->D, r->t->key.causal, c->st.median_ms),
                     c->st.min_ms, c->st.spread, c->st.reps, c->rel);
    if (cond->sm_clock_mhz >= 0) n += snprintf(extra + n, sizeof extra - (size_t)n, " sm_clock_mhz=%d", cond->sm_clock_mhz);
    if (cond->temp_c >= 0) n += snprintf(extra + n, sizeof extra - (size_t)n, " temp_c=%d", cond->temp_c);
    if (cond->processes >= 0) snprintf(extra + n, sizeof extra - (size_t)n, " busy=%d", c->busy ? 1 : 0);
    say_status(r, c, status, extra);
    c->out = 1;
}

static void say_ok(keyrun *r, cand *c) { say_timed(r, c, "ok"); }

/* Builds the candidate list: the space minus AVOID, plus (fault builds,
 * --inject) the two faulty variants first so a test meets them early. */
static int candidates(keyrun *r, cand **out, int *n) {
    tt_worker *w = r->w;
    tt__space_entry *e = NULL;
    size_t ne = 0;
    if (tt__space_enumerate(&r->t->key, &w->dev.limits, 0, NULL, 1, &e, &ne, r->err, sizeof r->err) < 0) return -1;
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
            v.causal = r->t->key.causal ? 1 : 0;
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

static void unload_all(pool *p) {
    for (int i = 0; i < p->n; i++) {
        tt__kernel_unload(p->c[i].k);
        p->c[i].k = NULL;
    }
}

/* Checks every candidate as soon as its compile is ready (the GPU checks
 * while the CPUs compile the rest). One that passes stays loaded and live
 * for the timing passes: a key's modules are all loaded at once, a few
 * dozen small cubins. Check failures are reported here (check()). */
static int check_all(keyrun *r, pool *p, int *live) {
    *live = 0;
    for (int i = 0; i < p->n; i++) {
        cand *c = &p->c[i];
        c->live = 0;
        if (pool_wait(p, i) != C_OK) continue;
        say_try(r, c);
        int x = check(r, c);
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
            say_ok(r, &p->c[i]);
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
                say_timed(r, &p->c[i], "skipped"); /* not a result the key can end on */
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
    tt_wproblem(r.Lq, r.D, t->batch, t->heads, &r.B, &r.H);
    /* The daemon takes batch up to 2^20 but the grid's y and z (heads,
     * batch) stop at 65535: every launch would fail and read as "no
     * correct variant". And B*H*L*D*2 bytes must not wrap. */
    long long bytes;
    int too_big = r.B > 65535 || r.H > 65535 ||
                  __builtin_mul_overflow((long long)r.B * r.H, (r.Lq > r.Lk ? r.Lq : r.Lk) * r.D * 2, &bytes);
    if (!too_big) {
        r.nq = (long long)r.B * r.H * r.Lq * r.D;
        r.nk = (long long)r.B * r.H * r.Lk * r.D;
        r.nlse = (long long)r.B * r.H * r.Lq;
    }
    const char *fail = NULL;
    int rc = TT_WORKER_NEXT, nok = 0, ncand = 0;
    cand *c = NULL;
    pool p;
    memset(&p, 0, sizeof p);
    if (too_big) {
        fail = "problem-size";
        snprintf(r.err, sizeof r.err, "batch %d x heads %d x seqlen %lld x head_dim %d is over the kernel's limits "
                 "(batch and heads at most 65535)", (int)r.B, (int)r.H, (long long)(r.Lq > r.Lk ? r.Lq : r.Lk), (int)r.D);
        goto done;
    }
    if (t->key.rev[0] && strcmp(t->key.rev, w->src->rev) != 0) {
        fail = "rev-mismatch";
        snprintf(r.err, sizeof r.err, "the key is for kernel revision %s, this worker compiles %s", t->key.rev,
                 w->src->rev);
        goto done;
    }
    if (load_check(w, r.err, sizeof r.err) < 0) {
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
    if (compile_reference(&r) < 0) {
        fail = "reference";
        goto done;
    }
    pool_start(&p); /* compiles run while the inputs and the reference are made */
    double t0 = now_ms();
    if (alloc_bufs(&r) < 0) {
        fail = "memory";
        goto stop;
    }
    if (run_reference(&r) < 0) {
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
            (now_ms() - t0) / 1000);
stop:
    pool_stop(&p);
    for (int i = 0; i < ncand; i++) tt__cubin_free(c[i].cubin);
done:
    tt__cubin_free(r.refcb);
    free(c);
    if (rc == TT_WORKER_NEXT || fail) free_bufs(&r);
    if (rc == TT_WORKER_EXIT && !fail) return rc; /* the daemon gives the key to the next worker */
    if (fail) {
        fprintf(stderr, "tiletune-worker: key failed (%s): %s\n", fail, r.err);
        emitf(emit, ud, "DONE id=%lld status=failed reason=%s", (long long)t->id, fail);
    } else {
        emitf(emit, ud, "DONE id=%lld status=done", (long long)t->id);
    }
    return rc;
}
