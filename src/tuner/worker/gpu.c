#include "tuner/worker/gpu.h"

#include <dlfcn.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tuner/worker/run.h"

extern const char tt_worker_check_source[];

/* ---- small helpers ---------------------------------------------------------------- */

double tt__wk_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void tt__wk_sleep_ms(double ms) {
    struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000) * 1e6)};
    nanosleep(&ts, NULL);
}
/* Waits for the stream with a deadline. 0 done; 1 past the deadline; 2 the
 * stream failed (a fault: the context is now unusable). Polls rather than
 * blocks: a blocking sync on a kernel that never ends never returns. */
int tt__wk_wait_stream(tt_worker *w, double limit_ms, char *err, size_t errlen) {
    double start = tt__wk_now_ms(), deadline = start + limit_ms;
    for (;;) {
        CUresult r = w->cu->StreamQuery(w->stream);
        if (r == CUDA_SUCCESS) return WAIT_OK;
        if (r != CUDA_ERROR_NOT_READY) {
            tt__cuda_fail(w->cu, r, "the stream", err, errlen);
            return WAIT_FAULT;
        }
        double t = tt__wk_now_ms();
        if (t > deadline) {
            snprintf(err, errlen, "still running after %.0f ms", t - start);
            return WAIT_TIMEOUT;
        }
        /* spin for the first millisecond (short kernels), then nap */
        if (t - start < 1.0) sched_yield();
        else tt__wk_sleep_ms(0.1);
    }
}

static unsigned grid_for(const tt_worker *w, long long n) {
    long long b = (n + CHECK_THREADS - 1) / CHECK_THREADS, cap = (long long)w->dev.limits.sm_count * 8;
    if (cap < 1) cap = 256;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

CUresult tt__wk_launch_helper(tt_worker *w, CUfunction f, long long n, void **args) {
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
    if (nv->GetCUBINSize(prog, &n) != NVRTC_SUCCESS || !(out = malloc(n)) ||
        nv->GetCUBIN(prog, out) != NVRTC_SUCCESS) {
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
int tt__wk_load_check(tt_worker *w, char *err, size_t errlen) {
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
