/* The HTML report of a tuning table (report.h). */
#include "client/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/key.h"
#include "common/proto.h"

/* ---- keys of a table --------------------------------------------------------- */

/* The kernel families by id (tt_family), with their chart colours. */
static const struct {
    const char *series, *color;
} family_series[] = {
    {"best mma", "#2ca02c"}, {"best wgmma", "#9467bd"}, {"best ws", "#17becf"}, {"best splitkv", "#e377c2"}};
#define FAMILIES ((int)(sizeof family_series / sizeof family_series[0]))
_Static_assert(sizeof family_series / sizeof family_series[0] == TT_FAMILY_SPLITKV + 1, "a series a family");

/* The built-in default a GPU of the record's arch runs for its key: sm_90's
 * own rows there (family ws for prefill), else the portable ones. */
static int record_default(const tt_fleet_rec *r, tt_config *out) {
    if (r->gpu.cc_major == 9 && r->gpu.cc_minor == 0 && tt__config_default_sm90(&r->rec.key, out) == 0)
        return 0;
    return tt_config_default_v2(&r->rec.key, out);
}

/* One key of a table (gpu and rev included): its winner and what the
 * measurements say about it. */
typedef struct kinfo {
    tt_key_v2 key;
    const tt_fleet_rec *best; /* NULL: measurements only */
    double fam[FAMILIES];     /* best ok TFLOP/s per family (by id); < 0 none */
    double def;               /* the built-in default's ok TFLOP/s; < 0 not measured */
    int def_skipped;          /* def is a timing reported skipped (skipped_default) */
    int nok, nfailed, nskipped;
    int stale;
    int shown; /* the key plotted for its seqlens (current revision, else newest) */
} kinfo;

typedef struct view {
    const tt_report_table *t;
    kinfo *k;
    size_t n;
    const char *rev; /* current */
    size_t nbest, nmeas;
} view;

/* gpu, dtype, hdim, causal: a chart's group */
static int group_cmp(const tt_key_v2 *a, const tt_key_v2 *b) {
    int c = strcmp(a->gpu, b->gpu);
    if (c) return c < 0 ? -1 : 1;
#define CMPF(f) \
    if (a->f != b->f) return a->f < b->f ? -1 : 1
    CMPF(dtype);
    CMPF(head_dim);
    CMPF(causal);
    return 0;
}

static int point_cmp(const tt_key_v2 *a, const tt_key_v2 *b) {
    int c = group_cmp(a, b);
    if (c) return c;
    CMPF(seqlen_q);
    CMPF(seqlen_k);
    CMPF(group);
#undef CMPF
    return 0;
}

static int key_cmp(const tt_key_v2 *a, const tt_key_v2 *b) {
    int c = point_cmp(a, b);
    if (c) return c;
    c = strcmp(a->rev, b->rev);
    return c < 0 ? -1 : c > 0;
}

static int rec_ptr_cmp(const void *x, const void *y) {
    const tt_fleet_rec *a = *(const tt_fleet_rec *const *)x, *b = *(const tt_fleet_rec *const *)y;
    return key_cmp(&a->rec.key, &b->rec.key);
}

/* The revision a table is "current" at: given, else that of its newest winner. */
static const char *current_rev(const tt_report_table *t) {
    if (t->current_rev[0]) return t->current_rev;
    const tt_fleet_rec *newest = NULL;
    for (size_t i = 0; i < t->n; i++)
        if (t->recs[i].kind == TT_FLEET_BEST &&
            (!newest || t->recs[i].rec.measured_at > newest->rec.measured_at))
            newest = &t->recs[i];
    return newest ? newest->rec.key.rev : "";
}

/* A key whose default has no ok timing but one reported skipped at the
 * winner's batch and heads takes that: a decode key's default can run
 * faster there than the config kept for both batches (docs/tuning.md,
 * "Decode across batches"), and fast mode drops a default after a partial
 * timing; either is a real time at the winner's problem, marked as such.
 * A skipped timing at another batch is not comparable and stays out.
 * p: the records sorted by key, as view_build grouped them. */
static void skipped_default(view *v, const tt_fleet_rec *const *p, size_t n) {
    size_t ki = 0;
    for (size_t i = 0; i < n; i++) {
        while (ki < v->n && key_cmp(&v->k[ki].key, &p[i]->rec.key) != 0) ki++;
        if (ki == v->n) return;
        kinfo *k = &v->k[ki];
        const tt_record *r = &p[i]->rec;
        if (p[i]->kind == TT_FLEET_BEST || r->status != TT_MEAS_SKIPPED || !k->best ||
            (k->def > 0 && !k->def_skipped))
            continue;
        if (r->batch <= 0 || r->batch != k->best->rec.batch || r->heads != k->best->rec.heads ||
            r->tflops <= 0)
            continue;
        tt_config d;
        if (record_default(p[i], &d) == 0 && tt_config_equal(&d, &r->config) && r->tflops > k->def) {
            k->def = r->tflops;
            k->def_skipped = 1;
        }
    }
}

static int view_build(const tt_report_table *t, view *v) {
    memset(v, 0, sizeof *v);
    v->t = t;
    v->rev = current_rev(t);
    if (t->n == 0) return 0;
    const tt_fleet_rec **p = malloc(t->n * sizeof *p);
    v->k = calloc(t->n, sizeof *v->k);
    if (!p || !v->k) {
        free(p);
        free(v->k);
        v->k = NULL;
        return TT_ERR_NOMEM;
    }
    for (size_t i = 0; i < t->n; i++) p[i] = &t->recs[i];
    qsort(p, t->n, sizeof *p, rec_ptr_cmp);
    for (size_t i = 0; i < t->n; i++) {
        const tt_record *r = &p[i]->rec;
        if (v->n == 0 || key_cmp(&v->k[v->n - 1].key, &r->key) != 0) {
            kinfo *k = &v->k[v->n++];
            k->key = r->key;
            for (int f = 0; f < FAMILIES; f++) k->fam[f] = -1;
            k->def = -1;
            k->stale = v->rev[0] && strcmp(r->key.rev, v->rev) != 0;
        }
        kinfo *k = &v->k[v->n - 1];
        if (p[i]->kind == TT_FLEET_BEST) {
            v->nbest++;
            if (!k->best || r->tflops > k->best->rec.tflops) k->best = p[i];
            continue;
        }
        v->nmeas++;
        if (r->status == TT_MEAS_SKIPPED) {
            k->nskipped++;
        } else if (r->status != TT_MEAS_OK) {
            k->nfailed++;
        } else {
            k->nok++;
            const int f = r->config.family;
            if (f >= 0 && f < FAMILIES && r->tflops > k->fam[f]) k->fam[f] = r->tflops;
            tt_config d;
            if (record_default(p[i], &d) == 0 && tt_config_equal(&d, &r->config) && r->tflops > k->def)
                k->def = r->tflops;
        }
    }
    skipped_default(v, p, t->n);
    free(p);
    /* per seqlen pair, the key that is plotted: the current revision's,
     * else the newest winner's */
    for (size_t i = 0; i < v->n;) {
        size_t j = i, pick = (size_t)-1;
        while (j < v->n && point_cmp(&v->k[i].key, &v->k[j].key) == 0) j++;
        for (size_t m = i; m < j; m++) {
            if (!v->k[m].best) continue;
            if (pick == (size_t)-1 || (!v->k[m].stale && v->k[pick].stale) ||
                (v->k[m].stale == v->k[pick].stale &&
                 v->k[m].best->rec.measured_at > v->k[pick].best->rec.measured_at))
                pick = m;
        }
        if (pick != (size_t)-1) v->k[pick].shown = 1;
        i = j;
    }
    return 0;
}

/* ---- HTML pieces ----------------------------------------------------------------- */

static void esc(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

static void fmt_seqlen(int64_t s, char *buf, size_t len) {
    if (s >= 1048576 && s % 1048576 == 0) snprintf(buf, len, "%lldM", (long long)(s / 1048576));
    else if (s >= 1024 && s % 1024 == 0) snprintf(buf, len, "%lldk", (long long)(s / 1024));
    else snprintf(buf, len, "%lld", (long long)s);
}

static void fmt_time(int64_t t, char *buf, size_t len) {
    time_t tt = (time_t)t;
    struct tm tm;
    if (t <= 0 || !gmtime_r(&tt, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M UTC", &tm))
        snprintf(buf, len, "-");
}

static const char *causal_name(int c) {
    return c == 0 ? "not causal" : c == 1 ? "causal" : "causal (bottom-right)";
}

static const tt_gpu_info *gpu_of(const view *v, const char *fp) {
    for (size_t i = 0; i < v->t->n; i++)
        if (strcmp(v->t->recs[i].gpu.fingerprint, fp) == 0) return &v->t->recs[i].gpu;
    return NULL;
}

static void group_title(FILE *f, const view *v, const tt_key_v2 *k) {
    const tt_gpu_info *g = gpu_of(v, k->gpu);
    esc(f, g && g->name[0] ? g->name : k->gpu);
    fprintf(f, " &middot; %s &middot; head dim %d &middot; %s", tt__dtype_name(k->dtype), (int)k->head_dim,
            causal_name(k->causal));
}

/* ---- charts ------------------------------------------------------------------------ */

#define CW 680
#define CH 300
#define PL 60
#define PR 540
#define PT 20
#define PB 256

typedef struct series {
    const char *name, *color;
    int dashed;
    int n;
    int64_t *x;
    double *y;
} series;

static double nice_ceil(double v) {
    if (v <= 0) return 1;
    double p = pow(10, floor(log10(v))), m = v / p;
    double n = m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10;
    return n * p;
}

/* A line chart of values against seqlen (log2 axis); points carry their
 * data (report.h). Series with no points are left out. */
static void chart(FILE *f, const char *title, const char *ylabel, const series *s, int ns) {
    int64_t xmin = 0, xmax = 0;
    double ymax = 0;
    int any = 0;
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < s[i].n; j++) {
            if (!any || s[i].x[j] < xmin) xmin = s[i].x[j];
            if (!any || s[i].x[j] > xmax) xmax = s[i].x[j];
            if (s[i].y[j] > ymax) ymax = s[i].y[j];
            any = 1;
        }
    if (!any) return;
    double x0 = floor(log2((double)xmin)), x1 = ceil(log2((double)xmax));
    if (x1 - x0 < 1) x0 -= 1, x1 += 1;
    double y1 = nice_ceil(ymax * 1.05);
#define PX(x) (PL + (log2((double)(x)) - x0) / (x1 - x0) * (PR - PL))
#define PY(y) (PB - (y) / y1 * (PB - PT))
    fprintf(f,
            "<figure><svg class=\"chart\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
            "data-x0=\"%g\" data-x1=\"%g\" data-y1=\"%g\" data-left=\"%d\" data-right=\"%d\" data-top=\"%d\" "
            "data-bottom=\"%d\"><title>",
            CW, CH, CW, CH, x0, x1, y1, PL, PR, PT, PB);
    esc(f, title);
    fputs("</title>\n", f);
    /* grid and axes */
    int step = x1 - x0 > 12 ? 2 : 1;
    for (double e = x0; e <= x1 + 1e-9; e += step) {
        double px = PL + (e - x0) / (x1 - x0) * (PR - PL);
        char lab[24];
        fmt_seqlen((int64_t)llround(pow(2, e)), lab, sizeof lab);
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" class=\"grid\"/>"
                "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">%s</text>\n",
                px, PT, px, PB, px, PB + 16, lab);
    }
    for (int i = 0; i <= 5; i++) {
        double v = y1 * i / 5, py = PY(v);
        fprintf(f,
                "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"grid\"/>"
                "<text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%g</text>\n",
                PL, py, PR, py, PL - 6, py + 4, v);
    }
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"frame\"/>\n", PL, PT, PR - PL,
            PB - PT);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"axis\" text-anchor=\"middle\">seqlen</text>\n", (PL + PR) / 2,
            CH - 8);
    fprintf(f,
            "<text x=\"14\" y=\"%d\" class=\"axis\" text-anchor=\"middle\" transform=\"rotate(-90 14 %d)\">",
            (PT + PB) / 2, (PT + PB) / 2);
    esc(f, ylabel);
    fputs("</text>\n", f);
    /* the first series is drawn last: on top of those it ties with */
    int ly = PT + 14 + 15 * (ns - 1);
    for (int i = ns - 1; i >= 0; i--, ly -= 15) {
        if (!s[i].n) continue;
        fprintf(
            f,
            "<g class=\"series\" data-series=\"%s\"><polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"",
            s[i].name, s[i].color, s[i].dashed ? " stroke-dasharray=\"6 4\"" : "");
        for (int j = 0; j < s[i].n; j++)
            fprintf(f, "%s%.2f,%.2f", j ? " " : "", PX(s[i].x[j]), PY(s[i].y[j]));
        fputs("\"/>\n", f);
        for (int j = 0; j < s[i].n; j++) {
            char lab[24];
            fmt_seqlen(s[i].x[j], lab, sizeof lab);
            fprintf(
                f,
                "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"%s\" fill=\"%s\" data-series=\"%s\" data-seqlen=\"%lld\" "
                "data-value=\"%.4f\"><title>%s, seqlen %s: %.2f</title></circle>\n",
                PX(s[i].x[j]), PY(s[i].y[j]), i == 0 ? "4.5" : "3", s[i].color, s[i].name,
                (long long)s[i].x[j], s[i].y[j], s[i].name, lab, s[i].y[j]);
        }
        fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"legend\" fill=\"%s\">%s</text></g>\n", PR + 10, ly,
                s[i].color, s[i].name);
    }
#undef PX
#undef PY
    fputs("</svg><figcaption>", f);
    esc(f, title);
    fputs("</figcaption></figure>\n", f);
}

/* Room for the series of one group. */
typedef struct gseries {
    int64_t *x;
    double *y;
    int cap;
} gseries;

static series take(gseries *g, int which, const char *name, const char *color, int dashed) {
    series s = {
        name, color, dashed, 0, g->x + (size_t)which * (size_t)g->cap, g->y + (size_t)which * (size_t)g->cap};
    return s;
}

static void put(series *s, int64_t x, double y) {
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
}

/* ---- sections -------------------------------------------------------------------- */

static const char *const style =
    "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1200px;color:#222;padding:0 16px}"
    "h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ccc}h3{font-size:15px}"
    "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:2px 8px;text-align:right}"
    "th{background:#f4f4f4}td.l,th.l{text-align:left}tr.stale td{color:#999}"
    "figure{display:inline-block;margin:4px 12px 4px 0}figcaption{font-size:12px;color:#555}"
    ".grid{stroke:#eee}.frame{fill:none;stroke:#999}.tick{font-size:11px;fill:#555}.axis{font-size:12px;fill:#333}"
    ".legend{font-size:12px}.note{color:#666}.warn{color:#a40}"
    "code{font-size:12px;word-break:break-all}table.keys td{font-size:13px}";

static void provenance(FILE *f, const view *v) {
    const tt_report_table *t = v->t;
    char when[64];
    fmt_time(t->exported_at, when, sizeof when);
    fputs("<h2>Provenance</h2>\n<table><tr><th class=\"l\">table</th><td class=\"l\">", f);
    esc(f, t->name);
    fputs("</td></tr><tr><th class=\"l\">node</th><td class=\"l\">", f);
    esc(f, t->node[0] ? t->node : "-");
    fprintf(f,
            "</td></tr><tr><th class=\"l\">exported</th><td class=\"l\">%s</td></tr>"
            "<tr><th class=\"l\">current kernel revision</th><td class=\"l\"><code>",
            when);
    esc(f, v->rev[0] ? v->rev : "-");
    fprintf(
        f,
        "</code></td></tr><tr><th class=\"l\">records</th><td class=\"l\">%zu winners, %zu measurements</td></tr></table>\n",
        v->nbest, v->nmeas);
    /* GPU models */
    fputs(
        "<h3>GPUs</h3><table id=\"gpus\"><tr><th class=\"l\">model</th><th class=\"l\">fingerprint</th><th>sm</th>"
        "<th>SMs</th><th>memory GiB</th><th class=\"l\">driver</th><th class=\"l\">CUDA</th><th class=\"l\">NVRTC</th>"
        "<th>winners</th></tr>\n",
        f);
    for (size_t i = 0; i < t->n; i++) {
        const tt_gpu_info *g = &t->recs[i].gpu;
        size_t first = i;
        for (size_t j = 0; j < i; j++)
            if (strcmp(t->recs[j].gpu.fingerprint, g->fingerprint) == 0) first = j;
        if (first != i) continue;
        size_t nw = 0;
        for (size_t j = 0; j < t->n; j++)
            nw += t->recs[j].kind == TT_FLEET_BEST && strcmp(t->recs[j].rec.key.gpu, g->fingerprint) == 0;
        fputs("<tr><td class=\"l\">", f);
        esc(f, g->name[0] ? g->name : "?");
        fputs("</td><td class=\"l\"><code>", f);
        esc(f, g->fingerprint);
        fprintf(f, "</code></td><td>%d%d</td><td>%d</td><td>%.1f</td><td class=\"l\">", (int)g->cc_major,
                (int)g->cc_minor, (int)g->sm_count, (double)g->mem_bytes / (1 << 30));
        esc(f, g->driver[0] ? g->driver : "-");
        fputs("</td><td class=\"l\">", f);
        esc(f, g->cuda[0] ? g->cuda : "-");
        fputs("</td><td class=\"l\">", f);
        esc(f, g->nvrtc[0] ? g->nvrtc : "-");
        fprintf(f, "</td><td>%zu</td></tr>\n", nw);
    }
    fputs("</table>\n", f);
    /* kernel revisions and nodes */
    fputs(
        "<h3>Kernel revisions and nodes</h3><table id=\"revs\"><tr><th class=\"l\">revision</th><th class=\"l\">"
        "state</th><th>winners</th></tr>\n",
        f);
    for (size_t i = 0; i < t->n; i++) {
        const char *r = t->recs[i].rec.key.rev;
        size_t first = i, nw = 0;
        for (size_t j = 0; j < i; j++)
            if (strcmp(t->recs[j].rec.key.rev, r) == 0) first = j;
        if (first != i) continue;
        for (size_t j = 0; j < t->n; j++)
            nw += t->recs[j].kind == TT_FLEET_BEST && strcmp(t->recs[j].rec.key.rev, r) == 0;
        fputs("<tr><td class=\"l\"><code>", f);
        esc(f, r);
        fprintf(f, "</code></td><td class=\"l\">%s</td><td>%zu</td></tr>\n",
                strcmp(r, v->rev) == 0 ? "current" : "stale", nw);
    }
    fputs(
        "</table><table id=\"nodes\"><tr><th class=\"l\">measured on node</th><th>records</th><th class=\"l\">"
        "newest</th></tr>\n",
        f);
    for (size_t i = 0; i < t->n; i++) {
        const char *nd = t->recs[i].rec.node;
        size_t first = i, nr = 0;
        int64_t newest = 0;
        for (size_t j = 0; j < i; j++)
            if (strcmp(t->recs[j].rec.node, nd) == 0) first = j;
        if (first != i) continue;
        for (size_t j = 0; j < t->n; j++)
            if (strcmp(t->recs[j].rec.node, nd) == 0) {
                nr++;
                if (t->recs[j].rec.measured_at > newest) newest = t->recs[j].rec.measured_at;
            }
        fmt_time(newest, when, sizeof when);
        fputs("<tr><td class=\"l\">", f);
        esc(f, nd[0] ? nd : "?");
        fprintf(f, "</td><td>%zu</td><td class=\"l\">%s</td></tr>\n", nr, when);
    }
    fputs("</table>\n", f);
}

static int dbl_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n) {
    if (!n) return 0;
    qsort(v, n, sizeof *v, dbl_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int summary(FILE *f, const view *v) {
    size_t keys = 0, stale = 0, failed = 0, skipped = 0, nr = 0;
    double *ratios = malloc((v->n + 1) * sizeof *ratios);
    if (!ratios) return TT_ERR_NOMEM;
    for (size_t i = 0; i < v->n; i++) {
        const kinfo *k = &v->k[i];
        failed += (size_t)k->nfailed;
        skipped += (size_t)k->nskipped;
        if (!k->best) continue;
        keys++;
        stale += (size_t)k->stale;
        if (k->def > 0) ratios[nr++] = k->best->rec.tflops / k->def;
    }
    fprintf(f,
            "<h2>Summary</h2><table id=\"summary\"><tr><th class=\"l\">tuned keys</th><td>%zu</td></tr>"
            "<tr><th class=\"l\">stale winners (another kernel revision)</th><td>%zu</td></tr>"
            "<tr><th class=\"l\">failed variants (wrong, fault, timeout)</th><td>%zu</td></tr>"
            "<tr><th class=\"l\">skipped variants</th><td>%zu</td></tr>",
            keys, stale, failed, skipped);
    if (nr)
        fprintf(f, "<tr><th class=\"l\">tuned/default, median over %zu keys</th><td>%.2f&times;</td></tr>",
                nr, median(ratios, nr));
    fputs("</table>\n", f);
    if (!v->nmeas)
        fputs("<p class=\"note\">This table holds winners only: the default's and each family's TFLOP/s, the "
              "spread of every variant and the failures come from its measurements (<code>tiletune export "
              "--all-measurements</code>).</p>\n",
              f);
    free(ratios);
    return 0;
}

static void cfg_cell(FILE *f, const tt_config *c) {
    char t[TT_CONFIG_TEXT_MAX];
    if (tt_config_format(c, t, sizeof t) < 0) snprintf(t, sizeof t, "?");
    fputs("<td class=\"l\"><code>", f);
    esc(f, t);
    fputs("</code></td>", f);
}

/* One group: its charts and its keys' table. */
static int group_section(FILE *f, const view *v, size_t i, size_t j, int gno) {
    int cap = (int)(j - i);
    enum { NSERIES = 2 + FAMILIES + 2 };
    gseries g = {malloc((size_t)cap * NSERIES * sizeof(int64_t)),
                 malloc((size_t)cap * NSERIES * sizeof(double)), cap};
    if (!g.x || !g.y) {
        free(g.x);
        free(g.y);
        return TT_ERR_NOMEM;
    }
    series tf[2 + FAMILIES];
    tf[0] = take(&g, 0, "winner", "#1f77b4", 0);
    tf[1] = take(&g, 1, "default", "#d62728", 1);
    for (int fi = 0; fi < FAMILIES; fi++)
        tf[2 + fi] = take(&g, 2 + fi, family_series[fi].series, family_series[fi].color, 0);
    series ratio = take(&g, 2 + FAMILIES, "tuned/default", "#ff7f0e", 0),
           spread = take(&g, 3 + FAMILIES, "winner spread %", "#8c564b", 0);
    for (size_t m = i; m < j; m++) {
        const kinfo *k = &v->k[m];
        if (!k->shown) continue;
        int64_t x = k->key.seqlen_q;
        put(&tf[0], x, k->best->rec.tflops);
        if (k->def > 0) put(&tf[1], x, k->def), put(&ratio, x, k->best->rec.tflops / k->def);
        for (int fi = 0; fi < FAMILIES; fi++)
            if (k->fam[fi] > 0) put(&tf[2 + fi], x, k->fam[fi]);
        if (k->best->rec.spread >= 0) put(&spread, x, k->best->rec.spread * 100);
    }
    fprintf(
        f,
        "<section class=\"group\" id=\"g%d\" data-gpu=\"%s\" data-dtype=\"%s\" data-hdim=\"%d\" data-causal=\"%d\"><h3>",
        gno, v->k[i].key.gpu, tt__dtype_name(v->k[i].key.dtype), (int)v->k[i].key.head_dim,
        (int)v->k[i].key.causal);
    group_title(f, v, &v->k[i].key);
    fputs("</h3>\n", f);
    chart(f, "TFLOP/s of the winner, the built-in default and each family's best", "TFLOP/s", tf,
          2 + FAMILIES);
    chart(f, "tuned/default: the winner's speed over the built-in default's", "tuned/default (x)", &ratio, 1);
    chart(f, "measurement spread of the winner ((p80-p20)/median)", "spread %", &spread, 1);
    fputs("<table class=\"keys\"><tr><th>seqlen_q</th><th>seqlen_k</th><th class=\"l\">revision</th>"
          "<th class=\"l\">winner config</th><th>TFLOP/s</th><th>default TFLOP/s</th><th>tuned/default</th>"
          "<th>spread %</th><th>measured</th><th>failed</th><th>skipped</th></tr>\n",
          f);
    for (size_t m = i; m < j; m++) {
        const kinfo *k = &v->k[m];
        if (!k->best && !k->nfailed && !k->nskipped && !k->nok) continue;
        fprintf(
            f,
            "<tr class=\"key%s\" data-seqlen=\"%lld\" data-shown=\"%d\"><td>%lld</td><td>%lld</td><td class=\"l\"><code>%s</code>%s</td>",
            k->stale ? " stale" : "", (long long)k->key.seqlen_q, k->shown, (long long)k->key.seqlen_q,
            (long long)k->key.seqlen_k, k->key.rev, k->stale ? " (stale)" : "");
        if (k->best) {
            cfg_cell(f, &k->best->rec.config);
            fprintf(f, "<td class=\"tflops\">%.2f</td>", k->best->rec.tflops);
        } else {
            fputs("<td class=\"l warn\">no winner</td><td class=\"tflops\">-</td>", f);
        }
        if (k->def > 0) fprintf(f, "<td>%.2f%s</td>", k->def, k->def_skipped ? "<sup>s</sup>" : "");
        else fputs("<td>-</td>", f);
        if (k->def > 0 && k->best) fprintf(f, "<td>%.2f&times;</td>", k->best->rec.tflops / k->def);
        else fputs("<td>-</td>", f);
        if (k->best && k->best->rec.spread >= 0) fprintf(f, "<td>%.1f</td>", k->best->rec.spread * 100);
        else fputs("<td>-</td>", f);
        fprintf(f, "<td>%d</td><td%s>%d</td><td>%d</td></tr>\n", k->nok, k->nfailed ? " class=\"warn\"" : "",
                k->nfailed, k->nskipped);
    }
    fputs("</table>", f);
    for (size_t m = i; m < j; m++)
        if (v->k[m].def_skipped) {
            fputs("<p class=\"note\"><sup>s</sup> the default's timing at the winner's batch was reported "
                  "skipped: a decode key's default faster there than the config kept for both batches, or "
                  "one fast mode dropped after a partial timing.</p>",
                  f);
            break;
        }
    fputs("</section>\n", f);
    free(g.x);
    free(g.y);
    return 0;
}

/* The failed variants, one row each (the first 200). */
static void failures(FILE *f, const view *v) {
    size_t shown = 0, total = 0;
    for (size_t i = 0; i < v->t->n; i++) {
        const tt_fleet_rec *r = &v->t->recs[i];
        if (r->kind != TT_FLEET_MEASUREMENT || r->rec.status == TT_MEAS_OK ||
            r->rec.status == TT_MEAS_SKIPPED)
            continue;
        if (!total++)
            fputs(
                "<h2>Failed variants</h2><table id=\"failed\"><tr><th class=\"l\">key</th><th class=\"l\">config</th>"
                "<th class=\"l\">status</th><th class=\"l\">node</th><th class=\"l\">when</th></tr>\n",
                f);
        if (shown >= 200) continue;
        shown++;
        char key[TT_LINE_MAX], when[64];
        if (tt__key_format(&r->rec.key, key, sizeof key) < 0) snprintf(key, sizeof key, "?");
        fmt_time(r->rec.measured_at, when, sizeof when);
        fputs("<tr><td class=\"l\"><code>", f);
        esc(f, key);
        fputs("</code></td>", f);
        cfg_cell(f, &r->rec.config);
        fprintf(f, "<td class=\"l\">%s</td><td class=\"l\">", tt_meas_status_name(r->rec.status));
        esc(f, r->rec.node);
        fprintf(f, "</td><td class=\"l\">%s</td></tr>\n", when);
    }
    if (total) fprintf(f, "</table>%s\n", total > shown ? "<p class=\"note\">(the first 200)</p>" : "");
}

static int body(FILE *f, const view *v) {
    int rc = summary(f, v);
    if (rc) return rc;
    fputs("<h2>Keys</h2>\n", f);
    int gno = 0;
    for (size_t i = 0; i < v->n;) {
        size_t j = i;
        while (j < v->n && group_cmp(&v->k[i].key, &v->k[j].key) == 0) j++;
        if ((rc = group_section(f, v, i, j, gno++))) return rc;
        i = j;
    }
    if (!v->n) fputs("<p class=\"note\">The table is empty: nothing has been tuned.</p>\n", f);
    failures(f, v);
    provenance(f, v);
    return 0;
}

/* ---- what changed --------------------------------------------------------------------- */

/* The shown winners of a and b, joined on the key without its revision. */
static int changes(FILE *f, const view *a, const view *b) {
    size_t i = 0, j = 0, same = 0, differ = 0, only_a = 0, only_b = 0, nchg = 0;
    double *chg = malloc((a->n + b->n + 1) * sizeof *chg);
    int64_t *gx = malloc((a->n + b->n + 1) * 2 * sizeof *gx);
    double *gy = malloc((a->n + b->n + 1) * 2 * sizeof *gy);
    if (!chg || !gx || !gy) {
        free(chg);
        free(gx);
        free(gy);
        return TT_ERR_NOMEM;
    }
    fputs("<h2>What changed</h2>\n<p>From <b>", f);
    esc(f, a->t->name);
    fputs("</b> (A) to <b>", f);
    esc(f, b->t->name);
    fputs("</b> (B): winners compared per key; a revision change alone is not a change of key.</p>\n", f);
    fputs(
        "<table id=\"changes\"><tr><th class=\"l\">group</th><th>seqlen_q</th><th>seqlen_k</th><th class=\"l\">what</th>"
        "<th class=\"l\">config A</th><th class=\"l\">config B</th><th>TFLOP/s A</th><th>TFLOP/s B</th><th>change</th></tr>\n",
        f);
    while (i < a->n || j < b->n) {
        if (i < a->n && !a->k[i].shown) {
            i++;
            continue;
        }
        if (j < b->n && !b->k[j].shown) {
            j++;
            continue;
        }
        int c = i >= a->n ? 1 : j >= b->n ? -1 : point_cmp(&a->k[i].key, &b->k[j].key);
        const kinfo *ka = c <= 0 ? &a->k[i] : NULL, *kb = c >= 0 ? &b->k[j] : NULL;
        if (c <= 0) i++;
        if (c >= 0) j++;
        const char *what;
        double ta = ka ? ka->best->rec.tflops : -1, tb = kb ? kb->best->rec.tflops : -1, pct = 0;
        if (!kb) what = "only in A", only_a++;
        else if (!ka) what = "only in B", only_b++;
        else if (tt_config_equal(&ka->best->rec.config, &kb->best->rec.config)) what = "same config", same++;
        else what = "config changed", differ++;
        if (ta > 0 && tb >= 0) chg[nchg++] = pct = (tb - ta) / ta * 100;
        if (ka && kb && !strcmp(what, "same config") && fabs(pct) < 1) continue;
        const kinfo *any = ka ? ka : kb;
        fputs("<tr class=\"change\"><td class=\"l\">", f);
        group_title(f, ka ? a : b, &any->key);
        fprintf(f, "</td><td>%lld</td><td>%lld</td><td class=\"l\">%s</td>", (long long)any->key.seqlen_q,
                (long long)any->key.seqlen_k, what);
        if (ka) cfg_cell(f, &ka->best->rec.config);
        else fputs("<td>-</td>", f);
        if (kb) cfg_cell(f, &kb->best->rec.config);
        else fputs("<td>-</td>", f);
        fprintf(f, ta >= 0 ? "<td>%.2f</td>" : "<td>-</td>", ta);
        fprintf(f, tb >= 0 ? "<td>%.2f</td>" : "<td>-</td>", tb);
        fprintf(f, ka && kb && ta > 0 ? "<td>%+.1f%%</td></tr>\n" : "<td>-</td></tr>\n", pct);
    }
    fputs("</table>\n", f);
    fprintf(
        f,
        "<p id=\"change-summary\">%zu keys: %zu same config, %zu config changed, %zu only in A, %zu only in B",
        same + differ + only_a + only_b, same, differ, only_a, only_b);
    if (nchg) fprintf(f, "; TFLOP/s median change %+.1f%% over %zu keys", median(chg, nchg), nchg);
    fputs(".</p>\n", f);
    /* per group: A's and B's winners */
    for (size_t gi = 0; gi < b->n;) {
        size_t gj = gi;
        while (gj < b->n && group_cmp(&b->k[gi].key, &b->k[gj].key) == 0) gj++;
        series s[2] = {{"A", "#7f7f7f", 1, 0, gx, gy},
                       {"B", "#1f77b4", 0, 0, gx + a->n + b->n + 1, gy + a->n + b->n + 1}};
        for (size_t m = 0; m < a->n; m++)
            if (a->k[m].shown && group_cmp(&a->k[m].key, &b->k[gi].key) == 0)
                put(&s[0], a->k[m].key.seqlen_q, a->k[m].best->rec.tflops);
        for (size_t m = gi; m < gj; m++)
            if (b->k[m].shown) put(&s[1], b->k[m].key.seqlen_q, b->k[m].best->rec.tflops);
        if (s[1].n) {
            fputs("<section class=\"change-group\"><h3>", f);
            group_title(f, b, &b->k[gi].key);
            fputs("</h3>\n", f);
            chart(f, "winner TFLOP/s: A against B", "TFLOP/s", s, 2);
            fputs("</section>\n", f);
        }
        gi = gj;
    }
    free(chg);
    free(gx);
    free(gy);
    return 0;
}

int tt_report_write(FILE *out, const tt_report_table *a, const tt_report_table *b) {
    view va, vb;
    memset(&vb, 0, sizeof vb);
    int rc = view_build(a, &va);
    if (!rc && b) rc = view_build(b, &vb);
    if (rc) goto out;
    const view *main_view = b ? &vb : &va;
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>tiletune report: ", out);
    esc(out, main_view->t->name);
    fprintf(out, "</title>\n<style>%s</style></head><body>\n<h1>tiletune report</h1>\n<p class=\"note\">",
            style);
    esc(out, main_view->t->name);
    fprintf(out, " &middot; tiletune %s &middot; one file, nothing fetched.</p>\n", TT_VERSION_STRING);
    if (b && (rc = changes(out, &va, &vb))) goto out;
    if (b) {
        fputs("<h1>B: ", out);
        esc(out, b->name);
        fputs("</h1>\n", out);
    }
    if ((rc = body(out, main_view))) goto out;
    fputs("</body></html>\n", out);
    if (ferror(out)) rc = TT_ERR_IO;
out:
    free(va.k);
    free(vb.k);
    return rc;
}
