#include "tuner/worker/nvml.h"

#include <dlfcn.h>
#include <stdlib.h>

#include "tiletune.h"

/* The few NVML types used, from NVML's ABI (no nvml.h in the toolkit). */
typedef int nvml_ret;
typedef void *nvml_dev;
#define NVML_OK 0
#define NVML_INSUFFICIENT_SIZE 7
#define NVML_CLOCK_SM 1
#define NVML_TEMPERATURE_GPU 0

struct tt_nvml {
    void *lib;
    nvml_dev dev;
    nvml_ret (*shutdown)(void);
    nvml_ret (*clock)(nvml_dev, int, unsigned *);
    nvml_ret (*temp)(nvml_dev, int, unsigned *);
    nvml_ret (*procs)(nvml_dev, unsigned *, void *);
    nvml_ret (*driver)(char *, unsigned);
};

tt_nvml *tt_nvml_open(const char *pci_bus_id, int index) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return NULL;
    tt_nvml *n = calloc(1, sizeof *n);
    if (!n) goto fail;
    n->lib = lib;
    nvml_ret (*init)(void) = (nvml_ret(*)(void))dlsym(lib, "nvmlInit_v2");
    nvml_ret (*by_pci)(const char *, nvml_dev *) =
        (nvml_ret(*)(const char *, nvml_dev *))dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    nvml_ret (*by_index)(unsigned, nvml_dev *) =
        (nvml_ret(*)(unsigned, nvml_dev *))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    n->shutdown = (nvml_ret(*)(void))dlsym(lib, "nvmlShutdown");
    n->clock = (nvml_ret(*)(nvml_dev, int, unsigned *))dlsym(lib, "nvmlDeviceGetClockInfo");
    n->temp = (nvml_ret(*)(nvml_dev, int, unsigned *))dlsym(lib, "nvmlDeviceGetTemperature");
    n->procs =
        (nvml_ret(*)(nvml_dev, unsigned *, void *))dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!n->procs)
        n->procs =
            (nvml_ret(*)(nvml_dev, unsigned *, void *))dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v2");
    n->driver = (nvml_ret(*)(char *, unsigned))dlsym(lib, "nvmlSystemGetDriverVersion");
    if (!init || !n->shutdown || init() != NVML_OK) goto fail;
    /* CUDA's device order (fastest first) need not be NVML's (PCI order):
     * the bus id names the same board in both. */
    if (!(pci_bus_id && *pci_bus_id && by_pci && by_pci(pci_bus_id, &n->dev) == NVML_OK) &&
        !(by_index && by_index((unsigned)index, &n->dev) == NVML_OK)) {
        n->shutdown();
        goto fail;
    }
    return n;
fail:
    free(n);
    dlclose(lib);
    return NULL;
}

void tt_nvml_close(tt_nvml *n) {
    if (!n) return;
    n->shutdown();
    dlclose(n->lib);
    free(n);
}

void tt_nvml_sample_now(tt_nvml *n, tt_nvml_sample *out) {
    out->sm_clock_mhz = out->temp_c = out->processes = -1;
    if (!n) return;
    unsigned v;
    if (n->clock && n->clock(n->dev, NVML_CLOCK_SM, &v) == NVML_OK) out->sm_clock_mhz = (int)v;
    if (n->temp && n->temp(n->dev, NVML_TEMPERATURE_GPU, &v) == NVML_OK) out->temp_c = (int)v;
    /* Asked with room for none: the count comes back without depending on
     * the layout of the process records (which changed between versions). */
    unsigned count = 0;
    nvml_ret r = n->procs ? n->procs(n->dev, &count, NULL) : -1;
    if (r == NVML_OK || r == NVML_INSUFFICIENT_SIZE) out->processes = (int)count;
}

int tt_nvml_driver_version(tt_nvml *n, char *buf, size_t len) {
    if (!n || !n->driver || len == 0 || n->driver(buf, (unsigned)len) != NVML_OK) return TT_ERR_NOTFOUND;
    return 0;
}
