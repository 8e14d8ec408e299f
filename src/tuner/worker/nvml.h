/*
 * The conditions of a measurement from NVML, loaded at run time
 * (dlopen("libnvidia-ml.so.1")): SM clock, temperature, and how many
 * compute processes hold the GPU. Optional: without NVML every field is
 * "not known" (-1) and a measurement is never flagged busy.
 */
#ifndef TT_TUNER_WORKER_NVML_H
#define TT_TUNER_WORKER_NVML_H

#include <stddef.h>

typedef struct tt_nvml tt_nvml;

typedef struct tt_nvml_sample {
    int sm_clock_mhz; /* -1: not known */
    int temp_c;       /* -1: not known */
    int processes;    /* compute processes on the GPU, this one included; -1: not known */
} tt_nvml_sample;

/* Opens NVML for the GPU whose PCI bus id is `pci_bus_id` ("0000:3b:00.0",
 * from the driver API; NULL or "": by NVML index `index`). NULL when NVML
 * or the device is unavailable. */
tt_nvml *tt_nvml_open(const char *pci_bus_id, int index);
void tt_nvml_close(tt_nvml *n);
/* Fills every field it can; NULL `n` gives all -1. */
void tt_nvml_sample_now(tt_nvml *n, tt_nvml_sample *out);
/* The driver version ("570.86.15"); 0 or TT_ERR_NOTFOUND. */
int tt_nvml_driver_version(tt_nvml *n, char *buf, size_t len);

#endif
