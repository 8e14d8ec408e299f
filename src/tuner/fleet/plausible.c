#include "tuner/fleet/plausible.h"

#include <math.h>

#include "common/fail.h"
#include "common/key.h"
#include "tuner/fleet/record.h"

/* Dense FP16 tensor FLOP per clock per SM (FP16 accumulate where a part
 * has two rates) and the highest boost clock of the arch's parts, from
 * NVIDIA's data sheets: V100 125 TFLOP/s at 80 SMs x 1530 MHz, A100 312 at
 * 108 x 1410, RTX 4090 330 at 128 x 2520, H100/H200 989 at 132 x 1830
 * (boost up to 1980), B200 2250 at 148 x 1965. */
static const struct {
    int cc; /* major * 10 + minor */
    double flop_per_clk_sm;
    double max_mhz;
} peaks[] = {
    {70, 1024, 1597},  {72, 1024, 1377},  {75, 1024, 2100},  {80, 2048, 1440},
    {86, 1024, 2100},  {87, 2048, 1300},  {89, 1024, 2640},  {90, 4096, 1980},
    {100, 8192, 2100}, {103, 8192, 2100}, {120, 1024, 2900},
};
#define NPEAKS (sizeof peaks / sizeof peaks[0])

double tt_fleet_tensor_peak(int cc_major, int cc_minor, int sm_count) {
    int cc = cc_major * 10 + cc_minor;
    double rate = 0, mhz = 0;
    for (size_t i = 0; i < NPEAKS; i++)
        if (peaks[i].cc == cc)
            return peaks[i].flop_per_clk_sm * (double)sm_count * peaks[i].max_mhz * 1e6 / 1e12;
    for (size_t i = 0; i < NPEAKS; i++) {
        rate = fmax(rate, peaks[i].flop_per_clk_sm);
        mhz = fmax(mhz, peaks[i].max_mhz);
    }
    return rate * (double)sm_count * mhz * 1e6 / 1e12;
}

int tt_fleet_plausible(const tt_record *r, const tt_gpu_info *g, char *err, size_t errlen) {
    if (!(r->time_ms > 0) || r->batch < 1 || r->heads < 1) return 0;
    double work =
        tt__sdpa_flops(r->batch, r->heads, r->key.seqlen_q, r->key.seqlen_k, r->key.head_dim, r->key.causal);
    double speed = work / (r->time_ms * 1e-3) / 1e12;
    if (r->tflops >= 0 && fabs(r->tflops - speed) > TT_FLEET_TFLOPS_TOL * speed)
        return tt__fail(TT_ERR_RANGE, err, errlen,
                        "'tflops' %g disagrees with its time and problem: %d x %d heads, %g ms give %.4g "
                        "TFLOP/s",
                        r->tflops, (int)r->batch, (int)r->heads, r->time_ms, speed);
    double peak = tt_fleet_tensor_peak(g->cc_major, g->cc_minor, g->sm_count);
    if (speed > peak)
        return tt__fail(TT_ERR_RANGE, err, errlen,
                        "%.4g TFLOP/s (%g ms) is faster than the dense tensor peak of %s (sm_%d%d, %d SMs: "
                        "%.0f TFLOP/s)",
                        speed, r->time_ms, g->name, (int)g->cc_major, (int)g->cc_minor, (int)g->sm_count,
                        peak);
    return 0;
}

int tt_fleet_plausible_check(const tt_fleet_rec *f, const char *config_text, char *err, size_t errlen) {
    (void)config_text;
    return f->rec.status == TT_MEAS_OK ? tt_fleet_plausible(&f->rec, &f->gpu, err, errlen) : 0;
}
