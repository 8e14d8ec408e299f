#include "tuner/fleet/policy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/key.h"
#include "common/proto.h"

static const char *const policy_names[] = {"faster", "newer", "fill"};

int tt_fleet_policy_parse(const char *name, tt_fleet_policy *out) {
    for (int i = 0; name && i < 3; i++)
        if (strcmp(name, policy_names[i]) == 0) {
            *out = (tt_fleet_policy)i;
            return 0;
        }
    return TT_ERR_INVAL;
}

const char *tt_fleet_policy_name(tt_fleet_policy p) { return (unsigned)p < 3 ? policy_names[p] : "?"; }

/* The tie band of a time: bands are TT_FLEET_TIE wide in log space, the
 * same on every node (no per-record width: "within each other's spread"
 * is not transitive, and only a total order makes merges commute). */
static long band(double t) { return (long)floor(log(t) / log1p(TT_FLEET_TIE)); }

#define CMP(x, y) ((x) < (y) ? -1 : (x) > (y) ? 1 : 0)

/* Optional values ("not recorded" < 0) sort after recorded ones. */
static int cmp_opt(double a, double b) {
    if ((a < 0) != (b < 0)) return a < 0 ? 1 : -1;
    return CMP(a, b);
}

double tt_fleet_time_per_work(const tt_record *r) {
    double w =
        tt__sdpa_flops(r->batch, r->heads, r->key.seqlen_q, r->key.seqlen_k, r->key.head_dim, r->key.causal);
    /* ms per TFLOP, a convenient scale; a record without its problem size
     * (never a winner) keeps its raw time */
    return w > 0 ? r->time_ms / (w * 1e-12) : r->time_ms;
}

static int cmp_faster(const tt_record *a, const tt_record *b) {
    double wa = tt_fleet_time_per_work(a), wb = tt_fleet_time_per_work(b);
    int c = CMP(band(wa), band(wb));
    if (c) return c;
    char ca[TT_CONFIG_TEXT_MAX] = "", cb[TT_CONFIG_TEXT_MAX] = "";
    tt_config_format(&a->config, ca, sizeof ca);
    tt_config_format(&b->config, cb, sizeof cb);
    if ((c = strcmp(ca, cb))) return c < 0 ? -1 : 1;
    /* The same config: the faster run, the tighter one, the better sampled,
     * the newer; then anything that still differs, so that no two distinct
     * records rank equal. */
    if ((c = CMP(wa, wb)) || (c = cmp_opt(a->spread, b->spread)) || (c = -CMP(a->reps, b->reps)) ||
        (c = -CMP(a->measured_at, b->measured_at)))
        return c;
    if ((c = strcmp(a->node, b->node))) return c < 0 ? -1 : 1;
    if ((c = CMP(a->batch, b->batch)) || (c = CMP(a->heads, b->heads)) ||
        (c = cmp_opt(a->time_min_ms, b->time_min_ms)) || (c = cmp_opt(a->tflops, b->tflops)) ||
        (c = cmp_opt(a->sm_clock_mhz, b->sm_clock_mhz)) || (c = cmp_opt(a->temp_c, b->temp_c)) ||
        (c = cmp_opt(a->busy, b->busy)) || (c = cmp_opt(a->regs, b->regs)) ||
        (c = cmp_opt(a->smem_bytes, b->smem_bytes)) || (c = cmp_opt(a->spill_bytes, b->spill_bytes)) ||
        (c = CMP(a->time_ms, b->time_ms)))
        return c;
    if ((c = strcmp(a->driver, b->driver)) || (c = strcmp(a->cuda, b->cuda)) ||
        (c = strcmp(a->nvrtc, b->nvrtc)))
        return c < 0 ? -1 : 1;
    return 0;
}

int tt_fleet_better(const tt_record *a, const tt_record *b, tt_fleet_policy policy) {
    if (policy == TT_POLICY_NEWER) {
        int c = -CMP(a->measured_at, b->measured_at);
        if (c) return c;
    }
    return cmp_faster(a, b);
}

uint64_t tt_fleet_table_sum_add(uint64_t sum, const tt_key_v2 *key, const tt_config *cfg) {
    char k[256] = "", c[TT_CONFIG_TEXT_MAX] = "";
    tt__key_format(key, k, sizeof k);
    tt_config_format(cfg, c, sizeof c);
    return sum + tt__hash_str(tt__hash_str(TT_HASH_INIT, k), c);
}
