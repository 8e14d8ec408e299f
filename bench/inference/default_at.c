/* The default tt_sdpa_fwd runs untuned for each key at a call size, on a
 * nominal device of an arch (no GPU): what grid.py --analyse needs to hold
 * a stored tune against a changed defaults table without re-running it.
 *
 *     tt_default_at ARCH SMS < keys.csv > defaults.csv
 *
 * Reads rows dtype,head_dim,causal,seqlen_q,seqlen_k,gqa_group,batch,heads
 * (a header line is skipped), writes grid.py's defaults.csv (the key's
 * columns and default_config). ARCH 90 with SMS 132 is an H100 SXM or an
 * H200. Exit 1 on a row it cannot read or a key with no default. */
#include "common/key.h"
#include "kernels/launch.h"
#include "kernels/variants.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int row(const char *line, tt_key_v2 *k, int64_t *batch, int64_t *heads) {
    char dtype[8];
    int d, c;
    long long lq, lk, g, b, h;
    if (sscanf(line, "%7[^,],%d,%d,%lld,%lld,%lld,%lld,%lld", dtype, &d, &c, &lq, &lk, &g, &b, &h) != 8)
        return -1;
    memset(k, 0, sizeof *k);
    if (tt__dtype_parse(dtype, &k->dtype) < 0) return -1;
    k->head_dim = d;
    k->causal = c;
    k->seqlen_q = lq;
    k->seqlen_k = lk;
    k->group = (int32_t)g;
    *batch = b;
    *heads = h;
    return tt__key_check(k, NULL, 0) < 0 ? -1 : 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s ARCH SMS < keys.csv > defaults.csv\n", argv[0]);
        return 2;
    }
    tt__device_limits lim;
    const int arch = atoi(argv[1]), sms = atoi(argv[2]);
    if (tt__device_limits_nominal(arch, &lim) < 0 || sms <= 0) {
        fprintf(stderr, "%s: no nominal device for arch %s with %s SMs\n", argv[0], argv[1], argv[2]);
        return 2;
    }
    lim.sm_count = sms;
    printf("dtype,head_dim,causal,seqlen_q,seqlen_k,gqa_group,default_config\n");
    char line[512], err[256], text[256];
    for (int n = 1; fgets(line, sizeof line, stdin); n++) {
        if (n == 1 && strncmp(line, "dtype", 5) == 0) continue;
        tt_key_v2 k;
        int64_t batch, heads;
        tt_config c;
        if (row(line, &k, &batch, &heads) < 0) {
            fprintf(stderr, "%s: line %d: not a key with a call size: %s", argv[0], n, line);
            return 1;
        }
        if (tt__sdpa_device_default_at(&k, &lim, batch, heads, &c, err, sizeof err) < 0 ||
            tt_config_format(&c, text, sizeof text) < 0) {
            fprintf(stderr, "%s: line %d: no default: %s\n", argv[0], n, err);
            return 1;
        }
        printf("%s,%d,%d,%lld,%lld,%d,\"%s\"\n", tt__dtype_name(k.dtype), (int)k.head_dim, (int)k.causal,
               (long long)k.seqlen_q, (long long)k.seqlen_k, (int)k.group, text);
    }
    return 0;
}
