/* Helpers of the fleet tests: records of a fake GPU model, tables written
 * through the real format functions, and a database's content as text. */
#ifndef TT_FLEET_TEST_UTIL_H
#define TT_FLEET_TEST_UTIL_H

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuner/fleet/record.h"
#include "tuner/store/store.h"
#include "common/hash.h"
#include "common/key.h"
#include "tt_test.h"

#define FU_REV "abc123"

/* The GPU model of model number m (0, 1, ...). */
static void fu_gpu(int m, tt_gpu_info *g) {
    memset(g, 0, sizeof *g);
    snprintf(g->name, sizeof g->name, "Fleet GPU %d", m);
    g->cc_major = 9;
    g->sm_count = 132 + m;
    g->mem_bytes = (int64_t)80 << 30;
    snprintf(g->driver, sizeof g->driver, "570.1");
    snprintf(g->cuda, sizeof g->cuda, "13.0");
    snprintf(g->nvrtc, sizeof g->nvrtc, "13.0");
    tt_gpu_fingerprint(g->name, g->cc_major, g->cc_minor, g->sm_count, g->mem_bytes, g->fingerprint);
}

/* A winner for seqlen s, head dim 128, fp16 of GPU model m, with a config
 * of block_n bn and a time. */
static tt_fleet_rec fu_rec(int m, int64_t s, int bn, double time_ms, const char *node) {
    tt_fleet_rec f;
    memset(&f, 0, sizeof f);
    f.kind = TT_FLEET_BEST;
    fu_gpu(m, &f.gpu);
    tt_record *r = &f.rec;
    tt_record_init(r);
    snprintf(r->key.gpu, sizeof r->key.gpu, "%s", f.gpu.fingerprint);
    snprintf(r->key.rev, sizeof r->key.rev, FU_REV);
    r->key.dtype = TT_DTYPE_FP16;
    r->key.head_dim = 128;
    r->key.seqlen_q = r->key.seqlen_k = s;
    ASSERT_OK(tt_config_default_v2(&r->key, &r->config));
    r->config.block_n = bn;
    r->batch = 4;
    r->heads = 16;
    r->time_ms = time_ms;
    r->spread = 0.01;
    r->reps = 50;
    /* what the worker reports: the work over the time (plausibility) */
    r->tflops = tt__sdpa_flops(r->batch, r->heads, s, s, 128, 0) / (time_ms * 1e-3) / 1e12;
    snprintf(r->driver, sizeof r->driver, "%s", f.gpu.driver);
    snprintf(r->cuda, sizeof r->cuda, "%s", f.gpu.cuda);
    snprintf(r->nvrtc, sizeof r->nvrtc, "%s", f.gpu.nvrtc);
    r->status = TT_MEAS_OK;
    r->measured_at = 1700000000;
    snprintf(r->node, sizeof r->node, "%s", node);
    return f;
}

/* The time at which fu_rec's problem (batch 4, 16 heads, head dim 128)
 * at seqlen s runs at `tflops`. */
__attribute__((unused)) static double fu_ms(int64_t s, double tflops) {
    return tt__sdpa_flops(4, 16, s, s, 128, 0) / (tflops * 1e12) * 1e3;
}

/* Writes a whole table file the way the CLI does. */
static void fu_write_table(const char *path, const tt_fleet_rec *recs, size_t n, const char *shard) {
    FILE *f = fopen(path, "w");
    ASSERT(f);
    char line[TT_FLEET_LINE_MAX + 1];
    tt_fleet_header h;
    memset(&h, 0, sizeof h);
    h.version = TT_FLEET_VERSION;
    h.exported_at = 1700000100;
    snprintf(h.node, sizeof h.node, "test");
    if (shard) snprintf(h.shard, sizeof h.shard, "%s", shard);
    ASSERT(tt_fleet_header_format(&h, line, sizeof line) > 0);
    fprintf(f, "%s\n", line);
    uint64_t sum = TT_HASH_INIT;
    for (size_t i = 0; i < n; i++) {
        int len = tt_fleet_rec_format(&recs[i], line, sizeof line);
        ASSERT(len > 0);
        sum = tt_fleet_sum_line(sum, line, (size_t)len);
        fprintf(f, "%s\n", line);
    }
    ASSERT(tt_fleet_end_format((int64_t)n, sum, line, sizeof line) > 0);
    fprintf(f, "%s\n", line);
    ASSERT_OK(fclose(f));
}

static int fu_dump_row(void *ud, int n, char **vals, char **names) {
    (void)names;
    char **acc = ud;
    for (int i = 0; i < n; i++) {
        const char *v = vals[i] ? vals[i] : "NULL";
        size_t have = *acc ? strlen(*acc) : 0;
        *acc = realloc(*acc, have + strlen(v) + 2);
        strcpy(*acc + have, v);
        strcat(*acc, i + 1 < n ? "|" : "\n");
    }
    return 0;
}

/* The tables an import may touch, as text (malloc'd). `winners_only`: the
 * best table alone (GPU rows carry the first importer's versions). */
static char *fu_db_content(const char *db, int winners_only) {
    sqlite3 *h;
    ASSERT_EQ(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    char *acc = calloc(1, 1);
    const char *q_best = "SELECT * FROM best ORDER BY gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k";
    const char *q_rest =
        "SELECT fingerprint, name, cc_major, cc_minor, sm_count, mem_bytes, driver, cuda, nvrtc,"
        " first_seen, last_seen FROM gpu ORDER BY 1;"
        " SELECT * FROM kernel_rev ORDER BY 1; SELECT count(*) FROM measurement;";
    char *e = NULL;
    if (sqlite3_exec(h, q_best, fu_dump_row, &acc, &e) != SQLITE_OK) TT_FAIL_AT("dump: %s", e);
    if (!winners_only && sqlite3_exec(h, q_rest, fu_dump_row, &acc, &e) != SQLITE_OK)
        TT_FAIL_AT("dump: %s", e);
    sqlite3_close(h);
    return acc;
}

/* A fresh temporary directory (mkdtemp) under /tmp. */
__attribute__((unused)) static void fu_tmpdir(char *dir, size_t len) {
    snprintf(dir, len, "/tmp/ttfleet-XXXXXX");
    ASSERT(mkdtemp(dir));
}

#endif
