/* Unit tests of the fleet modules: the table format and its validation,
 * shards, and the merge policies against a real database. */
#include <math.h>
#include <unistd.h>

#include "tuner/fleet/merge.h"
#include "tuner/fleet/plausible.h"
#include "tuner/fleet/shard.h"
#include "fleet_util.h"
#include "kernels/variants.h"
#include "tuner/daemon/handlers_fleet.h"

/* The daemon's rule: the config on the arch of the record's GPU. */
#define kernel_rule tt_fleet_daemon_config_rule

#define NOW 1800000000LL
#define NEAR(a, b, eps) ASSERT(fabs((double)(a) - (double)(b)) <= (eps))

/* ---- records -------------------------------------------------------------- */

TEST(record_round_trips_through_its_line) {
    tt_fleet_rec a = fu_rec(0, 4096, 64, 1.23456789012345, "node-a"), b;
    a.rec.time_min_ms = 1.2;
    a.rec.sm_clock_mhz = 1980;
    a.rec.temp_c = 55;
    a.rec.busy = 0;
    a.rec.regs = 168;
    snprintf(a.shard, sizeof a.shard, "3/8");
    char line[TT_FLEET_LINE_MAX + 1], again[TT_FLEET_LINE_MAX + 1], err[256];
    int n = tt_fleet_rec_format(&a, line, sizeof line);
    ASSERT(n > 0);
    ASSERT(!strchr(line, '\n'));
    ASSERT_OK(tt_fleet_rec_parse(line, (size_t)n, kernel_rule, NOW, &b, err, sizeof err));
    ASSERT_EQ(b.rec.time_ms == a.rec.time_ms, 1); /* %.17g: exact */
    ASSERT_EQ(b.rec.regs, 168);
    ASSERT_EQ(b.rec.smem_bytes, -1);
    ASSERT_STREQ(b.shard, "3/8");
    ASSERT_STREQ(b.gpu.name, "Fleet GPU 0");
    ASSERT_EQ(tt_fleet_better(&a.rec, &b.rec, TT_POLICY_FASTER), 0);
    ASSERT_EQ(tt_fleet_rec_format(&b, again, sizeof again), n);
    ASSERT_STREQ(line, again);
}

/* Group and bottom-right travel in a table; a key without "group" (a
 * table from before groups) is group 1, and group 1 is not written. */
TEST(group_and_bottom_right_round_trip) {
    tt_fleet_rec a = fu_rec(0, 32768, 64, 0.25, "node-a"), b;
    a.rec.key.seqlen_q = 8;
    a.rec.key.causal = 2;
    a.rec.key.group = 8;
    a.rec.tflops = tt__sdpa_flops(a.rec.batch, a.rec.heads, 8, 32768, 128, 2) / (a.rec.time_ms * 1e-3) / 1e12;
    char line[TT_FLEET_LINE_MAX + 1], err[256];
    int n = tt_fleet_rec_format(&a, line, sizeof line);
    ASSERT(n > 0);
    ASSERT_CONTAINS(line, "\"group\":8");
    ASSERT_OK(tt_fleet_rec_parse(line, (size_t)n, kernel_rule, NOW, &b, err, sizeof err));
    ASSERT_EQ(b.rec.key.group, 8);
    ASSERT_EQ(b.rec.key.causal, 2);
    a.rec.key.group = 1;
    n = tt_fleet_rec_format(&a, line, sizeof line);
    ASSERT(strstr(line, "group") == NULL);
    ASSERT_OK(tt_fleet_rec_parse(line, (size_t)n, kernel_rule, NOW, &b, err, sizeof err));
    ASSERT_EQ(b.rec.key.group, 1);
    /* read canonical: bottom-right over one query row is no mask */
    a.rec.key.seqlen_q = 1;
    a.rec.tflops = tt__sdpa_flops(a.rec.batch, a.rec.heads, 1, 32768, 128, 2) / (a.rec.time_ms * 1e-3) / 1e12;
    n = tt_fleet_rec_format(&a, line, sizeof line);
    ASSERT_OK(tt_fleet_rec_parse(line, (size_t)n, kernel_rule, NOW, &b, err, sizeof err));
    ASSERT_EQ(b.rec.key.causal, 0);
}

/* One record line with a field replaced (or added): `edit` is a JSON
 * fragment spliced in place of `from`. */
static int parse_edited(const char *from, const char *to, char *err, size_t errlen) {
    tt_fleet_rec a = fu_rec(0, 1024, 64, 0.5, "n"), b;
    char line[TT_FLEET_LINE_MAX + 1], out[TT_FLEET_LINE_MAX + 64];
    ASSERT(tt_fleet_rec_format(&a, line, sizeof line) > 0);
    char *at = strstr(line, from);
    if (!at) TT_FAIL_AT("'%s' not in %s", from, line);
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - line), line, to, at + strlen(from));
    return tt_fleet_rec_parse(out, strlen(out), kernel_rule, NOW, &b, err, errlen);
}

TEST(each_class_of_invalid_record_is_refused_with_its_reason) {
    static const struct {
        const char *from, *to, *reason;
        int code;
    } cases[] = {
        {"\"kind\":\"best\"", "\"kind\":\"best\",\"colour\":\"red\"", "unknown field 'colour'", TT_ERR_INVAL},
        /* the reason is one line of an IMPORT reply: no newline from the table */
        {"\"kind\":\"best\"", "\"kind\":\"best\",\"a\\nb\\u007f\":1", "unknown field 'a?b?'", TT_ERR_INVAL},
        {"\"hdim\":128", "\"hdim\":128,\"batch_size\":1", "unknown field 'key.batch_size'", TT_ERR_INVAL},
        {"\"seqlen_q\":1024", "\"seqlen_q\":0", "'key.seqlen_q' 0 is out of range", TT_ERR_RANGE},
        {"\"seqlen_k\":1024", "\"seqlen_k\":99999999", "'key.seqlen_k' 99999999 is out of range",
         TT_ERR_RANGE},
        {"\"hdim\":128", "\"hdim\":100", "unsupported head_dim 100", TT_ERR_UNSUPPORTED},
        {"\"dtype\":\"fp16\"", "\"dtype\":\"fp8\"", "unsupported dtype 'fp8'", TT_ERR_UNSUPPORTED},
        {"\"hdim\":128", "\"hdim\":\"128\"", "'key.hdim' must be a whole number", TT_ERR_INVAL},
        {"\"reps\":50", "\"reps\":\"many\"", "'reps' must be a whole number", TT_ERR_INVAL},
        {"\"time_ms\":0.5", "\"time_ms\":-1", "'time_ms' -1 is out of range", TT_ERR_RANGE},
        {"\"time_ms\":0.5", "\"time_ms\":\"fast\"", "'time_ms' must be a number", TT_ERR_INVAL},
        {"block_m=128", "block_m=999", "not a valid config", TT_ERR_RANGE},
        {"warps=4", "warps=1", "not valid at head_dim 128 on Fleet GPU 0 (sm_90)", TT_ERR_INVAL},
        {"\"rev\":\"abc123\"", "\"rev\":\"XYZ\"", "'key.rev' must be a kernel revision", TT_ERR_INVAL},
        {"\"sm_count\":132", "\"sm_count\":133", "not the fingerprint of the GPU described", TT_ERR_INVAL},
        {"\"measured_at\":1700000000", "\"measured_at\":4000000000", "out of range", TT_ERR_RANGE},
        {"\"status\":\"ok\"", "\"status\":\"wrong\"", "a best record must have status ok", TT_ERR_INVAL},
        {"\"reps\":50", "\"reps\":50,\"busy\":1", "busy", TT_ERR_INVAL},
        {"\"node\":\"n\"", "\"node\":\"a\\u0007b\"", "control character", TT_ERR_INVAL},
        {"\"kind\":\"best\",", "", "missing field 'kind'", TT_ERR_INVAL},
        {"\"kind\":\"best\"", "\"kind\":\"best\",\"kind\":\"best\"", "not valid JSON", TT_ERR_CORRUPT},
        {"{", "[", "not valid JSON", TT_ERR_CORRUPT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512] = "";
        int rc = parse_edited(cases[i].from, cases[i].to, err, sizeof err);
        if (rc != cases[i].code || !strstr(err, cases[i].reason))
            TT_FAIL_AT("case %zu (%s): rc %d, '%s'; want %d, '%s'", i, cases[i].to, rc, err, cases[i].code,
                       cases[i].reason);
    }
}

/* ---- the reader -------------------------------------------------------------- */

typedef struct collect {
    int header, good, bad, end;
    char last_bad[512];
} collect;

static int on_line(void *ud, int what, int64_t no, const tt_fleet_rec *rec, const char *why) {
    collect *c = ud;
    (void)no;
    (void)rec;
    if (what == TT_FLEET_LINE_HEADER) c->header++;
    if (what == TT_FLEET_LINE_RECORD) c->good++;
    if (what == TT_FLEET_LINE_BAD) {
        c->bad++;
        snprintf(c->last_bad, sizeof c->last_bad, "%s", why);
    }
    if (what == TT_FLEET_LINE_END) c->end++;
    return 0;
}

static int read_text(const char *text, size_t len, collect *c, char *err, size_t errlen) {
    FILE *f = fmemopen((void *)text, len, "r");
    ASSERT(f);
    tt_fleet_reader r;
    tt_fleet_reader_init(&r, kernel_rule, NOW);
    memset(c, 0, sizeof *c);
    int rc = tt_fleet_read_stream(f, &r, on_line, c, err, errlen);
    fclose(f);
    return rc;
}

static char *table_text(size_t nrec, size_t *len) {
    char path[] = "/tmp/ttfleet-table-XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    close(fd);
    tt_fleet_rec recs[8];
    for (size_t i = 0; i < nrec; i++) recs[i] = fu_rec(0, 512 << i, 64, 0.5, "n");
    fu_write_table(path, recs, nrec, NULL);
    FILE *f = fopen(path, "r");
    char *buf = calloc(1, 1 << 16);
    *len = fread(buf, 1, (1 << 16) - 1, f);
    fclose(f);
    unlink(path);
    return buf;
}

TEST(reader_accepts_a_whole_table_and_refuses_damaged_ones) {
    size_t len;
    char *t = table_text(3, &len), err[512];
    collect c;
    ASSERT_OK(read_text(t, len, &c, err, sizeof err));
    ASSERT_EQ(c.header, 1);
    ASSERT_EQ(c.good, 3);
    ASSERT_EQ(c.end, 1);

    /* truncated at a line boundary: no end line */
    char *last = strstr(t, "{\"end\"");
    ASSERT_EQ(read_text(t, (size_t)(last - t), &c, err, sizeof err), TT_ERR_CORRUPT);
    ASSERT_CONTAINS(err, "truncated");
    /* truncated mid-record */
    ASSERT_EQ(read_text(t, (size_t)(last - t) - 40, &c, err, sizeof err), TT_ERR_CORRUPT);
    ASSERT_CONTAINS(err, "truncated");
    /* one digit changed: still JSON, caught by the checksum */
    char *copy = strdup(t);
    char *tm = strstr(strchr(copy, '\n'), "\"time_ms\":0.5");
    tm[12] = '7'; /* 0.5 -> 0.7 */
    ASSERT_EQ(read_text(copy, len, &c, err, sizeof err), TT_ERR_CORRUPT);
    ASSERT_CONTAINS(err, "checksum");
    /* a record line dropped: the count says so */
    free(copy);
    copy = strdup(t);
    char *l2 = strchr(copy, '\n') + 1, *l3 = strchr(l2, '\n') + 1;
    memmove(l2, l3, strlen(l3) + 1);
    ASSERT_EQ(read_text(copy, strlen(copy), &c, err, sizeof err), TT_ERR_CORRUPT);
    ASSERT_CONTAINS(err, "counts 3 records, the file has 2");
    /* data after the end */
    free(copy);
    copy = calloc(1, len + 16);
    memcpy(copy, t, len);
    strcat(copy, "junk\n");
    ASSERT_EQ(read_text(copy, strlen(copy), &c, err, sizeof err), TT_ERR_CORRUPT);
    ASSERT_CONTAINS(err, "after the end");
    /* a format version from the future */
    free(copy);
    copy = strdup(t);
    char *v = strstr(copy, "\"version\":1");
    v[10] = '7';
    ASSERT_EQ(read_text(copy, len, &c, err, sizeof err), TT_ERR_VERSION);
    ASSERT_CONTAINS(err, "format version 7 is newer");
    free(copy);
    free(t);

    ASSERT_EQ(read_text("", 0, &c, err, sizeof err), TT_ERR_CORRUPT);
    ASSERT_CONTAINS(err, "empty");
    const char *notjson = "hello, world\nthis is not a table\n";
    ASSERT_EQ(read_text(notjson, strlen(notjson), &c, err, sizeof err), TT_ERR_CORRUPT);
    ASSERT_CONTAINS(err, "not a tiletune table");
    const char *other = "{\"format\":\"something-else\",\"version\":1}\n";
    ASSERT_EQ(read_text(other, strlen(other), &c, err, sizeof err), TT_ERR_CORRUPT);
    ASSERT_CONTAINS(err, "not a tiletune table");
    /* megabytes of junk without a newline: refused after the first 4 KiB */
    size_t big = 8 << 20;
    char *junk = malloc(big);
    for (size_t i = 0; i < big; i++) junk[i] = (char)('A' + i % 23);
    ASSERT_EQ(read_text(junk, big, &c, err, sizeof err), TT_ERR_CORRUPT);
    ASSERT_CONTAINS(err, "longer than 4096 bytes");
    free(junk);
}

TEST(a_bad_record_is_reported_and_the_rest_read) {
    size_t len;
    char *t = table_text(3, &len), err[512];
    /* hdim of the second record made unsupported: the checksum no longer
     * matches, so drop it from the end line (a hand-made table) */
    char *l2 = strchr(t, '\n') + 1, *l3 = strchr(l2, '\n') + 1;
    char *h = strstr(l2, "\"hdim\":128");
    ASSERT(h && h < l3);
    memcpy(h, "\"hdim\":100", 10);
    char *sum = strstr(t, ",\"fnv1a64\"");
    strcpy(sum, "}\n");
    collect c;
    ASSERT_OK(read_text(t, strlen(t), &c, err, sizeof err));
    ASSERT_EQ(c.good, 2);
    ASSERT_EQ(c.bad, 1);
    ASSERT_CONTAINS(c.last_bad, "unsupported head_dim 100");
    free(t);
}

/* ---- shards ------------------------------------------------------------------ */

static size_t make_grid(tt_key_v2 *keys) {
    static const int64_t seqlens[] = {128, 512, 1000, 2048, 4096, 16384, 512 /* a duplicate */};
    static const int hdims[] = {64, 128, 256};
    size_t n = 0;
    for (int d = 0; d < 2; d++)
        for (int h = 0; h < 3; h++)
            for (int c = 0; c < 2; c++)
                for (int s = 0; s < 7; s++) {
                    tt_key_v2 *k = &keys[n++];
                    memset(k, 0, sizeof *k);
                    k->dtype = (tt_dtype)d;
                    k->head_dim = hdims[h];
                    k->causal = c;
                    k->seqlen_q = seqlens[s];
                    k->seqlen_k = seqlens[s] > 1000 ? 2 * seqlens[s] : seqlens[s];
                }
    return n;
}

TEST(shards_are_disjoint_cover_the_grid_and_balance) {
    tt_key_v2 grid[128], part[128], uniq[128];
    size_t n = make_grid(grid);
    memcpy(uniq, grid, sizeof grid);
    size_t nu = tt_shard_select(uniq, n, 1, 1);
    ASSERT_EQ(nu, n - 12); /* the duplicate seqlen dropped */
    for (int count = 1; count <= 8; count++) {
        int owner[128];
        for (size_t i = 0; i < nu; i++) owner[i] = 0;
        size_t min = (size_t)-1, max = 0;
        for (int idx = 1; idx <= count; idx++) {
            /* each node may list the grid in its own order */
            memcpy(part, grid, sizeof grid);
            for (size_t i = 0; i < n; i++) {
                size_t j = (i * 7 + (size_t)idx) % n;
                tt_key_v2 t = part[i];
                part[i] = part[j];
                part[j] = t;
            }
            size_t got = tt_shard_select(part, n, idx, count);
            if (got < min) min = got;
            if (got > max) max = got;
            for (size_t i = 0; i < got; i++) {
                size_t u = 0;
                while (u < nu && tt_shard_key_cmp(&uniq[u], &part[i]) != 0) u++;
                ASSERT(u < nu);
                if (owner[u]) TT_FAIL_AT("n=%d: key in shards %d and %d", count, owner[u], idx);
                owner[u] = idx;
            }
        }
        for (size_t u = 0; u < nu; u++)
            if (!owner[u]) TT_FAIL_AT("n=%d: key %zu in no shard", count, u);
        ASSERT(max - min <= 1);
    }
}

TEST(shard_text_is_checked) {
    int i, n;
    char err[128];
    ASSERT_OK(tt_shard_parse("3/8", &i, &n, err, sizeof err));
    ASSERT_EQ(i, 3);
    ASSERT_EQ(n, 8);
    const char *bad[] = {"0/8", "9/8", "8", "/8", "3/", "a/b", "3/8/1", "-1/2", "1/0", "1/99999"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        if (tt_shard_parse(bad[k], &i, &n, err, sizeof err) == 0) TT_FAIL_AT("'%s' accepted", bad[k]);
}

/* ---- merge ------------------------------------------------------------------- */

typedef struct loaded {
    tt_fleet_rec recs[64];
    size_t n;
} loaded;

static int keep(void *ud, int what, int64_t no, const tt_fleet_rec *rec, const char *why) {
    loaded *l = ud;
    (void)no;
    if (what == TT_FLEET_LINE_BAD) TT_FAIL_AT("bad record: %s", why);
    if (what == TT_FLEET_LINE_RECORD) l->recs[l->n++] = *rec;
    return 0;
}

/* Reads a table file and merges it into db, as import does. */
static tt_fleet_counts import_file(const char *db, const char *file, tt_fleet_policy p, int dry) {
    loaded *l = calloc(1, sizeof *l);
    FILE *f = fopen(file, "r");
    ASSERT(f);
    tt_fleet_reader r;
    tt_fleet_reader_init(&r, kernel_rule, NOW);
    char err[512];
    if (tt_fleet_read_stream(f, &r, keep, l, err, sizeof err) < 0) TT_FAIL_AT("%s: %s", file, err);
    fclose(f);
    tt_store *s;
    ASSERT_OK(tt_store_open(db, &s, err, sizeof err));
    tt_fleet_merge_opts o = {.policy = p, .dry_run = dry, .local_rev = FU_REV};
    tt_fleet_counts c;
    int committed;
    if (tt_fleet_merge(s, l->recs, l->n, &o, &c, &committed, err, sizeof err) < 0)
        TT_FAIL_AT("merge: %s", err);
    ASSERT_EQ(committed, !dry);
    tt_store_close(s);
    free(l);
    return c;
}

/* Four overlapping tables of two GPU models: near-ties (within 2%) with
 * different configs, clear wins, duplicates, records equal but for node. */
static void write_fleet_files(const char *dir, char files[4][300]) {
    tt_fleet_rec t[4][6];
    t[0][0] = fu_rec(0, 1024, 64, 1.000, "a");
    t[0][1] = fu_rec(0, 2048, 64, 2.000, "a");
    t[0][2] = fu_rec(1, 1024, 32, 0.700, "a");
    t[1][0] = fu_rec(0, 1024, 32, 1.005, "b"); /* near-tie with a's, other config */
    t[1][1] = fu_rec(0, 2048, 32, 1.500, "b"); /* clear win */
    t[1][2] = fu_rec(0, 4096, 64, 4.000, "b");
    t[2][0] = fu_rec(0, 1024, 64, 1.001, "c"); /* same config as a's, a hair slower */
    t[2][1] = fu_rec(0, 4096, 32, 4.010, "c"); /* near-tie with b's */
    t[2][2] = fu_rec(1, 1024, 64, 0.701, "c");
    t[3][0] = fu_rec(0, 1024, 32, 1.005, "d"); /* b's record, measured on d */
    t[3][1] = fu_rec(0, 8192, 64, 9.0, "d");
    t[3][2] = fu_rec(0, 8192, 64, 8.0, "d"); /* the same key twice in one file: refused */
    size_t n[4] = {3, 3, 3, 3};
    for (int i = 0; i < 4; i++) {
        snprintf(files[i], 300, "%s/t%d.json", dir, i);
        fu_write_table(files[i], t[i], n[i], NULL);
    }
}

TEST(faster_merge_is_order_independent_and_idempotent) {
    char dir[64], files[4][300];
    fu_tmpdir(dir, sizeof dir);
    write_fleet_files(dir, files);
    static const int perms[][4] = {{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}, {2, 0, 3, 1}, {0, 3, 1, 2}};
    char *first = NULL;
    for (size_t p = 0; p < sizeof perms / sizeof perms[0]; p++) {
        char db[300];
        snprintf(db, sizeof db, "%s/perm%zu.db", dir, p);
        for (int i = 0; i < 4; i++) import_file(db, files[perms[p][i]], TT_POLICY_FASTER, 0);
        char *content = fu_db_content(db, 1);
        if (!first) first = content;
        else if (strcmp(first, content) != 0)
            TT_FAIL_AT("order %zu gives another table:\n%s\nvs\n%s", p, content, first);
        else free(content);
    }
    /* the near-tie went to the smaller config text, not to the fastest */
    ASSERT_CONTAINS(first, "|1024|1024|1|4|16|0|128|32|");
    /* idempotent: the whole database (gpu, kernel_rev too) stays as it is */
    char db[300];
    snprintf(db, sizeof db, "%s/perm0.db", dir);
    char *before = fu_db_content(db, 0);
    for (int i = 0; i < 4; i++) {
        tt_fleet_counts c = import_file(db, files[i], TT_POLICY_FASTER, 0);
        ASSERT_EQ(c.added + c.replaced, 0);
    }
    char *after = fu_db_content(db, 0);
    ASSERT_STREQ(before, after);
    free(before);
    free(after);
    free(first);
}

TEST(fill_never_replaces_and_newer_takes_the_later) {
    char dir[64], db[300], f1[300], f2[300];
    fu_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/t.db", dir);
    snprintf(f1, sizeof f1, "%s/1.json", dir);
    snprintf(f2, sizeof f2, "%s/2.json", dir);
    tt_fleet_rec a[2] = {fu_rec(0, 1024, 64, 2.0, "a"), fu_rec(0, 2048, 64, 2.0, "a")};
    tt_fleet_rec b[3] = {fu_rec(0, 1024, 32, 1.0, "b"), fu_rec(0, 2048, 32, 3.0, "b"),
                         fu_rec(0, 4096, 32, 3.0, "b")};
    b[0].rec.measured_at -= 100; /* older than a's */
    b[1].rec.measured_at += 100;
    fu_write_table(f1, a, 2, NULL);
    fu_write_table(f2, b, 3, NULL);
    tt_fleet_counts c = import_file(db, f1, TT_POLICY_FILL, 0);
    ASSERT_EQ(c.added, 2);
    char *before = fu_db_content(db, 1);
    c = import_file(db, f2, TT_POLICY_FILL, 0);
    ASSERT_EQ(c.added, 1);
    ASSERT_EQ(c.replaced, 0);
    ASSERT_EQ(c.kept, 2);
    char *after = fu_db_content(db, 1);
    ASSERT(strncmp(before, after, strlen(before)) == 0 || strstr(after, "|1024|1024|1|4|16|0|128|64|"));
    ASSERT_CONTAINS(after, "|1024|1024|1|4|16|0|128|64|"); /* the slower stays: fill */
    free(before);
    free(after);
    /* newer: 2048 takes b's later (slower) record, 1024 keeps a's later one */
    c = import_file(db, f2, TT_POLICY_NEWER, 0);
    ASSERT_EQ(c.replaced, 1);
    after = fu_db_content(db, 1);
    ASSERT_CONTAINS(after, "|2048|2048|1|4|16|0|128|32|");
    free(after);
    /* faster: 1024 goes to b's 1.0 ms */
    c = import_file(db, f2, TT_POLICY_FASTER, 0);
    ASSERT_EQ(c.replaced, 1);
}

TEST(dry_run_and_strict_change_nothing) {
    char dir[64], db[300], f1[300];
    fu_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/t.db", dir);
    snprintf(f1, sizeof f1, "%s/1.json", dir);
    tt_fleet_rec a[2] = {fu_rec(0, 1024, 64, 2.0, "a"), fu_rec(1, 2048, 64, 2.0, "a")};
    fu_write_table(f1, a, 2, NULL);
    tt_store *s;
    char err[256];
    ASSERT_OK(tt_store_open(db, &s, err, sizeof err));
    tt_store_close(s);
    char *before = fu_db_content(db, 0);
    tt_fleet_counts c = import_file(db, f1, TT_POLICY_FASTER, 1);
    ASSERT_EQ(c.added, 2);
    char *after = fu_db_content(db, 0);
    ASSERT_STREQ(before, after);
    free(after);
    /* strict: a record the store refuses rolls everything back */
    ASSERT_OK(tt_store_open(db, &s, err, sizeof err));
    tt_fleet_rec bad[2] = {a[0], a[1]};
    snprintf(bad[1].gpu.name, sizeof bad[1].gpu.name, "Fleet GPU 0"); /* collides below */
    tt_gpu_info other;
    fu_gpu(7, &other);
    snprintf(other.fingerprint, sizeof other.fingerprint, "%s", a[1].gpu.fingerprint);
    ASSERT_OK(tt_store_put_gpu(s, &other)); /* the fingerprint names another model here */
    tt_store_close(s);
    free(before);
    before = fu_db_content(db, 0);
    loaded l = {.n = 2};
    l.recs[0] = a[0];
    l.recs[1] = a[1];
    ASSERT_OK(tt_store_open(db, &s, err, sizeof err));
    tt_fleet_merge_opts o = {.policy = TT_POLICY_FASTER, .strict = 1};
    int committed = 1;
    ASSERT_OK(tt_fleet_merge(s, l.recs, 2, &o, &c, &committed, err, sizeof err));
    ASSERT_EQ(committed, 0);
    ASSERT_EQ(c.rejected, 1);
    tt_store_close(s);
    after = fu_db_content(db, 0);
    ASSERT_STREQ(before, after);
    free(before);
    free(after);
}

/* ---- the checks of a record: work, plausibility, arch, provenance ------------- */

/* A record through its line and back with the daemon's rule: 0 or the
 * parse status, the reason in err. */
static int reparse(const tt_fleet_rec *a, tt_fleet_rec *b, char *err, size_t errlen) {
    char line[TT_FLEET_LINE_MAX + 1];
    int n = tt_fleet_rec_format(a, line, sizeof line);
    ASSERT(n > 0);
    err[0] = '\0';
    return tt_fleet_rec_parse(line, (size_t)n, kernel_rule, NOW, b, err, errlen);
}

/* A record of GPU model m moved to compute capability cc (fingerprint
 * and key follow). */
static void move_to_arch(tt_fleet_rec *f, int cc_major, int cc_minor) {
    f->gpu.cc_major = cc_major;
    f->gpu.cc_minor = cc_minor;
    tt_gpu_fingerprint(f->gpu.name, cc_major, cc_minor, f->gpu.sm_count, f->gpu.mem_bytes,
                       f->gpu.fingerprint);
    snprintf(f->rec.key.gpu, sizeof f->rec.key.gpu, "%s", f->gpu.fingerprint);
}

TEST(work_of_a_forward_counts_the_pairs_its_mask_leaves) {
    double d = 4.0 * 2 * 3 * 128; /* batch 2, 3 heads, head dim 128 */
    NEAR(tt__sdpa_flops(2, 3, 1024, 4096, 128, 0), d * 1024 * 4096, 1);
    NEAR(tt__sdpa_flops(2, 3, 4096, 4096, 128, 1), d * 4096 * 4096 / 2, 1); /* the convention */
    /* top-left, Lq < Lk: query i sees i + 1 keys */
    NEAR(tt__sdpa_flops(2, 3, 1024, 4096, 128, 1), d * (1024.0 * 1025 / 2), 1);
    /* top-left, Lq > Lk: rows past Lk see every key */
    NEAR(tt__sdpa_flops(2, 3, 4096, 1024, 128, 1), d * (1024.0 * 1025 / 2 + 3072.0 * 1024), 1);
    /* bottom-right, Lq < Lk: query i sees i + 1 + (Lk - Lq) keys */
    NEAR(tt__sdpa_flops(2, 3, 1024, 4096, 128, 2), d * (1024.0 * 3072 + 1024.0 * 1025 / 2), 1);
    /* bottom-right, Lq > Lk: the first Lq - Lk queries see nothing */
    NEAR(tt__sdpa_flops(2, 3, 4096, 1024, 128, 2), d * (1024.0 * 1025 / 2), 1);
    ASSERT_EQ(tt__sdpa_flops(0, 3, 1024, 1024, 128, 0), 0);
}

TEST(faster_ranks_by_speed_not_by_the_size_of_the_problem_timed) {
    /* the winner timed at batch 32; a record of the same key timed at
     * batch 1 whose config is 50% slower per FLOP: a far smaller time */
    tt_fleet_rec big = fu_rec(0, 4096, 64, 1.0, "a"), small = fu_rec(0, 4096, 32, 1.0, "b");
    big.rec.batch = 32;
    big.rec.time_ms = fu_ms(4096, 400) * 8; /* 400 TFLOP/s at 8x fu_rec's batch */
    small.rec.batch = 1;
    small.rec.time_ms = fu_ms(4096, 400) / 4 * 1.5;
    ASSERT(small.rec.time_ms < big.rec.time_ms);
    ASSERT(tt_fleet_better(&big.rec, &small.rec, TT_POLICY_FASTER) < 0);
    ASSERT(tt_fleet_better(&small.rec, &big.rec, TT_POLICY_FASTER) > 0);
    /* and a batch-1 record really faster per FLOP wins */
    small.rec.time_ms = fu_ms(4096, 400) / 4 / 1.5;
    ASSERT(tt_fleet_better(&small.rec, &big.rec, TT_POLICY_FASTER) < 0);
    /* the merge keeps the batch-32 winner against the slower one, in
     * either order */
    small.rec.time_ms = fu_ms(4096, 400) / 4 * 1.5;
    for (int order = 0; order < 2; order++) {
        char dir[64], db[300], f1[300], f2[300];
        fu_tmpdir(dir, sizeof dir);
        snprintf(db, sizeof db, "%s/t.db", dir);
        snprintf(f1, sizeof f1, "%s/1.json", dir);
        snprintf(f2, sizeof f2, "%s/2.json", dir);
        for (int k = 0; k < 2; k++) {
            tt_fleet_rec *f = k ? &small : &big;
            f->rec.tflops =
                tt__sdpa_flops(f->rec.batch, 16, 4096, 4096, 128, 0) / (f->rec.time_ms * 1e-3) / 1e12;
        }
        fu_write_table(f1, order ? &small : &big, 1, NULL);
        fu_write_table(f2, order ? &big : &small, 1, NULL);
        import_file(db, f1, TT_POLICY_FASTER, 0);
        import_file(db, f2, TT_POLICY_FASTER, 0);
        char *content = fu_db_content(db, 1);
        ASSERT_CONTAINS(content, "|4096|4096|1|32|16|0|128|64|");
        free(content);
    }
}

TEST(implausible_speeds_are_refused) {
    tt_fleet_rec a = fu_rec(0, 4096, 64, fu_ms(4096, 500), "n"), b;
    char err[512];
    ASSERT_OK(reparse(&a, &b, err, sizeof err));
    /* TFLOP/s within print rounding of its time passes */
    a.rec.tflops *= 1.005;
    ASSERT_OK(reparse(&a, &b, err, sizeof err));
    /* TFLOP/s that its time and size do not give */
    a.rec.tflops = 2500;
    ASSERT_EQ(reparse(&a, &b, err, sizeof err), TT_ERR_RANGE);
    ASSERT_CONTAINS(err, "'tflops' 2500 disagrees with its time and problem");
    /* a consistent record faster than the H200-class peak (sm_90, 132 SMs) */
    a.rec.tflops = 999999;
    a.rec.time_ms = fu_ms(4096, 999999);
    ASSERT_EQ(reparse(&a, &b, err, sizeof err), TT_ERR_RANGE);
    ASSERT_CONTAINS(err, "faster than the dense tensor peak");
    a.rec.time_ms = fu_ms(4096, 1100); /* just over 4096 x 132 x 1.98 GHz */
    a.rec.tflops = 1100;
    ASSERT_EQ(reparse(&a, &b, err, sizeof err), TT_ERR_RANGE);
    /* the same speed on a part twice the SMs is possible */
    a.gpu.sm_count = 264;
    move_to_arch(&a, 9, 0);
    ASSERT_OK(reparse(&a, &b, err, sizeof err));
    /* no tflops field: the time alone must still be possible */
    a = fu_rec(0, 4096, 64, 1e-6, "n");
    a.rec.tflops = -1;
    ASSERT_EQ(reparse(&a, &b, err, sizeof err), TT_ERR_RANGE);
    ASSERT(tt_fleet_tensor_peak(8, 0, 108) > 300 && tt_fleet_tensor_peak(8, 0, 108) < 330);
    ASSERT(tt_fleet_tensor_peak(9, 0, 132) > 989 && tt_fleet_tensor_peak(9, 0, 132) < 1100);
}

TEST(a_config_is_checked_on_the_arch_of_the_gpu_its_record_names) {
    char err[512];
    tt_fleet_rec a = fu_rec(0, 4096, 64, fu_ms(4096, 200), "n"), b;
    ASSERT_OK(tt__config_default_sm90(&a.rec.key, &a.rec.config));
    ASSERT_EQ(a.rec.config.family, TT_FAMILY_WS);
    ASSERT_OK(reparse(&a, &b, err, sizeof err)); /* ws on sm_90 */
    /* a ws record on an A100's fingerprint */
    tt_fleet_rec c = a;
    move_to_arch(&c, 8, 0);
    c.rec.time_ms = fu_ms(4096, 200);
    ASSERT_EQ(reparse(&c, &b, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "on Fleet GPU 0 (sm_80): sm_80: the ws kernel runs on sm_90 only");
    /* no kernel family below sm_80 */
    tt_fleet_rec t = fu_rec(0, 4096, 64, fu_ms(4096, 50), "n");
    move_to_arch(&t, 7, 5);
    ASSERT_EQ(reparse(&t, &b, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "no kernel family runs on this compute capability");
    /* shared memory over an sm_86 part's 99 KB, legal on sm_90 */
    tt_fleet_rec m = fu_rec(0, 4096, 64, fu_ms(4096, 50), "n");
    m.rec.config.block_m = 128;
    m.rec.config.block_n = 128;
    m.rec.config.warps = 8;
    m.rec.config.stages = 3;
    ASSERT_OK(reparse(&m, &b, err, sizeof err));
    move_to_arch(&m, 8, 6);
    ASSERT_EQ(reparse(&m, &b, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "shared memory");
    /* the record's own compile report over the register file */
    tt_fleet_rec r = fu_rec(0, 4096, 64, fu_ms(4096, 200), "n");
    r.rec.regs = 255;
    ASSERT_OK(reparse(&r, &b, err, sizeof err));
    r.rec.config.warps = 16;
    r.rec.config.block_m = 256;
    r.rec.regs = 200;
    ASSERT_EQ(reparse(&r, &b, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "register file");
}

TEST(a_winner_keeps_its_own_driver_whatever_the_import_order) {
    /* X: driver 580 / CUDA 13.0; Z: 590 / 13.1 and 5% faster, same model */
    tt_fleet_rec x = fu_rec(0, 2048, 64, fu_ms(2048, 400), "x"),
                 z = fu_rec(0, 2048, 32, fu_ms(2048, 420), "z");
    snprintf(x.rec.driver, sizeof x.rec.driver, "580.159.04");
    snprintf(x.gpu.driver, sizeof x.gpu.driver, "580.159.04");
    snprintf(z.rec.driver, sizeof z.rec.driver, "590.48.01");
    snprintf(z.rec.cuda, sizeof z.rec.cuda, "13.1");
    snprintf(z.gpu.driver, sizeof z.gpu.driver, "590.48.01");
    for (int order = 0; order < 2; order++) {
        char dir[64], db[300], fx[300], fz[300], err[256];
        fu_tmpdir(dir, sizeof dir);
        snprintf(db, sizeof db, "%s/t.db", dir);
        snprintf(fx, sizeof fx, "%s/x.json", dir);
        snprintf(fz, sizeof fz, "%s/z.json", dir);
        fu_write_table(fx, &x, 1, NULL);
        fu_write_table(fz, &z, 1, NULL);
        import_file(db, order ? fz : fx, TT_POLICY_FASTER, 0);
        import_file(db, order ? fx : fz, TT_POLICY_FASTER, 0);
        tt_store *s;
        ASSERT_OK(tt_store_open(db, &s, err, sizeof err));
        tt_record best;
        ASSERT_OK(tt_store_get_best(s, &z.rec.key, &best));
        ASSERT_STREQ(best.node, "z");
        ASSERT_STREQ(best.driver, "590.48.01");
        ASSERT_STREQ(best.cuda, "13.1");
        tt_store_close(s);
        /* and its line carries them, not the model row's */
        tt_fleet_rec out = {.kind = TT_FLEET_BEST, .rec = best, .gpu = x.gpu};
        char line[TT_FLEET_LINE_MAX + 1];
        ASSERT(tt_fleet_rec_format(&out, line, sizeof line) > 0);
        ASSERT_CONTAINS(line, "\"driver\":\"590.48.01\",\"cuda\":\"13.1\"");
    }
}

TEST(a_key_twice_in_one_table_is_refused) {
    char dir[64], db[300], f1[300];
    fu_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/t.db", dir);
    snprintf(f1, sizeof f1, "%s/1.json", dir);
    tt_fleet_rec t[3] = {fu_rec(0, 1024, 64, 1.0, "a"), fu_rec(0, 2048, 64, 2.0, "a"),
                         fu_rec(0, 1024, 32, 0.9, "a")};
    fu_write_table(f1, t, 3, NULL);
    tt_fleet_counts c = import_file(db, f1, TT_POLICY_FASTER, 0);
    ASSERT_EQ(c.added, 2);
    ASSERT_EQ(c.rejected, 1);
    char *content = fu_db_content(db, 1);
    ASSERT_CONTAINS(content, "|1024|1024|1|4|16|0|128|64|"); /* the first, though slower */
    free(content);
}

TEST(csv_writes_knob_names_and_import_names_other_formats) {
    tt_fleet_rec a = fu_rec(0, 1024, 64, 1.0, "n");
    char row[TT_FLEET_LINE_MAX], err[512];
    ASSERT(tt_fleet_csv_row(&a, row, sizeof row) > 0);
    ASSERT_CONTAINS(row, ",mma,128,64,4,");
    ASSERT_CONTAINS(row, ",swizzle,0,");
    collect c;
    static const char sqlite[] = "SQLite format 3\0\x10\0\x02\x02";
    ASSERT_EQ(read_text(sqlite, sizeof sqlite, &c, err, sizeof err), TT_ERR_CORRUPT);
    ASSERT_CONTAINS(err, "this is a SQLite database");
    char csv[2 * TT_FLEET_LINE_MAX];
    int n = tt_fleet_csv_header(csv, sizeof csv);
    ASSERT(n > 0);
    ASSERT(tt_fleet_csv_row(&a, csv + n, sizeof csv - (size_t)n) > 0);
    ASSERT_EQ(read_text(csv, strlen(csv), &c, err, sizeof err), TT_ERR_CORRUPT);
    ASSERT_CONTAINS(err, "this is CSV");
}

TT_TEST_MAIN()
