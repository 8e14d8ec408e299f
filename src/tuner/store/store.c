/*
 * The tuning database. Opening is two-phase so that a file we must refuse
 * is never written and gains no -wal/-shm: a look at the file's bytes, then
 * SQLite on a private copy of the file and its WAL (see inspect), decides
 * whether the file is ours, new, newer, foreign or corrupt; only then is it
 * opened read-write, switched to WAL and migrated. Statements are prepared once at open; the knob columns are
 * bound and read by walking the knob list (src/common/knobs.def).
 */
#include "tuner/store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/hash.h"
#include "common/key.h"

/* db/schema.sql and the later steps' files, embedded by tt_embed
 * (cmake/Embed.cmake). */
extern const char tt_schema_sql[];
extern const unsigned long tt_schema_sql_len;
extern const char tt_migrate_3_sql[];

/* Writers wait this long for another writer (the daemon vs. a worker or an
 * import) before giving up with TT_ERR_DB. */
#define BUSY_TIMEOUT_MS 5000

/*
 * Forward migrations: steps[i] takes user_version i to i + 1, each in its
 * own BEGIN IMMEDIATE transaction. Append, never edit: a released step is
 * what existing files went through. NULL = the embedded schema file.
 */
/* Driver, CUDA and NVRTC versions per record (the gpu row keeps only
 * what the model was last seen with, so an imported winner lost its own).
 * Self-contained: it needs no other step but schema.sql's tables. The
 * node's own rows (measurements, and winners that point to one) take the
 * model's versions, the best this file knows; imported winners stay ''
 * (not recorded). */
#define MIGRATE_RECORD_VERSIONS                                                                   \
    "ALTER TABLE measurement ADD COLUMN driver TEXT NOT NULL DEFAULT '';"                         \
    "ALTER TABLE measurement ADD COLUMN cuda TEXT NOT NULL DEFAULT '';"                           \
    "ALTER TABLE measurement ADD COLUMN nvrtc TEXT NOT NULL DEFAULT '';"                          \
    "ALTER TABLE best ADD COLUMN driver TEXT NOT NULL DEFAULT '';"                                \
    "ALTER TABLE best ADD COLUMN cuda TEXT NOT NULL DEFAULT '';"                                  \
    "ALTER TABLE best ADD COLUMN nvrtc TEXT NOT NULL DEFAULT '';"                                 \
    "UPDATE measurement SET (driver, cuda, nvrtc) = (SELECT g.driver, g.cuda, g.nvrtc FROM gpu g" \
    " WHERE g.fingerprint = measurement.gpu);"                                                    \
    "UPDATE best SET (driver, cuda, nvrtc) = (SELECT g.driver, g.cuda, g.nvrtc FROM gpu g"        \
    " WHERE g.fingerprint = best.gpu) WHERE measurement_id IS NOT NULL;"

/* The knob split_ctas (splitkv's split target, knobs.def): a column of
 * measurement and best at its neutral value 0, which every record of the
 * families before it means (they do not read it). Self-contained (two
 * ADD COLUMNs, whatever the tables are), but after step 3: that step
 * rebuilds both tables naming their columns, and would drop this one. */
#define MIGRATE_KNOB_SPLIT_CTAS                                                 \
    "ALTER TABLE measurement ADD COLUMN split_ctas INTEGER NOT NULL DEFAULT 0;" \
    "ALTER TABLE best ADD COLUMN split_ctas INTEGER NOT NULL DEFAULT 0;"

static const char *const migrations[] = {
    NULL,                    /* 0 -> 1: db/schema.sql */
    MIGRATE_RECORD_VERSIONS, /* 1 -> 2 */
    tt_migrate_3_sql,        /* 2 -> 3: db/migrate_3.sql: the GQA group, causal 2 */
    MIGRATE_KNOB_SPLIT_CTAS, /* 3 -> 4 */
};
_Static_assert(sizeof(migrations) / sizeof(migrations[0]) == TT_STORE_SCHEMA_VERSION,
               "one migration step per schema version");

enum {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_SAVEPOINT,
    ST_RELEASE,
    ST_ROLLBACK_TO,
    ST_PUT_GPU,
    ST_GET_GPU,
    ST_PUT_REV,
    ST_INS_MEAS,
    ST_PUT_BEST,
    ST_GET_BEST,
    ST_BEST_TIME,
    ST_DEL_BEST,
    ST_EACH_BEST,
    ST_EACH_MEAS,
    ST_FAILED,
    ST_COUNT_BEST,
    ST_COUNT_MEAS,
    ST_JOB_INS,
    ST_JKEY_INS,
    ST_JOB_GET,
    ST_JOB_LIST,
    ST_JOB_KEYS,
    ST_JOB_CANCEL,
    ST_JKEY_CANCEL,
    ST_JOB_NEXT,
    ST_JKEY_CLAIM,
    ST_JOB_RUN,
    ST_JKEY_FINISH,
    ST_JOB_SETTLE,
    ST_JKEY_RECOVER,
    ST_JOB_RECOVER,
    ST_JOB_COUNTS,
    ST_STALE,
    ST_JOB_PROGRESS, /* the JOB verb */
    ST_COUNT_
};

struct tt_store {
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT_];
    int depth; /* open transactions: 0 none, 1 BEGIN, more: savepoints */
    char err[256];
};

/* ---- names (record.h keeps the lists) ---------------------------------------- */

/* The index of a stored name, -1 if the column holds an unknown one. */
#define NAME_INDEX(type, parse)                                    \
    static int parse##_index(const unsigned char *s) {             \
        type v;                                                    \
        return s && parse((const char *)s, &v) == 0 ? (int)v : -1; \
    }
NAME_INDEX(tt_meas_status, tt_meas_status_parse)
NAME_INDEX(tt_job_mode, tt_job_mode_parse)
NAME_INDEX(tt_job_state, tt_job_state_parse)
NAME_INDEX(tt_jkey_state, tt_jkey_state_parse)

/* ---- errors ---------------------------------------------------------------- */

static void set_err(tt_store *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(tt_store *s, const char *fmt, ...) {
    if (!s) return; /* a probe whose failure says nothing */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
}

static int map_sqlite(int rc) {
    switch (rc & 0xff) {
    case SQLITE_NOMEM: return TT_ERR_NOMEM;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return TT_ERR_CORRUPT;
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_FULL: return TT_ERR_IO;
    case SQLITE_CONSTRAINT:
        /* A key naming a GPU or revision that was never registered. */
        return rc == SQLITE_CONSTRAINT_FOREIGNKEY ? TT_ERR_NOTFOUND : TT_ERR_INVAL;
    default: return TT_ERR_DB;
    }
}

/* Records the failure of an SQLite call on `s` and returns its TT_ERR_*. */
static int db_fail(tt_store *s, int rc, const char *what) {
    if (rc == SQLITE_CONSTRAINT_FOREIGNKEY)
        set_err(s, "%s: unknown GPU fingerprint or kernel revision (register it first)", what);
    else set_err(s, "%s: %s", what, s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
    return map_sqlite(rc);
}

static int inval(tt_store *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int inval(tt_store *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return TT_ERR_INVAL;
}

const char *tt_store_errmsg(const tt_store *s) { return s ? s->err : "no store"; }

/* ---- SQL text built from the knob list ---------------------------------- */

typedef struct sqlbuf {
    char b[4096];
    size_t n;
    int overflow;
} sqlbuf;

static void sb_add(sqlbuf *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sqlbuf *q, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(q->b + q->n, sizeof q->b - q->n, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= sizeof q->b - q->n) q->overflow = 1;
    else q->n += (size_t)w;
}

#define KEY_COLS "gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k, gqa_group"
#define NKEY_COLS 8
/* After the key and the knobs, in this order, in both measurement and best. */
#define TAIL_COLS                                                                                 \
    "time_ms, time_min_ms, spread, reps, tflops, measured_at, node, sm_clock_mhz, temp_c, busy, " \
    "regs, smem_bytes, spill_bytes, driver, cuda, nvrtc"
#define NTAIL_COLS 16
/* Columns of a record: key, batch, heads, knobs, tail. */
#define NREC_COLS (NKEY_COLS + 2 + tt__knob_count() + NTAIL_COLS)

/* "gpu, ..., batch, heads, family, ..., q_in_regs, time_ms, ..." */
static void sb_record_cols(sqlbuf *q) {
    sb_add(q, KEY_COLS ", batch, heads");
    for (int i = 0; i < tt__knob_count(); i++) sb_add(q, ", %s", tt__knob_at(i)->name);
    sb_add(q, ", " TAIL_COLS);
}

static void sb_knob_cols(sqlbuf *q) {
    for (int i = 0; i < tt__knob_count(); i++) sb_add(q, "%s%s", i ? ", " : "", tt__knob_at(i)->name);
}

static void sb_params(sqlbuf *q, int n) {
    for (int i = 0; i < n; i++) sb_add(q, "%s?", i ? ", " : "");
}

#define KEY_WHERE                                                                                         \
    "gpu = ? AND rev = ? AND dtype = ? AND head_dim = ? AND causal = ? AND seqlen_q = ? AND seqlen_k = ?" \
    " AND gqa_group = ?"

/* ---- binding and reading ---------------------------------------------- */

static int64_t now_s(void) { return (int64_t)time(NULL); }

static int bind_text(sqlite3_stmt *st, int i, const char *v) {
    return sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
}

static int bind_opt_int(sqlite3_stmt *st, int i, int64_t v) {
    return v < 0 ? sqlite3_bind_null(st, i) : sqlite3_bind_int64(st, i, v);
}

static int bind_opt_double(sqlite3_stmt *st, int i, double v) {
    return v < 0 ? sqlite3_bind_null(st, i) : sqlite3_bind_double(st, i, v);
}

/* Binds the NKEY_COLS key columns from parameter i on. */
static int bind_key(sqlite3_stmt *st, int i, const tt_key_v2 *k) {
    int rc = bind_text(st, i, k->gpu);
    if (!rc) rc = bind_text(st, i + 1, k->rev);
    if (!rc) rc = bind_text(st, i + 2, tt__dtype_name(k->dtype));
    if (!rc) rc = sqlite3_bind_int(st, i + 3, k->head_dim);
    if (!rc) rc = sqlite3_bind_int(st, i + 4, k->causal);
    if (!rc) rc = sqlite3_bind_int64(st, i + 5, k->seqlen_q);
    if (!rc) rc = sqlite3_bind_int64(st, i + 6, k->seqlen_k);
    if (!rc) rc = sqlite3_bind_int(st, i + 7, k->group > 1 ? k->group : 1);
    return rc;
}

/* Binds a record's columns (sb_record_cols order) from parameter 1 on. */
static int bind_record(sqlite3_stmt *st, const tt_record *r) {
    int rc = bind_key(st, 1, &r->key);
    int i = NKEY_COLS + 1;
    if (!rc) rc = sqlite3_bind_int(st, i++, r->batch);
    if (!rc) rc = sqlite3_bind_int(st, i++, r->heads);
    for (int k = 0; !rc && k < tt__knob_count(); k++)
        rc = sqlite3_bind_int(st, i++, tt__knob_get(tt__knob_at(k), &r->config));
    if (rc) return rc;
    /* A failed variant may have no time: stored as NULL. */
    rc = r->time_ms > 0 ? sqlite3_bind_double(st, i, r->time_ms) : sqlite3_bind_null(st, i);
    i++;
    if (!rc) rc = r->time_min_ms > 0 ? sqlite3_bind_double(st, i, r->time_min_ms) : sqlite3_bind_null(st, i);
    i++;
    if (!rc) rc = bind_opt_double(st, i++, r->spread);
    if (!rc) rc = sqlite3_bind_int(st, i++, r->reps);
    if (!rc) rc = bind_opt_double(st, i++, r->tflops);
    if (!rc) rc = sqlite3_bind_int64(st, i++, r->measured_at > 0 ? r->measured_at : now_s());
    if (!rc) rc = bind_text(st, i++, r->node);
    if (!rc) rc = bind_opt_int(st, i++, r->sm_clock_mhz);
    if (!rc) rc = bind_opt_int(st, i++, r->temp_c);
    if (!rc) rc = bind_opt_int(st, i++, r->busy);
    if (!rc) rc = bind_opt_int(st, i++, r->regs);
    if (!rc) rc = bind_opt_int(st, i++, r->smem_bytes);
    if (!rc) rc = bind_opt_int(st, i++, r->spill_bytes);
    if (!rc) rc = bind_text(st, i++, r->driver);
    if (!rc) rc = bind_text(st, i++, r->cuda);
    if (!rc) rc = bind_text(st, i++, r->nvrtc);
    return rc;
}

static void col_text(sqlite3_stmt *st, int i, char *out, size_t len) {
    const unsigned char *t = sqlite3_column_text(st, i);
    snprintf(out, len, "%s", t ? (const char *)t : "");
}

static int64_t col_opt_int(sqlite3_stmt *st, int i) {
    return sqlite3_column_type(st, i) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, i);
}

static double col_opt_double(sqlite3_stmt *st, int i) {
    return sqlite3_column_type(st, i) == SQLITE_NULL ? -1.0 : sqlite3_column_double(st, i);
}

/* Reads the NKEY_COLS key columns from column i on. -1 if the row holds a value
 * this build cannot represent (only a damaged file can). */
static int read_key(sqlite3_stmt *st, int i, tt_key_v2 *k) {
    memset(k, 0, sizeof *k);
    col_text(st, i, k->gpu, sizeof k->gpu);
    col_text(st, i + 1, k->rev, sizeof k->rev);
    if (tt__dtype_parse((const char *)sqlite3_column_text(st, i + 2), &k->dtype) < 0) return -1;
    k->head_dim = sqlite3_column_int(st, i + 3);
    k->causal = sqlite3_column_int(st, i + 4);
    k->seqlen_q = sqlite3_column_int64(st, i + 5);
    k->seqlen_k = sqlite3_column_int64(st, i + 6);
    k->group = sqlite3_column_int(st, i + 7);
    return 0;
}

/* Reads a record selected as sb_record_cols, then status, then id. */
static int read_record(sqlite3_stmt *st, tt_record *r) {
    tt_record_init(r);
    if (read_key(st, 0, &r->key) < 0) return -1;
    int i = NKEY_COLS;
    r->batch = sqlite3_column_int(st, i++);
    r->heads = sqlite3_column_int(st, i++);
    for (int k = 0; k < tt__knob_count(); k++)
        tt__knob_set(tt__knob_at(k), &r->config, sqlite3_column_int(st, i++));
    r->time_ms = col_opt_double(st, i++);
    if (r->time_ms < 0) r->time_ms = 0;
    r->time_min_ms = col_opt_double(st, i++);
    r->spread = col_opt_double(st, i++);
    r->reps = sqlite3_column_int(st, i++);
    r->tflops = col_opt_double(st, i++);
    r->measured_at = sqlite3_column_int64(st, i++);
    col_text(st, i++, r->node, sizeof r->node);
    r->sm_clock_mhz = (int32_t)col_opt_int(st, i++);
    r->temp_c = (int32_t)col_opt_int(st, i++);
    r->busy = (int32_t)col_opt_int(st, i++);
    r->regs = (int32_t)col_opt_int(st, i++);
    r->smem_bytes = (int32_t)col_opt_int(st, i++);
    r->spill_bytes = (int32_t)col_opt_int(st, i++);
    col_text(st, i++, r->driver, sizeof r->driver);
    col_text(st, i++, r->cuda, sizeof r->cuda);
    col_text(st, i++, r->nvrtc, sizeof r->nvrtc);
    int stv = tt_meas_status_parse_index(sqlite3_column_text(st, i++));
    if (stv < 0) return -1;
    r->status = (tt_meas_status)stv;
    r->id = sqlite3_column_int64(st, i++);
    return 0;
}

/* ---- statements ------------------------------------------------------------ */

static sqlite3_stmt *stmt(tt_store *s, int which) {
    sqlite3_stmt *st = s->st[which];
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return st;
}

/* Steps a statement that returns no rows. */
static int exec_stmt(tt_store *s, sqlite3_stmt *st, const char *what) {
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        rc = db_fail(s, sqlite3_extended_errcode(s->db), what);
        sqlite3_reset(st);
        return rc;
    }
    sqlite3_reset(st);
    return 0;
}

/*
 * Transactions nest: the outermost is BEGIN IMMEDIATE (take the write lock
 * up front, so a reader-turned-writer never deadlocks and fails with BUSY
 * mid-way), inner ones are savepoints, so a failing call inside a caller's
 * transaction (an import) undoes only its own part.
 */
static int begin(tt_store *s) {
    int ret = exec_stmt(s, stmt(s, s->depth ? ST_SAVEPOINT : ST_BEGIN), "begin");
    if (ret == 0) s->depth++;
    return ret;
}

static int commit(tt_store *s) {
    int ret = exec_stmt(s, stmt(s, s->depth > 1 ? ST_RELEASE : ST_COMMIT), "commit");
    if (ret == 0) s->depth--;
    return ret;
}

static void rollback(tt_store *s) {
    if (s->depth == 0) return;
    if (sqlite3_get_autocommit(s->db)) {
        /* SQLite already rolled the whole transaction back (I/O error). */
        s->depth = 0;
        return;
    }
    int which = s->depth > 1 ? ST_ROLLBACK_TO : ST_ROLLBACK;
    sqlite3_stmt *st = stmt(s, which);
    sqlite3_step(st);
    sqlite3_reset(st);
    if (which == ST_ROLLBACK_TO) {
        st = stmt(s, ST_RELEASE);
        sqlite3_step(st);
        sqlite3_reset(st);
    }
    s->depth--;
}

int tt_store_begin(tt_store *s) { return s ? begin(s) : TT_ERR_INVAL; }

int tt_store_commit(tt_store *s) {
    if (!s) return TT_ERR_INVAL;
    if (s->depth == 0) return inval(s, "commit without begin");
    return commit(s);
}

void tt_store_rollback(tt_store *s) {
    if (s) rollback(s);
}

static int prepare_all(tt_store *s) {
    static const char *const fixed[ST_COUNT_] = {
        [ST_BEGIN] = "BEGIN IMMEDIATE",
        [ST_COMMIT] = "COMMIT",
        [ST_ROLLBACK] = "ROLLBACK",
        [ST_SAVEPOINT] = "SAVEPOINT tt_nested",
        [ST_RELEASE] = "RELEASE tt_nested",
        [ST_ROLLBACK_TO] = "ROLLBACK TO tt_nested",
        [ST_PUT_GPU] =
            "INSERT INTO gpu (fingerprint, name, cc_major, cc_minor, sm_count, mem_bytes, driver, cuda,"
            " nvrtc, first_seen, last_seen) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10)"
            " ON CONFLICT (fingerprint) DO UPDATE SET driver = excluded.driver, cuda = excluded.cuda,"
            " nvrtc = excluded.nvrtc, last_seen = excluded.last_seen",
        [ST_GET_GPU] = "SELECT fingerprint, name, cc_major, cc_minor, sm_count, mem_bytes, driver, cuda,"
                       " nvrtc FROM gpu WHERE fingerprint = ?",
        [ST_PUT_REV] = "INSERT OR IGNORE INTO kernel_rev (rev, description, first_seen) VALUES (?, ?, ?)",
        [ST_BEST_TIME] = "SELECT time_ms FROM best WHERE " KEY_WHERE,
        [ST_DEL_BEST] = "DELETE FROM best WHERE " KEY_WHERE,
        [ST_COUNT_BEST] = "SELECT count(*) FROM best",
        [ST_COUNT_MEAS] = "SELECT count(*) FROM measurement",
        [ST_JOB_INS] = "INSERT INTO job (state, mode, batch, heads, created_at, updated_at)"
                       " VALUES ('queued', ?1, ?2, ?3, ?4, ?4)",
        [ST_JKEY_INS] = "INSERT OR IGNORE INTO job_key (job_id, seq, gpu, rev, dtype, head_dim, causal,"
                        " seqlen_q, seqlen_k, gqa_group) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        /* Key counts come from job_key, so they cannot drift from it. */
        [ST_JOB_GET] = "SELECT j.id, j.state, j.mode, j.batch, j.heads, j.created_at, j.updated_at,"
                       " count(k.seq), total(k.state = 'pending'), total(k.state = 'running'),"
                       " total(k.state = 'done'), total(k.state = 'failed'), total(k.state = 'cancelled')"
                       " FROM job j LEFT JOIN job_key k ON k.job_id = j.id WHERE j.id = ? GROUP BY j.id",
        [ST_JOB_LIST] = "SELECT j.id, j.state, j.mode, j.batch, j.heads, j.created_at, j.updated_at,"
                        " count(k.seq), total(k.state = 'pending'), total(k.state = 'running'),"
                        " total(k.state = 'done'), total(k.state = 'failed'), total(k.state = 'cancelled')"
                        " FROM job j LEFT JOIN job_key k ON k.job_id = j.id"
                        " WHERE ?1 OR j.state IN ('queued', 'running') GROUP BY j.id ORDER BY j.id",
        [ST_JOB_KEYS] = "SELECT seq, " KEY_COLS ", state FROM job_key WHERE job_id = ? ORDER BY seq",
        /* Measurements of each key since its job was made, by the index on
         * measurement's key (every column an equality). */
        [ST_JOB_PROGRESS] =
            "SELECT k.seq, k.gpu, k.rev, k.dtype, k.head_dim, k.causal, k.seqlen_q, k.seqlen_k,"
            " k.gqa_group, k.state, coalesce(k.claimed_at, 0), coalesce(k.finished_at, 0),"
            " (SELECT count(*) FROM measurement m WHERE m.gpu = coalesce(nullif(k.gpu, ''), ?2)"
            "   AND m.rev = coalesce(nullif(k.rev, ''), ?3) AND m.dtype = k.dtype"
            "   AND m.head_dim = k.head_dim AND m.causal = k.causal AND m.seqlen_q = k.seqlen_q"
            "   AND m.seqlen_k = k.seqlen_k AND m.gqa_group = k.gqa_group"
            "   AND m.measured_at >= j.created_at)"
            " FROM job_key k JOIN job j ON j.id = k.job_id WHERE k.job_id = ?1 ORDER BY k.seq",
        [ST_JOB_CANCEL] = "UPDATE job SET state = 'cancelled', updated_at = ?2"
                          " WHERE id = ?1 AND state IN ('queued', 'running')",
        [ST_JKEY_CANCEL] = "UPDATE job_key SET state = 'cancelled', finished_at = ?2"
                           " WHERE job_id = ?1 AND state = 'pending'",
        [ST_JOB_NEXT] =
            "SELECT k.job_id, k.seq, k.gpu, k.rev, k.dtype, k.head_dim, k.causal, k.seqlen_q,"
            " k.seqlen_k, k.gqa_group, j.mode, j.batch, j.heads FROM job_key k JOIN job j ON j.id = k.job_id"
            " WHERE k.state = 'pending' AND j.state IN ('queued', 'running')"
            " AND (?1 = '' OR k.gpu IN ('', ?1)) ORDER BY k.job_id, k.seq LIMIT 1",
        [ST_JKEY_CLAIM] = "UPDATE job_key SET state = 'running', claimed_at = ?3"
                          " WHERE job_id = ?1 AND seq = ?2 AND state = 'pending'",
        [ST_JOB_RUN] = "UPDATE job SET state = 'running', updated_at = ?2 WHERE id = ?1 AND state = 'queued'",
        [ST_JKEY_FINISH] = "UPDATE job_key SET state = ?3, finished_at = ?4"
                           " WHERE job_id = ?1 AND seq = ?2 AND state = 'running'",
        /* A live job whose keys are all finished is done, or failed if
         * any key failed. */
        [ST_JOB_SETTLE] =
            "UPDATE job SET updated_at = ?2, state = CASE WHEN EXISTS (SELECT 1 FROM job_key"
            " WHERE job_id = ?1 AND state = 'failed') THEN 'failed' ELSE 'done' END"
            " WHERE id = ?1 AND state IN ('queued', 'running') AND NOT EXISTS (SELECT 1 FROM job_key"
            " WHERE job_id = ?1 AND state IN ('pending', 'running'))",
        /* A running key goes back to pending, or ends cancelled in a
         * cancelled job: every key (?1 = 0, recovery) or one (release). */
        [ST_JKEY_RECOVER] = "UPDATE job_key SET claimed_at = NULL, state = CASE WHEN (SELECT state FROM job"
                            " WHERE id = job_id) = 'cancelled' THEN 'cancelled' ELSE 'pending' END,"
                            " finished_at = CASE WHEN (SELECT state FROM job WHERE id = job_id) = 'cancelled'"
                            " THEN ?3 END WHERE state = 'running' AND (?1 = 0 OR (job_id = ?1 AND seq = ?2))",
        [ST_JOB_RECOVER] = "UPDATE job SET state = 'queued', updated_at = ?1 WHERE state = 'running'"
                           " AND NOT EXISTS (SELECT 1 FROM job_key WHERE job_id = job.id"
                           " AND state IN ('running', 'done', 'failed'))",
        [ST_JOB_COUNTS] = "SELECT state, count(*) FROM job GROUP BY state",
        [ST_STALE] =
            "SELECT DISTINCT gpu, ?1, dtype, head_dim, causal, seqlen_q, seqlen_k, gqa_group FROM best b"
            " WHERE rev <> ?1 AND (?2 = '' OR gpu = ?2) AND NOT EXISTS (SELECT 1 FROM best c"
            " WHERE c.gpu = b.gpu AND c.rev = ?1 AND c.dtype = b.dtype AND c.head_dim = b.head_dim"
            " AND c.causal = b.causal AND c.seqlen_q = b.seqlen_q AND c.seqlen_k = b.seqlen_k"
            " AND c.gqa_group = b.gqa_group)"
            /* a key an unfinished job already holds is not queued twice */
            " AND NOT EXISTS (SELECT 1 FROM job_key k WHERE k.state IN ('pending', 'running')"
            " AND k.gpu = b.gpu AND k.rev = ?1 AND k.dtype = b.dtype AND k.head_dim = b.head_dim"
            " AND k.causal = b.causal AND k.seqlen_q = b.seqlen_q AND k.seqlen_k = b.seqlen_k"
            " AND k.gqa_group = b.gqa_group)"
            " ORDER BY gpu, dtype, head_dim, causal, seqlen_q, seqlen_k, gqa_group",
    };
    for (int i = 0; i < ST_COUNT_; i++) {
        sqlbuf q = {.n = 0};
        switch (i) {
        case ST_INS_MEAS:
            sb_add(&q, "INSERT INTO measurement (");
            sb_record_cols(&q);
            sb_add(&q, ", status) VALUES (");
            sb_params(&q, NREC_COLS + 1);
            sb_add(&q, ")");
            break;
        case ST_PUT_BEST:
            /* REPLACE: nothing references best, so delete+insert is safe. */
            sb_add(&q, "INSERT OR REPLACE INTO best (");
            sb_record_cols(&q);
            sb_add(&q, ", measurement_id) VALUES (");
            sb_params(&q, NREC_COLS + 1);
            sb_add(&q, ")");
            break;
        case ST_GET_BEST:
        case ST_EACH_BEST:
            sb_add(&q, "SELECT ");
            sb_record_cols(&q);
            sb_add(&q, ", 'ok', coalesce(measurement_id, 0) FROM best");
            if (i == ST_GET_BEST) sb_add(&q, " WHERE " KEY_WHERE);
            else sb_add(&q, " ORDER BY " KEY_COLS);
            break;
        case ST_EACH_MEAS:
            sb_add(&q, "SELECT ");
            sb_record_cols(&q);
            sb_add(&q, ", status, id FROM measurement WHERE ?1 = '' OR gpu = ?1 ORDER BY id");
            break;
        case ST_FAILED:
            sb_add(&q, "SELECT ");
            sb_knob_cols(&q);
            sb_add(&q, ", min(status) FROM measurement WHERE " KEY_WHERE
                       " AND status IN ('wrong', 'fault', 'timeout') GROUP BY ");
            sb_knob_cols(&q);
            sb_add(&q, " ORDER BY min(id)");
            break;
        default: sb_add(&q, "%s", fixed[i]); break;
        }
        if (q.overflow) {
            set_err(s, "internal: statement %d too long", i);
            return TT_ERR_DB;
        }
        int rc = sqlite3_prepare_v3(s->db, q.b, -1, SQLITE_PREPARE_PERSISTENT, &s->st[i], NULL);
        if (rc != SQLITE_OK) return db_fail(s, rc, "prepare");
    }
    return 0;
}

/* ---- open: inspect, then migrate --------------------------------------- */

/* One-row integer query on a connection. */
static int query_int(sqlite3 *db, const char *sql, int64_t *out) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *out = sqlite3_column_int64(st, 0);
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            rc = SQLITE_ERROR;
        }
    }
    sqlite3_finalize(st);
    return rc;
}

/* PRAGMA quick_check: "ok", or the first problem it finds. */
static int quick_check(sqlite3 *db, char *msg, size_t len) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            const unsigned char *t = sqlite3_column_text(st, 0);
            snprintf(msg, len, "%s", t ? (const char *)t : "");
            rc = SQLITE_OK;
        }
    }
    if (rc != SQLITE_OK) snprintf(msg, len, "%s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return rc;
}

#define OPEN_FAIL(code, ...)     \
    do {                         \
        set_err(s, __VA_ARGS__); \
        ret = (code);            \
        goto out;                \
    } while (0)

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* SQLite's WAL checksum (its wal.c): over 8-byte steps of 32-bit words,
 * big-endian when the magic's low bit is set. */
static void wal_sum(int big, const unsigned char *p, size_t n, uint32_t *s1, uint32_t *s2) {
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint32_t a, b;
        if (big) {
            a = be32(p + i);
            b = be32(p + i + 4);
        } else {
            a = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 |
                (uint32_t)p[i + 3] << 24;
            b = (uint32_t)p[i + 4] | (uint32_t)p[i + 5] << 8 | (uint32_t)p[i + 6] << 16 |
                (uint32_t)p[i + 7] << 24;
        }
        *s1 += a + *s2;
        *s2 += b + *s1;
    }
}

/*
 * Inspection reads the files and never lets SQLite open them where that
 * would create something: SQLite's read-only open of a WAL database
 * creates an empty -wal and a -shm, and nothing can safely remove them
 * again (another process opening the database meanwhile may be using
 * them). So a WAL database (or one with a -wal beside it) is judged on a
 * private copy: the file and its WAL read whole, the WAL's committed
 * frames applied as SQLite's recovery would, and the result handed to an
 * in-memory SQLite. Only a file in rollback mode with no -wal is opened
 * read-only where it lies, which creates nothing.
 */

/* A file read whole, and which file it was. */
typedef struct {
    unsigned char *b;
    size_t n, cap;
    int exists;
    dev_t dev;
    ino_t ino;
} file_copy;

static void copy_free(file_copy *c) {
    free(c->b);
    memset(c, 0, sizeof *c);
}

/* No file is a copy with exists = 0. Refuses a symlink and anything but a
 * regular file (a FIFO without waiting for a writer). `s` NULL: no message. */
static int read_whole(tt_store *s, const char *path, file_copy *c) {
    memset(c, 0, sizeof *c);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        set_err(s, "%s: %s", path, strerror(errno));
        return errno == ELOOP ? TT_ERR_INVAL : TT_ERR_IO;
    }
    int ret = 0;
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        set_err(s, "%s: not a regular file", path);
        ret = TT_ERR_INVAL;
        goto out;
    }
    c->exists = 1;
    c->dev = sb.st_dev;
    c->ino = sb.st_ino;
    /* the file may grow while it is read: read to the end, not to st_size */
    for (;;) {
        if (c->n == c->cap) {
            size_t cap = c->cap ? c->cap * 2 : (size_t)sb.st_size + 4096;
            unsigned char *b = realloc(c->b, cap);
            if (!b) {
                set_err(s, "%s: out of memory reading it (%zu bytes) for its check", path, cap);
                ret = TT_ERR_NOMEM;
                goto out;
            }
            c->b = b;
            c->cap = cap;
        }
        ssize_t got = read(fd, c->b + c->n, c->cap - c->n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            set_err(s, "%s: %s", path, strerror(errno));
            ret = TT_ERR_IO;
            goto out;
        }
        if (got == 0) break;
        c->n += (size_t)got;
    }
out:
    close(fd);
    if (ret < 0) copy_free(c);
    return ret;
}

/* Whether `path` is still the file `c` copied, byte for byte. */
static int unchanged(const char *path, const file_copy *c) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0) return !c->exists && errno == ENOENT;
    struct stat sb;
    int same = c->exists && fstat(fd, &sb) == 0 && sb.st_dev == c->dev && sb.st_ino == c->ino;
    unsigned char buf[65536];
    for (size_t at = 0; same;) {
        ssize_t got = read(fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            same = got == 0 && at == c->n;
            break;
        }
        same = at + (size_t)got <= c->n && memcmp(buf, c->b + at, (size_t)got) == 0;
        at += (size_t)got;
    }
    close(fd);
    return same;
}

/*
 * The write-ahead log `w` of `wal`, checked as SQLite's recovery reads it,
 * so that a damaged one is refused instead of silently dropped with the
 * commits in it: no file or an empty one is fine; otherwise the header
 * must be a WAL header of this page size with a good checksum, and no
 * frame of the current generation (its salts) may fail its checksum while
 * a commit follows it (recovery would stop there and lose that commit).
 * Frames of an older generation after the last good one are the normal
 * leftovers of a checkpoint; a torn uncommitted tail is a crash's. On
 * success *frames is the count of frames recovery keeps (up to its last
 * commit) and *pages the database's size in pages after them. `db_size`:
 * the database file's size in bytes.
 */
static int check_wal(tt_store *s, const char *wal, const file_copy *w, uint32_t page_size, size_t db_size,
                     size_t *frames, uint32_t *pages) {
    *frames = 0;
    *pages = 0;
    if (!w->exists || w->n == 0) return 0;
    const unsigned char *h = w->b;
    if (w->n < 32 || (be32(h) & ~1u) != 0x377f0682u || be32(h + 4) != 3007000 || be32(h + 8) != page_size) {
        set_err(s,
                "%s: damaged write-ahead log (not a WAL of this database's %u-byte pages); the commits in it "
                "would be lost: restore it or the database from a backup, or move it away to accept the loss",
                wal, page_size);
        return TT_ERR_CORRUPT;
    }
    int big = be32(h) & 1;
    uint32_t s1 = 0, s2 = 0;
    wal_sum(big, h, 24, &s1, &s2);
    if (s1 != be32(h + 24) || s2 != be32(h + 28)) {
        set_err(s,
                "%s: damaged write-ahead log (bad header checksum); the commits in it would be lost: restore "
                "it or the database from a backup, or move it away to accept the loss",
                wal);
        return TT_ERR_CORRUPT;
    }
    size_t fsz = 24 + (size_t)page_size;
    int64_t bad_at = -1;
    uint32_t top = (uint32_t)((db_size + page_size - 1) / page_size); /* the highest page written anywhere */
    for (size_t i = 0; 32 + (i + 1) * fsz <= w->n; i++) {
        const unsigned char *frame = w->b + 32 + i * fsz;
        if (be32(frame + 8) != be32(h + 16) || be32(frame + 12) != be32(h + 20)) break; /* older generation */
        if (bad_at >= 0) {
            if (be32(frame + 4) != 0) { /* a commit after the damage */
                set_err(
                    s,
                    "%s: damaged write-ahead log (frame %lld fails its checksum, a commit follows it); the "
                    "commits after it would be lost: restore it or the database from a backup, or move it "
                    "away to accept the loss",
                    wal, (long long)bad_at + 1);
                return TT_ERR_CORRUPT;
            }
            continue;
        }
        wal_sum(big, frame, 8, &s1, &s2);
        wal_sum(big, frame + 24, page_size, &s1, &s2);
        if (s1 != be32(frame + 16) || s2 != be32(frame + 20) || be32(frame) == 0) {
            bad_at = (int64_t)i;
        } else {
            if (be32(frame) > top) top = be32(frame);
            if (be32(frame + 4) != 0) {
                *frames = i + 1;
                *pages = be32(frame + 4);
            }
        }
    }
    /* A commit only ever counts pages that were written (the copy would
     * otherwise have to make up, and hold, pages no file has). */
    if (*pages > top) {
        set_err(
            s,
            "%s: damaged write-ahead log (a commit gives the database %u pages; the file and the log hold "
            "%u)",
            wal, *pages, top);
        return TT_ERR_CORRUPT;
    }
    return 0;
}

/* The database as SQLite would read it: a new copy of the file `d` with
 * the first `frames` frames of `w` written over it, cut or grown to `pages`
 * pages. */
static unsigned char *apply_wal(const file_copy *d, const file_copy *w, uint32_t page_size, size_t frames,
                                uint32_t pages) {
    size_t size = (size_t)pages * page_size;
    unsigned char *b = malloc(size);
    if (!b) return NULL;
    memcpy(b, d->b, d->n < size ? d->n : size);
    if (size > d->n) memset(b + d->n, 0, size - d->n);
    for (size_t i = 0; i < frames; i++) {
        const unsigned char *frame = w->b + 32 + i * (24 + (size_t)page_size);
        uint32_t pg = be32(frame);
        if (pg <= pages) memcpy(b + (size_t)(pg - 1) * page_size, frame + 24, page_size);
    }
    return b;
}

/*
 * SQLite's view of the database on `db` (the file itself, or a copy):
 * refused unless it is an empty SQLite database or a healthy tiletune one
 * no newer than this build. `file_app` is the application id in the file's
 * own header, to tell a foreign WAL from a foreign file.
 */
static int judge(tt_store *s, sqlite3 *db, const char *path, int64_t file_app) {
    int ret = 0;
    int64_t app = 0, ver = 0, nobj = 0;
    int rc = query_int(db, "PRAGMA application_id", &app);
    if (rc == SQLITE_OK) rc = query_int(db, "PRAGMA user_version", &ver);
    if (rc == SQLITE_OK) rc = query_int(db, "SELECT count(*) FROM sqlite_master", &nobj);
    if (rc != SQLITE_OK) {
        /* A lock held past the time-out is not damage; anything else
         * SQLite cannot read is. */
        int code = (rc & 0xff) == SQLITE_BUSY    ? TT_ERR_DB
                   : map_sqlite(rc) == TT_ERR_DB ? TT_ERR_CORRUPT
                                                 : map_sqlite(rc);
        OPEN_FAIL(code, "%s: corrupt or unreadable database: %s", path, sqlite3_errmsg(db));
    }
    if (app != TT_STORE_APPLICATION_ID && file_app == TT_STORE_APPLICATION_ID)
        OPEN_FAIL(TT_ERR_CORRUPT,
                  "%s: the write-ahead log %s-wal belongs to another database (with it the file reads as "
                  "application_id 0x%08llx); move it away",
                  path, path, (unsigned long long)(uint32_t)app);
    if (app != TT_STORE_APPLICATION_ID) {
        if (app != 0 || ver != 0 || nobj != 0)
            OPEN_FAIL(TT_ERR_CORRUPT,
                      "%s: not a tiletune database (application_id 0x%08llx, %lld schema objects)", path,
                      (unsigned long long)(uint32_t)app, (long long)nobj);
        /* An SQLite file with nothing in it: ours to initialize. */
    } else if (ver > TT_STORE_SCHEMA_VERSION) {
        OPEN_FAIL(TT_ERR_VERSION,
                  "%s: schema version %lld is newer than this tiletune knows (%d); upgrade tiletune", path,
                  (long long)ver, TT_STORE_SCHEMA_VERSION);
    } else if (ver < 1) {
        OPEN_FAIL(TT_ERR_CORRUPT,
                  "%s: a tiletune database with schema version %lld, which no tiletune writes", path,
                  (long long)ver);
    }
    char msg[200];
    rc = quick_check(db, msg, sizeof msg);
    if ((rc & 0xff) == SQLITE_BUSY) OPEN_FAIL(TT_ERR_DB, "%s: %s", path, msg);
    if (rc != SQLITE_OK || strcmp(msg, "ok") != 0)
        OPEN_FAIL(TT_ERR_CORRUPT, "%s: corrupt database: %s", path, msg);
out:
    return ret;
}

/* The header's word on the file: its page size and application id, or a
 * refusal of what is not SQLite (or has a page size SQLite would not
 * read). `n` bytes of it at `head`. */
static int read_header(tt_store *s, const char *path, const unsigned char *head, size_t n,
                       uint32_t *page_size, int64_t *app, int64_t *ver) {
    if (n < 100 || memcmp(head, "SQLite format 3", 16) != 0) {
        set_err(s, "%s: not a tiletune database (not an SQLite file)", path);
        return TT_ERR_CORRUPT;
    }
    *page_size = (uint32_t)head[16] << 8 | head[17];
    if (*page_size == 1) *page_size = 65536;
    if (*page_size < 512 || (*page_size & (*page_size - 1))) {
        set_err(s, "%s: corrupt database: its header gives a page size of %u bytes", path, *page_size);
        return TT_ERR_CORRUPT;
    }
    *app = (int32_t)be32(head + 68);
    *ver = (int32_t)be32(head + 60);
    return 0;
}

/* What the header alone refuses (with nothing in a WAL it is the truth). */
static int judge_header(tt_store *s, const char *path, int64_t app, int64_t ver) {
    if (app != TT_STORE_APPLICATION_ID && app != 0) {
        set_err(s, "%s: not a tiletune database (application_id 0x%08llx)", path,
                (unsigned long long)(uint32_t)app);
        return TT_ERR_CORRUPT;
    }
    if (app == TT_STORE_APPLICATION_ID && ver > TT_STORE_SCHEMA_VERSION) {
        set_err(s, "%s: schema version %lld is newer than this tiletune knows (%d); upgrade tiletune", path,
                (long long)ver, TT_STORE_SCHEMA_VERSION);
        return TT_ERR_VERSION;
    }
    if (app == TT_STORE_APPLICATION_ID && ver < 1) {
        set_err(s, "%s: a tiletune database with schema version %lld, which no tiletune writes", path,
                (long long)ver);
        return TT_ERR_CORRUPT;
    }
    return 0;
}

/* The copies `d` (of `path`) and `w` (of its WAL) judged as one database;
 * both are left as they were read. */
static int judge_copy(tt_store *s, const char *path, const char *wal, file_copy *d, const file_copy *w) {
    if (!d->exists || d->n == 0) return 0; /* gone or empty meanwhile: ours to create */
    uint32_t page_size = 0, pages = 0;
    int64_t app = 0, ver = 0;
    size_t frames = 0;
    int ret = read_header(s, path, d->b, d->n, &page_size, &app, &ver);
    if (ret == 0) ret = check_wal(s, wal, w, page_size, d->n, &frames, &pages);
    if (ret == 0 && !frames) ret = judge_header(s, path, app, ver);
    if (ret < 0) return ret;
    /* with no commit in the WAL the file alone is the database */
    unsigned char *img = frames ? apply_wal(d, w, page_size, frames, pages) : d->b;
    size_t n = frames ? (size_t)pages * page_size : d->n;
    if (!img) {
        set_err(s, "%s: out of memory applying its write-ahead log for the check", path);
        return TT_ERR_NOMEM;
    }
    /* read in rollback mode: an in-memory database has no WAL */
    unsigned char mode[2] = {img[18], img[19]};
    if (img[18] == 2) img[18] = 1;
    if (img[19] == 2) img[19] = 1;
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_deserialize(db, "main", img, (sqlite3_int64)n, (sqlite3_int64)n,
                                 SQLITE_DESERIALIZE_READONLY);
    /* quick_check as on the file, where SQLite (seeing a read-only
     * database) parses no CHECK constraint: evaluating them on every row
     * would take several times as long */
    if (rc == SQLITE_OK) rc = sqlite3_exec(db, "PRAGMA ignore_check_constraints = ON", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        set_err(s, "%s: %s", path, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        ret = map_sqlite(rc);
    } else {
        ret = judge(s, db, path, app);
    }
    sqlite3_close(db);
    if (img == d->b) memcpy(img + 18, mode, 2);
    else free(img);
    return ret;
}

/*
 * Decides, creating and writing nothing, whether `path` may be opened for
 * writing: it does not exist, is empty (0 bytes, or SQLite with no schema
 * and no ids), or is a healthy tiletune database no newer than this build
 * with a write-ahead log SQLite would recover whole. Refuses a symlink and
 * anything but a regular file (a FIFO without waiting for a writer).
 */
static int inspect(tt_store *s, const char *path) {
    int ret = 0;
    struct stat sb;
    if (lstat(path, &sb) < 0) {
        if (errno == ENOENT) return 0;
        set_err(s, "%s: %s", path, strerror(errno));
        return TT_ERR_IO;
    }
    if (S_ISLNK(sb.st_mode)) {
        set_err(s, "%s is a symbolic link: give the database's own path", path);
        return TT_ERR_INVAL;
    }
    if (!S_ISREG(sb.st_mode)) {
        set_err(s, "%s: not a regular file", path);
        return TT_ERR_INVAL;
    }
    /* O_NONBLOCK|O_NOFOLLOW: the file may have been swapped since lstat */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0) {
        set_err(s, "%s: %s", path, strerror(errno));
        return errno == ELOOP ? TT_ERR_INVAL : TT_ERR_IO;
    }
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        set_err(s, "%s: not a regular file", path);
        return TT_ERR_INVAL;
    }
    /* SQLite would treat a short junk file as corrupt only on first read;
     * looking at the header ourselves gives a plain answer. */
    unsigned char head[100] = {0};
    ssize_t n = sb.st_size > 0 ? read(fd, head, sizeof head) : 0;
    close(fd);
    if (sb.st_size == 0) return 0;
    uint32_t page_size;
    int64_t file_app, file_ver;
    if ((ret = read_header(s, path, head, n > 0 ? (size_t)n : 0, &page_size, &file_app, &file_ver)) < 0)
        return ret;
    char wal[4200];
    snprintf(wal, sizeof wal, "%s-wal", path);
    if (head[19] != 2 && lstat(wal, &sb) < 0 && errno == ENOENT) {
        /* Rollback mode and no WAL: SQLite's read-only open creates no
         * file, and its locks keep a writer's half-done transaction out. */
        if ((ret = judge_header(s, path, file_app, file_ver)) < 0) return ret;
        sqlite3 *db = NULL;
        int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOFOLLOW, NULL);
        if (rc != SQLITE_OK) {
            set_err(s, "%s: %s", path, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
            ret = map_sqlite(rc);
        } else {
            /* Another process may be creating or migrating the file. */
            sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);
            ret = judge(s, db, path, file_app);
        }
        sqlite3_close(db);
        return ret;
    }
    /* A copy takes no lock: a writer may change the files while they are
     * read, and a torn copy can look damaged. A refusal stands only when
     * both files are still byte for byte what was judged. */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        file_copy d, w = {0};
        if ((ret = read_whole(s, path, &d)) < 0) return ret;
        if ((ret = read_whole(s, wal, &w)) < 0) {
            copy_free(&d);
            return ret;
        }
        ret = judge_copy(s, path, wal, &d, &w);
        int stands = ret >= 0 || ret == TT_ERR_NOMEM || (unchanged(path, &d) && unchanged(wal, &w));
        copy_free(&d);
        copy_free(&w);
        if (stands) return ret;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >= BUSY_TIMEOUT_MS) {
            set_err(s, "%s kept changing while it was checked (another process is writing it); try again",
                    path);
            return TT_ERR_DB;
        }
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
}

static int exec_sql(tt_store *s, const char *sql, const char *what) {
    char *msg = NULL;
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        set_err(s, "%s: %s", what, msg ? msg : sqlite3_errstr(rc));
        sqlite3_free(msg);
        return map_sqlite(sqlite3_extended_errcode(s->db));
    }
    return 0;
}

/* Brings the file to TT_STORE_SCHEMA_VERSION, one transaction per step.
 * Each step re-reads the version under the write lock: another process
 * may have migrated the file meanwhile. */
static int migrate(tt_store *s) {
    /* Up to date (the common case): no write lock, so opening never waits
     * for another connection's write transaction. */
    int64_t cur = 0;
    if (query_int(s->db, "PRAGMA user_version", &cur) == SQLITE_OK && cur == TT_STORE_SCHEMA_VERSION)
        return 0;
    for (int target = 1; target <= TT_STORE_SCHEMA_VERSION; target++) {
        int ret = exec_sql(s, "BEGIN IMMEDIATE", "migrate: begin");
        if (ret < 0) return ret;
        int64_t ver = 0;
        int rc = query_int(s->db, "PRAGMA user_version", &ver);
        if (rc != SQLITE_OK) {
            ret = db_fail(s, rc, "migrate: user_version");
            goto fail;
        }
        if (ver > TT_STORE_SCHEMA_VERSION) {
            set_err(s, "schema version %lld is newer than this tiletune knows (%d)", (long long)ver,
                    TT_STORE_SCHEMA_VERSION);
            ret = TT_ERR_VERSION;
            goto fail;
        }
        if (ver >= target) {
            exec_sql(s, "COMMIT", "migrate: commit");
            continue;
        }
        const char *sql = migrations[target - 1] ? migrations[target - 1] : tt_schema_sql;
        char what[64];
        snprintf(what, sizeof what, "migration to version %d", target);
        ret = exec_sql(s, sql, what);
        if (ret < 0) goto fail;
        /* A step that rebuilds a table must leave every reference whole. */
        int64_t dangling = 0;
        rc = query_int(s->db, "SELECT count(*) FROM pragma_foreign_key_check", &dangling);
        if (rc != SQLITE_OK || dangling) {
            set_err(s, "%s: %lld dangling foreign keys", what, (long long)dangling);
            ret = TT_ERR_CORRUPT;
            goto fail;
        }
        char pragma[96];
        snprintf(pragma, sizeof pragma, "PRAGMA application_id = %d; PRAGMA user_version = %d",
                 TT_STORE_APPLICATION_ID, target);
        ret = exec_sql(s, pragma, what);
        if (ret < 0) goto fail;
        ret = exec_sql(s, "COMMIT", what);
        if (ret < 0) goto fail;
        continue;
    fail:
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        return ret;
    }
    return 0;
}

/*
 * WAL is persistent in the file, so this changes something only on a new
 * file. The change needs the file to itself and SQLite does not run the
 * busy handler for it: when several processes create the file at once,
 * the losers retry until the winner's change is visible.
 */
static int set_wal(tt_store *s) {
    for (int waited = 0;; waited += 10) {
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(s->db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
        const unsigned char *mode = NULL;
        if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) mode = sqlite3_column_text(st, 0);
        int wal = mode && strcmp((const char *)mode, "wal") == 0;
        sqlite3_finalize(st);
        if (wal) return 0;
        if ((rc & 0xff) != SQLITE_BUSY && rc != SQLITE_ROW) return db_fail(s, rc, "journal_mode");
        if (waited >= BUSY_TIMEOUT_MS) {
            set_err(s, "journal_mode: could not switch to WAL: database is locked");
            return TT_ERR_DB;
        }
        usleep(10 * 1000);
    }
}

int tt_store_open(const char *path, tt_store **out, char *err, size_t errlen) {
    if (err && errlen) err[0] = '\0';
    if (!path || !*path || !out) {
        if (err && errlen) snprintf(err, errlen, "no database path");
        return TT_ERR_INVAL;
    }
    tt_store *s = calloc(1, sizeof *s);
    if (!s) {
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return TT_ERR_NOMEM;
    }
    int ret = inspect(s, path);
    if (ret < 0) goto fail;

    int rc = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW,
                             NULL);
    if (rc != SQLITE_OK) {
        ret = db_fail(s, rc, path);
        goto fail;
    }
    sqlite3_extended_result_codes(s->db, 1);
    sqlite3_busy_timeout(s->db, BUSY_TIMEOUT_MS);
    /* WAL: lookups and exports read while a tune writes. NORMAL: in WAL a
     * power cut may lose the last commits but never corrupts the file;
     * a lost measurement is re-taken, so fsync per commit buys nothing. */
    ret = exec_sql(s, "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL", "pragmas");
    if (ret < 0) goto fail;
    ret = set_wal(s);
    if (ret < 0) goto fail;
    ret = migrate(s);
    if (ret < 0) goto fail;
    ret = prepare_all(s);
    if (ret < 0) goto fail;
    *out = s;
    return 0;
fail:
    if (err && errlen) snprintf(err, errlen, "%s", s->err);
    tt_store_close(s);
    return ret;
}

int tt_store_open_reader(const char *path, tt_store **out, char *err, size_t errlen) {
    int ret = 0;
    if (err && errlen) err[0] = '\0';
    tt_store *s = calloc(1, sizeof *s);
    if (!s) return TT_ERR_NOMEM;
    int rc = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOFOLLOW, NULL);
    if (rc != SQLITE_OK)
        OPEN_FAIL(map_sqlite(rc), "%s: %s", path, s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
    sqlite3_extended_result_codes(s->db, 1);
    sqlite3_busy_timeout(s->db, BUSY_TIMEOUT_MS);
    int64_t app = 0, ver = 0;
    rc = query_int(s->db, "PRAGMA application_id", &app);
    if (rc == SQLITE_OK) rc = query_int(s->db, "PRAGMA user_version", &ver);
    if (rc != SQLITE_OK) OPEN_FAIL(map_sqlite(rc), "%s: %s", path, sqlite3_errmsg(s->db));
    if (app != TT_STORE_APPLICATION_ID || ver != TT_STORE_SCHEMA_VERSION)
        OPEN_FAIL(TT_ERR_VERSION, "%s: not the database this daemon opened (version %lld)", path,
                  (long long)ver);
    if ((ret = prepare_all(s)) < 0) goto out;
    /* a read transaction, not IMMEDIATE: a reader takes no write lock */
    sqlite3_finalize(s->st[ST_BEGIN]);
    s->st[ST_BEGIN] = NULL;
    rc = sqlite3_prepare_v2(s->db, "BEGIN", -1, &s->st[ST_BEGIN], NULL);
    if (rc != SQLITE_OK) OPEN_FAIL(map_sqlite(rc), "%s: %s", path, sqlite3_errmsg(s->db));
    *out = s;
    return 0;
out:
    if (err && errlen) snprintf(err, errlen, "%s", s->err);
    tt_store_close(s);
    return ret;
}

void tt_store_close(tt_store *s) {
    if (!s) return;
    for (int i = 0; i < ST_COUNT_; i++) sqlite3_finalize(s->st[i]);
    sqlite3_close(s->db);
    free(s);
}

/* ---- GPUs and revisions --------------------------------------------- */

static int check_name(tt_store *s, const char *v, const char *what) {
    if (!v || memchr(v, '\0', TT_NAME_MAX) == NULL) return inval(s, "%s missing or too long", what);
    return 0;
}

int tt_store_put_gpu(tt_store *s, const tt_gpu_info *g) {
    if (!s || !g) return TT_ERR_INVAL;
    if (memchr(g->fingerprint, '\0', TT_ID_MAX) == NULL || !tt__is_hex_id(g->fingerprint))
        return inval(s, "gpu fingerprint must be 1..32 lowercase hex digits");
    int ret;
    if ((ret = check_name(s, g->name, "gpu name")) < 0 || (ret = check_name(s, g->driver, "driver")) < 0 ||
        (ret = check_name(s, g->cuda, "cuda")) < 0 || (ret = check_name(s, g->nvrtc, "nvrtc")) < 0)
        return ret;
    if (g->cc_major < 0 || g->cc_minor < 0 || g->sm_count < 0 || g->mem_bytes < 0)
        return inval(s, "negative GPU property");
    sqlite3_stmt *st = stmt(s, ST_PUT_GPU);
    int rc = bind_text(st, 1, g->fingerprint);
    if (!rc) rc = bind_text(st, 2, g->name);
    if (!rc) rc = sqlite3_bind_int(st, 3, g->cc_major);
    if (!rc) rc = sqlite3_bind_int(st, 4, g->cc_minor);
    if (!rc) rc = sqlite3_bind_int(st, 5, g->sm_count);
    if (!rc) rc = sqlite3_bind_int64(st, 6, g->mem_bytes);
    if (!rc) rc = bind_text(st, 7, g->driver);
    if (!rc) rc = bind_text(st, 8, g->cuda);
    if (!rc) rc = bind_text(st, 9, g->nvrtc);
    if (!rc) rc = sqlite3_bind_int64(st, 10, now_s());
    if (rc) return db_fail(s, rc, "put gpu");
    return exec_stmt(s, st, "put gpu");
}

int tt_store_get_gpu(tt_store *s, const char *fingerprint, tt_gpu_info *out) {
    if (!s || !fingerprint || !out) return TT_ERR_INVAL;
    sqlite3_stmt *st = stmt(s, ST_GET_GPU);
    int rc = bind_text(st, 1, fingerprint);
    if (rc) return db_fail(s, rc, "get gpu");
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        sqlite3_reset(st);
        set_err(s, "no GPU with fingerprint %s", fingerprint);
        return TT_ERR_NOTFOUND;
    }
    if (rc != SQLITE_ROW) {
        int ret = db_fail(s, rc, "get gpu");
        sqlite3_reset(st);
        return ret;
    }
    tt_gpu_info g;
    memset(&g, 0, sizeof g);
    col_text(st, 0, g.fingerprint, sizeof g.fingerprint);
    col_text(st, 1, g.name, sizeof g.name);
    g.cc_major = sqlite3_column_int(st, 2);
    g.cc_minor = sqlite3_column_int(st, 3);
    g.sm_count = sqlite3_column_int(st, 4);
    g.mem_bytes = sqlite3_column_int64(st, 5);
    col_text(st, 6, g.driver, sizeof g.driver);
    col_text(st, 7, g.cuda, sizeof g.cuda);
    col_text(st, 8, g.nvrtc, sizeof g.nvrtc);
    sqlite3_reset(st);
    *out = g;
    return 0;
}

int tt_store_put_rev(tt_store *s, const char *rev, const char *description) {
    if (!s || !rev) return TT_ERR_INVAL;
    if (!tt__is_hex_id(rev)) return inval(s, "kernel revision must be 1..32 lowercase hex digits");
    sqlite3_stmt *st = stmt(s, ST_PUT_REV);
    int rc = bind_text(st, 1, rev);
    if (!rc) rc = bind_text(st, 2, description ? description : "");
    if (!rc) rc = sqlite3_bind_int64(st, 3, now_s());
    if (rc) return db_fail(s, rc, "put rev");
    return exec_stmt(s, st, "put rev");
}

/* ---- measurements and winners ----------------------------------------- */

/* A key the measurement tables accept: valid, with its GPU and revision. */
static int check_full_key(tt_store *s, const tt_key_v2 *k) {
    if (!k) return inval(s, "no key");
    int ret = tt__key_check(k, s->err, sizeof s->err);
    if (ret < 0) return ret;
    if (!k->gpu[0] || !k->rev[0]) return inval(s, "key must name its gpu fingerprint and kernel revision");
    return 0;
}

static int check_record(tt_store *s, const tt_record *r) {
    int ret = check_full_key(s, &r->key);
    if (ret < 0) return ret;
    ret = tt__config_check_ranges(&r->config, s->err, sizeof s->err);
    if (ret < 0) return ret;
    if (!tt_meas_status_name(r->status)) return inval(s, "invalid measurement status %d", (int)r->status);
    if (r->batch < 0 || r->heads < 0) return inval(s, "batch and heads must be >= 0");
    if (r->status == TT_MEAS_OK && (!(r->time_ms > 0) || r->batch < 1 || r->heads < 1))
        return inval(s, "an ok measurement needs time_ms > 0, batch >= 1 and heads >= 1");
    if (r->reps < 0) return inval(s, "reps must be >= 0");
    if (r->busy < -1 || r->busy > 1) return inval(s, "busy must be -1, 0 or 1");
    if ((ret = check_name(s, r->driver, "driver")) < 0 || (ret = check_name(s, r->cuda, "cuda")) < 0 ||
        (ret = check_name(s, r->nvrtc, "nvrtc")) < 0)
        return ret;
    return check_name(s, r->node, "node");
}

/* The winner's time for a key: 0 and *found = 0 if there is none. */
static int best_time(tt_store *s, const tt_key_v2 *k, double *t, int *found) {
    sqlite3_stmt *st = stmt(s, ST_BEST_TIME);
    int rc = bind_key(st, 1, k);
    if (rc) return db_fail(s, rc, "best time");
    rc = sqlite3_step(st);
    *found = rc == SQLITE_ROW;
    if (*found) *t = sqlite3_column_double(st, 0);
    sqlite3_reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return db_fail(s, rc, "best time");
    return 0;
}

static int write_best(tt_store *s, const tt_record *r, int64_t measurement_id) {
    sqlite3_stmt *st = stmt(s, ST_PUT_BEST);
    int rc = bind_record(st, r);
    if (!rc)
        rc = measurement_id > 0 ? sqlite3_bind_int64(st, NREC_COLS + 1, measurement_id)
                                : sqlite3_bind_null(st, NREC_COLS + 1);
    if (rc) return db_fail(s, rc, "put best");
    return exec_stmt(s, st, "put best");
}

int tt_store_add_measurement(tt_store *s, const tt_record *in, int *became_best) {
    if (!s || !in) return TT_ERR_INVAL;
    int ret = check_record(s, in);
    if (ret < 0) return ret;
    /* A run reported without its software ran on what its model was last
     * seen with: the worker's HELLO registered that just before. */
    tt_record r = *in;
    const tt_record *rec = &r;
    tt_gpu_info g;
    if (!r.driver[0] && !r.cuda[0] && !r.nvrtc[0] && tt_store_get_gpu(s, r.key.gpu, &g) == 0) {
        memcpy(r.driver, g.driver, sizeof r.driver);
        memcpy(r.cuda, g.cuda, sizeof r.cuda);
        memcpy(r.nvrtc, g.nvrtc, sizeof r.nvrtc);
    }
    if ((ret = begin(s)) < 0) return ret;
    sqlite3_stmt *st = stmt(s, ST_INS_MEAS);
    int rc = bind_record(st, rec);
    if (!rc) rc = bind_text(st, NREC_COLS + 1, tt_meas_status_name(rec->status));
    if (rc) {
        ret = db_fail(s, rc, "add measurement");
        goto fail;
    }
    if ((ret = exec_stmt(s, st, "add measurement")) < 0) goto fail;
    int64_t id = sqlite3_last_insert_rowid(s->db);
    int won = 0;
    /* A run on a busy GPU is kept as history but never trusted as a winner. */
    if (rec->status == TT_MEAS_OK && rec->busy != 1) {
        double t = 0;
        int found = 0;
        if ((ret = best_time(s, &rec->key, &t, &found)) < 0) goto fail;
        /* Strictly faster: on a tie the earlier winner stays. */
        if (!found || rec->time_ms < t) {
            if ((ret = write_best(s, rec, id)) < 0) goto fail;
            won = 1;
        }
    }
    if ((ret = commit(s)) < 0) goto fail;
    if (became_best) *became_best = won;
    return 0;
fail:
    rollback(s);
    return ret;
}

int tt_store_put_best(tt_store *s, const tt_record *rec) {
    if (!s || !rec) return TT_ERR_INVAL;
    int ret = check_record(s, rec);
    if (ret < 0) return ret;
    if (rec->status != TT_MEAS_OK || rec->busy == 1)
        return inval(s, "a winner must be an ok measurement on an idle GPU");
    /* rec->id may come from another database: never a local reference. */
    return write_best(s, rec, 0);
}

int tt_store_get_best(tt_store *s, const tt_key_v2 *key, tt_record *out) {
    if (!s || !out) return TT_ERR_INVAL;
    int ret = check_full_key(s, key);
    if (ret < 0) return ret;
    sqlite3_stmt *st = stmt(s, ST_GET_BEST);
    int rc = bind_key(st, 1, key);
    if (rc) return db_fail(s, rc, "get best");
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        sqlite3_reset(st);
        set_err(s, "no tuned record for this key");
        return TT_ERR_NOTFOUND;
    }
    if (rc != SQLITE_ROW) {
        ret = db_fail(s, rc, "get best");
        sqlite3_reset(st);
        return ret;
    }
    tt_record r;
    ret = read_record(st, &r);
    sqlite3_reset(st);
    if (ret < 0) {
        set_err(s, "best: a row holds a value this build cannot read");
        return TT_ERR_CORRUPT;
    }
    *out = r;
    return 0;
}

int tt_store_forget(tt_store *s, const tt_key_v2 *key, int *forgot) {
    if (!s) return TT_ERR_INVAL;
    int ret = check_full_key(s, key);
    if (ret < 0) return ret;
    sqlite3_stmt *st = stmt(s, ST_DEL_BEST);
    int rc = bind_key(st, 1, key);
    if (rc) return db_fail(s, rc, "forget");
    if ((ret = exec_stmt(s, st, "forget")) < 0) return ret;
    if (forgot) *forgot = sqlite3_changes(s->db) > 0;
    return 0;
}

/* Runs a record-returning statement, calling cb per row. */
static int each_record(tt_store *s, sqlite3_stmt *st, tt_store_record_cb cb, void *ud, const char *what) {
    int ret = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        tt_record r;
        if (read_record(st, &r) < 0) {
            set_err(s, "%s: a row holds a value this build cannot read", what);
            ret = TT_ERR_CORRUPT;
            break;
        }
        if ((ret = cb(ud, &r)) != 0) break;
    }
    if (ret == 0 && rc != SQLITE_DONE) ret = db_fail(s, rc, what);
    sqlite3_reset(st);
    return ret;
}

int tt_store_each_best(tt_store *s, tt_store_record_cb cb, void *ud) {
    if (!s || !cb) return TT_ERR_INVAL;
    return each_record(s, stmt(s, ST_EACH_BEST), cb, ud, "each best");
}

int tt_store_each_measurement(tt_store *s, const char *gpu, tt_store_record_cb cb, void *ud) {
    if (!s || !cb) return TT_ERR_INVAL;
    sqlite3_stmt *st = stmt(s, ST_EACH_MEAS);
    int rc = bind_text(st, 1, gpu ? gpu : "");
    if (rc) return db_fail(s, rc, "each measurement");
    return each_record(s, st, cb, ud, "each measurement");
}

int tt_store_failed_configs(tt_store *s, const tt_key_v2 *key, tt_store_config_cb cb, void *ud) {
    if (!s || !cb) return TT_ERR_INVAL;
    int ret = check_full_key(s, key);
    if (ret < 0) return ret;
    sqlite3_stmt *st = stmt(s, ST_FAILED);
    int rc = bind_key(st, 1, key);
    if (rc) return db_fail(s, rc, "failed configs");
    int nk = tt__knob_count();
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        tt_config cfg;
        memset(&cfg, 0, sizeof cfg);
        for (int k = 0; k < nk; k++) tt__knob_set(tt__knob_at(k), &cfg, sqlite3_column_int(st, k));
        int sv = tt_meas_status_parse_index(sqlite3_column_text(st, nk));
        if ((ret = cb(ud, &cfg, sv < 0 ? TT_MEAS_FAULT : (tt_meas_status)sv)) != 0) break;
    }
    if (ret == 0 && rc != SQLITE_DONE) ret = db_fail(s, rc, "failed configs");
    sqlite3_reset(st);
    return ret;
}

static int count(tt_store *s, int which, int64_t *out, const char *what) {
    if (!s || !out) return TT_ERR_INVAL;
    sqlite3_stmt *st = stmt(s, which);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        int ret = db_fail(s, rc, what);
        sqlite3_reset(st);
        return ret;
    }
    *out = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return 0;
}

int tt_store_count_best(tt_store *s, int64_t *out) { return count(s, ST_COUNT_BEST, out, "count best"); }
int tt_store_count_measurements(tt_store *s, int64_t *out) {
    return count(s, ST_COUNT_MEAS, out, "count measurements");
}

int tt_store_stale_keys(tt_store *s, const char *rev, const char *gpu, tt_store_key_cb cb, void *ud) {
    if (!s || !rev || !cb) return TT_ERR_INVAL;
    if (!tt__is_hex_id(rev)) return inval(s, "kernel revision must be 1..32 lowercase hex digits");
    sqlite3_stmt *st = stmt(s, ST_STALE);
    int rc = bind_text(st, 1, rev);
    if (!rc) rc = bind_text(st, 2, gpu ? gpu : "");
    if (rc) return db_fail(s, rc, "stale keys");
    int ret = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        tt_key_v2 k;
        if (read_key(st, 0, &k) < 0) {
            set_err(s, "stale keys: unreadable row");
            ret = TT_ERR_CORRUPT;
            break;
        }
        if ((ret = cb(ud, &k)) != 0) break;
    }
    if (ret == 0 && rc != SQLITE_DONE) ret = db_fail(s, rc, "stale keys");
    sqlite3_reset(st);
    return ret;
}

int tt_store_count_best_by(tt_store *s, tt_store_group_cb cb, void *ud) {
    if (!s || !cb) return TT_ERR_INVAL;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(
        s->db, "SELECT gpu, rev, count(*) FROM best GROUP BY gpu, rev ORDER BY gpu, rev", -1, &st, NULL);
    if (rc != SQLITE_OK) return db_fail(s, rc, "records by GPU and revision");
    int ret = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *gpu = (const char *)sqlite3_column_text(st, 0),
                   *rev = (const char *)sqlite3_column_text(st, 1);
        if ((ret = cb(ud, gpu ? gpu : "", rev ? rev : "", sqlite3_column_int64(st, 2))) != 0) break;
    }
    if (ret == 0 && rc != SQLITE_DONE) ret = db_fail(s, rc, "records by GPU and revision");
    sqlite3_finalize(st);
    return ret;
}

int tt_store_snapshot(tt_store *s, const char *dest) {
    if (!s || !dest || !*dest) return TT_ERR_INVAL;
    if (s->depth) return inval(s, "snapshot inside a transaction");
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", dest) >= (int)sizeof tmp) return inval(s, "path too long");
    /* VACUUM INTO wants a file that is empty or absent: mkstemp's is both
     * unique and empty. */
    int fd = mkstemp(tmp);
    if (fd < 0) {
        set_err(s, "%s: %s", tmp, strerror(errno));
        return TT_ERR_IO;
    }
    close(fd);
    int ret = 0;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, "VACUUM INTO ?", -1, &st, NULL);
    if (rc == SQLITE_OK) rc = bind_text(st, 1, tmp);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) ret = db_fail(s, sqlite3_extended_errcode(s->db), "snapshot");
    sqlite3_finalize(st);
    /* VACUUM INTO does not sync its output; rename only what is on disk. */
    if (ret == 0) {
        fd = open(tmp, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || fsync(fd) < 0 || rename(tmp, dest) < 0) {
            set_err(s, "snapshot %s: %s", dest, strerror(errno));
            ret = TT_ERR_IO;
        }
        if (fd >= 0) close(fd);
    }
    if (ret < 0) unlink(tmp);
    return ret;
}

/* ---- the job queue ------------------------------------------------------ */

int tt_store_job_create(tt_store *s, const tt_key_v2 *keys, int nkeys, tt_job_mode mode, int32_t batch,
                        int32_t heads, int64_t *job_id) {
    if (!s || !keys || !job_id) return TT_ERR_INVAL;
    if (nkeys < 1) return inval(s, "a job needs at least one key");
    if (!tt_job_mode_name(mode)) return inval(s, "invalid job mode %d", (int)mode);
    if (batch < 0 || heads < 0) return inval(s, "batch and heads must be >= 0");
    int ret;
    for (int i = 0; i < nkeys; i++)
        if ((ret = tt__key_check(&keys[i], s->err, sizeof s->err)) < 0) return ret;
    if ((ret = begin(s)) < 0) return ret;
    int64_t now = now_s();
    sqlite3_stmt *st = stmt(s, ST_JOB_INS);
    int rc = bind_text(st, 1, tt_job_mode_name(mode));
    if (!rc) rc = sqlite3_bind_int(st, 2, batch);
    if (!rc) rc = sqlite3_bind_int(st, 3, heads);
    if (!rc) rc = sqlite3_bind_int64(st, 4, now);
    if (rc) {
        ret = db_fail(s, rc, "create job");
        goto fail;
    }
    if ((ret = exec_stmt(s, st, "create job")) < 0) goto fail;
    int64_t id = sqlite3_last_insert_rowid(s->db);
    /* seq counts inserted keys only, so a job's seqs are 0..keys-1. */
    int seq = 0;
    for (int i = 0; i < nkeys; i++) {
        st = stmt(s, ST_JKEY_INS);
        rc = sqlite3_bind_int64(st, 1, id);
        if (!rc) rc = sqlite3_bind_int(st, 2, seq);
        if (!rc) rc = bind_key(st, 3, &keys[i]);
        if (rc) {
            ret = db_fail(s, rc, "create job key");
            goto fail;
        }
        if ((ret = exec_stmt(s, st, "create job key")) < 0) goto fail;
        seq += sqlite3_changes(s->db);
    }
    if ((ret = commit(s)) < 0) goto fail;
    *job_id = id;
    return 0;
fail:
    rollback(s);
    return ret;
}

static int read_job(sqlite3_stmt *st, tt_job_info *j) {
    memset(j, 0, sizeof *j);
    j->id = sqlite3_column_int64(st, 0);
    int state = tt_job_state_parse_index(sqlite3_column_text(st, 1));
    int mode = tt_job_mode_parse_index(sqlite3_column_text(st, 2));
    if (state < 0 || mode < 0) return -1;
    j->state = (tt_job_state)state;
    j->mode = (tt_job_mode)mode;
    j->batch = sqlite3_column_int(st, 3);
    j->heads = sqlite3_column_int(st, 4);
    j->created_at = sqlite3_column_int64(st, 5);
    j->updated_at = sqlite3_column_int64(st, 6);
    j->keys = sqlite3_column_int64(st, 7);
    j->pending = sqlite3_column_int64(st, 8);
    j->running = sqlite3_column_int64(st, 9);
    j->done = sqlite3_column_int64(st, 10);
    j->failed = sqlite3_column_int64(st, 11);
    j->cancelled = sqlite3_column_int64(st, 12);
    return 0;
}

int tt_store_job_get(tt_store *s, int64_t job_id, tt_job_info *out) {
    if (!s || !out) return TT_ERR_INVAL;
    sqlite3_stmt *st = stmt(s, ST_JOB_GET);
    int rc = sqlite3_bind_int64(st, 1, job_id);
    if (rc) return db_fail(s, rc, "get job");
    rc = sqlite3_step(st);
    int ret = 0;
    tt_job_info j;
    if (rc == SQLITE_DONE) {
        set_err(s, "no job %lld", (long long)job_id);
        ret = TT_ERR_NOTFOUND;
    } else if (rc != SQLITE_ROW) {
        ret = db_fail(s, rc, "get job");
    } else if (read_job(st, &j) < 0) {
        set_err(s, "job %lld: unreadable state", (long long)job_id);
        ret = TT_ERR_CORRUPT;
    }
    sqlite3_reset(st);
    if (ret == 0) *out = j;
    return ret;
}

int tt_store_job_list(tt_store *s, int include_finished, tt_store_job_cb cb, void *ud) {
    if (!s || !cb) return TT_ERR_INVAL;
    sqlite3_stmt *st = stmt(s, ST_JOB_LIST);
    int rc = sqlite3_bind_int(st, 1, include_finished ? 1 : 0);
    if (rc) return db_fail(s, rc, "list jobs");
    int ret = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        tt_job_info j;
        if (read_job(st, &j) < 0) {
            set_err(s, "list jobs: unreadable state");
            ret = TT_ERR_CORRUPT;
            break;
        }
        if ((ret = cb(ud, &j)) != 0) break;
    }
    if (ret == 0 && rc != SQLITE_DONE) ret = db_fail(s, rc, "list jobs");
    sqlite3_reset(st);
    return ret;
}

int tt_store_job_keys(tt_store *s, int64_t job_id, tt_store_jkey_cb cb, void *ud) {
    if (!s || !cb) return TT_ERR_INVAL;
    sqlite3_stmt *st = stmt(s, ST_JOB_KEYS);
    int rc = sqlite3_bind_int64(st, 1, job_id);
    if (rc) return db_fail(s, rc, "job keys");
    int ret = 0, n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        tt_key_v2 k;
        int state = tt_jkey_state_parse_index(sqlite3_column_text(st, 1 + NKEY_COLS));
        if (read_key(st, 1, &k) < 0 || state < 0) {
            set_err(s, "job keys: unreadable row");
            ret = TT_ERR_CORRUPT;
            break;
        }
        n++;
        if ((ret = cb(ud, sqlite3_column_int(st, 0), &k, (tt_jkey_state)state)) != 0) break;
    }
    if (ret == 0 && rc != SQLITE_DONE) ret = db_fail(s, rc, "job keys");
    sqlite3_reset(st);
    if (ret == 0 && n == 0) {
        /* A job always has keys: none means no such job. */
        set_err(s, "no job %lld", (long long)job_id);
        ret = TT_ERR_NOTFOUND;
    }
    return ret;
}

int tt_store_job_cancel(tt_store *s, int64_t job_id) {
    if (!s) return TT_ERR_INVAL;
    int ret = begin(s);
    if (ret < 0) return ret;
    int64_t now = now_s();
    sqlite3_stmt *st = stmt(s, ST_JOB_CANCEL);
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, now);
    if ((ret = exec_stmt(s, st, "cancel job")) < 0) goto fail;
    if (sqlite3_changes(s->db) == 0) {
        set_err(s, "no queued or running job %lld", (long long)job_id);
        ret = TT_ERR_NOTFOUND;
        goto fail;
    }
    st = stmt(s, ST_JKEY_CANCEL);
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, now);
    if ((ret = exec_stmt(s, st, "cancel job keys")) < 0) goto fail;
    if ((ret = commit(s)) < 0) goto fail;
    return 0;
fail:
    rollback(s);
    return ret;
}

int tt_store_job_next_key(tt_store *s, const char *gpu, tt_job_claim *out) {
    if (!s || !out) return TT_ERR_INVAL;
    int ret = begin(s);
    if (ret < 0) return ret;
    sqlite3_stmt *st = stmt(s, ST_JOB_NEXT);
    int rc = bind_text(st, 1, gpu ? gpu : "");
    if (rc) {
        ret = db_fail(s, rc, "next key");
        goto fail;
    }
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        sqlite3_reset(st);
        set_err(s, "no pending key");
        ret = TT_ERR_NOTFOUND;
        goto fail;
    }
    if (rc != SQLITE_ROW) {
        ret = db_fail(s, rc, "next key");
        sqlite3_reset(st);
        goto fail;
    }
    tt_job_claim c;
    memset(&c, 0, sizeof c);
    c.job_id = sqlite3_column_int64(st, 0);
    c.seq = sqlite3_column_int(st, 1);
    int mode = tt_job_mode_parse_index(sqlite3_column_text(st, 2 + NKEY_COLS));
    int bad = read_key(st, 2, &c.key) < 0 || mode < 0;
    c.mode = (tt_job_mode)mode;
    c.batch = sqlite3_column_int(st, 3 + NKEY_COLS);
    c.heads = sqlite3_column_int(st, 4 + NKEY_COLS);
    sqlite3_reset(st);
    if (bad) {
        set_err(s, "job %lld: unreadable key", (long long)c.job_id);
        ret = TT_ERR_CORRUPT;
        goto fail;
    }
    int64_t now = now_s();
    st = stmt(s, ST_JKEY_CLAIM);
    sqlite3_bind_int64(st, 1, c.job_id);
    sqlite3_bind_int(st, 2, c.seq);
    sqlite3_bind_int64(st, 3, now);
    if ((ret = exec_stmt(s, st, "claim key")) < 0) goto fail;
    st = stmt(s, ST_JOB_RUN);
    sqlite3_bind_int64(st, 1, c.job_id);
    sqlite3_bind_int64(st, 2, now);
    if ((ret = exec_stmt(s, st, "claim key")) < 0) goto fail;
    if ((ret = commit(s)) < 0) goto fail;
    *out = c;
    return 0;
fail:
    rollback(s);
    return ret;
}

int tt_store_job_key_finish(tt_store *s, int64_t job_id, int32_t seq, tt_jkey_state state) {
    if (!s) return TT_ERR_INVAL;
    if (state != TT_JKEY_DONE && state != TT_JKEY_FAILED) return inval(s, "a key finishes done or failed");
    int ret = begin(s);
    if (ret < 0) return ret;
    int64_t now = now_s();
    sqlite3_stmt *st = stmt(s, ST_JKEY_FINISH);
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int(st, 2, seq);
    bind_text(st, 3, tt_jkey_state_name(state));
    sqlite3_bind_int64(st, 4, now);
    if ((ret = exec_stmt(s, st, "finish key")) < 0) goto fail;
    if (sqlite3_changes(s->db) == 0) {
        set_err(s, "job %lld key %d is not running", (long long)job_id, (int)seq);
        ret = TT_ERR_NOTFOUND;
        goto fail;
    }
    st = stmt(s, ST_JOB_SETTLE);
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, now);
    if ((ret = exec_stmt(s, st, "settle job")) < 0) goto fail;
    if ((ret = commit(s)) < 0) goto fail;
    return 0;
fail:
    rollback(s);
    return ret;
}

/* Returns running keys to the queue: all of them (job_id 0) or one. A job
 * left with no claimed or finished key is queued again. */
static int requeue(tt_store *s, int64_t job_id, int32_t seq, int64_t *changed) {
    int ret = begin(s);
    if (ret < 0) return ret;
    int64_t now = now_s();
    sqlite3_stmt *st = stmt(s, ST_JKEY_RECOVER);
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int(st, 2, seq);
    sqlite3_bind_int64(st, 3, now);
    if ((ret = exec_stmt(s, st, "requeue keys")) < 0) goto fail;
    int64_t n = sqlite3_changes(s->db);
    st = stmt(s, ST_JOB_RECOVER);
    sqlite3_bind_int64(st, 1, now);
    if ((ret = exec_stmt(s, st, "requeue jobs")) < 0) goto fail;
    if ((ret = commit(s)) < 0) goto fail;
    *changed = n;
    return 0;
fail:
    rollback(s);
    return ret;
}

int tt_store_job_recover(tt_store *s, int64_t *requeued) {
    if (!s) return TT_ERR_INVAL;
    int64_t n;
    int ret = requeue(s, 0, 0, &n);
    if (ret == 0 && requeued) *requeued = n;
    return ret;
}

int tt_store_job_key_release(tt_store *s, int64_t job_id, int32_t seq) {
    if (!s) return TT_ERR_INVAL;
    if (job_id <= 0) return inval(s, "job ids start at 1");
    int64_t n;
    int ret = requeue(s, job_id, seq, &n);
    if (ret == 0 && n == 0) {
        set_err(s, "job %lld key %d is not running", (long long)job_id, (int)seq);
        ret = TT_ERR_NOTFOUND;
    }
    return ret;
}

int tt_store_job_counts(tt_store *s, tt_job_counts *out) {
    if (!s || !out) return TT_ERR_INVAL;
    tt_job_counts c;
    memset(&c, 0, sizeof c);
    sqlite3_stmt *st = stmt(s, ST_JOB_COUNTS);
    int rc, ret = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t n = sqlite3_column_int64(st, 1);
        switch (tt_job_state_parse_index(sqlite3_column_text(st, 0))) {
        case TT_JOB_QUEUED: c.queued = n; break;
        case TT_JOB_RUNNING: c.running = n; break;
        case TT_JOB_DONE: c.done = n; break;
        case TT_JOB_FAILED: c.failed = n; break;
        case TT_JOB_CANCELLED: c.cancelled = n; break;
        default: break;
        }
    }
    if (rc != SQLITE_DONE) ret = db_fail(s, rc, "job counts");
    sqlite3_reset(st);
    if (ret == 0) *out = c;
    return ret;
}

/* ---- job progress (the JOB verb) -------------------------------- */

int tt_store_job_progress(tt_store *s, int64_t job_id, const char *gpu, const char *rev,
                          tt_store_progress_cb cb, void *ud) {
    if (!s || !cb) return TT_ERR_INVAL;
    sqlite3_stmt *st = stmt(s, ST_JOB_PROGRESS);
    int rc = sqlite3_bind_int64(st, 1, job_id);
    if (!rc) rc = bind_text(st, 2, gpu ? gpu : "");
    if (!rc) rc = bind_text(st, 3, rev ? rev : "");
    if (rc) {
        sqlite3_reset(st);
        return db_fail(s, rc, "job progress");
    }
    int ret = 0, n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        tt_jkey_progress p;
        memset(&p, 0, sizeof p);
        int state = tt_jkey_state_parse_index(sqlite3_column_text(st, 1 + NKEY_COLS));
        if (read_key(st, 1, &p.key) < 0 || state < 0) {
            set_err(s, "job progress: unreadable row");
            ret = TT_ERR_CORRUPT;
            break;
        }
        p.seq = sqlite3_column_int(st, 0);
        p.state = (tt_jkey_state)state;
        p.claimed_at = sqlite3_column_int64(st, 2 + NKEY_COLS);
        p.finished_at = sqlite3_column_int64(st, 3 + NKEY_COLS);
        p.measured = sqlite3_column_int64(st, 4 + NKEY_COLS);
        n++;
        if ((ret = cb(ud, &p)) != 0) break;
    }
    if (ret == 0 && rc != SQLITE_DONE) ret = db_fail(s, rc, "job progress");
    sqlite3_reset(st);
    if (ret == 0 && n == 0) {
        set_err(s, "no job %lld", (long long)job_id);
        ret = TT_ERR_NOTFOUND;
    }
    return ret;
}
