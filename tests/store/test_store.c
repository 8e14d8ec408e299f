/* The tuning database: open/migrate/refuse, measurements and winners, the
 * job queue and its crash recovery, against real SQLite files. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/config.h"
#include "common/hash.h"
#include "common/key.h"
#include "tuner/store/store.h"
#include "tt_test.h"

/* ---- helpers ---------------------------------------------------------- */

static char tmpdir[256];
static char dbpath[300];

/* A fresh directory per test (each test runs in its own process) and the
 * path of a database inside it that does not exist yet. */
static const char *fresh_path(void) {
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/tt-store-XXXXXX", base && *base ? base : "/tmp");
    ASSERT(mkdtemp(tmpdir) != NULL);
    snprintf(dbpath, sizeof dbpath, "%s/tune.db", tmpdir);
    return dbpath;
}

/* Removes the database `path` and its side files. */
static void cleanup_files(const char *path) {
    char p[420];
    const char *sfx[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
        snprintf(p, sizeof p, "%s%s", path, sfx[i]);
        unlink(p);
    }
}

static void cleanup(void) {
    cleanup_files(dbpath);
    rmdir(tmpdir);
}

static void write_file(const char *path, const void *data, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT(fd >= 0);
    ASSERT_EQ(write(fd, data, len), (long long)len);
    close(fd);
}

/* Content hash and size of a file: "untouched" means both are equal. */
static uint64_t file_hash(const char *path, long long *size) {
    int fd = open(path, O_RDONLY);
    ASSERT(fd >= 0);
    uint64_t h = TT_HASH_INIT;
    char buf[8192];
    ssize_t n;
    *size = 0;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
        h = tt__hash_update(h, buf, (size_t)n);
        *size += n;
    }
    close(fd);
    return h;
}

static void raw_exec(const char *path, const char *sql) {
    sqlite3 *db = NULL;
    ASSERT_EQ(sqlite3_open(path, &db), SQLITE_OK);
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) TT_FAIL_AT("%s: %s", sql, msg ? msg : "?");
    sqlite3_close(db);
}

static long long raw_int(const char *path, const char *sql) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    ASSERT_EQ(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ASSERT_EQ(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    long long v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static tt_store *open_ok(const char *path) {
    tt_store *s = NULL;
    char err[256];
    int rc = tt_store_open(path, &s, err, sizeof err);
    if (rc != 0) TT_FAIL_AT("tt_store_open(%s) = %d: %s", path, rc, err);
    return s;
}

/* Opening must fail with `code`, a message containing `words`, and leave
 * the file byte-identical. */
static void expect_refusal(const char *path, int code, const char *words) {
    long long size0, size1;
    uint64_t h0 = file_hash(path, &size0);
    tt_store *s = NULL;
    char err[256] = "";
    ASSERT_EQ(tt_store_open(path, &s, err, sizeof err), code);
    ASSERT(s == NULL);
    ASSERT_CONTAINS(err, words);
    uint64_t h1 = file_hash(path, &size1);
    ASSERT_EQ(size1, size0);
    ASSERT(h0 == h1);
}

static const char GPU_A[] = "a1b2c3d4e5f60718";
static const char GPU_B[] = "0badc0de0badc0de";
static const char REV[] = "feedbeef00112233";

static void register_gpu(tt_store *s, const char *fp) {
    tt_gpu_info g;
    memset(&g, 0, sizeof g);
    snprintf(g.fingerprint, sizeof g.fingerprint, "%s", fp);
    snprintf(g.name, sizeof g.name, "NVIDIA H200");
    g.cc_major = 9;
    g.sm_count = 132;
    g.mem_bytes = 150ll << 30;
    snprintf(g.driver, sizeof g.driver, "570.86.15");
    snprintf(g.cuda, sizeof g.cuda, "13.0");
    snprintf(g.nvrtc, sizeof g.nvrtc, "13.0");
    ASSERT_OK(tt_store_put_gpu(s, &g));
}

static void setup_ids(tt_store *s) {
    register_gpu(s, GPU_A);
    register_gpu(s, GPU_B);
    ASSERT_OK(tt_store_put_rev(s, REV, "test kernel"));
}

static tt_key_v2 key_of(const char *gpu, int64_t seqlen) {
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    k.dtype = TT_DTYPE_FP16;
    k.head_dim = 128;
    k.causal = 1;
    k.seqlen_q = seqlen;
    k.seqlen_k = seqlen;
    snprintf(k.gpu, sizeof k.gpu, "%s", gpu);
    snprintf(k.rev, sizeof k.rev, "%s", REV);
    return k;
}

static tt_config cfg_of(int block_m, int stages) {
    tt_config c;
    memset(&c, 0, sizeof c);
    c.family = TT_FAMILY_MMA;
    c.block_m = block_m;
    c.block_n = 64;
    c.warps = 4;
    c.stages = stages;
    c.layout = TT_LAYOUT_SWIZZLE;
    return c;
}

static tt_record rec_of(tt_key_v2 k, tt_config c, tt_meas_status st, double ms) {
    tt_record r;
    tt_record_init(&r);
    r.key = k;
    r.config = c;
    r.batch = 8;
    r.heads = 16;
    r.status = st;
    r.time_ms = ms;
    r.spread = 0.01;
    r.reps = 50;
    r.tflops = ms > 0 ? 100.0 / ms : -1;
    r.measured_at = 1700000000;
    snprintf(r.node, sizeof r.node, "node-1");
    return r;
}

static int add(tt_store *s, tt_record r) {
    int won = -1;
    int rc = tt_store_add_measurement(s, &r, &won);
    if (rc != 0) TT_FAIL_AT("add_measurement = %d: %s", rc, tt_store_errmsg(s));
    return won;
}

/* ---- open, migrate, refuse -------------------------------------------- */

TEST(create_then_reopen_keeps_data_and_settings) {
    const char *p = fresh_path();
    tt_store *s = open_ok(p);
    setup_ids(s);
    ASSERT_EQ(add(s, rec_of(key_of(GPU_A, 1024), cfg_of(128, 2), TT_MEAS_OK, 1.0)), 1);
    tt_store_close(s);

    ASSERT_EQ(raw_int(p, "PRAGMA user_version"), TT_STORE_SCHEMA_VERSION);
    ASSERT_EQ(raw_int(p, "PRAGMA application_id"), TT_STORE_APPLICATION_ID);
    /* WAL is persistent in the file header: 2 in bytes 18 and 19. */
    ASSERT_EQ(raw_int(p, "SELECT count(*) FROM pragma_journal_mode WHERE journal_mode = 'wal'"), 1);

    s = open_ok(p);
    tt_record r;
    tt_key_v2 k = key_of(GPU_A, 1024);
    ASSERT_OK(tt_store_get_best(s, &k, &r));
    ASSERT_EQ(r.config.block_m, 128);
    ASSERT_STREQ(r.node, "node-1");
    tt_store_close(s);
    cleanup();
}

TEST(empty_files_are_initialized) {
    const char *p = fresh_path();
    write_file(p, "", 0);
    tt_store *s = open_ok(p);
    tt_store_close(s);
    ASSERT_EQ(raw_int(p, "PRAGMA user_version"), TT_STORE_SCHEMA_VERSION);
    unlink(p);

    /* An SQLite file at version 0 with no schema (a migration from 0). */
    raw_exec(p, "PRAGMA user_version = 0; VACUUM");
    ASSERT_EQ(raw_int(p, "PRAGMA user_version"), 0);
    s = open_ok(p);
    tt_store_close(s);
    ASSERT_EQ(raw_int(p, "PRAGMA user_version"), TT_STORE_SCHEMA_VERSION);
    ASSERT_EQ(raw_int(p, "SELECT count(*) FROM sqlite_master WHERE name = 'job_key'"), 1);
    cleanup();
}

/* Processes creating the same new database at once, each writing as soon
 * as its open returns: every open accepts the file, one migrates it, and
 * every commit lands (the check of one open must not touch the -wal and
 * -shm another has just created). */
TEST(concurrent_first_opens_migrate_once) {
    const char *p = fresh_path();
    enum { KIDS = 8, EACH = 60 };
    pid_t kids[KIDS];
    for (int i = 0; i < KIDS; i++) {
        kids[i] = fork();
        ASSERT(kids[i] >= 0);
        if (kids[i] == 0) {
            tt_store *s = NULL;
            char err[256];
            if (tt_store_open(p, &s, err, sizeof err)) {
                fprintf(stderr, "child open: %s\n", err);
                _exit(1);
            }
            setup_ids(s);
            for (int j = 0; j < EACH; j++) {
                tt_record r = rec_of(key_of(GPU_A, 1000 * (i + 1) + j), cfg_of(64, 2), TT_MEAS_OK, 1.0 + j);
                if (tt_store_add_measurement(s, &r, NULL)) {
                    fprintf(stderr, "child add: %s\n", tt_store_errmsg(s));
                    _exit(2);
                }
            }
            tt_store_close(s);
            _exit(0);
        }
    }
    for (int i = 0; i < KIDS; i++) {
        int st = 0;
        ASSERT_EQ(waitpid(kids[i], &st, 0), kids[i]);
        ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    ASSERT_EQ(raw_int(p, "PRAGMA user_version"), TT_STORE_SCHEMA_VERSION);
    ASSERT_EQ(raw_int(p, "SELECT count(*) FROM measurement"), KIDS * EACH);
    ASSERT_EQ(raw_int(p, "SELECT count(*) FROM pragma_quick_check WHERE quick_check = 'ok'"), 1);
    cleanup();
}

/* The step that keeps driver/CUDA/NVRTC per record, from a version 1
 * file: the node's own rows take the model's versions, an imported winner
 * (no measurement) stays '' (not recorded), and new rows keep their own. */
extern const char tt_schema_sql[];
extern const char tt_migrate_3_sql[];

TEST(migration_keeps_versions_per_record) {
    const char *p = fresh_path();
    char sql[512];
    raw_exec(p, tt_schema_sql);
    snprintf(sql, sizeof sql,
             "PRAGMA application_id = %d; PRAGMA user_version = 1;"
             "INSERT INTO gpu VALUES ('%s', 'G', 9, 0, 132, 1, '580.1', '13.0', '13.0', 1, 1);"
             "INSERT INTO kernel_rev VALUES ('%s', '', 1);",
             TT_STORE_APPLICATION_ID, GPU_A, REV);
    raw_exec(p, sql);
    snprintf(
        sql, sizeof sql,
        "INSERT INTO measurement (id, gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k, batch, heads,"
        " family, block_m, block_n, warps, stages, layout, q_in_regs, time_ms, measured_at, status)"
        " VALUES (1, '%s', '%s', 'fp16', 128, 0, 1024, 1024, 4, 16, 0, 128, 64, 4, 2, 1, 0, 1.0, 1, 'ok');",
        GPU_A, REV);
    raw_exec(p, sql);
    for (int own = 0; own < 2; own++) {
        snprintf(
            sql, sizeof sql,
            "INSERT INTO best (gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k, batch, heads, family,"
            " block_m, block_n, warps, stages, layout, q_in_regs, time_ms, measured_at, measurement_id)"
            " VALUES ('%s', '%s', 'fp16', 128, 0, %d, %d, 4, 16, 0, 128, 64, 4, 2, 1, 0, 1.0, 1, %s);",
            GPU_A, REV, own ? 1024 : 2048, own ? 1024 : 2048, own ? "1" : "NULL");
        raw_exec(p, sql);
    }
    tt_store *s = open_ok(p);
    ASSERT_EQ(raw_int(p, "PRAGMA user_version"), TT_STORE_SCHEMA_VERSION);
    tt_record r;
    tt_key_v2 k = key_of(GPU_A, 1024);
    k.causal = 0;
    ASSERT_OK(tt_store_get_best(s, &k, &r));
    ASSERT_STREQ(r.driver, "580.1");
    ASSERT_STREQ(r.cuda, "13.0");
    k.seqlen_q = k.seqlen_k = 2048;
    ASSERT_OK(tt_store_get_best(s, &k, &r));
    ASSERT_STREQ(r.driver, "");
    ASSERT_EQ(raw_int(p, "SELECT count(*) FROM measurement WHERE driver = '580.1'"), 1);
    /* a new winner keeps its own versions, whatever the model row says */
    snprintf(r.driver, sizeof r.driver, "590.48.01");
    ASSERT_OK(tt_store_put_best(s, &r));
    ASSERT_OK(tt_store_get_best(s, &k, &r));
    ASSERT_STREQ(r.driver, "590.48.01");
    tt_store_close(s);
    cleanup();
}

/* A version-1 file with a winner, its measurement and a queued key
 * migrates to groups and bottom-right causal with every row's meaning
 * kept: group 1, causal as it was, the winner still pointing at its
 * measurement (a table rebuild under foreign keys could have nulled it). */
TEST(migrates_a_version_1_database_with_data) {
    const char *p = fresh_path();
    raw_exec(p, tt_schema_sql);
    raw_exec(
        p, "PRAGMA application_id = 1414816866; PRAGMA user_version = 1;"
           "INSERT INTO gpu VALUES ('a1b2c3d4e5f60718', 'NVIDIA H200', 9, 0, 132, 1, '', '', '', 1, 1);"
           "INSERT INTO kernel_rev VALUES ('feedbeef00112233', 'v1 kernel', 1);"
           "INSERT INTO measurement (id, gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k, batch, heads,"
           " family, block_m, block_n, warps, stages, layout, q_in_regs, time_ms, reps, tflops, measured_at,"
           " status) VALUES (7, 'a1b2c3d4e5f60718', 'feedbeef00112233', 'fp16', 128, 1, 1024, 1024, 8, 16,"
           " 0, 128, 64, 4, 2, 1, 0, 0.5, 50, 200.0, 1700000000, 'ok');"
           "INSERT INTO best (gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k, batch, heads, family,"
           " block_m, block_n, warps, stages, layout, q_in_regs, time_ms, reps, tflops, measured_at,"
           " measurement_id) VALUES ('a1b2c3d4e5f60718', 'feedbeef00112233', 'fp16', 128, 1, 1024, 1024,"
           " 8, 16, 0, 128, 64, 4, 2, 1, 0, 0.5, 50, 200.0, 1700000000, 7);"
           "INSERT INTO job (id, mode, created_at, updated_at) VALUES (3, 'fast', 1, 1);"
           "INSERT INTO job_key (job_id, seq, dtype, head_dim, causal, seqlen_q, seqlen_k)"
           " VALUES (3, 0, 'bf16', 64, 1, 2048, 2048);");
    ASSERT_EQ(raw_int(p, "PRAGMA user_version"), 1);

    tt_store *s = open_ok(p);
    ASSERT_EQ(raw_int(p, "PRAGMA user_version"), TT_STORE_SCHEMA_VERSION);
    /* the winner: same key with group 1, same config, same measurement */
    tt_key_v2 k = key_of(GPU_A, 1024);
    k.group = 1;
    tt_record r;
    ASSERT_OK(tt_store_get_best(s, &k, &r));
    ASSERT_EQ(r.key.causal, 1);
    ASSERT_EQ(r.key.group, 1);
    ASSERT_EQ(r.config.block_m, 128);
    ASSERT_EQ(r.config.stages, 2);
    ASSERT(r.time_ms == 0.5);
    ASSERT_EQ(raw_int(p, "SELECT measurement_id FROM best"), 7);
    ASSERT_EQ(raw_int(p, "SELECT count(*) FROM measurement WHERE id = 7 AND gqa_group = 1 AND causal = 1"),
              1);
    ASSERT_EQ(raw_int(p, "SELECT count(*) FROM pragma_foreign_key_check"), 0);
    ASSERT_EQ(raw_int(p, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name LIKE '%v1%'"), 0);
    ASSERT_EQ(raw_int(p, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name IN"
                         " ('measurement_key', 'best_measurement', 'job_key_state')"),
              3);
    /* the queued key is claimed as it was queued */
    tt_job_claim c;
    ASSERT_OK(tt_store_job_next_key(s, GPU_A, &c));
    ASSERT_EQ(c.job_id, 3);
    ASSERT_EQ(c.key.causal, 1);
    ASSERT_EQ(c.key.group, 1);
    ASSERT_EQ(c.key.seqlen_q, 2048);
    ASSERT_EQ(c.mode, TT_JOB_FAST);
    /* the new key space: bottom-right and groups are keys of their own */
    tt_key_v2 br = key_of(GPU_A, 1024);
    br.causal = 2;
    br.seqlen_q = 8;
    br.group = 8;
    ASSERT_EQ(add(s, rec_of(br, cfg_of(64, 1), TT_MEAS_OK, 0.25)), 1);
    tt_key_v2 g4 = br;
    g4.group = 4;
    ASSERT_EQ(tt_store_get_best(s, &g4, &r), TT_ERR_NOTFOUND);
    ASSERT_OK(tt_store_get_best(s, &br, &r));
    ASSERT_EQ(r.key.causal, 2);
    ASSERT_EQ(r.key.group, 8);
    ASSERT_OK(tt_store_get_best(s, &k, &r)); /* the old winner is untouched */
    ASSERT_EQ(r.config.block_m, 128);
    tt_store_close(s);
    /* reopening does not migrate again */
    s = open_ok(p);
    ASSERT_OK(tt_store_get_best(s, &br, &r));
    tt_store_close(s);
    cleanup();
}

/* The step that adds the knob split_ctas, from a version 3 file with rows
 * (version 1's schema and the released steps 2 and 3): every row stays,
 * reads split_ctas 0 (what the families before it ran), and a new winner
 * keeps its non-zero value. */
TEST(migration_adds_split_ctas_and_keeps_rows) {
    const char *p = fresh_path();
    char sql[768];
    raw_exec(p, tt_schema_sql);
    raw_exec(p, "ALTER TABLE measurement ADD COLUMN driver TEXT NOT NULL DEFAULT '';"
                "ALTER TABLE measurement ADD COLUMN cuda TEXT NOT NULL DEFAULT '';"
                "ALTER TABLE measurement ADD COLUMN nvrtc TEXT NOT NULL DEFAULT '';"
                "ALTER TABLE best ADD COLUMN driver TEXT NOT NULL DEFAULT '';"
                "ALTER TABLE best ADD COLUMN cuda TEXT NOT NULL DEFAULT '';"
                "ALTER TABLE best ADD COLUMN nvrtc TEXT NOT NULL DEFAULT '';");
    raw_exec(p, tt_migrate_3_sql);
    snprintf(sql, sizeof sql,
             "PRAGMA application_id = %d; PRAGMA user_version = 3;"
             "INSERT INTO gpu VALUES ('%s', 'G', 9, 0, 132, 1, '580.1', '13.0', '13.0', 1, 1);"
             "INSERT INTO kernel_rev VALUES ('%s', '', 1);",
             TT_STORE_APPLICATION_ID, GPU_A, REV);
    raw_exec(p, sql);
    snprintf(
        sql, sizeof sql,
        "INSERT INTO measurement (id, gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k, batch, heads,"
        " family, block_m, block_n, warps, stages, layout, q_in_regs, time_ms, measured_at, status, driver)"
        " VALUES (1, '%s', '%s', 'fp16', 128, 0, 1024, 1024, 4, 16, 0, 128, 64, 4, 2, 1, 0, 1.0, 1, 'ok',"
        " '580.1');"
        "INSERT INTO best (gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k, batch, heads, family,"
        " block_m, block_n, warps, stages, layout, q_in_regs, time_ms, measured_at, measurement_id, driver)"
        " VALUES ('%s', '%s', 'fp16', 128, 0, 1024, 1024, 4, 16, 0, 128, 64, 4, 2, 1, 0, 1.0, 1, 1, '580.1');",
        GPU_A, REV, GPU_A, REV);
    raw_exec(p, sql);
    tt_store *s = open_ok(p);
    ASSERT_EQ(raw_int(p, "PRAGMA user_version"), TT_STORE_SCHEMA_VERSION);
    ASSERT_EQ(raw_int(p, "SELECT count(*) FROM measurement WHERE split_ctas = 0"), 1);
    ASSERT_EQ(raw_int(p, "SELECT count(*) FROM best WHERE split_ctas = 0"), 1);
    tt_record r;
    tt_key_v2 k = key_of(GPU_A, 1024);
    k.causal = 0;
    ASSERT_OK(tt_store_get_best(s, &k, &r));
    ASSERT_EQ(r.config.block_m, 128);
    ASSERT_EQ(r.config.layout, 1);
    ASSERT_EQ(r.config.split_ctas, 0);
    ASSERT_STREQ(r.driver, "580.1");
    ASSERT_EQ(r.id, 1);
    /* a splitkv winner keeps its split target */
    r.config.family = TT_FAMILY_SPLITKV;
    r.config.block_m = 16;
    r.config.layout = 0;
    r.config.split_ctas = 2;
    ASSERT_OK(tt_store_put_best(s, &r));
    ASSERT_OK(tt_store_get_best(s, &k, &r));
    ASSERT_EQ(r.config.family, TT_FAMILY_SPLITKV);
    ASSERT_EQ(r.config.split_ctas, 2);
    ASSERT_EQ(raw_int(p, "SELECT count(*) FROM measurement"), 1);
    tt_store_close(s);
    cleanup();
}

TEST(refuses_a_newer_schema_untouched) {
    const char *p = fresh_path();
    tt_store_close(open_ok(p));
    raw_exec(p, "PRAGMA user_version = 99");
    expect_refusal(p, TT_ERR_VERSION, "newer");
    ASSERT_EQ(raw_int(p, "PRAGMA user_version"), 99);
    cleanup();
}

TEST(refuses_a_file_that_is_not_sqlite_untouched) {
    const char *p = fresh_path();
    char junk[10000];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)("tiletune\n"[i % 9]);
    write_file(p, junk, sizeof junk);
    expect_refusal(p, TT_ERR_CORRUPT, "not a tiletune database");
    /* Shorter than SQLite's magic. */
    write_file(p, "SQLite", 6);
    expect_refusal(p, TT_ERR_CORRUPT, "not a tiletune database");
    cleanup();
}

TEST(refuses_a_foreign_sqlite_database_untouched) {
    const char *p = fresh_path();
    raw_exec(p, "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users VALUES (1, 'x')");
    expect_refusal(p, TT_ERR_CORRUPT, "not a tiletune database");
    unlink(p);
    /* Another application's id, even with no tables. */
    raw_exec(p, "PRAGMA application_id = 1234; PRAGMA user_version = 1");
    expect_refusal(p, TT_ERR_CORRUPT, "application_id");
    cleanup();
}

/* A tiletune database with 300 measurements, closed; scribbles 0x5a over
 * its pages from `first` (counted from 0; negative: from the end) on. */
static void make_and_scribble(const char *p, long long first) {
    tt_store *s = open_ok(p);
    setup_ids(s);
    for (int i = 1; i <= 300; i++)
        add(s, rec_of(key_of(GPU_A, i), cfg_of(64, 1 + i % 4), TT_MEAS_OK, 1.0 + i));
    tt_store_close(s);
    long long size;
    file_hash(p, &size);
    long long page = raw_int(p, "PRAGMA page_size");
    ASSERT(size > 8 * page);
    if (first < 0) first += size / page;
    int fd = open(p, O_WRONLY);
    ASSERT(fd >= 0);
    char *junk = malloc((size_t)page);
    memset(junk, 0x5a, (size_t)page);
    for (long long off = first * page; off < size; off += page)
        ASSERT_EQ(pwrite(fd, junk, (size_t)page, off), page);
    close(fd);
    free(junk);
}

TEST(refuses_a_corrupt_database_untouched) {
    const char *p = fresh_path();
    /* Everything but the header page: even the schema is unreadable. */
    make_and_scribble(p, 1);
    expect_refusal(p, TT_ERR_CORRUPT, "corrupt");
    cleanup();
    /* Only the last pages (table data): the schema reads fine, only
     * quick_check finds the damage. */
    p = fresh_path();
    make_and_scribble(p, -2);
    ASSERT(raw_int(p, "SELECT count(*) FROM sqlite_master") > 0);
    expect_refusal(p, TT_ERR_CORRUPT, "corrupt database");
    cleanup();
}

/* --db naming a symlink or a FIFO: refused, the FIFO without waiting for a
 * writer (the probe's blocking open hung start-up forever). */
TEST(refuses_a_symlink_and_a_fifo) {
    const char *p = fresh_path();
    tt_store_close(open_ok(p));
    char link[400], fifo[400], err[256];
    snprintf(link, sizeof link, "%s/link.db", tmpdir);
    ASSERT_OK(symlink(p, link));
    tt_store *s = NULL;
    ASSERT_EQ(tt_store_open(link, &s, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "symbolic link");
    unlink(link);
    snprintf(fifo, sizeof fifo, "%s/fifo.db", tmpdir);
    ASSERT_OK(mkfifo(fifo, 0600));
    ASSERT_EQ(tt_store_open(fifo, &s, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "not a regular file");
    unlink(fifo);
    cleanup();
}

static void copy_file(const char *from, const char *to) {
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT(in >= 0 && out >= 0);
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0) ASSERT_EQ(write(out, buf, (size_t)n), n);
    close(in);
    close(out);
}

/* A database whose last commits live only in its WAL, as a kill -9 leaves
 * it: the files are copied while the store still has them open. Returns
 * the WAL's path (dbpath + "-wal"). */
static const char *db_with_commits_in_wal(int records) {
    static char wal[400];
    const char *p = fresh_path();
    char live[400], livewal[420];
    snprintf(live, sizeof live, "%s/live.db", tmpdir);
    tt_store *s = open_ok(live);
    setup_ids(s);
    for (int i = 1; i <= records; i++)
        add(s, rec_of(key_of(GPU_A, i), cfg_of(64, 1 + i % 4), TT_MEAS_OK, 1.0 + i));
    snprintf(livewal, sizeof livewal, "%s-wal", live);
    copy_file(live, p);
    snprintf(wal, sizeof wal, "%s-wal", p);
    copy_file(livewal, wal);
    tt_store_close(s);
    char side[420];
    const char *sfx[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        snprintf(side, sizeof side, "%s%s", live, sfx[i]);
        unlink(side);
    }
    return wal;
}

/* Inverts the byte at `off` of the file `path`. */
static void flip_byte(const char *path, long long off) {
    int fd = open(path, O_RDWR);
    unsigned char b;
    ASSERT_EQ(pread(fd, &b, 1, off), 1);
    b ^= 0xff;
    ASSERT_EQ(pwrite(fd, &b, 1, off), 1);
    close(fd);
}

/* Refused with `words`, the database and the WAL byte-identical and no
 * -shm left behind. */
static void expect_wal_refusal(const char *wal, int code, const char *words) {
    long long wsize0, wsize1;
    uint64_t w0 = file_hash(wal, &wsize0);
    char shm[420];
    snprintf(shm, sizeof shm, "%s-shm", dbpath);
    unlink(shm);
    expect_refusal(dbpath, code, words);
    ASSERT(file_hash(wal, &wsize1) == w0 && wsize1 == wsize0);
    ASSERT(access(shm, F_OK) != 0);
}

TEST(a_damaged_wal_is_refused_untouched) {
    const char *wal = db_with_commits_in_wal(200);
    long long size;
    file_hash(wal, &size);
    ASSERT(size > 32 + 2 * 4120);
    /* the copy is what a crash leaves: it opens, and the WAL's commits are there */
    {
        char keep[420], keepdb[420];
        snprintf(keep, sizeof keep, "%s.keep", wal);
        snprintf(keepdb, sizeof keepdb, "%s.keepdb", wal);
        copy_file(wal, keep);
        copy_file(dbpath, keepdb);
        tt_store *s = open_ok(dbpath);
        int64_t n = 0;
        ASSERT_OK(tt_store_count_measurements(s, &n));
        ASSERT_EQ(n, 200);
        tt_store_close(s);
        /* the open checkpointed: back to the crash's files */
        copy_file(keep, wal);
        copy_file(keepdb, dbpath);
        unlink(keep);
        unlink(keepdb);
    }
    /* one byte of the first frame's page flipped: recovery would stop there
     * and drop every commit after it */
    flip_byte(wal, 32 + 24 + 100);
    expect_wal_refusal(wal, TT_ERR_CORRUPT, "damaged write-ahead log (frame 1 fails its checksum");
    /* random bytes as the WAL */
    char junk[8192];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)(i * 7919 % 251);
    write_file(wal, junk, sizeof junk);
    expect_wal_refusal(wal, TT_ERR_CORRUPT, "damaged write-ahead log");
    cleanup();
}

/* A tiletune database at `p` with another database's WAL next to it
 * (`wal`: its path). */
static void db_with_foreign_wal(const char *p, char wal[420]) {
    tt_store_close(open_ok(p));
    char other[400], otherwal[420];
    snprintf(other, sizeof other, "%s/other.db", tmpdir);
    sqlite3 *db = NULL;
    ASSERT_EQ(sqlite3_open(other, &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; CREATE TABLE t(x); "
                           "INSERT INTO t VALUES (1)",
                           NULL, NULL, NULL),
              SQLITE_OK);
    snprintf(otherwal, sizeof otherwal, "%s-wal", other);
    snprintf(wal, 420, "%s-wal", p);
    copy_file(otherwal, wal);
    sqlite3_close(db);
    unlink(other);
    unlink(otherwal);
}

/* Another database's WAL next to ours, and a user_version no tiletune
 * writes: plain messages, not "not a tiletune database (application_id 0)"
 * or "table gpu already exists". */
TEST(a_foreign_wal_and_a_negative_version_are_named) {
    const char *p = fresh_path();
    char wal[420];
    db_with_foreign_wal(p, wal);
    expect_wal_refusal(wal, TT_ERR_CORRUPT, "belongs to another database");
    unlink(wal);
    raw_exec(p, "PRAGMA user_version = -1");
    char shm[420];
    snprintf(shm, sizeof shm, "%s-shm", p);
    unlink(shm);
    unlink(wal);
    expect_refusal(p, TT_ERR_CORRUPT, "schema version -1");
    ASSERT(access(shm, F_OK) != 0 && access(wal, F_OK) != 0);
    cleanup();
}

/* What a directory holds: every name, with each file's size and content
 * hash, in name order. */
static void dir_state(const char *dir, char *out, size_t len) {
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort);
    ASSERT(n >= 0);
    size_t at = 0;
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i]->d_name, ".") && strcmp(names[i]->d_name, "..")) {
            char p[600];
            long long size = 0;
            snprintf(p, sizeof p, "%s/%s", dir, names[i]->d_name);
            uint64_t h = file_hash(p, &size);
            at += (size_t)snprintf(out + at, len - at, "%s:%lld:%016llx ", names[i]->d_name, size,
                                   (unsigned long long)h);
            ASSERT(at < len);
        }
        free(names[i]);
    }
    free(names);
}

/* Refused with `words`, and the directory exactly as it was: the same
 * names, each file with the same bytes (no -wal or -shm created). */
static void expect_refusal_leaves_dir(const char *path, int code, const char *words) {
    char before[2048], after[2048];
    dir_state(tmpdir, before, sizeof before);
    expect_refusal(path, code, words);
    dir_state(tmpdir, after, sizeof after);
    if (strcmp(before, after) != 0) TT_FAIL_AT("directory changed:\n  before %s\n  after  %s", before, after);
}

static uint32_t get_be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (24 - 8 * i));
}

/* SQLite's WAL checksum in native (little-endian) words, as SQLite writes
 * it here: `sum` runs on over the `n` bytes at `p`. */
static void wal_cksum(uint32_t sum[2], const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        uint32_t x[2];
        memcpy(x, p + i, 8);
        sum[0] += x[0] + sum[1];
        sum[1] += x[1] + sum[0];
    }
}

/* A tiletune database of 300 measurements whose last commit is only in
 * its WAL, as a kill -9 leaves it (no -shm); then a page the WAL does not
 * hold scribbled over, which only quick_check sees. */
static void db_with_wal_and_damage(const char *p) {
    char live[400], livewal[420], wal[420];
    make_and_scribble(p, 1LL << 40); /* nothing scribbled: a clean closed file */
    snprintf(live, sizeof live, "%s/live.db", tmpdir);
    copy_file(p, live);
    sqlite3 *db = NULL;
    ASSERT_EQ(sqlite3_open(live, &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "PRAGMA wal_autocheckpoint = 0; UPDATE gpu SET name = 'NVIDIA H200 NVL'", NULL,
                           NULL, NULL),
              SQLITE_OK);
    snprintf(livewal, sizeof livewal, "%s-wal", live);
    snprintf(wal, sizeof wal, "%s-wal", p);
    copy_file(live, p);
    copy_file(livewal, wal);
    sqlite3_close(db);
    unlink(live);
    unlink(livewal);
    long long page = raw_int(p, "PRAGMA page_size"), size = 0, wsize = 0; /* read-only: leaves a -shm */
    file_hash(p, &size);
    file_hash(wal, &wsize);
    /* the last page of the file that no frame of the WAL replaces */
    unsigned char *w = malloc((size_t)wsize);
    int fd = open(wal, O_RDONLY);
    ASSERT_EQ(read(fd, w, (size_t)wsize), wsize);
    close(fd);
    long long victim = size / page;
    for (int again = 1; again;) {
        again = 0;
        for (long long off = 32; off + 24 + page <= wsize; off += 24 + page)
            if (get_be32(w + off) == victim) {
                victim--;
                again = 1;
            }
    }
    free(w);
    ASSERT(victim > 1);
    char *junk = malloc((size_t)page);
    memset(junk, 0x5a, (size_t)page);
    fd = open(p, O_WRONLY);
    ASSERT_EQ(pwrite(fd, junk, (size_t)page, (victim - 1) * page), page);
    close(fd);
    free(junk);
    char shm[420];
    snprintf(shm, sizeof shm, "%s-shm", p);
    unlink(shm);
}

/* Every refusal, whether the header, the WAL or only SQLite's own reading
 * decides it, leaves the directory as it was: no -wal or -shm appear
 * (SQLite's read-only open of a WAL database creates both). */
TEST(every_refusal_leaves_the_directory_as_it_was) {
    /* damage only quick_check finds, no WAL */
    const char *p = fresh_path();
    make_and_scribble(p, -2);
    expect_refusal_leaves_dir(p, TT_ERR_CORRUPT, "corrupt database");
    cleanup();
    /* the schema itself unreadable */
    p = fresh_path();
    make_and_scribble(p, 1);
    expect_refusal_leaves_dir(p, TT_ERR_CORRUPT, "corrupt");
    cleanup();
    /* damage quick_check finds in the file under a WAL with a commit */
    p = fresh_path();
    db_with_wal_and_damage(p);
    expect_refusal_leaves_dir(p, TT_ERR_CORRUPT, "corrupt database");
    cleanup();
    /* another database's WAL */
    p = fresh_path();
    char wal[420];
    db_with_foreign_wal(p, wal);
    expect_refusal_leaves_dir(p, TT_ERR_CORRUPT, "belongs to another database");
    cleanup();
    /* a WAL with one corrupt frame and commits after it */
    const char *w = db_with_commits_in_wal(200);
    flip_byte(w, 32 + 24 + 100);
    expect_refusal_leaves_dir(dbpath, TT_ERR_CORRUPT, "damaged write-ahead log (frame 1 fails its checksum");
    cleanup();
    /* refused from the header: newer, another application's */
    p = fresh_path();
    tt_store_close(open_ok(p));
    raw_exec(p, "PRAGMA user_version = 99");
    expect_refusal_leaves_dir(p, TT_ERR_VERSION, "newer");
    raw_exec(p, "PRAGMA application_id = 1234");
    expect_refusal_leaves_dir(p, TT_ERR_CORRUPT, "application_id");
    cleanup();
    /* a header whose page size SQLite would not read (0, not a power of 2),
     * in WAL mode and in rollback mode */
    for (int i = 0; i < 4; i++) {
        p = fresh_path();
        tt_store_close(open_ok(p));
        int fd = open(p, O_WRONLY);
        unsigned char bad[2][2] = {{0, 0}, {3, 0}};
        ASSERT_EQ(pwrite(fd, bad[i % 2], 2, 16), 2);
        if (i >= 2) ASSERT_EQ(pwrite(fd, "\1\1", 2, 18), 2);
        close(fd);
        if (i == 0) { /* and a WAL of 0-byte pages, which passes its own checks */
            unsigned char h[64] = {0};
            uint32_t sum[2] = {0, 0};
            put_be32(h, 0x377f0682);
            put_be32(h + 4, 3007000);
            put_be32(h + 16, 1);
            wal_cksum(sum, h, 24);
            put_be32(h + 24, sum[0]);
            put_be32(h + 28, sum[1]);
            char wal[420];
            snprintf(wal, sizeof wal, "%s-wal", p);
            write_file(wal, h, sizeof h);
        }
        expect_refusal_leaves_dir(p, TT_ERR_CORRUPT,
                                  i % 2 ? "page size of 768 bytes" : "page size of 0 bytes");
        cleanup();
    }
    /* another application's database in rollback mode, which only SQLite
     * (opened where it lies) refuses */
    p = fresh_path();
    raw_exec(p, "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users VALUES (1, 'x')");
    expect_refusal_leaves_dir(p, TT_ERR_CORRUPT, "1 schema objects");
    cleanup();
}

/* A WAL whose last commit claims pages no file holds, with checksums that
 * SQLite accepts (as anyone can compute them): refused at once, without
 * making up (and holding) those pages, and nothing created. */
TEST(a_wal_commit_claiming_unwritten_pages_is_refused) {
    const char *wal = db_with_commits_in_wal(20);
    long long size = 0;
    file_hash(wal, &size);
    unsigned char *w = malloc((size_t)size);
    int fd = open(wal, O_RDWR);
    ASSERT_EQ(read(fd, w, (size_t)size), size);
    ASSERT_EQ(get_be32(w) & 1, 0); /* checksums in native (little-endian) words */
    size_t page = get_be32(w + 8), fsz = 24 + page, last = 0;
    uint32_t sum[2] = {get_be32(w + 24), get_be32(w + 28)};
    for (size_t off = 32; off + fsz <= (size_t)size && !memcmp(w + off + 8, w + 16, 8); off += fsz)
        if (get_be32(w + off + 4)) last = off;
    ASSERT(last > 0);
    put_be32(w + last + 4, 0x7fffffff);
    for (size_t off = 32; off <= last; off += fsz) {
        wal_cksum(sum, w + off, 8); /* not the frame header's salts and checksum */
        wal_cksum(sum, w + off + 24, page);
        put_be32(w + off + 16, sum[0]);
        put_be32(w + off + 20, sum[1]);
    }
    ASSERT_EQ(pwrite(fd, w, last + fsz, 0), (long long)(last + fsz));
    close(fd);
    free(w);
    expect_refusal_leaves_dir(dbpath, TT_ERR_CORRUPT, "a commit gives the database 2147483647 pages");
    cleanup();
}

/* The files a kill -9 leaves at every stage of a WAL's life (growing,
 * checkpointed, restarted over an older generation's frames): each is
 * accepted, and opens with every commit made before the copy. The check
 * reads these WALs itself, so its recovery must match SQLite's. */
TEST(crash_copies_at_every_stage_are_accepted_whole) {
    const char *p = fresh_path();
    char live[400], livewal[420], wal[420];
    snprintf(live, sizeof live, "%s/live.db", tmpdir);
    snprintf(livewal, sizeof livewal, "%s-wal", live);
    snprintf(wal, sizeof wal, "%s-wal", p);
    tt_store *s = open_ok(live);
    setup_ids(s);
    sqlite3 *ck = NULL;
    ASSERT_EQ(sqlite3_open(live, &ck), SQLITE_OK);
    for (int i = 1; i <= 120; i++) {
        add(s, rec_of(key_of(GPU_A, i), cfg_of(64, 1 + i % 4), TT_MEAS_OK, 1.0 + i));
        /* a checkpoint now and then: the next commit restarts the WAL */
        if (i % 7 == 0)
            ASSERT_EQ(sqlite3_exec(ck, "PRAGMA wal_checkpoint(PASSIVE)", NULL, NULL, NULL), SQLITE_OK);
        if (i % 3) continue;
        copy_file(live, p);
        copy_file(livewal, wal);
        tt_store *c = NULL;
        char err[256];
        if (tt_store_open(p, &c, err, sizeof err))
            TT_FAIL_AT("crash copy after %d commits refused: %s", i, err);
        int64_t n = 0;
        ASSERT_OK(tt_store_count_measurements(c, &n));
        ASSERT_EQ(n, i);
        tt_store_close(c);
        cleanup_files(p);
    }
    sqlite3_close(ck);
    tt_store_close(s);
    cleanup_files(live);
    cleanup();
}

TEST(open_reports_bad_arguments_and_paths) {
    tt_store *s = NULL;
    char err[256];
    ASSERT_EQ(tt_store_open(NULL, &s, err, sizeof err), TT_ERR_INVAL);
    ASSERT_EQ(tt_store_open("", &s, err, sizeof err), TT_ERR_INVAL);
    ASSERT_EQ(tt_store_open("/nonexistent-dir/x/tune.db", &s, err, sizeof err), TT_ERR_IO);
    ASSERT(s == NULL);
    ASSERT(err[0] != '\0');
    tt_store_close(NULL);
}

/* Adding a knob to knobs.def without a migration adding its column fails
 * here: the store binds knobs by name. */
TEST(every_knob_is_a_column_of_measurement_and_best) {
    const char *p = fresh_path();
    tt_store_close(open_ok(p));
    const char *tables[] = {"measurement", "best"};
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < tt__knob_count(); i++) {
            char sql[200];
            snprintf(sql, sizeof sql,
                     "SELECT count(*) FROM pragma_table_info('%s') WHERE name = '%s' AND \"notnull\" = 1",
                     tables[t], tt__knob_at(i)->name);
            if (raw_int(p, sql) != 1)
                TT_FAIL_AT("knob %s is not a column of %s", tt__knob_at(i)->name, tables[t]);
        }
    cleanup();
}

/* ---- measurements and winners ------------------------------------------ */

TEST(gpu_fingerprint_is_the_model_identity) {
    char a[TT_ID_MAX], b[TT_ID_MAX], c[TT_ID_MAX];
    tt_gpu_fingerprint("NVIDIA H200", 9, 0, 132, 150ll << 30, a);
    tt_gpu_fingerprint("NVIDIA H200", 9, 0, 132, (150ll << 30) + 4096, b);
    tt_gpu_fingerprint("NVIDIA H100 80GB HBM3", 9, 0, 132, 80ll << 30, c);
    ASSERT_EQ(strlen(a), 16);
    ASSERT_STREQ(a, b);
    ASSERT(strcmp(a, c) != 0);
    ASSERT_EQ(tt__is_hex_id(a), 1);

    const char *p = fresh_path();
    tt_store *s = open_ok(p);
    tt_gpu_info g, back;
    memset(&g, 0, sizeof g);
    snprintf(g.fingerprint, sizeof g.fingerprint, "%s", a);
    snprintf(g.name, sizeof g.name, "NVIDIA H200");
    g.cc_major = 9;
    g.sm_count = 132;
    g.mem_bytes = 150ll << 30;
    snprintf(g.driver, sizeof g.driver, "550.1");
    ASSERT_OK(tt_store_put_gpu(s, &g));
    snprintf(g.driver, sizeof g.driver, "570.2"); /* a driver upgrade updates the row */
    ASSERT_OK(tt_store_put_gpu(s, &g));
    ASSERT_OK(tt_store_get_gpu(s, a, &back));
    ASSERT_STREQ(back.driver, "570.2");
    ASSERT_EQ(back.mem_bytes, 150ll << 30);
    ASSERT_EQ(tt_store_get_gpu(s, c, &back), TT_ERR_NOTFOUND);
    snprintf(g.fingerprint, sizeof g.fingerprint, "NOT-HEX");
    ASSERT_EQ(tt_store_put_gpu(s, &g), TT_ERR_INVAL);
    tt_store_close(s);
    cleanup();
}

TEST(best_is_the_fastest_ok_measurement) {
    const char *p = fresh_path();
    tt_store *s = open_ok(p);
    setup_ids(s);
    tt_key_v2 k = key_of(GPU_A, 4096);
    ASSERT_EQ(add(s, rec_of(k, cfg_of(128, 2), TT_MEAS_OK, 2.0)), 1);
    ASSERT_EQ(add(s, rec_of(k, cfg_of(64, 2), TT_MEAS_OK, 3.0)), 0);
    /* Faster, but wrong / faulting / skipped: never a winner. */
    ASSERT_EQ(add(s, rec_of(k, cfg_of(64, 3), TT_MEAS_WRONG, 0.5)), 0);
    ASSERT_EQ(add(s, rec_of(k, cfg_of(64, 4), TT_MEAS_FAULT, 0)), 0);
    ASSERT_EQ(add(s, rec_of(k, cfg_of(64, 1), TT_MEAS_TIMEOUT, 0)), 0);
    ASSERT_EQ(add(s, rec_of(k, cfg_of(32, 1), TT_MEAS_SKIPPED, 0)), 0);
    ASSERT_EQ(add(s, rec_of(k, cfg_of(128, 3), TT_MEAS_OK, 1.5)), 1);
    /* Equal time: the earlier winner stays. */
    ASSERT_EQ(add(s, rec_of(k, cfg_of(128, 4), TT_MEAS_OK, 1.5)), 0);
    /* Taken on a busy GPU: kept as history, never the winner. */
    tt_record busy = rec_of(k, cfg_of(256, 2), TT_MEAS_OK, 1.0);
    busy.busy = 1;
    ASSERT_EQ(add(s, busy), 0);

    tt_record r;
    ASSERT_OK(tt_store_get_best(s, &k, &r));
    ASSERT(r.time_ms == 1.5);
    tt_config want = cfg_of(128, 3);
    ASSERT(tt_config_equal(&r.config, &want));
    ASSERT_EQ(r.status, TT_MEAS_OK);
    ASSERT_EQ(r.batch, 8);
    ASSERT_EQ(r.heads, 16);
    ASSERT_EQ(r.reps, 50);
    ASSERT_EQ(r.sm_clock_mhz, -1); /* not recorded stays "not recorded" */
    ASSERT_EQ(r.id, 7);            /* the measurement that won */
    int64_t n = 0;
    ASSERT_OK(tt_store_count_measurements(s, &n));
    ASSERT_EQ(n, 9);
    ASSERT_OK(tt_store_count_best(s, &n));
    ASSERT_EQ(n, 1);
    /* Other key: nothing. */
    tt_key_v2 other = key_of(GPU_B, 4096);
    ASSERT_EQ(tt_store_get_best(s, &other, &r), TT_ERR_NOTFOUND);
    tt_store_close(s);
    cleanup();
}

TEST(optional_fields_round_trip) {
    const char *p = fresh_path();
    tt_store *s = open_ok(p);
    setup_ids(s);
    tt_key_v2 k = key_of(GPU_A, 512);
    tt_record in = rec_of(k, cfg_of(64, 2), TT_MEAS_OK, 0.25);
    in.time_min_ms = 0.24;
    in.sm_clock_mhz = 1980;
    in.temp_c = 41;
    in.busy = 0;
    in.regs = 168;
    in.smem_bytes = 49152;
    in.spill_bytes = 0;
    add(s, in);
    tt_record r;
    ASSERT_OK(tt_store_get_best(s, &k, &r));
    ASSERT(r.time_min_ms == 0.24);
    ASSERT(r.spread == 0.01);
    ASSERT(r.tflops == 400.0);
    ASSERT_EQ(r.measured_at, 1700000000);
    ASSERT_EQ(r.sm_clock_mhz, 1980);
    ASSERT_EQ(r.temp_c, 41);
    ASSERT_EQ(r.busy, 0);
    ASSERT_EQ(r.regs, 168);
    ASSERT_EQ(r.smem_bytes, 49152);
    ASSERT_EQ(r.spill_bytes, 0);
    tt_store_close(s);
    cleanup();
}

TEST(records_need_registered_ids_and_valid_fields) {
    const char *p = fresh_path();
    tt_store *s = open_ok(p);
    ASSERT_OK(tt_store_put_rev(s, REV, NULL));
    tt_record r = rec_of(key_of(GPU_A, 128), cfg_of(64, 2), TT_MEAS_OK, 1.0);
    ASSERT_EQ(tt_store_add_measurement(s, &r, NULL), TT_ERR_NOTFOUND); /* GPU not registered */
    ASSERT_CONTAINS(tt_store_errmsg(s), "register");
    register_gpu(s, GPU_A);
    r.config.block_m = 1024;
    ASSERT_EQ(tt_store_add_measurement(s, &r, NULL), TT_ERR_RANGE);
    r.config.block_m = 64;
    r.key.head_dim = 100;
    ASSERT_EQ(tt_store_add_measurement(s, &r, NULL), TT_ERR_UNSUPPORTED);
    r.key.head_dim = 128;
    r.key.gpu[0] = '\0';
    ASSERT_EQ(tt_store_add_measurement(s, &r, NULL), TT_ERR_INVAL);
    r.key = key_of(GPU_A, 128);
    r.time_ms = 0;
    ASSERT_EQ(tt_store_add_measurement(s, &r, NULL), TT_ERR_INVAL); /* ok needs a time */
    r.time_ms = 1;
    r.batch = 0; /* an ok timing must say what it timed */
    ASSERT_EQ(tt_store_add_measurement(s, &r, NULL), TT_ERR_INVAL);
    r.batch = -1;
    r.status = TT_MEAS_FAULT;
    ASSERT_EQ(tt_store_add_measurement(s, &r, NULL), TT_ERR_INVAL);
    r.batch = 8;
    r.status = (tt_meas_status)9;
    ASSERT_EQ(tt_store_add_measurement(s, &r, NULL), TT_ERR_INVAL);
    r.status = TT_MEAS_WRONG;
    ASSERT_EQ(tt_store_put_best(s, &r), TT_ERR_INVAL); /* a winner is ok */
    int64_t n = -1;
    ASSERT_OK(tt_store_count_measurements(s, &n));
    ASSERT_EQ(n, 0);
    tt_store_close(s);
    cleanup();
}

TEST(forget_deletes_the_winner_and_keeps_history) {
    const char *p = fresh_path();
    tt_store *s = open_ok(p);
    setup_ids(s);
    tt_key_v2 k = key_of(GPU_A, 2048);
    add(s, rec_of(k, cfg_of(128, 2), TT_MEAS_OK, 1.0));
    int forgot = -1;
    ASSERT_OK(tt_store_forget(s, &k, &forgot));
    ASSERT_EQ(forgot, 1);
    tt_record r;
    ASSERT_EQ(tt_store_get_best(s, &k, &r), TT_ERR_NOTFOUND);
    ASSERT_OK(tt_store_forget(s, &k, &forgot));
    ASSERT_EQ(forgot, 0);
    int64_t n = 0;
    ASSERT_OK(tt_store_count_measurements(s, &n));
    ASSERT_EQ(n, 1);
    /* A re-tune starts from scratch: a slower time wins again. */
    ASSERT_EQ(add(s, rec_of(k, cfg_of(64, 2), TT_MEAS_OK, 1.2)), 1);
    tt_store_close(s);
    cleanup();
}

TEST(put_best_replaces_unconditionally) {
    const char *p = fresh_path();
    tt_store *s = open_ok(p);
    setup_ids(s);
    tt_key_v2 k = key_of(GPU_B, 8192);
    add(s, rec_of(k, cfg_of(128, 2), TT_MEAS_OK, 1.0));
    tt_record imp = rec_of(k, cfg_of(64, 3), TT_MEAS_OK, 5.0);
    snprintf(imp.node, sizeof imp.node, "node-7");
    imp.id = 12345; /* another database's measurement id: must not be stored */
    ASSERT_OK(tt_store_put_best(s, &imp));
    tt_record r;
    ASSERT_OK(tt_store_get_best(s, &k, &r));
    ASSERT(r.time_ms == 5.0);
    ASSERT_STREQ(r.node, "node-7");
    ASSERT_EQ(r.id, 0); /* imported: no local measurement */
    tt_store_close(s);
    cleanup();
}

struct collect {
    int n;
    int64_t seqlens[16];
    char gpus[16][TT_ID_MAX];
    int stop_at;
};

static int collect_rec(void *ud, const tt_record *r) {
    struct collect *c = ud;
    if (c->n < 16) {
        c->seqlens[c->n] = r->key.seqlen_q;
        snprintf(c->gpus[c->n], TT_ID_MAX, "%s", r->key.gpu);
    }
    c->n++;
    return c->stop_at && c->n == c->stop_at ? 42 : 0;
}

TEST(each_best_and_each_measurement_visit_every_row) {
    const char *p = fresh_path();
    tt_store *s = open_ok(p);
    setup_ids(s);
    add(s, rec_of(key_of(GPU_A, 1024), cfg_of(128, 2), TT_MEAS_OK, 1.0));
    add(s, rec_of(key_of(GPU_A, 1024), cfg_of(128, 3), TT_MEAS_OK, 0.9));
    add(s, rec_of(key_of(GPU_A, 512), cfg_of(128, 2), TT_MEAS_OK, 0.5));
    add(s, rec_of(key_of(GPU_B, 1024), cfg_of(64, 2), TT_MEAS_OK, 1.1));
    add(s, rec_of(key_of(GPU_B, 256), cfg_of(64, 2), TT_MEAS_FAULT, 0));

    struct collect c = {0};
    ASSERT_OK(tt_store_each_best(s, collect_rec, &c));
    ASSERT_EQ(c.n, 3);
    c = (struct collect){.stop_at = 2};
    ASSERT_EQ(tt_store_each_best(s, collect_rec, &c), 42);
    ASSERT_EQ(c.n, 2);

    c = (struct collect){0};
    ASSERT_OK(tt_store_each_measurement(s, NULL, collect_rec, &c));
    ASSERT_EQ(c.n, 5);
    c = (struct collect){0};
    ASSERT_OK(tt_store_each_measurement(s, GPU_B, collect_rec, &c));
    ASSERT_EQ(c.n, 2);
    ASSERT_EQ(c.seqlens[0], 1024); /* oldest first */
    ASSERT_EQ(c.seqlens[1], 256);
    ASSERT_STREQ(c.gpus[1], GPU_B);
    tt_store_close(s);
    cleanup();
}

struct failed {
    int n;
    tt_config cfg[8];
    tt_meas_status st[8];
};

static int collect_failed(void *ud, const tt_config *cfg, tt_meas_status st) {
    struct failed *f = ud;
    if (f->n < 8) {
        f->cfg[f->n] = *cfg;
        f->st[f->n] = st;
    }
    f->n++;
    return 0;
}

TEST(failed_configs_are_the_wrong_fault_and_timeout_ones_of_the_key) {
    const char *p = fresh_path();
    tt_store *s = open_ok(p);
    setup_ids(s);
    tt_key_v2 k = key_of(GPU_A, 1000);
    add(s, rec_of(k, cfg_of(128, 1), TT_MEAS_WRONG, 1.0));
    add(s, rec_of(k, cfg_of(128, 2), TT_MEAS_FAULT, 0));
    /* The same config again, from a worker that died before it said the
     * problem size. */
    tt_record died = rec_of(k, cfg_of(128, 2), TT_MEAS_TIMEOUT, 0);
    died.batch = died.heads = 0;
    add(s, died);
    add(s, rec_of(k, cfg_of(64, 2), TT_MEAS_OK, 1.0));
    add(s, rec_of(k, cfg_of(32, 2), TT_MEAS_SKIPPED, 0));
    add(s, rec_of(key_of(GPU_A, 999), cfg_of(16, 1), TT_MEAS_FAULT, 0));  /* other seqlen */
    add(s, rec_of(key_of(GPU_B, 1000), cfg_of(16, 2), TT_MEAS_FAULT, 0)); /* other GPU */
    struct failed f = {0};
    ASSERT_OK(tt_store_failed_configs(s, &k, collect_failed, &f));
    ASSERT_EQ(f.n, 2);
    tt_config a = cfg_of(128, 1), b = cfg_of(128, 2);
    ASSERT(tt_config_equal(&f.cfg[0], &a));
    ASSERT_EQ(f.st[0], TT_MEAS_WRONG);
    ASSERT(tt_config_equal(&f.cfg[1], &b));
    ASSERT(f.st[1] == TT_MEAS_FAULT || f.st[1] == TT_MEAS_TIMEOUT);
    tt_store_close(s);
    cleanup();
}

TEST(transactions_land_whole_or_not_at_all) {
    const char *p = fresh_path();
    tt_store *s = open_ok(p);
    setup_ids(s);
    tt_record a = rec_of(key_of(GPU_A, 100), cfg_of(64, 2), TT_MEAS_OK, 1.0);
    tt_record b = rec_of(key_of(GPU_A, 200), cfg_of(64, 2), TT_MEAS_OK, 1.0);
    ASSERT_OK(tt_store_begin(s));
    ASSERT_OK(tt_store_put_best(s, &a));
    ASSERT_OK(tt_store_put_best(s, &b));
    tt_store_rollback(s);
    int64_t n = -1;
    ASSERT_OK(tt_store_count_best(s, &n));
    ASSERT_EQ(n, 0);

    ASSERT_OK(tt_store_begin(s));
    ASSERT_OK(tt_store_put_best(s, &a));
    /* A failing call inside undoes only itself. */
    tt_record bad = rec_of(key_of("77777777", 300), cfg_of(64, 2), TT_MEAS_OK, 1.0);
    ASSERT_EQ(tt_store_add_measurement(s, &bad, NULL), TT_ERR_NOTFOUND);
    ASSERT_EQ(add(s, b), 1);
    /* Another connection sees nothing before the commit. */
    tt_store *r = open_ok(p);
    ASSERT_OK(tt_store_count_best(r, &n));
    ASSERT_EQ(n, 0);
    ASSERT_OK(tt_store_commit(s));
    ASSERT_OK(tt_store_count_best(r, &n));
    ASSERT_EQ(n, 2);
    ASSERT_OK(tt_store_count_measurements(r, &n));
    ASSERT_EQ(n, 1);
    ASSERT_EQ(tt_store_commit(s), TT_ERR_INVAL); /* nothing open */
    tt_store_close(r);
    tt_store_close(s);
    cleanup();
}

TEST(snapshot_is_a_complete_tiletune_database) {
    const char *p = fresh_path();
    tt_store *s = open_ok(p);
    setup_ids(s);
    for (int i = 1; i <= 20; i++) add(s, rec_of(key_of(GPU_A, 64 * i), cfg_of(64, 2), TT_MEAS_OK, 1.0));
    char snap[400];
    snprintf(snap, sizeof snap, "%s/snap.db", tmpdir);
    write_file(snap, "old contents", 12); /* replaced, not appended to */
    ASSERT_OK(tt_store_snapshot(s, snap));
    ASSERT_OK(tt_store_snapshot(s, snap)); /* again over its own output */
    tt_store_close(s);

    ASSERT_EQ(raw_int(snap, "PRAGMA application_id"), TT_STORE_APPLICATION_ID);
    ASSERT_EQ(raw_int(snap, "PRAGMA user_version"), TT_STORE_SCHEMA_VERSION);
    tt_store *c = open_ok(snap);
    int64_t n = 0;
    ASSERT_OK(tt_store_count_best(c, &n));
    ASSERT_EQ(n, 20);
    tt_gpu_info g;
    ASSERT_OK(tt_store_get_gpu(c, GPU_A, &g));
    tt_store_close(c);
    char p2[420];
    snprintf(p2, sizeof p2, "%s-wal", snap);
    unlink(p2);
    snprintf(p2, sizeof p2, "%s-shm", snap);
    unlink(p2);
    unlink(snap);
    cleanup();
}

static int collect_key(void *ud, const tt_key_v2 *k) {
    struct collect *c = ud;
    if (c->n < 16) {
        c->seqlens[c->n] = k->seqlen_q;
        snprintf(c->gpus[c->n], TT_ID_MAX, "%s", k->rev);
    }
    c->n++;
    return 0;
}

TEST(stale_keys_are_those_tuned_only_by_older_revisions) {
    const char *p = fresh_path();
    tt_store *s = open_ok(p);
    setup_ids(s);
    const char *new_rev = "00aa";
    ASSERT_OK(tt_store_put_rev(s, new_rev, "edited kernel"));
    add(s, rec_of(key_of(GPU_A, 512), cfg_of(64, 2), TT_MEAS_OK, 1.0));  /* old only: stale */
    add(s, rec_of(key_of(GPU_A, 1024), cfg_of(64, 2), TT_MEAS_OK, 1.0)); /* old and new: fresh */
    tt_key_v2 k = key_of(GPU_A, 1024);
    snprintf(k.rev, sizeof k.rev, "%s", new_rev);
    add(s, rec_of(k, cfg_of(64, 2), TT_MEAS_OK, 1.0));
    add(s, rec_of(key_of(GPU_B, 2048), cfg_of(64, 2), TT_MEAS_OK, 1.0)); /* other GPU, stale */
    struct collect c = {0};
    ASSERT_OK(tt_store_stale_keys(s, new_rev, GPU_A, collect_key, &c));
    ASSERT_EQ(c.n, 1);
    ASSERT_EQ(c.seqlens[0], 512);
    ASSERT_STREQ(c.gpus[0], new_rev); /* handed out for the current revision */
    c = (struct collect){0};
    ASSERT_OK(tt_store_stale_keys(s, new_rev, NULL, collect_key, &c));
    ASSERT_EQ(c.n, 2);
    c = (struct collect){0};
    ASSERT_OK(tt_store_stale_keys(s, REV, NULL, collect_key, &c));
    ASSERT_EQ(c.n, 0); /* 1024, the only new_rev key, also has an old-revision winner */
    tt_store_close(s);
    cleanup();
}

/* ---- the job queue ------------------------------------------------------- */

static tt_key_v2 job_key(const char *gpu, int64_t seqlen) {
    tt_key_v2 k = key_of(gpu, seqlen);
    k.rev[0] = '\0';
    return k;
}

static int count_jobs(void *ud, const tt_job_info *j) {
    (void)j;
    (*(int *)ud)++;
    return 0;
}

TEST(job_queue_runs_keys_in_order_and_settles) {
    const char *p = fresh_path();
    tt_store *s = open_ok(p);
    tt_key_v2 keys[3] = {job_key("", 512), job_key("", 1024), job_key("", 512)}; /* a duplicate */
    int64_t id = 0, id2 = 0;
    ASSERT_OK(tt_store_job_create(s, keys, 3, TT_JOB_FAST, 4, 16, &id));
    ASSERT(id > 0);
    tt_job_info j;
    ASSERT_OK(tt_store_job_get(s, id, &j));
    ASSERT_EQ(j.state, TT_JOB_QUEUED);
    ASSERT_EQ(j.mode, TT_JOB_FAST);
    ASSERT_EQ(j.keys, 2);
    ASSERT_EQ(j.pending, 2);
    ASSERT_EQ(j.batch, 4);
    ASSERT_OK(tt_store_job_create(s, keys + 1, 1, TT_JOB_EXHAUSTIVE, 0, 0, &id2));
    ASSERT(id2 > id);

    tt_job_claim c;
    ASSERT_OK(tt_store_job_next_key(s, NULL, &c));
    ASSERT_EQ(c.job_id, id);
    ASSERT_EQ(c.seq, 0);
    ASSERT_EQ(c.key.seqlen_q, 512);
    ASSERT_EQ(c.mode, TT_JOB_FAST);
    ASSERT_EQ(c.heads, 16);
    ASSERT_OK(tt_store_job_get(s, id, &j));
    ASSERT_EQ(j.state, TT_JOB_RUNNING);
    ASSERT_EQ(j.running, 1);
    ASSERT_OK(tt_store_job_next_key(s, NULL, &c));
    ASSERT_EQ(c.job_id, id);
    ASSERT_EQ(c.seq, 1);
    ASSERT_EQ(c.key.seqlen_q, 1024);
    /* The oldest job has no pending key left: the next job's turn. */
    ASSERT_OK(tt_store_job_next_key(s, NULL, &c));
    ASSERT_EQ(c.job_id, id2);
    ASSERT_EQ(c.mode, TT_JOB_EXHAUSTIVE);
    ASSERT_EQ(tt_store_job_next_key(s, NULL, &c), TT_ERR_NOTFOUND);

    ASSERT_OK(tt_store_job_key_finish(s, id, 0, TT_JKEY_DONE));
    ASSERT_OK(tt_store_job_get(s, id, &j));
    ASSERT_EQ(j.state, TT_JOB_RUNNING);
    ASSERT_EQ(j.done, 1);
    ASSERT_OK(tt_store_job_key_finish(s, id, 1, TT_JKEY_FAILED));
    ASSERT_OK(tt_store_job_get(s, id, &j));
    ASSERT_EQ(j.state, TT_JOB_FAILED);
    ASSERT_EQ(j.failed, 1);
    ASSERT_EQ(tt_store_job_key_finish(s, id, 1, TT_JKEY_DONE), TT_ERR_NOTFOUND); /* finished */
    ASSERT_EQ(tt_store_job_key_finish(s, id, 7, TT_JKEY_DONE), TT_ERR_NOTFOUND);
    ASSERT_EQ(tt_store_job_key_finish(s, id2, 0, TT_JKEY_PENDING), TT_ERR_INVAL);
    ASSERT_OK(tt_store_job_key_finish(s, id2, 0, TT_JKEY_DONE));
    ASSERT_OK(tt_store_job_get(s, id2, &j));
    ASSERT_EQ(j.state, TT_JOB_DONE);

    int n = 0;
    ASSERT_OK(tt_store_job_list(s, 0, count_jobs, &n));
    ASSERT_EQ(n, 0);
    ASSERT_OK(tt_store_job_list(s, 1, count_jobs, &n));
    ASSERT_EQ(n, 2);
    tt_job_counts jc;
    ASSERT_OK(tt_store_job_counts(s, &jc));
    ASSERT_EQ(jc.done, 1);
    ASSERT_EQ(jc.failed, 1);
    ASSERT_EQ(jc.queued + jc.running + jc.cancelled, 0);
    ASSERT_EQ(tt_store_job_get(s, 999, &j), TT_ERR_NOTFOUND);
    tt_store_close(s);
    cleanup();
}

TEST(job_create_validates) {
    const char *p = fresh_path();
    tt_store *s = open_ok(p);
    tt_key_v2 k = job_key("", 512);
    int64_t id = -5;
    ASSERT_EQ(tt_store_job_create(s, &k, 0, TT_JOB_FAST, 0, 0, &id), TT_ERR_INVAL);
    ASSERT_EQ(tt_store_job_create(s, &k, 1, (tt_job_mode)7, 0, 0, &id), TT_ERR_INVAL);
    ASSERT_EQ(tt_store_job_create(s, &k, 1, TT_JOB_FAST, -1, 0, &id), TT_ERR_INVAL);
    k.head_dim = 48;
    ASSERT_EQ(tt_store_job_create(s, &k, 1, TT_JOB_FAST, 0, 0, &id), TT_ERR_UNSUPPORTED);
    ASSERT_EQ(id, -5);
    tt_job_counts jc;
    ASSERT_OK(tt_store_job_counts(s, &jc));
    ASSERT_EQ(jc.queued, 0);
    tt_store_close(s);
    cleanup();
}

static int collect_states(void *ud, int32_t seq, const tt_key_v2 *k, tt_jkey_state st) {
    (void)k;
    ((tt_jkey_state *)ud)[seq] = st;
    return 0;
}

TEST(cancel_stops_pending_keys_and_only_live_jobs) {
    const char *p = fresh_path();
    tt_store *s = open_ok(p);
    tt_key_v2 keys[3] = {job_key("", 128), job_key("", 256), job_key("", 512)};
    int64_t id = 0;
    ASSERT_OK(tt_store_job_create(s, keys, 3, TT_JOB_EXHAUSTIVE, 0, 0, &id));
    tt_job_claim c;
    ASSERT_OK(tt_store_job_next_key(s, NULL, &c));
    ASSERT_OK(tt_store_job_cancel(s, id));
    tt_job_info j;
    ASSERT_OK(tt_store_job_get(s, id, &j));
    ASSERT_EQ(j.state, TT_JOB_CANCELLED);
    ASSERT_EQ(j.cancelled, 2);
    ASSERT_EQ(j.running, 1);
    ASSERT_EQ(tt_store_job_next_key(s, NULL, &c), TT_ERR_NOTFOUND);
    ASSERT_EQ(tt_store_job_cancel(s, id), TT_ERR_NOTFOUND); /* finished */
    ASSERT_EQ(tt_store_job_cancel(s, 4242), TT_ERR_NOTFOUND);
    /* The claimed key may still report; the job stays cancelled. */
    ASSERT_OK(tt_store_job_key_finish(s, id, 0, TT_JKEY_DONE));
    ASSERT_OK(tt_store_job_get(s, id, &j));
    ASSERT_EQ(j.state, TT_JOB_CANCELLED);
    tt_jkey_state st[3] = {9, 9, 9};
    ASSERT_OK(tt_store_job_keys(s, id, collect_states, st));
    ASSERT_EQ(st[0], TT_JKEY_DONE);
    ASSERT_EQ(st[1], TT_JKEY_CANCELLED);
    ASSERT_EQ(st[2], TT_JKEY_CANCELLED);
    ASSERT_EQ(tt_store_job_keys(s, 4242, collect_states, st), TT_ERR_NOTFOUND);
    tt_store_close(s);
    cleanup();
}

TEST(next_key_honours_the_gpu_filter) {
    const char *p = fresh_path();
    tt_store *s = open_ok(p);
    tt_key_v2 keys[2] = {job_key(GPU_B, 128), job_key("", 256)};
    int64_t id = 0;
    ASSERT_OK(tt_store_job_create(s, keys, 2, TT_JOB_FAST, 0, 0, &id));
    tt_job_claim c;
    ASSERT_OK(tt_store_job_next_key(s, GPU_A, &c));
    ASSERT_EQ(c.seq, 1); /* GPU_B's key is not for GPU_A */
    ASSERT_EQ(tt_store_job_next_key(s, GPU_A, &c), TT_ERR_NOTFOUND);
    ASSERT_OK(tt_store_job_next_key(s, GPU_B, &c));
    ASSERT_EQ(c.seq, 0);
    ASSERT_STREQ(c.key.gpu, GPU_B);
    tt_store_close(s);
    cleanup();
}

/* A worker claims a key and is killed with SIGKILL before finishing it:
 * after recovery the key is pending again and is handed out again. */
TEST(recovery_after_kill_9_requeues_the_claimed_key) {
    const char *p = fresh_path();
    tt_store *s = open_ok(p);
    tt_key_v2 keys[2] = {job_key("", 1024), job_key("", 2048)};
    int64_t id = 0;
    ASSERT_OK(tt_store_job_create(s, keys, 2, TT_JOB_FAST, 0, 0, &id));
    tt_store_close(s);

    int fds[2];
    ASSERT_OK(pipe(fds));
    pid_t kid = fork();
    ASSERT(kid >= 0);
    if (kid == 0) {
        close(fds[0]);
        tt_store *ks = NULL;
        char err[256];
        tt_job_claim c;
        if (tt_store_open(p, &ks, err, sizeof err) || tt_store_job_next_key(ks, NULL, &c)) _exit(1);
        char ok = 'y';
        if (write(fds[1], &ok, 1) != 1) _exit(1);
        for (;;) pause(); /* mid-key, store still open */
    }
    close(fds[1]);
    char got = 0;
    ASSERT_EQ(read(fds[0], &got, 1), 1);
    ASSERT_EQ(got, 'y');
    ASSERT_OK(kill(kid, SIGKILL));
    int wst = 0;
    ASSERT_EQ(waitpid(kid, &wst, 0), kid);
    ASSERT(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL);
    close(fds[0]);

    s = open_ok(p);
    tt_job_info j;
    ASSERT_OK(tt_store_job_get(s, id, &j));
    ASSERT_EQ(j.state, TT_JOB_RUNNING); /* the claim survived the crash */
    ASSERT_EQ(j.running, 1);
    int64_t n = -1;
    ASSERT_OK(tt_store_job_recover(s, &n));
    ASSERT_EQ(n, 1);
    ASSERT_OK(tt_store_job_get(s, id, &j));
    ASSERT_EQ(j.state, TT_JOB_QUEUED);
    ASSERT_EQ(j.pending, 2);
    tt_job_claim c;
    ASSERT_OK(tt_store_job_next_key(s, NULL, &c));
    ASSERT_EQ(c.job_id, id);
    ASSERT_EQ(c.seq, 0);
    ASSERT_EQ(c.key.seqlen_q, 1024);
    /* With a finished key, recovery leaves the job running. */
    ASSERT_OK(tt_store_job_key_finish(s, id, 0, TT_JKEY_DONE));
    ASSERT_OK(tt_store_job_next_key(s, NULL, &c));
    ASSERT_OK(tt_store_job_recover(s, &n));
    ASSERT_EQ(n, 1);
    ASSERT_OK(tt_store_job_get(s, id, &j));
    ASSERT_EQ(j.state, TT_JOB_RUNNING);
    ASSERT_EQ(j.pending, 1);
    ASSERT_OK(tt_store_job_recover(s, &n)); /* idempotent */
    ASSERT_EQ(n, 0);
    tt_store_close(s);
    cleanup();
}

/* ---- concurrency (WAL) ------------------------------------------------ */

TEST(reader_is_not_blocked_by_an_open_write_transaction) {
    const char *p = fresh_path();
    tt_store *w = open_ok(p);
    setup_ids(w);
    tt_store *r = open_ok(p);
    /* Another process (a raw connection) holds the write lock mid-insert. */
    sqlite3 *db = NULL;
    ASSERT_EQ(sqlite3_open(p, &db), SQLITE_OK);
    ASSERT_EQ(
        sqlite3_exec(db, "BEGIN IMMEDIATE; DELETE FROM gpu WHERE fingerprint = 'ffff'", NULL, NULL, NULL),
        SQLITE_OK);
    int64_t n = -1;
    ASSERT_OK(tt_store_count_best(r, &n)); /* would be SQLITE_BUSY without WAL */
    ASSERT_EQ(n, 0);
    ASSERT_EQ(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);

    /* A winner is visible to another connection once add returns. */
    tt_key_v2 k = key_of(GPU_A, 333);
    add(w, rec_of(k, cfg_of(64, 2), TT_MEAS_OK, 1.0));
    tt_record rec;
    ASSERT_OK(tt_store_get_best(r, &k, &rec));
    tt_store_close(w);
    tt_store_close(r);
    cleanup();
}

/* A new database at `p` with the ids and `bulk` measurements of other
 * keys, and a child process that opens it and adds `n` measurements over
 * `keys` keys, each faster than the last. */
static pid_t spawn_writer(const char *p, int bulk, int n, int keys) {
    tt_store *s = open_ok(p);
    setup_ids(s);
    ASSERT_OK(tt_store_begin(s));
    for (int i = 0; i < bulk; i++) add(s, rec_of(key_of(GPU_B, 1 + i), cfg_of(64, 2), TT_MEAS_OK, 1.0));
    ASSERT_OK(tt_store_commit(s));
    tt_store_close(s);
    pid_t kid = fork();
    ASSERT(kid >= 0);
    if (kid == 0) {
        tt_store *ws = NULL;
        char err[256];
        if (tt_store_open(p, &ws, err, sizeof err)) {
            fprintf(stderr, "writer: %s\n", err);
            _exit(1);
        }
        for (int i = 0; i < n; i++) {
            tt_record r =
                rec_of(key_of(GPU_A, 1 + i % keys), cfg_of(64, 1 + i % 4), TT_MEAS_OK, 10.0 - i * 0.001);
            if (tt_store_add_measurement(ws, &r, NULL)) {
                fprintf(stderr, "writer: %s\n", tt_store_errmsg(ws));
                _exit(2);
            }
        }
        tt_store_close(ws);
        _exit(0);
    }
    return kid;
}

TEST(concurrent_writer_and_reader_processes) {
    const char *p = fresh_path();
    enum { N = 400 };
    pid_t kid = spawn_writer(p, 0, N, 50);
    tt_store *s = open_ok(p);
    int64_t last = 0, best = 0;
    int done = 0, reads = 0;
    while (!done) {
        int64_t n = 0;
        ASSERT_OK(tt_store_count_measurements(s, &n));
        ASSERT_OK(tt_store_count_best(s, &best));
        ASSERT(n >= last); /* commits only ever add */
        ASSERT(best <= 50);
        last = n;
        reads++;
        int wst = 0;
        pid_t w = waitpid(kid, &wst, WNOHANG);
        if (w == kid) {
            ASSERT(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
            done = 1;
        }
    }
    ASSERT_OK(tt_store_count_measurements(s, &last));
    ASSERT_EQ(last, N);
    ASSERT_OK(tt_store_count_best(s, &best));
    ASSERT_EQ(best, 50);
    ASSERT(reads > 0);
    tt_store_close(s);
    cleanup();
}

/* Opening beside a process that keeps writing (its WAL growing,
 * checkpointed and restarted while the inspection copies the files): no
 * torn copy is taken for damage, every open accepts the file, and every
 * commit lands. */
TEST(opens_beside_a_busy_writer_accept_it) {
    const char *p = fresh_path();
    enum { BULK = 15000, N = 4000 };
    pid_t kid = spawn_writer(p, BULK, N, N);
    tt_store *s = NULL;
    int opens = 0;
    for (int done = 0; !done;) {
        char err[256];
        int rc = tt_store_open(p, &s, err, sizeof err);
        if (rc != 0) TT_FAIL_AT("open beside the writer = %d: %s", rc, err);
        tt_store_close(s);
        opens++;
        int wst = 0;
        if (waitpid(kid, &wst, WNOHANG) == kid) {
            ASSERT(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
            done = 1;
        }
    }
    ASSERT(opens > 1);
    ASSERT_EQ(raw_int(p, "SELECT count(*) FROM measurement"), BULK + N);
    cleanup();
}

TEST(names_round_trip) {
    for (int i = 0; i <= TT_MEAS_SKIPPED; i++) {
        tt_meas_status st;
        ASSERT_OK(tt_meas_status_parse(tt_meas_status_name((tt_meas_status)i), &st));
        ASSERT_EQ(st, i);
    }
    ASSERT(tt_meas_status_name((tt_meas_status)5) == NULL);
    tt_job_mode m;
    ASSERT_OK(tt_job_mode_parse("fast", &m));
    ASSERT_EQ(m, TT_JOB_FAST);
    ASSERT_EQ(tt_job_mode_parse("slow", &m), TT_ERR_INVAL);
    ASSERT_STREQ(tt_job_state_name(TT_JOB_CANCELLED), "cancelled");
    ASSERT_STREQ(tt_jkey_state_name(TT_JKEY_PENDING), "pending");
}

TT_TEST_MAIN()
