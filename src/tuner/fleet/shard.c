#include "tuner/fleet/shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/proto.h"

int tt_shard_parse(const char *text, int *index, int *count, char *err, size_t errlen) {
    const char *slash = text ? strchr(text, '/') : NULL;
    char a[16], b[16];
    if (!slash || slash == text || (size_t)(slash - text) >= sizeof a || strlen(slash + 1) >= sizeof b) {
        if (err && errlen) snprintf(err, errlen, "shard must be i/n, e.g. 2/8");
        return TT_ERR_INVAL;
    }
    memcpy(a, text, (size_t)(slash - text));
    a[slash - text] = '\0';
    snprintf(b, sizeof b, "%s", slash + 1);
    int64_t i, n;
    int rc = tt__parse_i64(b, 1, TT_SHARD_MAX, &n);
    if (rc == 0) rc = tt__parse_i64(a, 1, n, &i);
    if (rc < 0) {
        if (err && errlen) snprintf(err, errlen, "shard '%s': need 1 <= i <= n <= %d", text, TT_SHARD_MAX);
        return rc;
    }
    *index = (int)i;
    *count = (int)n;
    return 0;
}

/* Work of a key up to a constant: the attention FLOPs per batch and head. */
static double work(const tt_key_v2 *k) {
    double w = (double)k->seqlen_q * (double)k->seqlen_k * (double)k->head_dim;
    return k->causal ? w / 2 : w;
}

#define CMP(x, y) ((x) < (y) ? -1 : (x) > (y) ? 1 : 0)

int tt_shard_key_cmp(const tt_key_v2 *a, const tt_key_v2 *b) {
    int c = CMP(work(a), work(b));
    if (!c) c = CMP((int)a->dtype, (int)b->dtype);
    if (!c) c = CMP(a->head_dim, b->head_dim);
    if (!c) c = CMP(a->causal, b->causal);
    if (!c) c = CMP(a->seqlen_q, b->seqlen_q);
    if (!c) c = CMP(a->seqlen_k, b->seqlen_k);
    if (!c) c = CMP(a->group > 1 ? a->group : 1, b->group > 1 ? b->group : 1);
    return c;
}

static int qsort_cmp(const void *a, const void *b) { return tt_shard_key_cmp(a, b); }

int tt_shard_of_position(size_t pos, int count) {
    size_t round = pos / (size_t)count, j = pos % (size_t)count;
    return (int)(round % 2 == 0 ? j : (size_t)count - 1 - j) + 1;
}

size_t tt_shard_select(tt_key_v2 *keys, size_t n, int index, int count) {
    if (!keys || n == 0 || count < 1 || index < 1 || index > count) return 0;
    qsort(keys, n, sizeof *keys, qsort_cmp);
    size_t uniq = 0;
    for (size_t i = 0; i < n; i++)
        if (uniq == 0 || tt_shard_key_cmp(&keys[uniq - 1], &keys[i]) != 0) keys[uniq++] = keys[i];
    size_t kept = 0;
    for (size_t pos = 0; pos < uniq; pos++)
        if (tt_shard_of_position(pos, count) == index) keys[kept++] = keys[pos];
    return kept;
}
