/*
 * Is a measurement physically possible? A table's TFLOP/s must be what its
 * time and problem size say (tt__sdpa_flops / time, within
 * TT_FLEET_TFLOPS_TOL), and no faster than its GPU's dense tensor peak:
 * a record with a time of 1e-6 ms, or TFLOP/s typed in by hand, would
 * otherwise win every `faster` merge on every node that imports it.
 */
#ifndef TT_TUNER_FLEET_PLAUSIBLE_H
#define TT_TUNER_FLEET_PLAUSIBLE_H

#include <stddef.h>

#include "tuner/store/record.h"

/* Relative disagreement allowed between a record's TFLOP/s and the one its
 * time gives: printing rounds (the worker writes 4 significant digits). */
#define TT_FLEET_TFLOPS_TOL 0.01

/*
 * The dense FP16/BF16 tensor-core peak in TFLOP/s of a GPU with this
 * compute capability and SM count: FLOP per clock per SM of the arch times
 * the highest boost clock of its parts (docs/fleet.md has the table). An
 * arch not in the table gets the largest rate and clock of any: the bound
 * stays, loose, rather than refusing a GPU newer than this build.
 */
double tt_fleet_tensor_peak(int cc_major, int cc_minor, int sm_count);

/* 0 if the ok record `r` of GPU `g` is plausible, else TT_ERR_RANGE with
 * the reason. Records without a time (failed runs) pass. */
int tt_fleet_plausible(const tt_record *r, const tt_gpu_info *g, char *err, size_t errlen);

/* tt_fleet_plausible as a record check of the reader (record.h). */
typedef struct tt_fleet_rec tt_fleet_rec;
int tt_fleet_plausible_check(const tt_fleet_rec *f, const char *config_text, char *err, size_t errlen);

#endif
