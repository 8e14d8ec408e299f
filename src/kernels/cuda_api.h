/*
 * The CUDA driver API and NVRTC, loaded at run time.
 *
 * libtiletune must load, serve lookups and pass its CPU tests on machines
 * without a GPU, a driver or the CUDA toolkit, so neither library is linked:
 * the driver is dlopen("libcuda.so.1") and NVRTC is "libnvrtc.so.13" /
 * "libnvrtc.so" with the build machine's toolkit directory as a last resort.
 * Each is loaded once per process (thread-safe); a failure is remembered and
 * every later call gets the same error and message.
 *
 * The tables hold only the entry points tiletune uses. Names follow the
 * driver's without the "cu"/"nvrtc" prefix; where cuda.h maps a name to a
 * versioned symbol (cuMemAlloc -> cuMemAlloc_v2) the versioned one is loaded.
 */
#ifndef TT_KERNELS_CUDA_API_H
#define TT_KERNELS_CUDA_API_H

#include <cuda.h>
#include <nvrtc.h>
#include <stddef.h>

#include "common/fail.h"

typedef struct tt__cuda {
    int driver_version; /* cuDriverGetVersion, e.g. 13000 */
    int device_count;   /* >= 1: loading fails with TT_ERR_NOGPU otherwise */
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*CtxGetDevice)(CUdevice *);
    CUresult (*CtxPushCurrent)(CUcontext);
    CUresult (*CtxPopCurrent)(CUcontext *);
    CUresult (*CtxSynchronize)(void);
    CUresult (*PointerGetAttribute)(void *, CUpointer_attribute, CUdeviceptr);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*FuncSetAttribute)(CUfunction, CUfunction_attribute, int);
    CUresult (*FuncGetAttribute)(int *, CUfunction_attribute, CUfunction);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
    /* stream-ordered: inside a stream capture they become the graph's own
     * allocation (splitkv's workspace for a call first made under capture) */
    CUresult (*MemAllocAsync)(CUdeviceptr *, size_t, CUstream);
    CUresult (*MemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*StreamQuery)(CUstream);
    CUresult (*StreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventQuery)(CUevent);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    /* family ws: its Q/K/V/O tensor maps (CUDA 12.0+ drivers) */
    CUresult (*TensorMapEncodeTiled)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                     const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                     const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                     CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
} tt__cuda;

typedef struct tt__nvrtc {
    int major, minor; /* nvrtcVersion: part of every cubin cache key */
    char path[256];   /* the library that was opened, for messages */
    const char *(*GetErrorString)(nvrtcResult);
    nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                                 const char *const *);
    nvrtcResult (*DestroyProgram)(nvrtcProgram *);
    nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
    nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);
} tt__nvrtc;

/*
 * The driver, initialized (cuInit) with at least one device. TT_ERR_NOGPU
 * with a message when libcuda.so.1 is missing, cuInit fails or there is no
 * device; TT_ERR_CUDA for a driver that lacks an entry point we need.
 */
int tt__cuda_get(const tt__cuda **out, char *err, size_t errlen);

/* NVRTC. TT_ERR_COMPILE with a message naming the paths tried. */
int tt__nvrtc_get(const tt__nvrtc **out, char *err, size_t errlen);

/* Makes `ctx` the calling thread's context for a call: pushed only when
 * another one (or none) is current, since a launch path pays ~0.05 us a
 * push and pop on the H200's host and PyTorch's primary context is usually
 * current already. *pushed says whether tt__ctx_leave must pop. */
int tt__ctx_enter(const tt__cuda *cu, CUcontext ctx, int *pushed, char *err, size_t errlen);
void tt__ctx_leave(const tt__cuda *cu, int pushed);

/* Writes "where: CUDA_ERROR_X (text)" into err and returns TT_ERR_CUDA,
 * or TT_ERR_NOGPU for the driver's no-device / not-initialized codes. */
int tt__cuda_fail(const tt__cuda *cu, CUresult r, const char *where, char *err, size_t errlen);

#endif
