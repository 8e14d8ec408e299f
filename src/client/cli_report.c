/* tiletune report: loads the tables (the daemon's, or files) and writes
 * the HTML page of report.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/cli.h"
#include "client/report.h"
#include "common/key.h"

const cli_opt cli_report_opts[] = {
    {"output", "FILE", "write the page to FILE, atomically (default or '-': stdout)", 0},
    {"rev", "HEX",
     "the current kernel revision: winners of others are stale (default: the daemon's, "
     "for a file the revision of its newest winner)",
     0},
    {NULL},
};

/* Bad records named one by one; past these, only counted. */
#define BAD_SHOWN 10

typedef struct loaded {
    tt_report_table t;
    tt_fleet_rec *r;
    size_t cap;
    int64_t bad;
    const char *path;
} loaded;

static int add(loaded *l, const tt_fleet_rec *rec) {
    if (l->t.n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        tt_fleet_rec *p = realloc(l->r, cap * sizeof *p);
        if (!p) return TT_ERR_NOMEM;
        l->r = p;
        l->cap = cap;
    }
    l->r[l->t.n++] = *rec;
    l->t.recs = l->r;
    return 0;
}

static int on_line(void *ud, int what, int64_t no, const tt_fleet_rec *rec, const char *why) {
    loaded *l = ud;
    if (what == TT_FLEET_LINE_BAD && ++l->bad <= BAD_SHOWN)
        fprintf(stderr, "%s: record %lld: %s (left out of the report)\n", l->path, (long long)no, why);
    if (what == TT_FLEET_LINE_RECORD) return add(l, rec);
    return 0;
}

/* The daemon's table with every measurement, and its revision. */
static int load_live(cli *c, loaded *l) {
    tt__reply r;
    l->t.name = "the node's table";
    if (cli_request(c, "STATUS", &r)) return CLI_FAIL;
    const char *rev = tt__msg_get(&r.msg, "rev");
    if (rev && tt__is_hex_id(rev)) snprintf(l->t.current_rev, sizeof l->t.current_rev, "%s", rev);
    tt__reply_free(&r);
    if (cli_request(c, "EXPORT all=1", &r)) return CLI_FAIL;
    int rc = 0;
    int64_t now = (int64_t)time(NULL);
    l->t.exported_at = now;
    gethostname(l->t.node, sizeof l->t.node - 1);
    for (int i = 0; !rc && i < r.nbody; i++) {
        tt_fleet_rec rec;
        char err[512];
        if (tt_fleet_rec_parse(r.body[i], strlen(r.body[i]), NULL, now, &rec, err, sizeof err) < 0) {
            if (++l->bad <= BAD_SHOWN)
                fprintf(stderr, "tiletune: the daemon's record %d: %s (left out of the report)\n", i + 1,
                        err);
        } else if (add(l, &rec) < 0) {
            rc = cli_fail("out of memory");
        }
    }
    tt__reply_free(&r);
    return rc;
}

static int load_file(const char *path, loaded *l) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!f) return cli_fail("cannot open %s: %s", path, strerror(errno));
    tt_fleet_reader rd;
    tt_fleet_reader_init(&rd, NULL, (int64_t)time(NULL));
    l->path = l->t.name = path;
    char err[512];
    int rc = tt_fleet_read_stream(f, &rd, on_line, l, err, sizeof err);
    if (f != stdin) fclose(f);
    if (rc == TT_ERR_NOMEM) return cli_fail("out of memory reading %s", path);
    if (rc < 0) return cli_fail("%s: %s", path, err);
    snprintf(l->t.node, sizeof l->t.node, "%s", rd.hdr.node);
    l->t.exported_at = rd.hdr.exported_at;
    return 0;
}

static int load(cli *c, const char *what, loaded *l) {
    memset(l, 0, sizeof *l);
    int rc = strcmp(what, "@live") == 0 ? load_live(c, l) : load_file(what, l);
    if (l->bad > BAD_SHOWN)
        fprintf(stderr, "tiletune: %s: %lld bad records in all, left out of the report\n", what,
                (long long)l->bad);
    const char *rev = cli_opt_val(c, "rev");
    if (!rc && rev) snprintf(l->t.current_rev, sizeof l->t.current_rev, "%s", rev);
    return rc;
}

int cli_cmd_report(cli *c) {
    const char *out = cli_opt_val(c, "output"), *rev = cli_opt_val(c, "rev");
    if (out && strcmp(out, "-") == 0) out = NULL;
    if (rev && !tt__is_hex_id(rev)) return cli_usage(c, "--rev must be 1..32 lower-case hex digits");
    if (c->npos == 2 && strcmp(c->pos[0], "-") == 0 && strcmp(c->pos[1], "-") == 0)
        return cli_usage(c, "only one table can come from stdin");
    loaded a, b;
    memset(&b, 0, sizeof b);
    int rc = load(c, c->npos ? c->pos[0] : "@live", &a);
    if (!rc && c->npos == 2) rc = load(c, c->pos[1], &b);
    char *page = NULL;
    size_t len = 0;
    FILE *f = NULL;
    if (!rc && out && !(f = open_memstream(&page, &len))) rc = cli_fail("out of memory");
    if (!rc) {
        int w = tt_report_write(f ? f : stdout, &a.t, c->npos == 2 ? &b.t : NULL);
        if (w == TT_ERR_NOMEM) rc = cli_fail("out of memory");
        else if (w < 0) rc = cli_fail("cannot write the report: %s", strerror(errno));
    }
    if (f && fclose(f) != 0 && !rc) rc = cli_fail("out of memory");
    if (!rc && out && (rc = cli_write_atomic(out, page, len)) == 0)
        fprintf(stderr, "wrote the report of %zu records%s to %s\n", a.t.n + b.t.n,
                c->npos == 2 ? " (two tables)" : "", out);
    free(page);
    free(a.r);
    free(b.r);
    return rc;
}
