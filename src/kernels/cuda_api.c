#include "kernels/cuda_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tiletune.h"

#ifndef TT_NVRTC_FALLBACK_DIR
#define TT_NVRTC_FALLBACK_DIR "/usr/local/cuda/lib64"
#endif

/* ---- the driver ---------------------------------------------------------- */

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static tt__cuda cuda_table;
static int cuda_rc;
static char cuda_msg[256];

/* Stores the address of `sym` into the function pointer at `slot` (memcpy:
 * ISO C has no cast from void * to a function pointer). */
static int load_sym(void *h, const char *lib, const char *sym, void *slot, char *msg, size_t n) {
    void *p = dlsym(h, sym);
    if (!p) {
        snprintf(msg, n, "%s lacks %s", lib, sym);
        return -1;
    }
    memcpy(slot, &p, sizeof p);
    return 0;
}

/* The symbol name is given explicitly because some are versioned (_v2). */
#define LOAD(field, sym)                                             \
    do {                                                             \
        if (load_sym(h, lib, sym, &t->field, msg, sizeof msg) < 0) { \
            rc = TT_ERR_CUDA;                                        \
            goto fail;                                               \
        }                                                            \
    } while (0)

static void cuda_load_once(void) {
    char msg[256] = "";
    int rc = 0;
    const char *lib = "libcuda.so.1";
    tt__cuda *t = &cuda_table;
    /* RTLD_LOCAL: the driver's symbols stay out of the global namespace, so
     * the application's own CUDA use is unaffected. Never dlclose'd: the
     * driver does not support being unloaded while contexts exist. */
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        rc = TT_ERR_NOGPU;
        const char *e = dlerror();
        snprintf(msg, sizeof msg, "no CUDA driver: cannot load %s (%s)", lib, e ? e : "?");
        goto fail;
    }
    CUresult (*init)(unsigned);
    CUresult (*get_version)(int *);
    CUresult (*get_count)(int *);
    if (load_sym(h, lib, "cuInit", &init, msg, sizeof msg) < 0 ||
        load_sym(h, lib, "cuDriverGetVersion", &get_version, msg, sizeof msg) < 0 ||
        load_sym(h, lib, "cuDeviceGetCount", &get_count, msg, sizeof msg) < 0) {
        rc = TT_ERR_CUDA;
        goto fail;
    }
    LOAD(GetErrorString, "cuGetErrorString");
    LOAD(GetErrorName, "cuGetErrorName");
    LOAD(DeviceGet, "cuDeviceGet");
    LOAD(DeviceGetAttribute, "cuDeviceGetAttribute");
    LOAD(DeviceGetName, "cuDeviceGetName");
    LOAD(DeviceTotalMem, "cuDeviceTotalMem_v2");
    LOAD(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    LOAD(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
    LOAD(CtxGetCurrent, "cuCtxGetCurrent");
    LOAD(CtxGetDevice, "cuCtxGetDevice");
    LOAD(CtxPushCurrent, "cuCtxPushCurrent_v2");
    LOAD(CtxPopCurrent, "cuCtxPopCurrent_v2");
    LOAD(CtxSynchronize, "cuCtxSynchronize");
    LOAD(PointerGetAttribute, "cuPointerGetAttribute");
    LOAD(ModuleLoadData, "cuModuleLoadData");
    LOAD(ModuleUnload, "cuModuleUnload");
    LOAD(ModuleGetFunction, "cuModuleGetFunction");
    LOAD(FuncSetAttribute, "cuFuncSetAttribute");
    LOAD(FuncGetAttribute, "cuFuncGetAttribute");
    LOAD(LaunchKernel, "cuLaunchKernel");
    LOAD(MemAlloc, "cuMemAlloc_v2");
    LOAD(MemFree, "cuMemFree_v2");
    LOAD(MemcpyHtoD, "cuMemcpyHtoD_v2");
    LOAD(MemcpyDtoH, "cuMemcpyDtoH_v2");
    LOAD(MemsetD8, "cuMemsetD8_v2");
    LOAD(MemsetD8Async, "cuMemsetD8Async");
    LOAD(MemAllocAsync, "cuMemAllocAsync");
    LOAD(MemFreeAsync, "cuMemFreeAsync");
    LOAD(StreamCreate, "cuStreamCreate");
    LOAD(StreamDestroy, "cuStreamDestroy_v2");
    LOAD(StreamSynchronize, "cuStreamSynchronize");
    LOAD(StreamQuery, "cuStreamQuery");
    LOAD(StreamIsCapturing, "cuStreamIsCapturing");
    LOAD(StreamWaitEvent, "cuStreamWaitEvent");
    LOAD(EventCreate, "cuEventCreate");
    LOAD(EventDestroy, "cuEventDestroy_v2");
    LOAD(EventRecord, "cuEventRecord");
    LOAD(EventSynchronize, "cuEventSynchronize");
    LOAD(TensorMapEncodeTiled, "cuTensorMapEncodeTiled");
    LOAD(EventQuery, "cuEventQuery");
    LOAD(EventElapsedTime, "cuEventElapsedTime_v2");

    CUresult r = init(0);
    if (r != CUDA_SUCCESS) {
        const char *name = NULL;
        t->GetErrorName(r, &name);
        rc = TT_ERR_NOGPU;
        snprintf(msg, sizeof msg, "no usable GPU: cuInit failed (%s)", name ? name : "?");
        goto fail;
    }
    if (get_version(&t->driver_version) != CUDA_SUCCESS) t->driver_version = 0;
    if (get_count(&t->device_count) != CUDA_SUCCESS || t->device_count < 1) {
        rc = TT_ERR_NOGPU;
        snprintf(msg, sizeof msg, "no GPU: the CUDA driver sees no device");
        goto fail;
    }
    return;
fail:
    cuda_rc = rc;
    memcpy(cuda_msg, msg, sizeof msg);
    /* the handle stays open: dlclose of a half-initialized driver is not
     * worth its risk, and this path runs once per process */
}

int tt__cuda_get(const tt__cuda **out, char *err, size_t errlen) {
    pthread_once(&cuda_once, cuda_load_once);
    if (cuda_rc < 0) return tt__fail(cuda_rc, err, errlen, "%s", cuda_msg);
    *out = &cuda_table;
    return 0;
}

int tt__cuda_fail(const tt__cuda *cu, CUresult r, const char *where, char *err, size_t errlen) {
    const char *name = NULL, *text = NULL;
    if (cu) {
        cu->GetErrorName(r, &name);
        cu->GetErrorString(r, &text);
    }
    int code = (r == CUDA_ERROR_NO_DEVICE || r == CUDA_ERROR_NOT_INITIALIZED || r == CUDA_ERROR_DEINITIALIZED)
                   ? TT_ERR_NOGPU
                   : TT_ERR_CUDA;
    return tt__fail(code, err, errlen, "%s: %s (%s)", where, name ? name : "CUDA error", text ? text : "?");
}

int tt__ctx_enter(const tt__cuda *cu, CUcontext ctx, int *pushed, char *err, size_t errlen) {
    CUcontext cur = NULL;
    *pushed = 0;
    if (cu->CtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx) return 0;
    CUresult r = cu->CtxPushCurrent(ctx);
    if (r) return tt__cuda_fail(cu, r, "cuCtxPushCurrent", err, errlen);
    *pushed = 1;
    return 0;
}

void tt__ctx_leave(const tt__cuda *cu, int pushed) {
    CUcontext popped;
    if (pushed) cu->CtxPopCurrent(&popped);
}

/* ---- NVRTC ---------------------------------------------------------------- */

static pthread_once_t nvrtc_once = PTHREAD_ONCE_INIT;
static tt__nvrtc nvrtc_table;
static int nvrtc_rc;
static char nvrtc_msg[512];

static void nvrtc_load_once(void) {
    char msg[512] = "";
    int rc = 0;
    tt__nvrtc *t = &nvrtc_table;
    /* The soname of this toolkit's NVRTC first; the unversioned name for a
     * newer one; the build machine's toolkit directory for a toolkit that is
     * installed but not on the loader's path (/usr/local/cuda usually is not). */
    const char *names[] = {"libnvrtc.so.13", "libnvrtc.so", TT_NVRTC_FALLBACK_DIR "/libnvrtc.so.13",
                           TT_NVRTC_FALLBACK_DIR "/libnvrtc.so"};
    void *h = NULL;
    const char *lib = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++) {
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) lib = names[i];
    }
    if (!h) {
        rc = TT_ERR_COMPILE;
        snprintf(msg, sizeof msg,
                 "NVRTC not found (tried libnvrtc.so.13, libnvrtc.so and %s): install the CUDA "
                 "toolkit's NVRTC to compile kernels",
                 TT_NVRTC_FALLBACK_DIR);
        goto fail;
    }
    snprintf(t->path, sizeof t->path, "%s", lib);
    nvrtcResult (*version)(int *, int *);
    if (load_sym(h, lib, "nvrtcVersion", &version, msg, sizeof msg) < 0) {
        rc = TT_ERR_COMPILE;
        goto fail;
    }
    if (version(&t->major, &t->minor) != NVRTC_SUCCESS) {
        rc = TT_ERR_COMPILE;
        snprintf(msg, sizeof msg, "%s: nvrtcVersion failed", lib);
        goto fail;
    }
#define NLOAD(field, sym)                                            \
    do {                                                             \
        if (load_sym(h, lib, sym, &t->field, msg, sizeof msg) < 0) { \
            rc = TT_ERR_COMPILE;                                     \
            goto fail;                                               \
        }                                                            \
    } while (0)
    NLOAD(GetErrorString, "nvrtcGetErrorString");
    NLOAD(CreateProgram, "nvrtcCreateProgram");
    NLOAD(DestroyProgram, "nvrtcDestroyProgram");
    NLOAD(CompileProgram, "nvrtcCompileProgram");
    NLOAD(GetProgramLogSize, "nvrtcGetProgramLogSize");
    NLOAD(GetProgramLog, "nvrtcGetProgramLog");
    NLOAD(GetCUBINSize, "nvrtcGetCUBINSize");
    NLOAD(GetCUBIN, "nvrtcGetCUBIN");
#undef NLOAD
    return;
fail:
    nvrtc_rc = rc;
    memcpy(nvrtc_msg, msg, sizeof msg);
}

int tt__nvrtc_get(const tt__nvrtc **out, char *err, size_t errlen) {
    pthread_once(&nvrtc_once, nvrtc_load_once);
    if (nvrtc_rc < 0) return tt__fail(nvrtc_rc, err, errlen, "%s", nvrtc_msg);
    *out = &nvrtc_table;
    return 0;
}
