/* The commands of `tiletune`: each builds one request line (docs/protocol.md),
 * sends it and prints the reply for people, or as JSON with --json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/cli.h"
#include "client/cli_fleet.h"
#include "common/key.h"
#include "tuner/fleet/shard.h"

extern const cli_opt cli_report_opts[];
int cli_cmd_report(cli *c);

/* ---- keys ------------------------------------------------------------------ */

/* clang-format off */
#define KEY_OPTS                                                                        \
    {"seqlen", "N", "query sequence length (1..16777216)", 1},                       \
    {"seqlen-k", "N", "key/value sequence length (default: --seqlen)", 0},             \
    {"hdim", "D", "head dimension: 32, 64, 96, 128 or 256", 1},                      \
    {"dtype", "T", "fp16 or bf16", 1},                                               \
    {"causal", "[=KIND]", "causal attention (top-left mask); --causal=bottom-right for the " \
                          "mask aligned to the end of the keys (default: not causal)", 0}, \
    {"group", "G", "GQA group: query heads per K/V head (default 1)", 0},              \
    {"gpu", "HEX", "GPU fingerprint (default: the daemon's GPU)", 0},                  \
    {"rev", "HEX", "kernel revision (default: the daemon's)", 0}
/* clang-format on */

/* --causal of a key: absent 0; bare, yes, 1 or top-left 1; bottom-right
 * or 2 the bottom-right mask; -1 for anything else. */
static int causal_kind(const char *s) {
    if (!s || strcmp(s, "no") == 0 || strcmp(s, "0") == 0) return 0;
    if (!*s || strcmp(s, "yes") == 0 || strcmp(s, "1") == 0 || strcmp(s, "top-left") == 0) return 1;
    if (strcmp(s, "bottom-right") == 0 || strcmp(s, "2") == 0) return 2;
    return -1;
}

/* The key of --seqlen/--hdim/... */
static int key_parse(const cli *c, tt_key_v2 *kp) {
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    int64_t v;
    int rc;
    if ((rc = cli_int_opt(c, "seqlen", 1, TT_SEQLEN_MAX, &v))) return rc;
    k.seqlen_q = k.seqlen_k = v;
    if (cli_opt_val(c, "seqlen-k")) {
        if ((rc = cli_int_opt(c, "seqlen-k", 1, TT_SEQLEN_MAX, &v))) return rc;
        k.seqlen_k = v;
    }
    if ((rc = cli_int_opt(c, "hdim", 1, 1 << 20, &v))) return rc;
    if (!tt__head_dim_supported((int32_t)v))
        return cli_usage(c, "--hdim %lld is not supported (32, 64, 96, 128 or 256)", (long long)v);
    k.head_dim = (int32_t)v;
    if (tt__dtype_parse(cli_opt_val(c, "dtype"), &k.dtype) < 0)
        return cli_usage(c, "--dtype must be fp16 or bf16, not '%s'", cli_opt_val(c, "dtype"));
    int causal = causal_kind(cli_opt_val(c, "causal"));
    if (causal < 0)
        return cli_usage(c, "--causal takes no value, or =bottom-right, not '%s'", cli_opt_val(c, "causal"));
    k.causal = causal;
    k.group = 1;
    if (cli_opt_val(c, "group")) {
        if ((rc = cli_int_opt(c, "group", 1, TT_GROUP_MAX, &v))) return rc;
        k.group = (int32_t)v;
    }
    const char *ids[2] = {"gpu", "rev"};
    char *dst[2] = {k.gpu, k.rev};
    for (int i = 0; i < 2; i++) {
        const char *s = cli_opt_val(c, ids[i]);
        if (!s) continue;
        if (!tt__is_hex_id(s)) return cli_usage(c, "--%s must be 1..32 lower-case hex digits", ids[i]);
        strcpy(dst[i], s);
    }
    *kp = k;
    return 0;
}

/* The key of --seqlen/--hdim/... as LOOKUP fields in buf. */
static int key_fields(const cli *c, char *buf, size_t len) {
    tt_key_v2 k;
    int rc = key_parse(c, &k);
    if (rc) return rc;
    if (tt__key_format(&k, buf, len) < 0) return cli_fail("key too long");
    return 0;
}

/* ---- ping ------------------------------------------------------------------ */

static const cli_opt ping_opts[] = {{NULL}};

static int cmd_ping(cli *c) {
    tt__reply r;
    int64_t t0 = tt__now_ns();
    if (cli_request(c, "PING", &r)) return CLI_FAIL;
    double ms = (double)(tt__now_ns() - t0) / 1e6;
    printf("%s from %s in %.2f ms\n", *r.word ? r.word : "OK", c->socket, ms);
    tt__reply_free(&r);
    return 0;
}

/* ---- status ---------------------------------------------------------------- */

static const cli_opt status_opts[] = {{"json", NULL, "print a JSON object", 0}, {NULL}};

static int print_fields(const cli *c, const tt__msg *m) {
    if (cli_opt_val(c, "json")) return cli_json_print(cli_json_fields(m));
    const char *keys[TT_FIELDS_MAX], *vals[TT_FIELDS_MAX];
    for (int i = 0; i < m->nfields; i++) {
        keys[i] = m->f[i].key;
        vals[i] = m->f[i].value;
    }
    cli_kv(keys, vals, m->nfields);
    return 0;
}

static int cmd_status(cli *c) {
    tt__reply r;
    if (cli_request(c, "STATUS", &r)) return CLI_FAIL;
    int rc = print_fields(c, &r.msg);
    const char *t = tt__msg_get(&r.msg, "tuning"), *why = tt__msg_get(&r.msg, "reason");
    if (!cli_opt_val(c, "json") && t && strcmp(t, "waiting") == 0 && why && strcmp(why, "no-gpu") == 0)
        printf("\nTuning needs a GPU: this node has none the daemon can use; it serves lookups.\n");
    tt__reply_free(&r);
    return rc;
}

/* ---- stats ----------------------------------------------------------------- */

static const cli_opt stats_opts[] = {
    {"prom", NULL, "the Prometheus text exposition format, as the daemon sends it", 0},
    {"json", NULL, "print a JSON object of counters", 0},
    {"output", "FILE", "with --prom: write FILE atomically (node_exporter's textfile collector)", 0},
    {NULL},
};

static int cmd_stats(cli *c) {
    int prom = cli_opt_val(c, "prom") != NULL, json = cli_opt_val(c, "json") != NULL;
    const char *out = cli_opt_val(c, "output");
    if (prom && json) return cli_usage(c, "--prom and --json exclude each other");
    if (out && !prom) return cli_usage(c, "--output goes with --prom");
    tt__reply r;
    if (cli_request(c, prom ? "STATS format=prometheus" : "STATS", &r)) return CLI_FAIL;
    int rc = 0;
    if (prom && out) {
        /* the collector reads the file whenever it likes: whole or not at all */
        char *text = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&text, &len);
        for (int i = 0; m && i < r.nbody; i++) fprintf(m, "%s\n", r.body[i]);
        if (!m || fclose(m) != 0) rc = cli_fail("out of memory");
        else rc = cli_write_atomic(out, text, len);
        free(text);
    } else if (prom) {
        for (int i = 0; i < r.nbody; i++) puts(r.body[i]);
    } else {
        json_t *o = json ? json_object() : NULL;
        const char **cells = calloc((size_t)r.nbody * 2 + 1, sizeof *cells);
        int n = 0;
        for (int i = 0; cells && i < r.nbody; i++) {
            char *sp = strchr(r.body[i], ' ');
            if (!sp) continue;
            *sp = '\0';
            if (o) json_object_set_new(o, r.body[i], cli_json_value(sp + 1));
            cells[2 * n] = r.body[i];
            cells[2 * n + 1] = sp + 1;
            n++;
        }
        if (!cells) rc = cli_fail("out of memory");
        else if (o) rc = cli_json_print(o), o = NULL;
        else cli_table(cells, n, 2, 2u);
        json_decref(o);
        free(cells);
    }
    tt__reply_free(&r);
    return rc;
}

/* ---- lookup ---------------------------------------------------------------- */

static const cli_opt lookup_opts[] = {
    KEY_OPTS,
    {"json", NULL, "print a JSON object", 0},
    {"offline", NULL, "ask no daemon: the built-in default the library falls back to", 0},
    {NULL},
};

/* A config's canonical text as a JSON object of knobs. */
static json_t *config_json(const char *text) {
    json_t *o = json_object();
    char *copy = strdup(text);
    for (char *save = NULL, *kv = copy ? strtok_r(copy, ",", &save) : NULL; o && kv;
         kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) continue;
        *eq = '\0';
        json_object_set_new(o, kv, cli_json_value(eq + 1));
    }
    free(copy);
    return o;
}

/* What libtiletune answers with no daemon: the portable built-in default,
 * as a LOOKUP reply would carry it. */
static int offline_reply(const cli *c, tt__reply *r) {
    tt_key_v2 k;
    tt_config cfg;
    char text[TT_CONFIG_TEXT_MAX];
    int rc = key_parse(c, &k);
    if (rc) return rc;
    if (tt_config_default_v2(&k, &cfg) < 0 || tt_config_format(&cfg, text, sizeof text) < 0)
        return cli_fail("no built-in default for this key");
    char line[TT_LINE_MAX];
    int n = snprintf(line, sizeof line, "OK match=default config=%s seqlen_q=%lld seqlen_k=%lld", text,
                     (long long)k.seqlen_q, (long long)k.seqlen_k);
    memset(r, 0, sizeof *r);
    char *own = n > 0 && (size_t)n < sizeof line ? strdup(line) : NULL;
    if (!own || tt__reply_parse(own, r) < 0)
        return cli_fail("the built-in default does not format as a reply");
    return 0;
}

static int cmd_lookup(cli *c) {
    char line[TT_LINE_MAX] = "LOOKUP ";
    int rc = key_fields(c, line + 7, sizeof line - 7);
    if (rc) return rc;
    tt__reply r;
    int offline = cli_opt_val(c, "offline") != NULL;
    if (offline) {
        if (cli_opt_val(c, "gpu") || cli_opt_val(c, "rev"))
            return cli_usage(c, "--offline answers the built-in default: no --gpu or --rev");
        if ((rc = offline_reply(c, &r))) return rc;
    } else if (cli_request(c, line, &r)) {
        return CLI_FAIL;
    }
    const char *match = tt__msg_get(&r.msg, "match"), *cfg = tt__msg_get(&r.msg, "config");
    const char *sq = tt__msg_get(&r.msg, "seqlen_q"), *sk = tt__msg_get(&r.msg, "seqlen_k");
    const char *tf = tt__msg_get(&r.msg, "tflops"), *grp = tt__msg_get(&r.msg, "group");
    tt_lookup_result res;
    if (!match || !cfg || !sq || !sk || tt__lookup_reply_parse(&r.msg, &res) < 0) {
        tt__reply_free(&r);
        return cli_fail(
            "the daemon's LOOKUP reply is not one the library would accept (a field missing or out "
            "of range)");
    }
    if (cli_opt_val(c, "json")) {
        json_t *o = json_object();
        json_object_set_new(o, "match", json_string(match));
        json_object_set_new(o, "config", config_json(cfg));
        json_object_set_new(o, "config_text", json_string(cfg));
        json_object_set_new(o, "seqlen_q", cli_json_value(sq));
        json_object_set_new(o, "seqlen_k", cli_json_value(sk));
        json_object_set_new(o, "group", grp ? cli_json_value(grp) : json_integer(1));
        json_object_set_new(o, "tflops", tf ? cli_json_value(tf) : json_null());
        json_object_set_new(o, "stale", json_boolean(tt__msg_get(&r.msg, "stale") != NULL));
        rc = cli_json_print(o);
    } else {
        char tuned[96], knobs[TT_CONFIG_TEXT_MAX];
        if (strcmp(match, "default") == 0)
            snprintf(tuned, sizeof tuned, "%s",
                     tt__msg_get(&r.msg, "stale") ? "tuned for another kernel revision only (tune --stale)"
                                                  : "nothing tuned: the built-in default");
        else
            snprintf(tuned, sizeof tuned, "seqlen_q=%s seqlen_k=%s%s%s", sq, sk, grp ? " group=" : "",
                     grp ? grp : "");
        snprintf(knobs, sizeof knobs, "%s", cfg);
        for (char *p = knobs; *p; p++)
            if (*p == ',') *p = ' ';
        const char *keys[] = {"match", "config", "tuned for", "tflops"};
        const char *vals[] = {match, knobs, tuned, tf ? tf : "-"};
        cli_kv(keys, vals, 4);
    }
    tt__reply_free(&r);
    return rc;
}

/* ---- tune ------------------------------------------------------------------ */

static const cli_opt tune_opts[] = {
    {"seqlen", "LIST", "sequence lengths, comma-separated (e.g. 512,1024,4096)", 0},
    {"hdim", "LIST", "head dimensions, comma-separated (32,64,96,128,256)", 0},
    {"dtype", "LIST", "fp16, bf16 or fp16,bf16", 0},
    {"causal", "[=LIST]",
     "causal keys only; --causal=0,1 (or no, yes, both, bottom-right) for a list "
     "(default: not causal)",
     0},
    {"causal-both", NULL, "both non-causal and causal keys (as --causal=0,1)", 0},
    {"seqlen-k", "LIST", "key/value sequence lengths (default: each --seqlen)", 0},
    {"group", "LIST", "GQA groups, comma-separated (default 1)", 0},
    {"default-grid", NULL,
     "the node's default grid: seqlen 128..32768 (powers of 2), hdim 64,128,256, fp16+bf16, causal both", 0},
    {"inference-grid", NULL,
     "the inference grid: seqlen_q 1..512 x seqlen_k 1k..128k x GQA group 1,4,8, hdim 128,64, bf16+fp16 (docs/tuning.md)",
     0},
    {"stale", NULL,
     "re-tune every key whose winner is from another kernel revision (none: nothing to do, exit 0)", 0},
    {"mode", "M", "exhaustive (default) or fast", 0},
    {"batch", "N", "batch size to measure with (default: the daemon's rule)", 0},
    {"heads", "N", "heads to measure with (default: the daemon's rule)", 0},
    {"gpu", "HEX", "GPU fingerprint (default: the daemon's GPU)", 0},
    {"shard", "I/N", "only shard I of N of the grid, for a fleet (docs/fleet.md)", 0},
    {"wait", NULL, "wait for the job and show its progress (as 'tiletune watch')", 0},
    {"json", NULL, "with --wait: JSON events, one per line", 0},
    {NULL},
};

/* --causal of tune as the TUNE list: "0", "1", "0,1", ...; NULL if bad. */
static const char *causal_list(const char *s, char *buf, size_t len) {
    if (!*s || strcmp(s, "yes") == 0) return "1";
    if (strcmp(s, "no") == 0) return "0";
    if (strcmp(s, "both") == 0) return "0,1";
    char *copy = strdup(s);
    size_t at = 0;
    int ok = copy && s[0] != ',' && s[strlen(s) - 1] != ',' && !strstr(s, ",,");
    buf[0] = '\0';
    for (char *save = NULL, *it = ok ? strtok_r(copy, ",", &save) : NULL; ok && it;
         it = strtok_r(NULL, ",", &save)) {
        int k = causal_kind(it);
        if (k < 0 || !strcmp(it, "") || at + 3 > len) ok = 0;
        else at += (size_t)snprintf(buf + at, len - at, "%s%d", at ? "," : "", k);
    }
    free(copy);
    return ok ? buf : NULL;
}

/* A comma list whose items all pass `ok`; usage error otherwise. */
static int check_list(const cli *c, const char *name, int (*ok)(const char *)) {
    const char *s = cli_opt_val(c, name);
    char *copy = strdup(s);
    if (!copy) return cli_fail("out of memory");
    int rc = 0;
    if (s[0] == ',' || s[strlen(s) - 1] == ',' || strstr(s, ",,"))
        rc = cli_usage(c, "--%s: empty item in '%s'", name, s);
    for (char *save = NULL, *it = strtok_r(copy, ",", &save); !rc && it; it = strtok_r(NULL, ",", &save))
        if (!ok(it)) rc = cli_usage(c, "--%s: '%s' is not valid", name, it);
    free(copy);
    return rc;
}

static int ok_seqlen(const char *s) {
    int64_t v;
    return tt__parse_i64(s, 1, TT_SEQLEN_MAX, &v) == 0;
}
static int ok_hdim(const char *s) {
    int64_t v;
    return tt__parse_i64(s, 1, 1024, &v) == 0 && tt__head_dim_supported((int32_t)v);
}
static int ok_dtype(const char *s) {
    tt_dtype d;
    return tt__dtype_parse(s, &d) == 0;
}
static int ok_group(const char *s) {
    int64_t v;
    return tt__parse_i64(s, 1, TT_GROUP_MAX, &v) == 0;
}

static int watch_job(cli *c, int64_t job, int json, int interval_ms);

/* The default grid of a node: what `setup-and-run` pre-tunes. */
#define DEFAULT_GRID                              \
    "dtype=fp16,bf16 hdim=64,128,256 causal=0,1 " \
    "seqlen=128,256,512,1024,2048,4096,8192,16384,32768"

static int cmd_tune(cli *c) {
    int rc;
    int grid = cli_opt_val(c, "default-grid") != NULL, stale = cli_opt_val(c, "stale") != NULL;
    int igrid = cli_opt_val(c, "inference-grid") != NULL;
    const char *lists[] = {"seqlen", "hdim", "dtype", "causal", "causal-both", "seqlen-k", "group"};
    int given = 0, needed = 0;
    for (int i = 0; i < 7; i++) given += cli_opt_val(c, lists[i]) != NULL;
    for (int i = 0; i < 3; i++) needed += cli_opt_val(c, lists[i]) != NULL;
    if (grid + igrid + stale + (given > 0) > 1)
        return cli_usage(
            c,
            "give one of --default-grid, --inference-grid, --stale, or --seqlen/--hdim/--dtype (and --causal)");
    if (!grid && !igrid && !stale && needed < 3)
        return cli_usage(
            c, "tune needs --seqlen, --hdim and --dtype (or --default-grid, --inference-grid or --stale)");
    grid += igrid; /* from here on, both grids are "a grid" */
    if (cli_opt_val(c, "causal") && cli_opt_val(c, "causal-both"))
        return cli_usage(c, "give --causal or --causal-both, not both");
    if (stale && cli_opt_val(c, "shard")) return cli_usage(c, "--stale takes no --shard");
    if (cli_opt_val(c, "json") && !cli_opt_val(c, "wait")) return cli_usage(c, "--json goes with --wait");
    if (!grid && !stale &&
        ((rc = check_list(c, "seqlen", ok_seqlen)) || (rc = check_list(c, "hdim", ok_hdim)) ||
         (rc = check_list(c, "dtype", ok_dtype))))
        return rc;
    if (!grid && !stale &&
        ((cli_opt_val(c, "seqlen-k") && (rc = check_list(c, "seqlen-k", ok_seqlen))) ||
         (cli_opt_val(c, "group") && (rc = check_list(c, "group", ok_group)))))
        return rc;
    const char *cl = NULL;
    char clbuf[64];
    if (!grid && !stale) {
        const char *causal = cli_opt_val(c, "causal");
        cl = cli_opt_val(c, "causal-both") ? "0,1" : !causal ? "0" : causal_list(causal, clbuf, sizeof clbuf);
        if (!cl)
            return cli_usage(
                c, "--causal takes no value, or a list of no, yes, both, bottom-right (0, 1, 2), not '%s'",
                causal);
    }
    const char *mode = cli_opt_val(c, "mode");
    if (mode && strcmp(mode, "exhaustive") != 0 && strcmp(mode, "fast") != 0)
        return cli_usage(c, "--mode must be exhaustive or fast, not '%s'", mode);
    int64_t v;
    if (cli_opt_val(c, "batch") && (rc = cli_int_opt(c, "batch", 1, 65535, &v))) return rc;
    if (cli_opt_val(c, "heads") && (rc = cli_int_opt(c, "heads", 1, 1 << 16, &v))) return rc;
    const char *gpu = cli_opt_val(c, "gpu");
    if (gpu && !tt__is_hex_id(gpu)) return cli_usage(c, "--gpu must be 1..32 lower-case hex digits");
    const char *shard = cli_opt_val(c, "shard");
    int si, sn;
    char serr[256];
    if (shard && tt_shard_parse(shard, &si, &sn, serr, sizeof serr) < 0)
        return cli_usage(c, "--shard: %s", serr);

    char line[TT_LINE_MAX + 64];
    int n;
    if (igrid) n = snprintf(line, sizeof line, "TUNE grid=inference");
    else if (grid) n = snprintf(line, sizeof line, "TUNE " DEFAULT_GRID);
    else if (stale) n = snprintf(line, sizeof line, "TUNE stale=1");
    else
        n = snprintf(line, sizeof line, "TUNE dtype=%s hdim=%s causal=%s seqlen=%s", cli_opt_val(c, "dtype"),
                     cli_opt_val(c, "hdim"), cl, cli_opt_val(c, "seqlen"));
    const char *extra[] = {"mode", "batch", "heads", "gpu", "shard", "seqlen-k", "group"};
    const char *field[] = {"mode", "batch", "heads", "gpu", "shard", "seqlen_k", "group"};
    /* snprintf returns the length it wanted: once the lists overflow the
     * buffer, appending at line + n would write past it. */
    for (int i = 0; i < 7 && n < TT_LINE_MAX; i++)
        if (cli_opt_val(c, extra[i]))
            n += snprintf(line + n, sizeof line - (size_t)n, " %s=%s", field[i], cli_opt_val(c, extra[i]));
    if (n >= TT_LINE_MAX) return cli_usage(c, "the lists are too long for one request");
    tt__reply r;
    if (cli_request_raw(c, line, &r)) return CLI_FAIL;
    if (r.status < 0 && stale && r.code && strcmp(r.code, "notfound") == 0) {
        /* nothing stale is nothing to do, not a failure */
        printf("nothing to re-tune: %s\n", *r.message ? r.message : "no stale keys");
        tt__reply_free(&r);
        return CLI_OK;
    }
    if (r.status < 0) {
        cli_fail("the daemon refused: %s (%s)", *r.message ? r.message : tt_strerror(r.status), r.code);
        tt__reply_free(&r);
        return CLI_FAIL;
    }
    const char *job = tt__msg_get(&r.msg, "job"), *keys = tt__msg_get(&r.msg, "keys");
    int64_t id = 0;
    if (!job || tt__parse_i64(job, 1, INT64_MAX, &id) < 0) {
        tt__reply_free(&r);
        return cli_fail("the daemon's TUNE reply lacks a job number");
    }
    if (!cli_opt_val(c, "json"))
        printf("job %s queued: %s keys%s\n", job, keys ? keys : "?", stale ? " (stale)" : "");
    tt__reply_free(&r);
    if (cli_opt_val(c, "wait")) return watch_job(c, id, cli_opt_val(c, "json") != NULL, 1000);
    /* Say plainly when the job cannot start (e.g. no GPU): a queued job
     * that silently never runs is the worst outcome of a tune command. */
    if (cli_request(c, "STATUS", &r) == 0) {
        const char *t = tt__msg_get(&r.msg, "tuning"), *why = tt__msg_get(&r.msg, "reason");
        if (t && strcmp(t, "waiting") == 0)
            printf("tuning is waiting: %s%s\n", why ? why : "unknown reason",
                   why && strcmp(why, "no-gpu") == 0 ? " (tuning needs a GPU; the job stays queued)" : "");
        tt__reply_free(&r);
    }
    return 0;
}

/* ---- jobs ------------------------------------------------------------------ */

static const cli_opt jobs_opts[] = {
    {"all", NULL, "include finished jobs", 0}, {"json", NULL, "print a JSON array", 0}, {NULL}};

static int cmd_jobs(cli *c) {
    int json = cli_opt_val(c, "json") != NULL;
    tt__reply r;
    if (cli_request(c, cli_opt_val(c, "all") ? "JOBS all=1" : "JOBS", &r)) return CLI_FAIL;
    int rc = 0, n = 0;
    tt__msg *m = calloc((size_t)r.nbody + 1, sizeof *m);
    char **lines = calloc((size_t)r.nbody + 1, sizeof *lines);
    if (!m || !lines) rc = cli_fail("out of memory");
    /* each body line is "job=.. state=..": parse it as fields of a verb */
    for (int i = 0; !rc && i < r.nbody; i++) {
        size_t len = strlen(r.body[i]);
        const char *perr;
        if (!(lines[n] = malloc(len + 3))) {
            rc = cli_fail("out of memory");
            break;
        }
        memcpy(lines[n], "J ", 2);
        memcpy(lines[n] + 2, r.body[i], len + 1);
        if (tt__proto_parse(lines[n], len + 2, &m[n], &perr) < 0)
            rc = cli_fail("the daemon sent a bad JOBS line: %s", perr);
        n++;
    }
    if (!rc && json) {
        json_t *a = json_array();
        for (int i = 0; a && i < n; i++) json_array_append_new(a, cli_json_fields(&m[i]));
        rc = cli_json_print(a);
    } else if (!rc && n == 0) {
        printf(cli_opt_val(c, "all") ? "no jobs\n"
                                     : "no queued or running jobs (--all shows finished ones)\n");
    } else if (!rc) {
        /* columns: the fields of the first line, in its order; a header row */
        int ncols = m[0].nfields < 32 ? m[0].nfields : 32;
        const char **cells = calloc(((size_t)n + 1) * (size_t)ncols, sizeof *cells);
        char(*own)[32] = calloc(((size_t)n + 1) * (size_t)ncols, sizeof *own);
        unsigned right = 0;
        for (int k = 0; cells && own && k < ncols; k++) {
            const char *key = m[0].f[k].key;
            if (strcmp(key, "state") != 0 && strcmp(key, "mode") != 0 && strcmp(key, "created") != 0)
                right |= 1u << k;
            for (int j = 0; key[j] && j < 31; j++)
                own[k][j] = (char)(key[j] >= 'a' && key[j] <= 'z' ? key[j] - 'a' + 'A' : key[j]);
            cells[k] = own[k];
            for (int i = 0; i < n; i++) {
                size_t at = (size_t)(i + 1) * (size_t)ncols + (size_t)k;
                const char *v = tt__msg_get(&m[i], key);
                int64_t t;
                cells[at] = v ? v : "-";
                if (v && strcmp(key, "created") == 0 && tt__parse_i64(v, 0, INT64_MAX, &t) == 0) {
                    time_t tt = (time_t)t;
                    struct tm tm;
                    if (localtime_r(&tt, &tm) && strftime(own[at], sizeof own[at], "%Y-%m-%d %H:%M", &tm))
                        cells[at] = own[at];
                }
            }
        }
        if (cells && own) cli_table(cells, n + 1, ncols, right);
        else rc = cli_fail("out of memory");
        free(cells);
        free(own);
    }
    for (int i = 0; lines && i < n; i++) free(lines[i]);
    free(lines);
    free(m);
    tt__reply_free(&r);
    return rc;
}

/* ---- cancel ---------------------------------------------------------------- */

static const cli_opt cancel_opts[] = {{NULL}};

static int cmd_cancel(cli *c) {
    int64_t id;
    if (tt__parse_i64(c->pos[0], 1, INT64_MAX, &id) < 0)
        return cli_usage(c, "JOB must be a job number, not '%s'", c->pos[0]);
    char line[64];
    snprintf(line, sizeof line, "CANCEL job=%lld", (long long)id);
    tt__reply r;
    if (cli_request(c, line, &r)) return CLI_FAIL;
    const char *st = tt__msg_get(&r.msg, "state");
    printf("job %lld %s\n", (long long)id, st ? st : "cancelled");
    tt__reply_free(&r);
    return 0;
}

/* ---- forget ---------------------------------------------------------------- */

static const cli_opt forget_opts[] = {KEY_OPTS, {NULL}};

static int cmd_forget(cli *c) {
    char line[TT_LINE_MAX] = "FORGET ";
    int rc = key_fields(c, line + 7, sizeof line - 7);
    if (rc) return rc;
    tt__reply r;
    if (cli_request(c, line, &r)) return CLI_FAIL;
    const char *f = tt__msg_get(&r.msg, "forgot");
    if (f && strcmp(f, "0") != 0)
        printf("forgot the tuned config of %s (its measurements stay as history)\n", line + 7);
    else printf("nothing tuned for %s: nothing to forget\n", line + 7);
    tt__reply_free(&r);
    return 0;
}

/* ---- watch ------------------------------------------------------------------ */

static const cli_opt watch_opts[] = {
    {"json", NULL, "JSON events, one per line (progress, key, finished)", 0},
    {"interval", "MS", "how often to ask the daemon (default 1000)", 0},
    {NULL},
};

static void fmt_secs(int64_t s, char *buf, size_t len) {
    if (s < 0) snprintf(buf, len, "?");
    else if (s < 60) snprintf(buf, len, "%llds", (long long)s);
    else if (s < 3600) snprintf(buf, len, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
    else snprintf(buf, len, "%lldh%02lldm", (long long)(s / 3600), (long long)(s % 3600 / 60));
}

static int64_t field_i64(const tt__msg *m, const char *k) {
    int64_t v;
    const char *s = tt__msg_get(m, k);
    return s && tt__parse_i64(s, INT64_MIN, INT64_MAX, &v) == 0 ? v : -1;
}

/* Polls JOB until the job finishes: a redrawn bar on a terminal, a plain
 * line per change otherwise, or JSON events. 0 when every key was
 * measured, 1 when some failed, the job was cancelled, or tuning cannot
 * run here (no GPU). */
static int watch_job(cli *c, int64_t job, int json, int interval_ms) {
    int tty = !json && isatty(STDOUT_FILENO);
    char req[64], last[512] = "";
    snprintf(req, sizeof req, "JOB job=%lld", (long long)job);
    unsigned char *seen = NULL; /* per key: 1 once its finish was reported */
    size_t nseen = 0;
    int rc = 0, waited_nogpu = 0;
    for (;;) {
        tt__reply r;
        if (cli_request(c, req, &r)) {
            rc = CLI_FAIL;
            break;
        }
        const tt__msg *m = &r.msg;
        const char *state = tt__msg_get(m, "state");
        int64_t keys = field_i64(m, "keys"), done = field_i64(m, "done"), failed = field_i64(m, "failed");
        int64_t measured = field_i64(m, "measured"), eta = field_i64(m, "eta_s"),
                el = field_i64(m, "elapsed_s");
        const char *bt = tt__msg_get(m, "best_tflops"), *bk = tt__msg_get(m, "best_key");
        int finished = state && (strcmp(state, "done") == 0 || strcmp(state, "failed") == 0 ||
                                 strcmp(state, "cancelled") == 0);
        if (json) {
            if ((size_t)r.nbody > nseen) {
                unsigned char *ns = realloc(seen, (size_t)r.nbody);
                if (ns) {
                    memset(ns + nseen, 0, (size_t)r.nbody - nseen);
                    seen = ns;
                    nseen = (size_t)r.nbody;
                }
            }
            for (int i = 0; i < r.nbody && (size_t)i < nseen; i++) {
                if (seen[i] || (!strstr(r.body[i], "state=done") && !strstr(r.body[i], "state=failed")))
                    continue;
                seen[i] = 1;
                size_t len = strlen(r.body[i]);
                char *ln = malloc(len + 3);
                tt__msg km;
                const char *perr;
                if (!ln) continue;
                memcpy(ln, "K ", 2);
                memcpy(ln + 2, r.body[i], len + 1);
                if (tt__proto_parse(ln, len + 2, &km, &perr) == 0) {
                    json_t *o = cli_json_fields(&km);
                    json_object_set_new(o, "event", json_string("key"));
                    json_object_set_new(o, "job", json_integer((json_int_t)job));
                    char *txt = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
                    if (txt) puts(txt);
                    free(txt);
                    json_decref(o);
                }
                free(ln);
            }
        }
        char now[512];
        snprintf(now, sizeof now, "%s %lld %lld %lld %s", state ? state : "?", (long long)done,
                 (long long)measured, (long long)failed, bt ? bt : "");
        if (json && strcmp(now, last) != 0) {
            json_t *o = cli_json_fields(m);
            json_object_set_new(o, "event", json_string(finished ? "finished" : "progress"));
            char *txt = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
            if (txt) puts(txt);
            free(txt);
            json_decref(o);
        } else if (tty) {
            char e[32], b[160] = "";
            fmt_secs(finished ? el : eta, e, sizeof e);
            if (bt) snprintf(b, sizeof b, "  best %s TFLOP/s (%s)", bt, bk ? bk : "?");
            int width = 30, fill = keys > 0 ? (int)(width * done / keys) : 0;
            char bar[64];
            for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
            bar[width] = '\0';
            printf("\r\033[K[%s] %lld/%lld keys  %lld variants  %s %s%s", bar, (long long)done,
                   (long long)keys, (long long)measured, finished ? "took" : "ETA", e, b);
        } else if (strcmp(now, last) != 0) {
            char e[32];
            fmt_secs(eta, e, sizeof e);
            printf("job %lld %s: %lld/%lld keys, %lld variants measured, %lld failed, eta %s", (long long)job,
                   state ? state : "?", (long long)done, (long long)keys, (long long)measured,
                   (long long)failed, finished ? "-" : e);
            if (bt) printf(", best %s TFLOP/s (%s)", bt, bk ? bk : "?");
            putchar('\n');
        }
        fflush(stdout);
        snprintf(last, sizeof last, "%s", now);
        if (finished) {
            if (tty) putchar('\n');
            rc = strcmp(state, "done") == 0 ? 0 : CLI_FAIL;
            if (!json && rc)
                fprintf(stderr, "tiletune: job %lld %s (%lld keys failed)\n", (long long)job, state,
                        (long long)failed);
            tt__reply_free(&r);
            break;
        }
        tt__reply_free(&r);
        /* A node without a GPU never runs the job: say so rather than wait forever. */
        if (cli_request(c, "STATUS", &r) == 0) {
            const char *t = tt__msg_get(&r.msg, "tuning"), *why = tt__msg_get(&r.msg, "reason");
            int nogpu = t && strcmp(t, "waiting") == 0 && why && strcmp(why, "no-gpu") == 0;
            tt__reply_free(&r);
            if (nogpu && ++waited_nogpu >= 3) {
                if (tty) putchar('\n');
                if (json) puts("{\"event\":\"waiting\",\"reason\":\"no-gpu\"}");
                fprintf(stderr, "tiletune: tuning cannot run here (no GPU); job %lld stays queued\n",
                        (long long)job);
                rc = CLI_FAIL;
                break;
            }
            if (!nogpu) waited_nogpu = 0;
        }
        struct timespec ts = {interval_ms / 1000, (long)(interval_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    free(seen);
    return rc;
}

static int cmd_watch(cli *c) {
    int64_t id, iv = 1000;
    if (tt__parse_i64(c->pos[0], 1, INT64_MAX, &id) < 0)
        return cli_usage(c, "JOB must be a job number, not '%s'", c->pos[0]);
    int rc;
    if (cli_opt_val(c, "interval") && (rc = cli_int_opt(c, "interval", 50, 60000, &iv))) return rc;
    return watch_job(c, id, cli_opt_val(c, "json") != NULL, (int)iv);
}

/* ---- the table ------------------------------------------------------------- */

const cli_cmd cli_commands[] = {
    {"ping", "", "Check that the daemon answers, and how fast", NULL, ping_opts, 0, 0, cmd_ping},
    {"status", "", "Show the daemon's version, GPU, records and tuning state", NULL, status_opts, 0, 0,
     cmd_status},
    {"stats", "", "Show the daemon's counters (requests, lookups, errors, jobs)", NULL, stats_opts, 0, 0,
     cmd_stats},
    {"lookup", "", "Show the best config for a key, as the library would get it",
     "match says where it comes from: exact (tuned for this key), nearest (tuned\n"
     "for the nearest seqlen) or default (nothing tuned: the built-in default).",
     lookup_opts, 0, 0, cmd_lookup},
    {"tune", "", "Queue a tuning job for every combination of the lists",
     "Needs root, the daemon's user or its admin group. Prints the job number;\n"
     "'tiletune watch JOB' (or --wait) shows progress. With no GPU the job waits\n"
     "in the queue. --default-grid is the node's pre-tuning grid; --stale re-tunes\n"
     "the keys tuned with an older kernel revision.",
     tune_opts, 0, 0, cmd_tune},
    {"jobs", "", "List queued and running tuning jobs", NULL, jobs_opts, 0, 0, cmd_jobs},
    {"watch", "JOB", "Follow a tuning job's progress until it finishes",
     "A progress bar on a terminal (keys done/total, variants measured, ETA, best\n"
     "so far), plain lines otherwise, JSON events with --json. Exit status 0 when\n"
     "every key was measured, 1 when some failed, the job was cancelled, or the\n"
     "node has no GPU to tune on.",
     watch_opts, 1, 1, cmd_watch},
    {"cancel", "JOB", "Cancel a queued or running job (admin)", NULL, cancel_opts, 1, 1, cmd_cancel},
    {"forget", "", "Delete the tuned winner of one key (admin); its measurements stay", NULL, forget_opts, 0,
     0, cmd_forget},
    CLI_FLEET_COMMANDS,
    {"report", "[A [B]]", "Write the tuning table as one HTML page with charts (the daemon's, or a file)",
     "Per GPU, dtype, head dim and causal mask: the winner's TFLOP/s against\n"
     "seqlen beside the built-in default's and each family's best, tuned/default,\n"
     "the measurement spread; failed and skipped variants, stale records, GPU,\n"
     "driver and kernel provenance. A is a file from 'tiletune export' (with\n"
     "--all-measurements for everything but the winners) or @live (the default);\n"
     "with B too, the page starts with what changed from A to B. The page is\n"
     "self-contained: inline SVG and CSS, no script, nothing fetched.",
     cli_report_opts, 0, 2, cli_cmd_report},
    {NULL},
};
