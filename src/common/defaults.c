/* The built-in default config per key: what a lookup answers when nothing
 * is tuned, and what libtiletune runs without a daemon. It must be valid on
 * every sm_80+ device and within reach of the tuned best (issue 3 target:
 * within 15%); docs/perf.md records how it was chosen. */
#include "key.h"

#include <string.h>

int tt_config_default(const tt_key *key, tt_config *out) {
    if (!key || !out) return TT_ERR_INVAL;
    if (!tt__head_dim_supported(key->head_dim)) return TT_ERR_UNSUPPORTED;
    tt_config c;
    memset(&c, 0, sizeof c);
    c.family = TT_FAMILY_MMA;
    c.layout = TT_LAYOUT_SWIZZLE;
    c.warps = 4;
    c.stages = 2;
    c.q_in_regs = 0;
    switch (key->head_dim) {
    case 32:
    case 64: c.block_m = 128; c.block_n = 64; break;
    case 96:
    case 128: c.block_m = 128; c.block_n = 64; break;
    default: c.block_m = 64; c.block_n = 64; break;
    }
    *out = c;
    return 0;
}

int tt__lookup_default(const tt_key *key, tt_lookup_result *out) {
    tt_lookup_result r;
    memset(&r, 0, sizeof r);
    int rc = tt_config_default(key, &r.config);
    if (rc < 0) return rc;
    r.match = TT_MATCH_DEFAULT;
    r.seqlen_q = key->seqlen_q;
    r.seqlen_k = key->seqlen_k;
    *out = r;
    return 0;
}
