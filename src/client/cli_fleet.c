/* tiletune export / import / diff: tuning tables for fleets (docs/fleet.md).
 * The table format and its checks are src/tuner/fleet/record.c; the
 * daemon merges (IMPORT) and reads the database (EXPORT). */
#include "client/cli_fleet.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tuner/fleet/plausible.h"
#include "tuner/fleet/policy.h"
#include "tuner/fleet/record.h"
#include "common/hash.h"
#include "common/key.h"

/* An import may take a while to merge: the daemon answers after the
 * whole transaction. */
#define IMPORT_EXTRA_MS 120000

/* ---- a growable byte buffer ------------------------------------------------ */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_line(sbuf *b, const char *s, int n) {
    if (n < 0) { /* a formatting error upstream: keep the buffer consistent */
        b->oom = 1;
        return;
    }
    sb_add(b, s, (size_t)n);
    sb_add(b, "\n", 1);
}

/* ---- output files ------------------------------------------------------------- */

/* -o/--output FILE ("-" or none: stdout). */
static int output_path(cli *c, const char **path) {
    const char *o = cli_opt_val(c, "output");
    *path = o && strcmp(o, "-") != 0 ? o : NULL;
    return 0;
}

static int emit(const char *path, const sbuf *b) {
    if (b->oom) return cli_fail("out of memory");
    if (path) return cli_write_atomic(path, b->p ? b->p : "", b->len);
    if (b->len && fwrite(b->p, 1, b->len, stdout) != b->len)
        return cli_fail("cannot write: %s", strerror(errno));
    return 0;
}

/* ---- tables in memory ------------------------------------------------------------ */

typedef struct table {
    tt_fleet_rec *r;
    int64_t *no; /* the record number of r[i] in its file (or export) */
    size_t n, cap;
} table;

static int table_add(table *t, const tt_fleet_rec *r, int64_t no) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        tt_fleet_rec *p = realloc(t->r, cap * sizeof *p);
        if (!p) return -1;
        t->r = p;
        int64_t *q = realloc(t->no, cap * sizeof *q);
        if (!q) return -1;
        t->no = q;
        t->cap = cap;
    }
    t->no[t->n] = no;
    t->r[t->n++] = *r;
    return 0;
}

/* The checksum STATUS shows as table=: the winners' keys and configs. */
static uint64_t table_sum(const table *t) {
    uint64_t sum = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->r[i].kind == TT_FLEET_BEST)
            sum = tt_fleet_table_sum_add(sum, &t->r[i].rec.key, &t->r[i].rec.config);
    return sum;
}

static void table_free(table *t) {
    free(t->r);
    free(t->no);
}

/* The daemon's table through EXPORT; every line is checked like a file's.
 * A bad one fails the whole, or with skip_bad is reported and left out
 * (counted in *skipped). */
static int fetch_live(cli *c, const char *fields, int best_only, int skip_bad, int64_t *skipped, table *t) {
    char line[512];
    snprintf(line, sizeof line, "EXPORT%s", fields);
    tt__reply r;
    if (cli_request(c, line, &r)) return CLI_FAIL;
    int rc = 0;
    int64_t now = (int64_t)time(NULL);
    for (int i = 0; !rc && i < r.nbody; i++) {
        tt_fleet_rec rec;
        char err[512];
        if (tt_fleet_rec_parse(r.body[i], strlen(r.body[i]), NULL, now, &rec, err, sizeof err) < 0) {
            if (!skip_bad)
                rc = cli_fail("the daemon exported a bad record %d: %s (--skip-bad leaves it out)", i + 1,
                              err);
            else
                fprintf(stderr, "tiletune: skipped the daemon's bad record %d: %s\n", i + 1, err), ++*skipped;
        } else if ((!best_only || rec.kind == TT_FLEET_BEST) && table_add(t, &rec, i + 1) < 0)
            rc = cli_fail("out of memory");
    }
    tt__reply_free(&r);
    return rc;
}

/* Reading a file: good records into the table, bad ones reported. */
typedef struct file_ctx {
    const char *path;
    table *t;
    int best_only;
    int64_t bad, history;
    int quiet;
} file_ctx;

/* Reasons printed for one file: a valid header over 65536 lines of junk
 * would print 65536 of them. The count of the rest follows. */
#define REASONS_SHOWN 20

static void reason(const char *path, int64_t shown_before, long long no, const char *why) {
    if (shown_before < REASONS_SHOWN) fprintf(stderr, "%s: record %lld: %s\n", path, no, why);
}

static void reasons_left(const char *path, int64_t total) {
    if (total > REASONS_SHOWN)
        fprintf(stderr, "%s: ... and %lld more bad records\n", path, (long long)(total - REASONS_SHOWN));
}

static int on_file_line(void *ud, int what, int64_t no, const tt_fleet_rec *rec, const char *why) {
    file_ctx *x = ud;
    if (what == TT_FLEET_LINE_BAD) {
        if (!x->quiet) reason(x->path, x->bad, (long long)no, why);
        x->bad++;
    } else if (what == TT_FLEET_LINE_RECORD) {
        if (rec->kind != TT_FLEET_BEST) x->history++;
        if ((!x->best_only || rec->kind == TT_FLEET_BEST) && table_add(x->t, rec, no) < 0)
            return TT_ERR_NOMEM;
    }
    return 0;
}

/* Reads a table file in bounded memory per line; a damaged file fails
 * whole (CLI_FAIL with the reason). */
static int read_file(const char *path, int best_only, table *t, file_ctx *x) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!f) return cli_fail("cannot open %s: %s", path, strerror(errno));
    tt_fleet_reader r;
    tt_fleet_reader_init(&r, tt_fleet_plausible_check, (int64_t)time(NULL));
    memset(x, 0, sizeof *x);
    x->path = path;
    x->t = t;
    x->best_only = best_only;
    char err[512];
    int rc = tt_fleet_read_stream(f, &r, on_file_line, x, err, sizeof err);
    if (f != stdin) fclose(f);
    if (!x->quiet) reasons_left(path, x->bad);
    if (rc == TT_ERR_NOMEM) return cli_fail("out of memory reading %s", path);
    if (rc < 0) return cli_fail("%s: %s; nothing imported or compared", path, err);
    return 0;
}

/* ---- export ---------------------------------------------------------------------- */

const cli_opt cli_export_opts[] = {
    {"format", "F", "jsonl (default; 'json' is the same JSON Lines), csv or sqlite", 0},
    {"gpu", "HEX", "only this GPU model's records", 0},
    {"rev", "HEX", "only this kernel revision's records", 0},
    {"all-measurements", NULL, "every measurement too, not only the winners (jsonl, csv)", 0},
    {"job", "N", "only the keys of tuning job N (as tuned: this node's GPU and kernel revision)", 0},
    {"shard", "I/N", "label the table as shard I of N; needs --job, the job 'tune --shard I/N' queued", 0},
    {"output", "FILE", "write to FILE, atomically (default or '-': stdout)", 0},
    {"skip-bad", NULL, "leave out records that do not pass the checks, each reported, instead of failing", 0},
    {NULL},
};

/* The keys of a tuning job (JOB job=N), with the daemon's GPU and
 * revision where the job named none; *failed counts its keys that did
 * not end done. */
typedef struct keyset {
    tt_key_v2 *k;
    size_t n;
} keyset;

static int job_keys(cli *c, int64_t id, keyset *ks, int64_t *failed) {
    tt__reply st, r;
    char line[64];
    if (cli_request(c, "STATUS", &st)) return CLI_FAIL;
    char gpu[TT_ID_MAX] = "", rev[TT_ID_MAX] = "";
    const char *g = tt__msg_get(&st.msg, "gpu"), *v = tt__msg_get(&st.msg, "rev");
    if (g && strcmp(g, "none") != 0) snprintf(gpu, sizeof gpu, "%s", g);
    if (v) snprintf(rev, sizeof rev, "%s", v);
    tt__reply_free(&st);
    snprintf(line, sizeof line, "JOB job=%lld", (long long)id);
    if (cli_request(c, line, &r)) return CLI_FAIL;
    int rc = 0;
    *failed = 0;
    ks->n = 0;
    ks->k = calloc((size_t)r.nbody + 1, sizeof *ks->k);
    if (!ks->k) rc = cli_fail("out of memory");
    for (int i = 0; !rc && i < r.nbody; i++) {
        char buf[TT_LINE_MAX + 8], err[256];
        int n = snprintf(buf, sizeof buf, "KEY %s", r.body[i]);
        tt__msg m;
        const char *perr = NULL;
        tt_key_v2 k;
        if (n < 0 || (size_t)n >= sizeof buf || tt__proto_parse(buf, (size_t)n, &m, &perr) < 0 ||
            tt__key_from_msg(&m, &k, err, sizeof err) < 0) {
            rc = cli_fail("the daemon's JOB reply line %d is not a key", i + 1);
            break;
        }
        const char *state = tt__msg_get(&m, "state");
        if (!state || strcmp(state, "done") != 0) (*failed)++;
        if (!k.gpu[0]) snprintf(k.gpu, sizeof k.gpu, "%s", gpu);
        if (!k.rev[0]) snprintf(k.rev, sizeof k.rev, "%s", rev);
        ks->k[ks->n++] = k;
    }
    tt__reply_free(&r);
    return rc;
}

static int full_key_cmp(const void *pa, const void *pb) {
    const tt_key_v2 *a = pa, *b = pb;
    int c = strcmp(a->gpu, b->gpu);
    if (!c) c = strcmp(a->rev, b->rev);
    if (c) return c < 0 ? -1 : 1;
    return tt_shard_key_cmp(a, b);
}

/* Keeps the records of t whose key is in ks (sorted here); returns how
 * many keys of ks have no winner left. */
static size_t keep_keys(table *t, keyset *ks) {
    size_t k = 0, missing = 0;
    char *won = calloc(ks->n + 1, 1);
    if (ks->n > 1) qsort(ks->k, ks->n, sizeof *ks->k, full_key_cmp);
    for (size_t i = 0; i < t->n; i++) {
        const tt_key_v2 *hit =
            ks->n ? bsearch(&t->r[i].rec.key, ks->k, ks->n, sizeof *ks->k, full_key_cmp) : NULL;
        if (!hit) continue;
        if (won && t->r[i].kind == TT_FLEET_BEST) won[hit - ks->k] = 1;
        t->no[k] = t->no[i];
        t->r[k++] = t->r[i];
    }
    t->n = k;
    for (size_t j = 0; won && j < ks->n; j++) missing += !won[j];
    free(won);
    return missing;
}

static int b64_val(int ch) {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+') return 62;
    if (ch == '/') return 63;
    return -1;
}

/* Appends the bytes of a base64 line; -1 if it is not base64. */
static int b64_decode(const char *s, sbuf *out) {
    size_t n = strlen(s);
    if (n % 4) return -1;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else if ((v[k] = b64_val((unsigned char)s[i + k])) < 0 || pad) {
                return -1;
            }
        }
        unsigned char b[3] = {(unsigned char)(v[0] << 2 | v[1] >> 4), (unsigned char)(v[1] << 4 | v[2] >> 2),
                              (unsigned char)(v[2] << 6 | v[3])};
        sb_add(out, (const char *)b, (size_t)(3 - pad));
    }
    return 0;
}

static int export_sqlite(cli *c, const char *path) {
    if (!path) return cli_usage(c, "--format sqlite writes a database file: give -o FILE");
    if (cli_opt_val(c, "gpu") || cli_opt_val(c, "rev") || cli_opt_val(c, "all-measurements") ||
        cli_opt_val(c, "shard"))
        return cli_usage(
            c, "--format sqlite copies the whole database: no --gpu, --rev, --all-measurements or --shard");
    tt__reply r;
    if (cli_request(c, "EXPORT format=sqlite", &r)) return CLI_FAIL;
    sbuf b = {0};
    int64_t bytes = -1;
    const char *bs = tt__msg_get(&r.msg, "bytes");
    int rc = 0;
    if (!bs || tt__parse_i64(bs, 0, INT64_MAX, &bytes) < 0)
        rc = cli_fail("the daemon's snapshot reply has no bytes=N");
    for (int i = 0; !rc && i < r.nbody; i++)
        if (b64_decode(r.body[i], &b) < 0)
            rc = cli_fail("the daemon's snapshot line %d is not base64", i + 1);
    if (!rc && (int64_t)b.len != bytes)
        rc = cli_fail("the snapshot is %zu bytes, the daemon announced %lld", b.len, (long long)bytes);
    if (!rc) rc = emit(path, &b);
    if (!rc) fprintf(stderr, "wrote a SQLite snapshot of %zu bytes to %s\n", b.len, path);
    free(b.p);
    tt__reply_free(&r);
    return rc;
}

int cli_cmd_export(cli *c) {
    const char *path, *format = cli_opt_val(c, "format");
    int rc = output_path(c, &path);
    if (rc) return rc;
    if (format && strcmp(format, "sqlite") == 0) return export_sqlite(c, path);
    int csv = format && strcmp(format, "csv") == 0;
    if (format && !csv && strcmp(format, "jsonl") != 0 && strcmp(format, "json") != 0)
        return cli_usage(c, "--format must be jsonl, csv or sqlite, not '%s'", format);
    int64_t job = 0;
    if (cli_opt_val(c, "job") && (rc = cli_int_opt(c, "job", 1, INT64_MAX, &job))) return rc;
    /* a shard label on the node's whole table would hand the merge every
     * key this node ever tuned, old ones included */
    if (cli_opt_val(c, "shard") && !job)
        return cli_usage(c, "--shard needs --job N: the shard's keys are the job 'tune --shard' queued");
    tt_fleet_header h;
    memset(&h, 0, sizeof h);
    const char *gpu = cli_opt_val(c, "gpu"), *rev = cli_opt_val(c, "rev"), *shard = cli_opt_val(c, "shard");
    int si, sn;
    char err[256];
    if ((gpu && !tt__is_hex_id(gpu)) || (rev && !tt__is_hex_id(rev)))
        return cli_usage(c, "--gpu and --rev take 1..32 lower-case hex digits");
    if (shard && tt_shard_parse(shard, &si, &sn, err, sizeof err) < 0)
        return cli_usage(c, "--shard: %s", err);
    char fields[256];
    snprintf(fields, sizeof fields, "%s%s%s%s%s", gpu ? " gpu=" : "", gpu ? gpu : "", rev ? " rev=" : "",
             rev ? rev : "", cli_opt_val(c, "all-measurements") ? " all=1" : "");
    table t = {0};
    keyset ks = {0};
    int64_t skipped = 0;
    if ((rc = fetch_live(c, fields, 0, cli_opt_val(c, "skip-bad") != NULL, &skipped, &t))) goto out;
    if (job) {
        int64_t failed = 0;
        if ((rc = job_keys(c, job, &ks, &failed))) goto out;
        size_t missing = keep_keys(&t, &ks);
        if (failed || missing)
            fprintf(stderr, "tiletune: job %lld: %lld of %zu keys did not end done, %zu have no winner\n",
                    (long long)job, (long long)failed, ks.n, missing);
    }

    sbuf b = {0};
    char line[TT_FLEET_LINE_MAX + 1];
    uint64_t sum = TT_HASH_INIT;
    int n;
    h.version = TT_FLEET_VERSION;
    h.exported_at = (int64_t)time(NULL);
    gethostname(h.node, sizeof h.node - 1);
    if (gpu) snprintf(h.gpu, sizeof h.gpu, "%s", gpu);
    if (shard) snprintf(h.shard, sizeof h.shard, "%d/%d", si, sn);
    h.all = cli_opt_val(c, "all-measurements") != NULL;
    if (csv) {
        if ((n = tt_fleet_csv_header(line, sizeof line)) > 0) sb_add(&b, line, (size_t)n);
    } else if ((n = tt_fleet_header_format(&h, line, sizeof line)) > 0) {
        sb_line(&b, line, n);
    }
    for (size_t i = 0; n > 0 && i < t.n; i++) {
        if (shard) snprintf(t.r[i].shard, sizeof t.r[i].shard, "%s", h.shard);
        n = csv ? tt_fleet_csv_row(&t.r[i], line, sizeof line)
                : tt_fleet_rec_format(&t.r[i], line, sizeof line);
        if (n <= 0) break;
        if (csv) {
            sb_add(&b, line, (size_t)n);
        } else {
            sum = tt_fleet_sum_line(sum, line, (size_t)n);
            sb_line(&b, line, n);
        }
    }
    if (n > 0 && !csv && (n = tt_fleet_end_format((int64_t)t.n, sum, line, sizeof line)) > 0)
        sb_line(&b, line, n);
    if (n <= 0) rc = cli_fail("a record does not fit a table line (%s)", tt_strerror(n));
    else rc = emit(path, &b);
    if (!rc && path) {
        char hex[17];
        tt__hash_hex(table_sum(&t), hex);
        fprintf(stderr, "exported %zu records%s%s to %s (table %s)\n", t.n, shard ? " of shard " : "",
                shard ? h.shard : "", path, hex);
    }
    if (!rc && skipped) fprintf(stderr, "tiletune: %lld bad records skipped\n", (long long)skipped);
    free(b.p);
out:
    free(ks.k);
    table_free(&t);
    return rc;
}

/* ---- import ---------------------------------------------------------------------- */

const cli_opt cli_import_opts[] = {
    {"policy", "P", "faster (default), newer or fill", 0},
    {"dry-run", NULL, "check and count, change nothing", 0},
    {"strict", NULL, "one bad record in any FILE: import nothing from any", 0},
    {"json", NULL, "print the counts as a JSON object (one per file)", 0},
    {NULL},
};

/* The counts of an IMPORT reply, in this order. */
static const char *const count_names[] = {"added", "replaced", "kept",    "rejected",
                                          "stale", "foreign",  "history", "committed"};
enum { C_ADDED, C_REPLACED, C_KEPT, C_REJECTED, C_STALE, C_FOREIGN, C_HISTORY, C_COMMITTED, C_N };

/*
 * Sends one file's records as one IMPORT and reads the counts (the file's
 * own bad records and history added). The daemon's reasons are printed
 * with the file's record numbers unless `quiet`. 0, or CLI_FAIL when the
 * import did not happen at all (daemon refused, connection lost).
 */
static int send_import(cli *c, const char *path, const table *t, const file_ctx *x, tt_fleet_policy p,
                       int dry, int strict, int quiet, int64_t v[C_N]) {
    sbuf body = {0};
    char line[TT_FLEET_LINE_MAX + 1], err[512];
    int rc = 0;
    /* The request and its body: one record a line, re-written canonically
     * (what was checked here is what the daemon gets). */
    int n = snprintf(line, sizeof line, "IMPORT policy=%s dry_run=%d strict=%d lines=%zu",
                     tt_fleet_policy_name(p), dry, strict, t->n);
    sb_line(&body, line, n);
    for (size_t i = 0; n > 0 && i < t->n; i++)
        if ((n = tt_fleet_rec_format(&t->r[i], line, sizeof line)) > 0) sb_line(&body, line, n);
    if (body.oom || n <= 0) {
        rc =
            cli_fail("cannot prepare the import of %s (%s)", path, n <= 0 ? tt_strerror(n) : "out of memory");
        goto out;
    }
    int64_t deadline = tt__deadline_after_ms(c->timeout_ms + IMPORT_EXTRA_MS);
    if (!c->conn && (rc = tt__conn_open(c->socket, deadline, &c->conn, err, sizeof err)) < 0) {
        rc = cli_fail("%s%s", err, rc == TT_ERR_NODAEMON ? " (is tiletuned running?)" : "");
        goto out;
    }
    tt__reply r;
    int sent = tt__conn_send(c->conn, body.p, body.len, deadline, err, sizeof err) == 0 &&
               tt__conn_read_reply(c->conn, &r, deadline, err, sizeof err) == 0;
    cli_reply_clean(err, sent ? &r : NULL);
    if (!sent) {
        rc = cli_fail("%s: %s; the import may or may not have been merged", path, err);
        goto out;
    }
    if (r.status < 0) {
        rc = cli_fail("the daemon refused the import of %s: %s (%s); nothing imported", path, r.message,
                      r.code);
        tt__reply_free(&r);
        goto out;
    }
    for (int i = 0; i < C_N; i++) {
        const char *s = tt__msg_get(&r.msg, count_names[i]);
        v[i] = 0;
        if (s && tt__parse_i64(s, 0, INT64_MAX, &v[i]) < 0) v[i] = 0;
    }
    v[C_REJECTED] += x->bad; /* refused here, never sent */
    v[C_HISTORY] += x->history;
    /* "record=K reason": K counts the records sent; report the file's number */
    for (int i = 0; !quiet && i < r.nbody; i++) {
        char *sp = strchr(r.body[i], ' ');
        long long k = strncmp(r.body[i], "record=", 7) == 0 ? strtoll(r.body[i] + 7, NULL, 10) : 0;
        reason(path, x->bad + i, k >= 1 && (size_t)k <= t->n ? (long long)t->no[k - 1] : k,
               sp ? sp + 1 : r.body[i]);
    }
    if (!quiet) reasons_left(path, x->bad + r.nbody);
    tt__reply_free(&r);
out:
    free(body.p);
    return rc;
}

/* What one file's import came to, for people (the --json form has the
 * counts as they are). */
static void report(const char *path, tt_fleet_policy p, int dry, const int64_t v[C_N]) {
    const char *pol = tt_fleet_policy_name(p);
    long long taken = (long long)(v[C_ADDED] + v[C_REPLACED] + v[C_KEPT]);
    if (dry)
        printf("dry run of %s (%s): would add %lld, replace %lld, keep %lld; rejected %lld\n", path, pol,
               (long long)v[C_ADDED], (long long)v[C_REPLACED], (long long)v[C_KEPT],
               (long long)v[C_REJECTED]);
    else if (!v[C_COMMITTED])
        printf("did not import %s (%s, --strict): %lld records rejected; nothing changed\n", path, pol,
               (long long)v[C_REJECTED]);
    else if (!taken && v[C_REJECTED])
        printf("did not import %s (%s): all %lld records rejected\n", path, pol, (long long)v[C_REJECTED]);
    else
        printf("imported %s (%s): added %lld, replaced %lld, kept %lld, rejected %lld\n", path, pol,
               (long long)v[C_ADDED], (long long)v[C_REPLACED], (long long)v[C_KEPT],
               (long long)v[C_REJECTED]);
    if (v[C_STALE] || v[C_FOREIGN] || v[C_HISTORY])
        printf("  %lld of another kernel revision (kept as stale), %lld of other GPU models (kept, not "
               "served here), %lld measurements not merged (history)\n",
               (long long)v[C_STALE], (long long)v[C_FOREIGN], (long long)v[C_HISTORY]);
}

int cli_cmd_import(cli *c) {
    const char *policy = cli_opt_val(c, "policy");
    tt_fleet_policy p = TT_POLICY_FASTER;
    if (policy && tt_fleet_policy_parse(policy, &p) < 0)
        return cli_usage(c, "--policy must be faster, newer or fill, not '%s'", policy);
    int dry = cli_opt_val(c, "dry-run") != NULL, strict = cli_opt_val(c, "strict") != NULL;
    int json = cli_opt_val(c, "json") != NULL, nf = c->npos, rc = 0;
    table *t = calloc((size_t)nf, sizeof *t);
    file_ctx *x = calloc((size_t)nf, sizeof *x);
    json_t *all = json ? json_array() : NULL;
    if (!t || !x || (json && !all)) {
        rc = cli_fail("out of memory");
        goto out;
    }
    /* Every file read and checked before anything is sent: a damaged one
     * stops the whole import. */
    int64_t bad = 0;
    for (int f = 0; f < nf; f++) {
        if ((rc = read_file(c->pos[f], 1, &t[f], &x[f]))) goto out;
        bad += x[f].bad;
    }
    if (strict && bad > 0) {
        rc = cli_fail("%lld bad records and --strict: nothing imported", (long long)bad);
        goto out;
    }
    /* --strict over several files: each one merged as a dry run first (the
     * daemon's checks: config on its GPU's arch, collisions, duplicates),
     * so a shard the daemon refuses leaves none of the others merged. */
    if (strict && nf > 1 && !dry) {
        for (int f = 0; f < nf; f++) {
            int64_t v[C_N];
            if ((rc = send_import(c, c->pos[f], &t[f], &x[f], p, 1, 1, 0, v))) goto out;
            bad += v[C_REJECTED];
        }
        if (bad > 0) {
            rc = cli_fail("%lld bad records in %d files and --strict: nothing imported", (long long)bad, nf);
            goto out;
        }
    }
    for (int f = 0; f < nf; f++) {
        const char *path = c->pos[f];
        int64_t v[C_N];
        if ((rc = send_import(c, path, &t[f], &x[f], p, dry, strict, 0, v))) {
            if (f > 0) fprintf(stderr, "tiletune: %d of %d files were imported before %s\n", f, nf, path);
            goto out;
        }
        if (json) {
            json_t *o = json_object();
            json_object_set_new(o, "file", json_string(path));
            json_object_set_new(o, "policy", json_string(tt_fleet_policy_name(p)));
            json_object_set_new(o, "dry_run", json_boolean(dry));
            for (int i = 0; i < C_COMMITTED; i++) json_object_set_new(o, count_names[i], json_integer(v[i]));
            json_object_set_new(o, "committed", json_boolean(v[C_COMMITTED]));
            json_array_append_new(all, o);
        } else {
            report(path, p, dry, v);
        }
        /* 0 only for files taken whole: a script must not mistake a partly
         * refused table for a clean one. */
        long long taken = (long long)(v[C_ADDED] + v[C_REPLACED] + v[C_KEPT]);
        if (!dry && !v[C_COMMITTED])
            rc = cli_fail("%s: --strict and %lld bad records: nothing imported", path,
                          (long long)v[C_REJECTED]);
        else if (v[C_REJECTED] > 0 && !taken)
            rc = cli_fail("%s: all %lld records rejected: nothing imported", path, (long long)v[C_REJECTED]);
        else if (v[C_REJECTED] > 0)
            rc = cli_fail("%s: %lld records rejected%s", path, (long long)v[C_REJECTED],
                          dry ? "" : "; the others were imported");
    }
    if (json) {
        int prc = cli_json_print(nf == 1 ? json_incref(json_array_get(all, 0)) : json_incref(all));
        if (!rc) rc = prc;
    }
out:
    for (int f = 0; t && f < nf; f++) table_free(&t[f]);
    free(t);
    free(x);
    json_decref(all);
    return rc;
}

/* ---- diff ------------------------------------------------------------------------ */

const cli_opt cli_diff_opts[] = {
    {"json", NULL, "print a JSON object: the keys and the summary", 0},
    {"changed", NULL, "list only keys whose config differs or that one side lacks", 0},
    {"by-rev", NULL, "the kernel revision is part of the key (default: keys match across revisions)", 0},
    {NULL},
};

/* Keys in the order diff walks them; the revision last, and only with
 * by_rev, so a table re-tuned after an upgrade meets its old self. */
static int key_cmp(const tt_key_v2 *a, const tt_key_v2 *b, int by_rev) {
    int c = strcmp(a->gpu, b->gpu);
    if (c) return c < 0 ? -1 : 1;
    if ((c = tt_shard_key_cmp(a, b))) return c;
    if (by_rev && (c = strcmp(a->rev, b->rev))) return c < 0 ? -1 : 1;
    return 0;
}

static int rec_cmp_rev(const void *a, const void *b) {
    return key_cmp(&((const tt_fleet_rec *)a)->rec.key, &((const tt_fleet_rec *)b)->rec.key, 1);
}

/* A config's knob values without their names, "mma,128,64,4,2,swizzle,0":
 * two of them fit one table row. Points into `text`, rewritten in place. */
static const char *config_knobs(char *text) {
    char *w = text;
    for (const char *r = text; *r;) {
        const char *eq = strchr(r, '=');
        if (!eq) break;
        r = eq + 1;
        while (*r && *r != ',') *w++ = *r++;
        if (*r == ',') *w++ = *r++;
    }
    *w = '\0';
    return text;
}

static int dbl_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int load_side(cli *c, const char *what, table *t) {
    int64_t skipped = 0;
    if (strcmp(what, "@live") == 0) return fetch_live(c, "", 1, 0, &skipped, t);
    file_ctx x;
    int rc = read_file(what, 1, t, &x);
    if (!rc && x.bad)
        fprintf(stderr, "%s: %lld bad records left out of the comparison\n", what, (long long)x.bad);
    return rc;
}

/* One table holds one winner per key; a file may repeat a key: the
 * faster-policy winner stands for it, as an import would keep. Without
 * by_rev, a key held under several revisions (a stale winner and its
 * re-tune) is represented by its latest measurement. */
static void one_per_key(table *t, int by_rev) {
    if (t->n < 2) return; /* an empty table has no array: qsort(NULL) is undefined */
    qsort(t->r, t->n, sizeof *t->r, rec_cmp_rev);
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (k && key_cmp(&t->r[k - 1].rec.key, &t->r[i].rec.key, by_rev) == 0) {
            const tt_record *a = &t->r[i].rec, *b = &t->r[k - 1].rec;
            int newer = strcmp(a->key.rev, b->key.rev) != 0
                            ? (a->measured_at > b->measured_at ||
                               (a->measured_at == b->measured_at && strcmp(a->key.rev, b->key.rev) > 0))
                            : tt_fleet_better(a, b, TT_POLICY_FASTER) < 0;
            if (newer) t->r[k - 1] = t->r[i];
            continue;
        }
        t->r[k++] = t->r[i];
    }
    t->n = k;
}

int cli_cmd_diff(cli *c) {
    table a = {0}, b = {0};
    int rc = load_side(c, c->pos[0], &a);
    if (!rc) rc = load_side(c, c->pos[1], &b);
    if (rc) goto out;
    int by_rev = cli_opt_val(c, "by-rev") != NULL;
    one_per_key(&a, by_rev);
    one_per_key(&b, by_rev);
    int json = cli_opt_val(c, "json") != NULL, changed_only = cli_opt_val(c, "changed") != NULL;
    json_t *keys = json ? json_array() : NULL;
    size_t cap = (a.n + b.n + 1) * 12;
    const char **cells = calloc(cap, sizeof *cells);
    char(*own)[2 * TT_CONFIG_TEXT_MAX + 8] = calloc(cap, sizeof *own);
    double *changes = calloc(a.n + b.n + 1, sizeof *changes);
    if (!cells || !own || !changes) {
        rc = cli_fail("out of memory");
        goto out2;
    }
    static const char *const head[] = {"GPU",      "REV",      "DTYPE",    "HDIM",
                                       "CAUSAL",   "SEQLEN_Q", "SEQLEN_K", "CONFIG",
                                       "A_TFLOPS", "B_TFLOPS", "CHANGE",   "A_CONFIG -> B_CONFIG"};
    int nrows = 1, ncols = 12;
    for (int k = 0; k < ncols; k++) cells[k] = head[k];
    size_t i = 0, j = 0, nsame = 0, ndiff = 0, nonlya = 0, nonlyb = 0, nchg = 0;
    while (i < a.n || j < b.n) {
        int cmp = i >= a.n ? 1 : j >= b.n ? -1 : key_cmp(&a.r[i].rec.key, &b.r[j].rec.key, by_rev);
        const tt_record *ra = cmp <= 0 ? &a.r[i].rec : NULL, *rb = cmp >= 0 ? &b.r[j].rec : NULL;
        const tt_record *any = ra ? ra : rb;
        const char *what = !rb                                         ? "only-a"
                           : !ra                                       ? "only-b"
                           : tt_config_equal(&ra->config, &rb->config) ? "same"
                                                                       : "differs";
        double ta = ra ? ra->tflops : -1, tb = rb ? rb->tflops : -1, chg = 0;
        int have_chg = ta > 0 && tb >= 0;
        if (have_chg) changes[nchg++] = chg = (tb - ta) / ta * 100.0;
        if (!rb) nonlya++;
        else if (!ra) nonlyb++;
        else if (strcmp(what, "same") == 0) nsame++;
        else ndiff++;
        if (cmp <= 0) i++;
        if (cmp >= 0) j++;
        if (changed_only && strcmp(what, "same") == 0) continue;
        char ca[TT_CONFIG_TEXT_MAX] = "", cb[TT_CONFIG_TEXT_MAX] = "";
        if (ra) tt_config_format(&ra->config, ca, sizeof ca);
        if (rb) tt_config_format(&rb->config, cb, sizeof cb);
        if (json) {
            json_t *o = json_object();
            json_object_set_new(o, "gpu", json_string(any->key.gpu));
            json_object_set_new(o, "rev", json_string(any->key.rev));
            json_object_set_new(o, "rev_a", ra ? json_string(ra->key.rev) : json_null());
            json_object_set_new(o, "rev_b", rb ? json_string(rb->key.rev) : json_null());
            json_object_set_new(o, "dtype", json_string(tt__dtype_name(any->key.dtype)));
            json_object_set_new(o, "hdim", json_integer(any->key.head_dim));
            json_object_set_new(o, "causal", json_integer(any->key.causal));
            json_object_set_new(o, "seqlen_q", json_integer(any->key.seqlen_q));
            json_object_set_new(o, "seqlen_k", json_integer(any->key.seqlen_k));
            json_object_set_new(o, "config", json_string(what));
            json_object_set_new(o, "config_a", ra ? json_string(ca) : json_null());
            json_object_set_new(o, "config_b", rb ? json_string(cb) : json_null());
            json_object_set_new(o, "tflops_a", ta >= 0 ? json_real(ta) : json_null());
            json_object_set_new(o, "tflops_b", tb >= 0 ? json_real(tb) : json_null());
            json_object_set_new(o, "change_pct", have_chg ? json_real(chg) : json_null());
            json_array_append_new(keys, o);
            continue;
        }
        const char **row = cells + (size_t)nrows * (size_t)ncols;
        char(*mine)[2 * TT_CONFIG_TEXT_MAX + 8] = own + (size_t)nrows * (size_t)ncols;
        snprintf(mine[0], sizeof mine[0], "%.8s", any->key.gpu);
        if (ra && rb && strcmp(ra->key.rev, rb->key.rev) != 0)
            snprintf(mine[1], sizeof mine[1], "%.8s>%.8s", ra->key.rev, rb->key.rev);
        else snprintf(mine[1], sizeof mine[1], "%.8s", any->key.rev);
        snprintf(mine[3], sizeof mine[3], "%d", (int)any->key.head_dim);
        snprintf(mine[4], sizeof mine[4], "%d", (int)any->key.causal);
        snprintf(mine[5], sizeof mine[5], "%lld", (long long)any->key.seqlen_q);
        snprintf(mine[6], sizeof mine[6], "%lld", (long long)any->key.seqlen_k);
        snprintf(mine[8], sizeof mine[8], ta >= 0 ? "%.1f" : "-", ta);
        snprintf(mine[9], sizeof mine[9], tb >= 0 ? "%.1f" : "-", tb);
        snprintf(mine[10], sizeof mine[10], have_chg ? "%+.1f%%" : "-", chg);
        /* the configs themselves where they differ: what changed, not only that it did */
        if (ra && rb && strcmp(what, "differs") == 0)
            snprintf(mine[11], sizeof mine[11], "%s -> %s", config_knobs(ca), config_knobs(cb));
        else snprintf(mine[11], sizeof mine[11], "%s", config_knobs(ra ? ca : cb));
        for (int k = 0; k < ncols; k++) row[k] = mine[k];
        row[2] = tt__dtype_name(any->key.dtype);
        row[7] = what;
        nrows++;
    }
    double median = 0;
    if (nchg) {
        qsort(changes, nchg, sizeof *changes, dbl_cmp);
        median = nchg % 2 ? changes[nchg / 2] : (changes[nchg / 2 - 1] + changes[nchg / 2]) / 2;
    }
    if (json) {
        json_t *o = json_object(), *sm = json_object();
        json_object_set_new(sm, "keys", json_integer((json_int_t)(nsame + ndiff + nonlya + nonlyb)));
        json_object_set_new(sm, "same", json_integer((json_int_t)nsame));
        json_object_set_new(sm, "differ", json_integer((json_int_t)ndiff));
        json_object_set_new(sm, "only_a", json_integer((json_int_t)nonlya));
        json_object_set_new(sm, "only_b", json_integer((json_int_t)nonlyb));
        json_object_set_new(sm, "median_change_pct", nchg ? json_real(median) : json_null());
        json_object_set_new(o, "keys", keys);
        json_object_set_new(o, "summary", sm);
        keys = NULL;
        rc = cli_json_print(o);
    } else {
        if (nrows > 1) cli_table(cells, nrows, ncols, 0x778u);
        printf("%zu keys: %zu same config, %zu differ, %zu only in A, %zu only in B",
               nsame + ndiff + nonlya + nonlyb, nsame, ndiff, nonlya, nonlyb);
        if (nchg) printf("; TFLOP/s median change %+.1f%% over %zu keys", median, nchg);
        printf("\n");
    }
    /* as diff(1): 1 when the tables differ, so a script can tell */
    if (!rc && ndiff + nonlya + nonlyb > 0) rc = CLI_FAIL;
out2:
    json_decref(keys);
    free(cells);
    free(own);
    free(changes);
out:
    table_free(&a);
    table_free(&b);
    return rc;
}
