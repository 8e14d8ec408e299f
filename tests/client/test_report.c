/* tiletune report: the page of a table written here with known values,
 * checked as text (self-contained, the right rows and points) and, where a
 * headless Chromium is installed, as a browser lays it out: every chart
 * point must land where the table's value puts it. */
#include <math.h>
#include <sys/stat.h>

/* shared test helpers: not every one is used here */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "cli_run.h"
#include "fleet/fleet_util.h"

static const int64_t seqlens[] = {512, 1024, 2048, 4096};
static const double times[] = {0.5, 0.4, 0.3125, 0.25}; /* winners: 200, 250, 320, 400 TFLOP/s */
#define STALE_SEQLEN 8192
#define STALE_TIME 0.2 /* 500 TFLOP/s, kernel revision 0c0d */

/* A block_n other than the built-in default's: the winners are not the default. */
static int other_block_n(int64_t s, int k) {
    tt_key_v2 key = {.seqlen_q = s, .seqlen_k = s, .head_dim = 128, .dtype = TT_DTYPE_FP16};
    tt_config d;
    ASSERT_OK(tt_config_default_v2(&key, &d));
    static const int bns[] = {32, 64, 128};
    for (int i = 0; i < 3; i++)
        if (bns[i] != d.block_n && k-- == 0) return bns[i];
    return 16;
}

static size_t make_table(tt_fleet_rec *out, int changed) {
    size_t n = 0;
    for (int i = 0; i < 4; i++) {
        if (changed && seqlens[i] == 4096) continue; /* only in A */
        tt_fleet_rec w = fu_rec(0, seqlens[i], other_block_n(seqlens[i], changed && seqlens[i] == 1024),
                                times[i], "node-a");
        /* round numbers to check the charts against: 100 / time */
        w.rec.tflops = 100.0 / times[i];
        out[n++] = w;
        /* the built-in default measured at 100 TFLOP/s (the table's GPUs
         * are sm_90: the default they run is sm_90's, family ws), a wgmma
         * variant at 150 */
        tt_fleet_rec d = fu_rec(0, seqlens[i], 64, 1.0, "node-a");
        d.kind = TT_FLEET_MEASUREMENT;
        d.rec.tflops = 100;
        ASSERT_EQ(d.gpu.cc_major, 9);
        ASSERT_OK(tt__config_default_sm90(&d.rec.key, &d.rec.config));
        ASSERT_EQ(d.rec.config.family, TT_FAMILY_WS);
        out[n++] = d;
        tt_fleet_rec g = d;
        g.rec.config.family = TT_FAMILY_WGMMA;
        g.rec.time_ms = 100.0 / 150;
        g.rec.tflops = 150;
        out[n++] = g;
        tt_fleet_rec m = w;
        m.kind = TT_FLEET_MEASUREMENT;
        out[n++] = m;
    }
    tt_fleet_rec bad = fu_rec(0, 1024, other_block_n(1024, 1), 2.0, "node-a");
    bad.kind = TT_FLEET_MEASUREMENT;
    bad.rec.status = TT_MEAS_WRONG;
    out[n++] = bad;
    tt_fleet_rec sk = fu_rec(0, 2048, other_block_n(2048, 1), 2.0, "node-a");
    sk.kind = TT_FLEET_MEASUREMENT;
    sk.rec.status = TT_MEAS_SKIPPED;
    out[n++] = sk;
    tt_fleet_rec st = fu_rec(0, STALE_SEQLEN, 64, STALE_TIME, "node-b");
    st.rec.tflops = 100.0 / STALE_TIME;
    snprintf(st.rec.key.rev, sizeof st.rec.key.rev, "0c0d");
    st.rec.measured_at -= 86400;
    out[n++] = st;
    return n;
}

static double winner_tflops(int64_t s) {
    if (s == STALE_SEQLEN) return 100.0 / STALE_TIME;
    for (int i = 0; i < 4; i++)
        if (seqlens[i] == s) return 100.0 / times[i];
    return -1;
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static char dir[] = "/tmp/ttreport-XXXXXX";
static char table_a[300], table_b[300], page[300];

static void setup(void) {
    if (!table_a[0]) ASSERT(mkdtemp(dir) != NULL);
    snprintf(table_a, sizeof table_a, "%s/a.jsonl", dir);
    snprintf(table_b, sizeof table_b, "%s/b.jsonl", dir);
    snprintf(page, sizeof page, "%s/report.html", dir);
    tt_fleet_rec recs[64];
    size_t n = make_table(recs, 0);
    fu_write_table(table_a, recs, n, NULL);
    n = make_table(recs, 1);
    fu_write_table(table_b, recs, n, NULL);
}

static void cleanup(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ASSERT_EQ(system(cmd), 0);
}

static char *slurp_file(const char *path) {
    FILE *f = fopen(path, "r");
    ASSERT(f != NULL);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

TEST(page_of_a_table_file) {
    setup();
    cli_result r;
    cli(&r, "report", "-o", page, table_a, "--rev", FU_REV, NULL);
    if (r.rc) fprintf(stderr, "%s", r.err);
    ASSERT_EQ(r.rc, 0);
    struct stat sb;
    ASSERT(stat(page, &sb) == 0 && (sb.st_mode & 0444) == 0444);
    const char *h = slurp_file(page);
    /* self-contained: nothing a browser would fetch, no script */
    ASSERT(!strstr(h, "http://") && !strstr(h, "https://") && !strstr(h, "<script") && !strstr(h, "src=") &&
           !strstr(h, "url(") && !strstr(h, "<link"));
    ASSERT(strncmp(h, "<!DOCTYPE html>", 15) == 0);
    ASSERT_CONTAINS(h, "</html>\n");
    /* winners at the four seqlens and the stale one; the default and the
     * families at the four */
    ASSERT_EQ(count(h, "data-series=\"winner\" data-seqlen"), 5);
    ASSERT_EQ(count(h, "data-series=\"default\" data-seqlen"), 4);
    ASSERT_EQ(count(h, "data-series=\"best wgmma\" data-seqlen"), 4);
    /* each family its own series: the ws default's measurements, the mma
     * winners'; none for a family with no measurement */
    ASSERT_EQ(count(h, "data-series=\"best ws\" data-seqlen"), 4);
    ASSERT_EQ(count(h, "data-series=\"best mma\" data-seqlen"), 4);
    ASSERT_EQ(count(h, "data-series=\"best splitkv\""), 0);
    ASSERT_EQ(count(h, "data-series=\"tuned/default\" data-seqlen"), 4);
    ASSERT_CONTAINS(h, "data-series=\"winner\" data-seqlen=\"1024\" data-value=\"250.0000\"");
    ASSERT_CONTAINS(h, "data-series=\"tuned/default\" data-seqlen=\"4096\" data-value=\"4.0000\"");
    ASSERT_CONTAINS(h, "<tr class=\"key stale\" data-seqlen=\"8192\"");
    ASSERT_CONTAINS(h, "<td class=\"l\">wrong</td>");
    ASSERT_CONTAINS(h, "<tr><th class=\"l\">stale winners (another kernel revision)</th><td>1</td></tr>");
    ASSERT_CONTAINS(h, "<tr><th class=\"l\">skipped variants</th><td>1</td></tr>");
    ASSERT_CONTAINS(h, "<tr><th class=\"l\">tuned/default, median over 4 keys</th><td>2.85&times;</td></tr>");
    ASSERT_CONTAINS(h, "Fleet GPU 0");
    ASSERT_CONTAINS(h, "570.1");
    ASSERT_CONTAINS(h, "node-b");
    /* the same page on stdout */
    cli(&r, "report", table_a, "--rev=" FU_REV, NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "<!DOCTYPE html>");
    cleanup();
}

TEST(what_changed_between_two_tables) {
    setup();
    cli_result r;
    cli(&r, "report", table_a, table_b, "-o", page, NULL);
    ASSERT_EQ(r.rc, 0);
    const char *h = slurp_file(page);
    ASSERT_CONTAINS(h, "<h2>What changed</h2>");
    ASSERT_CONTAINS(h, "5 keys: 3 same config, 1 config changed, 1 only in A, 0 only in B");
    ASSERT_EQ(count(h, "<tr class=\"change\">"), 2);
    ASSERT_EQ(count(h, "data-series=\"A\" data-seqlen"), 5);
    ASSERT_EQ(count(h, "data-series=\"B\" data-seqlen"), 4);
    cleanup();
}

TEST(bad_input) {
    setup();
    cli_result r;
    cli(&r, "report", "/nonexistent/table.jsonl", NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT_CONTAINS(r.err, "cannot open /nonexistent/table.jsonl");
    cli(&r, "report", "a", "b", "c", NULL);
    ASSERT_EQ(r.rc, 2);
    cli(&r, "report", table_a, "--rev", "XYZ", NULL);
    ASSERT_EQ(r.rc, 2);
    cli(&r, "--socket", "/nonexistent/s", "report", NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT_CONTAINS(r.err, "is tiletuned running?");
    cleanup();
}

/* A decode key whose default ran faster at the tune's batch than the
 * config kept for both batches: the worker reports the default's timing
 * skipped; the page shows it, marked, and not the one at the second batch. */
TEST(a_decode_default_reported_skipped_is_shown_marked) {
    setup();
    tt_fleet_rec recs[4];
    tt_fleet_rec w = fu_rec(0, 1, 64, 0.05, "node-a");
    w.rec.key.seqlen_k = 4096;
    w.rec.key.group = 4;
    w.rec.key.dtype = TT_DTYPE_BF16;
    w.rec.batch = 8;
    w.rec.heads = 32;
    tt_config d;
    ASSERT_OK(tt__config_default_sm90(&w.rec.key, &d));
    ASSERT_EQ(d.family, TT_FAMILY_SPLITKV);
    w.rec.config = d;
    w.rec.config.block_n = d.block_n == 64 ? 128 : 64; /* the kept one is not the default */
    w.rec.tflops = 10;
    recs[0] = w;
    tt_fleet_rec own = w;
    own.kind = TT_FLEET_MEASUREMENT;
    own.rec.config = d;
    own.rec.status = TT_MEAS_SKIPPED;
    own.rec.tflops = 12.5; /* faster at the winner's batch */
    recs[1] = own;
    tt_fleet_rec wide = own;
    wide.rec.batch = 132; /* the second batch: another problem */
    wide.rec.tflops = 40;
    recs[2] = wide;
    tt_fleet_rec kept = w;
    kept.kind = TT_FLEET_MEASUREMENT;
    recs[3] = kept;
    fu_write_table(table_a, recs, 4, NULL);
    cli_result r;
    cli(&r, "report", "-o", page, table_a, NULL);
    if (r.rc) fprintf(stderr, "%s", r.err);
    ASSERT_EQ(r.rc, 0);
    const char *h = slurp_file(page);
    ASSERT_CONTAINS(h, "<td>12.50<sup>s</sup></td><td>0.80&times;</td>");
    ASSERT_CONTAINS(h, "data-series=\"default\" data-seqlen=\"1\" data-value=\"12.5000\"");
    ASSERT_CONTAINS(h, "the default's timing at the winner's batch was reported skipped");
    ASSERT(!strstr(h, "40.00"));
    /* the same key with the default timed ok: that one, unmarked */
    recs[1].rec.status = TT_MEAS_OK;
    recs[1].rec.tflops = 11;
    fu_write_table(table_a, recs, 4, NULL);
    cli(&r, "report", "-o", page, table_a, NULL);
    ASSERT_EQ(r.rc, 0);
    h = slurp_file(page);
    ASSERT_CONTAINS(h, "<td>11.00</td>");
    ASSERT(!strstr(h, "<sup>s</sup>"));
    cleanup();
}

/* A checker run by the browser after layout: every point's centre, in the
 * chart's own units, with the chart's axes. */
static const char *const checker =
    "<script>(function(){var out=[];document.querySelectorAll('svg.chart').forEach(function(s){"
    "var r=s.getBoundingClientRect(),k=r.width/s.viewBox.baseVal.width,d=s.dataset,"
    "t=s.querySelector('title').textContent.slice(0,7).replace(/ /g,'_');"
    "s.querySelectorAll('circle').forEach(function(c){var b=c.getBoundingClientRect();"
    "out.push(['PT',t,c.dataset.series.replace(/ /g,'_'),c.dataset.seqlen,((b.left+b.width/2-r.left)/k).toFixed(3),"
    "((b.top+b.height/2-r.top)/k).toFixed(3),d.x0,d.x1,d.y1,d.left,d.right,d.top,d.bottom,r.width.toFixed(1)].join(' '))})});"
    "document.body.innerHTML='<pre>'+out.join('\\n')+'\\nEND</pre>';})();</script>";

static const char *browser(void) {
    static const char *const names[] = {"/usr/bin/chromium-headless-shell", "/usr/bin/chromium",
                                        "/usr/lib/chromium/chromium-headless-shell", NULL};
    for (int i = 0; names[i]; i++)
        if (access(names[i], X_OK) == 0) return names[i];
    return NULL;
}

TEST(points_where_a_browser_draws_them) {
    const char *b = browser();
    if (!b) TT_SKIP("no headless Chromium (Debian: apt-get install chromium-headless-shell or chromium)");
    setup();
    cli_result r;
    cli(&r, "report", "-o", page, table_a, "--rev", FU_REV, NULL);
    ASSERT_EQ(r.rc, 0);
    char checked[400], cmd[1200];
    snprintf(checked, sizeof checked, "%s/checked.html", dir);
    FILE *f = fopen(checked, "w");
    ASSERT(f != NULL);
    const char *h = slurp_file(page), *end = strstr(h, "</body>");
    ASSERT(end != NULL);
    fwrite(h, 1, (size_t)(end - h), f);
    fprintf(f, "%s</body></html>\n", checker);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "%s --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir=%s/profile "
             "--dump-dom file://%s 2>%s/browser.log",
             b, dir, checked, dir);
    FILE *p = popen(cmd, "r");
    ASSERT(p != NULL);
    char line[512];
    int points = 0, winners = 0, ended = 0;
    while (fgets(line, sizeof line, p)) {
        if (strncmp(line, "END", 3) == 0) ended = 1;
        char title[32], series[32];
        long long s;
        double px, py, x0, x1, y1, left, right, top, bottom, width;
        if (sscanf(strstr(line, "PT ") ? strstr(line, "PT ") : "",
                   "PT %31s %31s %lld %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf", title, series, &s, &px, &py,
                   &x0, &x1, &y1, &left, &right, &top, &bottom, &width) != 13)
            continue;
        points++;
        ASSERT(width > 100); /* laid out, not collapsed */
        double want_x = left + (log2((double)s) - x0) / (x1 - x0) * (right - left);
        if (fabs(px - want_x) > 0.5)
            TT_FAIL_AT("%s %s at seqlen %lld: x %.2f, want %.2f", title, series, s, px, want_x);
        if (strcmp(title, "TFLOP/s") == 0 && strcmp(series, "winner") == 0) {
            /* the table's value, not the point's own data attribute */
            double want_y = bottom - winner_tflops(s) / y1 * (bottom - top);
            if (fabs(py - want_y) > 0.5)
                TT_FAIL_AT("winner at seqlen %lld: y %.2f, want %.2f", s, py, want_y);
            winners++;
        }
        if (strcmp(title, "TFLOP/s") == 0 && strcmp(series, "default") == 0) {
            double want_y = bottom - 100.0 / y1 * (bottom - top);
            if (fabs(py - want_y) > 0.5)
                TT_FAIL_AT("default at seqlen %lld: y %.2f, want %.2f", s, py, want_y);
        }
    }
    int st = pclose(p);
    if (!ended) {
        char log[300];
        snprintf(log, sizeof log, "%s/browser.log", dir);
        fprintf(stderr, "%s\n", slurp_file(log));
    }
    ASSERT_EQ(st, 0);
    ASSERT(ended);
    ASSERT_EQ(winners, 5);
    ASSERT(points >= 5 + 4 + 4 + 4 + 4);
    cleanup();
}

TT_TEST_MAIN()
