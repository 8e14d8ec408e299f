#include "tuner/fleet/record.h"

#include <jansson.h>
#include <stdarg.h>
#include <string.h>

#include "common/config.h"
#include "common/fail.h"
#include "common/hash.h"
#include "common/key.h"

/* How far past `now` a measured_at may lie: clocks of a fleet drift. */
#define FUTURE_SLACK_S 86400

/* ---- reading typed fields ----------------------------------------------------- */

/* Every member of `o` is in `allowed` (NULL-terminated). */
static int only_fields(const json_t *o, const char *const *allowed, const char *where, char *err,
                       size_t errlen) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        const char *const *a = allowed;
        while (*a && strcmp(*a, k) != 0) a++;
        if (!*a) {
            /* The name is the table's, and the reason travels as one line
             * of an IMPORT reply: a control character in it ("a\nb") would
             * break the reply's framing. */
            char shown[65];
            size_t n = 0;
            for (; k[n] && n < sizeof shown - 1; n++)
                shown[n] = (unsigned char)k[n] < 0x20 || k[n] == 0x7f ? '?' : k[n];
            shown[n] = '\0';
            return tt__fail(TT_ERR_INVAL, err, errlen, "unknown field '%s%s'", where, shown);
        }
    }
    return 0;
}

/* An absent or null member reads as "not given" (*given = 0). */
static const json_t *member(const json_t *o, const char *name, int *given) {
    const json_t *v = json_object_get(o, name);
    *given = v && !json_is_null(v);
    return *given ? v : NULL;
}

static int get_int(const json_t *o, const char *where, const char *name, int required, int64_t min,
                   int64_t max, int64_t *out, int *given, char *err, size_t errlen) {
    int g;
    const json_t *v = member(o, name, &g);
    if (given) *given = g;
    if (!g) {
        if (required) return tt__fail(TT_ERR_INVAL, err, errlen, "missing field '%s%s'", where, name);
        return 0;
    }
    if (!json_is_integer(v))
        return tt__fail(TT_ERR_INVAL, err, errlen, "'%s%s' must be a whole number", where, name);
    json_int_t x = json_integer_value(v);
    if (x < min || x > max)
        return tt__fail(TT_ERR_RANGE, err, errlen, "'%s%s' %lld is out of range %lld..%lld", where, name,
                        (long long)x, (long long)min, (long long)max);
    *out = x;
    return 0;
}

/* A number > lo (or >= lo with lo_incl) and <= hi; integers are numbers. */
static int get_num(const json_t *o, const char *name, int required, double lo, int lo_incl, double hi,
                   double *out, char *err, size_t errlen) {
    int g;
    const json_t *v = member(o, name, &g);
    if (!g) {
        if (required) return tt__fail(TT_ERR_INVAL, err, errlen, "missing field '%s'", name);
        return 0;
    }
    if (!json_is_number(v)) return tt__fail(TT_ERR_INVAL, err, errlen, "'%s' must be a number", name);
    double x = json_number_value(v);
    if (!(lo_incl ? x >= lo : x > lo) || !(x <= hi))
        return tt__fail(TT_ERR_RANGE, err, errlen, "'%s' %g is out of range %s%g..%g", name, x,
                        lo_incl ? "" : "above ", lo, hi);
    *out = x;
    return 0;
}

/* A printable string shorter than cap (control characters would break
 * CSV, logs and terminals). */
static int get_str(const json_t *o, const char *where, const char *name, int required, char *out, size_t cap,
                   char *err, size_t errlen) {
    int g;
    const json_t *v = member(o, name, &g);
    if (!g) {
        if (required) return tt__fail(TT_ERR_INVAL, err, errlen, "missing field '%s%s'", where, name);
        return 0;
    }
    if (!json_is_string(v))
        return tt__fail(TT_ERR_INVAL, err, errlen, "'%s%s' must be a string", where, name);
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n >= cap)
        return tt__fail(TT_ERR_RANGE, err, errlen, "'%s%s' is longer than %zu bytes", where, name, cap - 1);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return tt__fail(TT_ERR_INVAL, err, errlen, "'%s%s' holds a control character", where, name);
    memcpy(out, s, n + 1);
    return 0;
}

/* ---- records -------------------------------------------------------------------- */

static const char *const rec_fields[] = {"kind",    "key",         "config",     "batch",        "heads",
                                         "time_ms", "time_min_ms", "spread",     "reps",         "tflops",
                                         "status",  "measured_at", "node",       "sm_clock_mhz", "temp_c",
                                         "busy",    "regs",        "smem_bytes", "spill_bytes",  "gpu",
                                         "shard",   NULL};
static const char *const key_fields[] = {"gpu",      "rev",      "dtype", "hdim", "causal",
                                         "seqlen_q", "seqlen_k", "group", NULL};
static const char *const gpu_fields[] = {"name",   "cc_major", "cc_minor", "sm_count", "mem_bytes",
                                         "driver", "cuda",     "nvrtc",    NULL};

static int parse_key(const json_t *o, tt_key_v2 *k, char *err, size_t errlen) {
    if (!json_is_object(o)) return tt__fail(TT_ERR_INVAL, err, errlen, "'key' must be an object");
    int rc = only_fields(o, key_fields, "key.", err, errlen);
    if (rc < 0) return rc;
    memset(k, 0, sizeof *k);
    char dtype[16];
    int64_t v;
    if ((rc = get_str(o, "key.", "gpu", 1, k->gpu, sizeof k->gpu, err, errlen)) < 0 ||
        (rc = get_str(o, "key.", "rev", 1, k->rev, sizeof k->rev, err, errlen)) < 0)
        return rc;
    if (!tt__is_hex_id(k->gpu))
        return tt__fail(TT_ERR_INVAL, err, errlen,
                        "'key.gpu' must be a GPU fingerprint (1..32 lower-case hex)");
    if (!tt__is_hex_id(k->rev))
        return tt__fail(TT_ERR_INVAL, err, errlen,
                        "'key.rev' must be a kernel revision (1..32 lower-case hex)");
    if ((rc = get_str(o, "key.", "dtype", 1, dtype, sizeof dtype, err, errlen)) < 0) return rc;
    if (tt__dtype_parse(dtype, &k->dtype) < 0)
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen, "unsupported dtype '%s' (fp16 or bf16)", dtype);
    if ((rc = get_int(o, "key.", "hdim", 1, 1, 1 << 20, &v, NULL, err, errlen)) < 0) return rc;
    k->head_dim = (int32_t)v;
    if ((rc = get_int(o, "key.", "causal", 1, 0, 2, &v, NULL, err, errlen)) < 0) return rc;
    k->causal = (int32_t)v;
    /* absent in tables from before GQA groups: those are group 1 */
    v = 1;
    if ((rc = get_int(o, "key.", "group", 0, 1, TT_GROUP_MAX, &v, NULL, err, errlen)) < 0) return rc;
    k->group = (int32_t)v;
    if ((rc = get_int(o, "key.", "seqlen_q", 1, 1, TT_SEQLEN_MAX, &k->seqlen_q, NULL, err, errlen)) < 0 ||
        (rc = get_int(o, "key.", "seqlen_k", 1, 1, TT_SEQLEN_MAX, &k->seqlen_k, NULL, err, errlen)) < 0)
        return rc;
    if ((rc = tt__key_check(k, err, errlen)) < 0) return rc;
    /* stored as the daemon looks it up (a hand-made table may spell an
     * equal mask another way) */
    tt__key_canon(k);
    return 0;
}

static int parse_gpu(const json_t *o, const tt_key_v2 *k, tt_gpu_info *g, char *err, size_t errlen) {
    if (!json_is_object(o)) return tt__fail(TT_ERR_INVAL, err, errlen, "'gpu' must be an object");
    int rc = only_fields(o, gpu_fields, "gpu.", err, errlen);
    if (rc < 0) return rc;
    memset(g, 0, sizeof *g);
    int64_t v;
    if ((rc = get_str(o, "gpu.", "name", 1, g->name, sizeof g->name, err, errlen)) < 0) return rc;
    if ((rc = get_int(o, "gpu.", "cc_major", 1, 1, 99, &v, NULL, err, errlen)) < 0) return rc;
    g->cc_major = (int32_t)v;
    if ((rc = get_int(o, "gpu.", "cc_minor", 1, 0, 99, &v, NULL, err, errlen)) < 0) return rc;
    g->cc_minor = (int32_t)v;
    if ((rc = get_int(o, "gpu.", "sm_count", 1, 1, 1 << 20, &v, NULL, err, errlen)) < 0) return rc;
    g->sm_count = (int32_t)v;
    if ((rc = get_int(o, "gpu.", "mem_bytes", 1, 1, INT64_C(1) << 50, &g->mem_bytes, NULL, err, errlen)) < 0)
        return rc;
    if ((rc = get_str(o, "gpu.", "driver", 0, g->driver, sizeof g->driver, err, errlen)) < 0 ||
        (rc = get_str(o, "gpu.", "cuda", 0, g->cuda, sizeof g->cuda, err, errlen)) < 0 ||
        (rc = get_str(o, "gpu.", "nvrtc", 0, g->nvrtc, sizeof g->nvrtc, err, errlen)) < 0)
        return rc;
    /* The fingerprint names the model: a record must describe the model it
     * claims, or a table could plant winners under another GPU's key. */
    tt_gpu_fingerprint(g->name, g->cc_major, g->cc_minor, g->sm_count, g->mem_bytes, g->fingerprint);
    if (strcmp(g->fingerprint, k->gpu) != 0)
        return tt__fail(TT_ERR_INVAL, err, errlen,
                        "'key.gpu' %s is not the fingerprint of the GPU described (%s, cc %d.%d, %d SMs, "
                        "%lld MiB: %s)",
                        k->gpu, g->name, (int)g->cc_major, (int)g->cc_minor, (int)g->sm_count,
                        (long long)(g->mem_bytes >> 20), g->fingerprint);
    return 0;
}

static int parse_record(const json_t *o, tt_fleet_config_check check, int64_t now, tt_fleet_rec *out,
                        char *err, size_t errlen) {
    int rc = only_fields(o, rec_fields, "", err, errlen);
    if (rc < 0) return rc;
    tt_fleet_rec f;
    memset(&f, 0, sizeof f);
    tt_record *r = &f.rec;
    tt_record_init(r);
    char s[TT_CONFIG_TEXT_MAX * 2];
    int64_t v;
    int given;

    if ((rc = get_str(o, "", "kind", 1, s, sizeof s, err, errlen)) < 0) return rc;
    if (strcmp(s, "best") == 0) f.kind = TT_FLEET_BEST;
    else if (strcmp(s, "measurement") == 0) f.kind = TT_FLEET_MEASUREMENT;
    else return tt__fail(TT_ERR_INVAL, err, errlen, "'kind' must be best or measurement, not '%s'", s);

    int g;
    const json_t *key = member(o, "key", &g);
    if (!g) return tt__fail(TT_ERR_INVAL, err, errlen, "missing field 'key'");
    if ((rc = parse_key(key, &r->key, err, errlen)) < 0) return rc;

    if ((rc = get_str(o, "", "config", 1, s, sizeof s, err, errlen)) < 0) return rc;
    char cfg_text[sizeof s];
    memcpy(cfg_text, s, sizeof s);
    if ((rc = tt_config_parse(s, &r->config)) < 0)
        return tt__fail(rc == TT_ERR_RANGE ? TT_ERR_RANGE : TT_ERR_INVAL, err, errlen,
                        "'config' '%s' is not a valid config (%s)", s,
                        rc == TT_ERR_RANGE ? "a knob out of range" : "every knob of knobs.def once");

    if ((rc = get_str(o, "", "status", 0, s, sizeof s, err, errlen)) < 0) return rc;
    member(o, "status", &given);
    if (!given) r->status = TT_MEAS_OK;
    else if (tt_meas_status_parse(s, &r->status) < 0)
        return tt__fail(TT_ERR_INVAL, err, errlen,
                        "'status' '%s' is not ok, wrong, fault, timeout or skipped", s);
    if (f.kind == TT_FLEET_BEST && r->status != TT_MEAS_OK)
        return tt__fail(TT_ERR_INVAL, err, errlen, "a best record must have status ok");

    int ok = r->status == TT_MEAS_OK;
    if ((rc = get_int(o, "", "batch", ok, ok ? 1 : 0, 1 << 24, &v, &given, err, errlen)) < 0) return rc;
    r->batch = given ? (int32_t)v : 0;
    if ((rc = get_int(o, "", "heads", ok, ok ? 1 : 0, 1 << 16, &v, &given, err, errlen)) < 0) return rc;
    r->heads = given ? (int32_t)v : 0;
    r->time_ms = 0;
    if ((rc = get_num(o, "time_ms", ok, 0, 0, 1e7, &r->time_ms, err, errlen)) < 0 ||
        (rc = get_num(o, "time_min_ms", 0, 0, 0, 1e7, &r->time_min_ms, err, errlen)) < 0 ||
        (rc = get_num(o, "spread", 0, 0, 1, 1e3, &r->spread, err, errlen)) < 0 ||
        (rc = get_num(o, "tflops", 0, 0, 1, 1e6, &r->tflops, err, errlen)) < 0)
        return rc;
    if (r->time_min_ms > 0 && r->time_ms > 0 && r->time_min_ms > r->time_ms)
        return tt__fail(TT_ERR_INVAL, err, errlen, "'time_min_ms' %g exceeds the median 'time_ms' %g",
                        r->time_min_ms, r->time_ms);
    if ((rc = get_int(o, "", "reps", 0, 0, INT32_MAX, &v, &given, err, errlen)) < 0) return rc;
    r->reps = given ? (int32_t)v : 0;
    if ((rc = get_int(o, "", "measured_at", 1, 1, now + FUTURE_SLACK_S, &r->measured_at, NULL, err, errlen)) <
        0)
        return rc;
    if ((rc = get_str(o, "", "node", 0, r->node, sizeof r->node, err, errlen)) < 0) return rc;

    static const struct {
        const char *name;
        int64_t min, max;
        size_t off;
    } opt[] = {
        {"sm_clock_mhz", 0, 100000, offsetof(tt_record, sm_clock_mhz)},
        {"temp_c", 0, 200, offsetof(tt_record, temp_c)}, /* the store keeps no negative */
        {"busy", 0, 1, offsetof(tt_record, busy)},
        {"regs", 0, 65536, offsetof(tt_record, regs)},
        {"smem_bytes", 0, 1 << 30, offsetof(tt_record, smem_bytes)},
        {"spill_bytes", 0, 1 << 30, offsetof(tt_record, spill_bytes)},
    };
    for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++) {
        if ((rc = get_int(o, "", opt[i].name, 0, opt[i].min, opt[i].max, &v, &given, err, errlen)) < 0)
            return rc;
        if (given) {
            int32_t x = (int32_t)v;
            memcpy((char *)r + opt[i].off, &x, sizeof x);
        }
    }
    if (f.kind == TT_FLEET_BEST && r->busy == 1)
        return tt__fail(TT_ERR_INVAL, err, errlen, "a run on a busy GPU cannot be a winner (busy=1)");

    const json_t *gpu = member(o, "gpu", &g);
    if (!g) return tt__fail(TT_ERR_INVAL, err, errlen, "missing field 'gpu' (the GPU model's description)");
    if ((rc = parse_gpu(gpu, &r->key, &f.gpu, err, errlen)) < 0) return rc;
    /* The versions travel in the model's description but belong to the
     * record: the store keeps them per record. */
    memcpy(r->driver, f.gpu.driver, sizeof r->driver);
    memcpy(r->cuda, f.gpu.cuda, sizeof r->cuda);
    memcpy(r->nvrtc, f.gpu.nvrtc, sizeof r->nvrtc);
    if (check && (rc = check(&f, cfg_text, err, errlen)) < 0) return rc;

    if ((rc = get_str(o, "", "shard", 0, f.shard, sizeof f.shard, err, errlen)) < 0) return rc;
    int si, sn;
    if (f.shard[0] && tt_shard_parse(f.shard, &si, &sn, NULL, 0) < 0)
        return tt__fail(TT_ERR_INVAL, err, errlen, "'shard' '%s' is not i/n", f.shard);
    *out = f;
    return 0;
}

/* Parses one line into a JSON object; TT_ERR_CORRUPT with jansson's words. */
static int load_object(const char *line, size_t len, json_t **out, char *err, size_t errlen) {
    json_error_t je;
    json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return tt__fail(TT_ERR_CORRUPT, err, errlen, "not valid JSON: %s (column %d)", je.text, je.column);
    if (!json_is_object(o)) {
        json_decref(o);
        return tt__fail(TT_ERR_CORRUPT, err, errlen, "not a JSON object");
    }
    *out = o;
    return 0;
}

int tt_fleet_rec_parse(const char *line, size_t len, tt_fleet_config_check check, int64_t now,
                       tt_fleet_rec *out, char *err, size_t errlen) {
    json_t *o;
    int rc = load_object(line, len, &o, err, errlen);
    if (rc < 0) return rc;
    rc = parse_record(o, check, now, out, err, errlen);
    json_decref(o);
    return rc;
}

/* ---- writing -------------------------------------------------------------------- */

static void set_opt_int(json_t *o, const char *name, int64_t v) {
    if (v >= 0) json_object_set_new(o, name, json_integer(v));
}

static void set_opt_num(json_t *o, const char *name, double v) {
    if (v >= 0) json_object_set_new(o, name, json_real(v));
}

/* Dumps compactly into buf; the length, or TT_ERR_RANGE / TT_ERR_NOMEM. */
static int dump(json_t *o, char *buf, size_t len) {
    if (!o) return TT_ERR_NOMEM;
    size_t n = json_dumpb(o, buf, len, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (n == 0) return TT_ERR_NOMEM;
    if (n >= len || n > TT_FLEET_LINE_MAX) return TT_ERR_RANGE;
    buf[n] = '\0';
    return (int)n;
}

int tt_fleet_rec_format(const tt_fleet_rec *f, char *buf, size_t len) {
    if (!f || !buf) return TT_ERR_INVAL;
    const tt_record *r = &f->rec;
    char cfg[TT_CONFIG_TEXT_MAX];
    const char *dt = tt__dtype_name(r->key.dtype);
    if (!dt || tt_config_format(&r->config, cfg, sizeof cfg) < 0) return TT_ERR_INVAL;
    json_t *o = json_object(), *k = json_object(), *g = json_object();
    if (!o || !k || !g) {
        json_decref(o), json_decref(k), json_decref(g);
        return TT_ERR_NOMEM;
    }
    json_object_set_new(o, "kind", json_string(f->kind == TT_FLEET_BEST ? "best" : "measurement"));
    json_object_set_new(k, "gpu", json_string(r->key.gpu));
    json_object_set_new(k, "rev", json_string(r->key.rev));
    json_object_set_new(k, "dtype", json_string(dt));
    json_object_set_new(k, "hdim", json_integer(r->key.head_dim));
    json_object_set_new(k, "causal", json_integer(r->key.causal));
    json_object_set_new(k, "seqlen_q", json_integer(r->key.seqlen_q));
    json_object_set_new(k, "seqlen_k", json_integer(r->key.seqlen_k));
    if (r->key.group > 1) json_object_set_new(k, "group", json_integer(r->key.group));
    json_object_set_new(o, "key", k);
    json_object_set_new(o, "config", json_string(cfg));
    json_object_set_new(o, "status", json_string(tt_meas_status_name(r->status)));
    if (r->batch > 0) json_object_set_new(o, "batch", json_integer(r->batch));
    if (r->heads > 0) json_object_set_new(o, "heads", json_integer(r->heads));
    if (r->time_ms > 0) json_object_set_new(o, "time_ms", json_real(r->time_ms));
    if (r->time_min_ms > 0) json_object_set_new(o, "time_min_ms", json_real(r->time_min_ms));
    set_opt_num(o, "spread", r->spread);
    json_object_set_new(o, "reps", json_integer(r->reps));
    set_opt_num(o, "tflops", r->tflops);
    json_object_set_new(o, "measured_at", json_integer(r->measured_at));
    json_object_set_new(o, "node", json_string(r->node));
    set_opt_int(o, "sm_clock_mhz", r->sm_clock_mhz);
    set_opt_int(o, "temp_c", r->temp_c);
    set_opt_int(o, "busy", r->busy);
    set_opt_int(o, "regs", r->regs);
    set_opt_int(o, "smem_bytes", r->smem_bytes);
    set_opt_int(o, "spill_bytes", r->spill_bytes);
    json_object_set_new(g, "name", json_string(f->gpu.name));
    json_object_set_new(g, "cc_major", json_integer(f->gpu.cc_major));
    json_object_set_new(g, "cc_minor", json_integer(f->gpu.cc_minor));
    json_object_set_new(g, "sm_count", json_integer(f->gpu.sm_count));
    json_object_set_new(g, "mem_bytes", json_integer(f->gpu.mem_bytes));
    json_object_set_new(g, "driver", json_string(r->driver));
    json_object_set_new(g, "cuda", json_string(r->cuda));
    json_object_set_new(g, "nvrtc", json_string(r->nvrtc));
    json_object_set_new(o, "gpu", g);
    if (f->shard[0]) json_object_set_new(o, "shard", json_string(f->shard));
    return dump(o, buf, len);
}

int tt_fleet_header_format(const tt_fleet_header *h, char *buf, size_t len) {
    json_t *o = json_object();
    if (!o) return TT_ERR_NOMEM;
    json_object_set_new(o, "format", json_string(TT_FLEET_FORMAT));
    json_object_set_new(o, "version", json_integer(TT_FLEET_VERSION));
    json_object_set_new(o, "exported_at", json_integer(h->exported_at));
    json_object_set_new(o, "node", json_string(h->node));
    json_object_set_new(o, "tiletune", json_string(h->tiletune[0] ? h->tiletune : TT_VERSION_STRING));
    json_object_set_new(o, "kind", json_string(h->all ? "all" : "best"));
    if (h->gpu[0]) json_object_set_new(o, "gpu", json_string(h->gpu));
    if (h->shard[0]) json_object_set_new(o, "shard", json_string(h->shard));
    return dump(o, buf, len);
}

int tt_fleet_end_format(int64_t records, uint64_t sum, char *buf, size_t len) {
    char hex[17];
    tt__hash_hex(sum, hex);
    int n = snprintf(buf, len, "{\"end\":\"%s\",\"records\":%lld,\"fnv1a64\":\"%s\"}", TT_FLEET_FORMAT,
                     (long long)records, hex);
    return n < 0 || (size_t)n >= len ? TT_ERR_RANGE : n;
}

uint64_t tt_fleet_sum_line(uint64_t sum, const char *line, size_t len) {
    return tt__hash_update(tt__hash_update(sum, line, len), "\n", 1);
}

/* ---- the reader ---------------------------------------------------------------- */

void tt_fleet_reader_init(tt_fleet_reader *r, tt_fleet_config_check check, int64_t now) {
    memset(r, 0, sizeof *r);
    r->check = check;
    r->now = now;
    r->sum = TT_HASH_INIT;
}

static const char *sniff(const char *line, size_t len);

static const char *const header_fields[] = {"format", "version", "exported_at", "node", "tiletune",
                                            "kind",   "gpu",     "shard",       NULL};

static int read_header(tt_fleet_reader *r, const char *line, size_t len, char *err, size_t errlen) {
    json_t *o;
    char why[200];
    const char *what = sniff(line, len);
    if (what) return tt__fail(TT_ERR_CORRUPT, err, errlen, "not a tiletune table: %s", what);
    if (load_object(line, len, &o, why, sizeof why) < 0)
        return tt__fail(TT_ERR_CORRUPT, err, errlen, "not a tiletune table: line 1 is %s", why);
    const json_t *fmt = json_object_get(o, "format");
    int rc;
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), TT_FLEET_FORMAT) != 0) {
        rc = tt__fail(TT_ERR_CORRUPT, err, errlen, "not a tiletune table: line 1 has no \"format\":\"%s\"",
                      TT_FLEET_FORMAT);
        goto out;
    }
    tt_fleet_header *h = &r->hdr;
    int64_t v;
    /* The version first: a newer format may well have fields we do not know. */
    if ((rc = get_int(o, "header.", "version", 1, 1, INT32_MAX, &v, NULL, why, sizeof why)) < 0) {
        rc = tt__fail(TT_ERR_CORRUPT, err, errlen, "bad header: %s", why);
        goto out;
    }
    h->version = (int)v;
    if (v > TT_FLEET_VERSION) {
        rc = tt__fail(TT_ERR_VERSION, err, errlen,
                      "format version %lld is newer than this tiletune reads (%d): upgrade tiletune",
                      (long long)v, TT_FLEET_VERSION);
        goto out;
    }
    char kind[16] = "best";
    if ((rc = only_fields(o, header_fields, "header.", why, sizeof why)) < 0 ||
        (rc = get_int(o, "header.", "exported_at", 1, 0, INT64_MAX, &h->exported_at, NULL, why, sizeof why)) <
            0 ||
        (rc = get_str(o, "header.", "node", 0, h->node, sizeof h->node, why, sizeof why)) < 0 ||
        (rc = get_str(o, "header.", "tiletune", 0, h->tiletune, sizeof h->tiletune, why, sizeof why)) < 0 ||
        (rc = get_str(o, "header.", "kind", 0, kind, sizeof kind, why, sizeof why)) < 0 ||
        (rc = get_str(o, "header.", "gpu", 0, h->gpu, sizeof h->gpu, why, sizeof why)) < 0 ||
        (rc = get_str(o, "header.", "shard", 0, h->shard, sizeof h->shard, why, sizeof why)) < 0) {
        rc = tt__fail(TT_ERR_CORRUPT, err, errlen, "bad header: %s", why);
        goto out;
    }
    int si, sn;
    if ((strcmp(kind, "best") != 0 && strcmp(kind, "all") != 0) || (h->gpu[0] && !tt__is_hex_id(h->gpu)) ||
        (h->shard[0] && tt_shard_parse(h->shard, &si, &sn, NULL, 0) < 0)) {
        rc = tt__fail(TT_ERR_CORRUPT, err, errlen, "bad header: kind, gpu or shard malformed");
        goto out;
    }
    h->all = strcmp(kind, "all") == 0;
    r->state = 1;
    rc = TT_FLEET_LINE_HEADER;
out:
    json_decref(o);
    return rc;
}

static const char *const end_fields[] = {"end", "records", "fnv1a64", NULL};

static int read_end(tt_fleet_reader *r, json_t *o, char *err, size_t errlen) {
    char why[200], hex[24] = "";
    int64_t n;
    const json_t *e = json_object_get(o, "end");
    if (!json_is_string(e) || strcmp(json_string_value(e), TT_FLEET_FORMAT) != 0 ||
        only_fields(o, end_fields, "end.", why, sizeof why) < 0 ||
        get_int(o, "end.", "records", 1, 0, INT64_MAX, &n, NULL, why, sizeof why) < 0 ||
        get_str(o, "end.", "fnv1a64", 0, hex, sizeof hex, why, sizeof why) < 0)
        return tt__fail(TT_ERR_CORRUPT, err, errlen, "corrupt end line (line %lld)", (long long)r->line_no);
    if (n != r->records)
        return tt__fail(TT_ERR_CORRUPT, err, errlen,
                        "truncated or spliced: the end line counts %lld records, the file has %lld",
                        (long long)n, (long long)r->records);
    char want[17];
    tt__hash_hex(r->sum, want);
    /* Optional, so a table made by hand (or filtered with jq) can leave it
     * out; when present it must match. */
    if (hex[0] && strcmp(hex, want) != 0)
        return tt__fail(TT_ERR_CORRUPT, err, errlen,
                        "corrupt: the records' checksum is %s, the end line says %s", want, hex);
    r->state = 2;
    return TT_FLEET_LINE_END;
}

/* What line 1 of a file that is not a table is, where it is something
 * tiletune itself writes (the other export formats), else NULL. */
static const char *sniff(const char *line, size_t len) {
    static const char sqlite[] = "SQLite format 3";
    if (len >= sizeof sqlite - 1 && memcmp(line, sqlite, sizeof sqlite - 1) == 0)
        return "this is a SQLite database (export --format sqlite): serve it with tiletuned --db, or "
               "export a JSON Lines table from it";
    if (len >= 15 && memcmp(line, "kind,gpu,rev,", 13) == 0)
        return "this is CSV (export --format csv, for spreadsheets): import reads the JSON Lines table "
               "of export --format jsonl";
    return NULL;
}

/* A line over the limit: on line 1 the input is not a table at all (a
 * file of junk stops here, after 4 KiB); later, the file is damaged. */
static int too_long(const tt_fleet_reader *r, const char *line, size_t len, char *err, size_t errlen) {
    const char *what = r->state == 0 ? sniff(line, len) : NULL;
    if (what) return tt__fail(TT_ERR_CORRUPT, err, errlen, "not a tiletune table: %s", what);
    if (r->state == 0)
        return tt__fail(TT_ERR_CORRUPT, err, errlen, "not a tiletune table: line 1 is longer than %d bytes",
                        TT_FLEET_LINE_MAX);
    return tt__fail(TT_ERR_RANGE, err, errlen, "line %lld is longer than %d bytes", (long long)r->line_no,
                    TT_FLEET_LINE_MAX);
}

int tt_fleet_reader_line(tt_fleet_reader *r, const char *line, size_t len, tt_fleet_rec *out, char *err,
                         size_t errlen) {
    if (len > 0 && line[len - 1] == '\r') len--;
    r->line_no++;
    if (len > TT_FLEET_LINE_MAX) return too_long(r, line, len, err, errlen);
    if (r->state == 0) return read_header(r, line, len, err, errlen);
    if (r->state == 2) {
        for (size_t i = 0; i < len; i++)
            if (line[i] != ' ' && line[i] != '\t')
                return tt__fail(TT_ERR_CORRUPT, err, errlen, "data after the end line (line %lld)",
                                (long long)r->line_no);
        return TT_FLEET_LINE_END;
    }
    json_t *o = NULL;
    int rc = load_object(line, len, &o, err, errlen);
    if (rc == 0 && json_object_get(o, "end")) {
        rc = read_end(r, o, err, errlen);
        json_decref(o);
        return rc;
    }
    r->records++;
    r->sum = tt_fleet_sum_line(r->sum, line, len);
    if (r->records > TT_FLEET_RECORDS_MAX) {
        json_decref(o);
        return tt__fail(TT_ERR_RANGE, err, errlen, "more than %d records in one table", TT_FLEET_RECORDS_MAX);
    }
    if (rc == 0) rc = parse_record(o, r->check, r->now, out, err, errlen);
    json_decref(o);
    return rc < 0 ? TT_FLEET_LINE_BAD : TT_FLEET_LINE_RECORD;
}

int tt_fleet_reader_finish(const tt_fleet_reader *r, char *err, size_t errlen) {
    if (r->state == 2) return 0;
    if (r->line_no == 0) return tt__fail(TT_ERR_CORRUPT, err, errlen, "empty file: not a tiletune table");
    return tt__fail(TT_ERR_CORRUPT, err, errlen, "truncated: no end line after %lld records",
                    (long long)r->records);
}

int tt_fleet_read_stream(FILE *f, tt_fleet_reader *r, tt_fleet_line_cb on_line, void *ud, char *err,
                         size_t errlen) {
    char *line = malloc(TT_FLEET_LINE_MAX + 2);
    tt_fleet_rec *rec = malloc(sizeof *rec);
    char why[512];
    int rc = 0;
    if (!line || !rec) {
        rc = tt__fail(TT_ERR_NOMEM, err, errlen, "out of memory");
        goto out;
    }
    for (;;) {
        size_t n = 0;
        int c = EOF;
        while (n < TT_FLEET_LINE_MAX + 2 && (c = getc_unlocked(f)) != EOF && c != '\n') line[n++] = (char)c;
        if (c == EOF && ferror(f)) {
            rc = tt__fail(TT_ERR_IO, err, errlen, "read error");
            goto out;
        }
        if (c == EOF && n == 0) break;
        if (n > TT_FLEET_LINE_MAX + 1) { /* one more may be the '\r' */
            r->line_no++;
            rc = too_long(r, line, n, err, errlen);
            goto out;
        }
        why[0] = '\0';
        int what = tt_fleet_reader_line(r, line, n, rec, why, sizeof why);
        if (what < 0) {
            rc = tt__fail(what, err, errlen, "%s", why);
            goto out;
        }
        if (on_line && (rc = on_line(ud, what, r->records, what == TT_FLEET_LINE_RECORD ? rec : NULL, why)))
            goto out;
        if (c == EOF) break;
    }
    rc = tt_fleet_reader_finish(r, err, errlen);
out:
    free(line);
    free(rec);
    return rc;
}

/* ---- CSV ------------------------------------------------------------------------ */

/* Appends s as a CSV field: quoted when it holds a comma, quote or space. */
static void csv_str(char *buf, size_t len, size_t *at, const char *s, int first) {
    if (!first && *at < len) buf[(*at)++] = ',';
    int quote = strpbrk(s, ",\" \r\n") != NULL;
    if (quote && *at < len) buf[(*at)++] = '"';
    for (; *s && *at < len; s++) {
        if (*s == '"' && *at < len) buf[(*at)++] = '"';
        if (*at < len) buf[(*at)++] = *s;
    }
    if (quote && *at < len) buf[(*at)++] = '"';
}

static void csv_fmt(char *buf, size_t len, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void csv_fmt(char *buf, size_t len, size_t *at, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    csv_str(buf, len, at, tmp, 0);
}

static void csv_opt(char *buf, size_t len, size_t *at, double v, int is_int) {
    if (v < 0) csv_str(buf, len, at, "", 0);
    else if (is_int) csv_fmt(buf, len, at, "%lld", (long long)v);
    else csv_fmt(buf, len, at, "%.17g", v);
}

/* A knob's value as the config text writes it: its symbolic name where
 * the knob has names ("mma", "swizzle"), else the number. */
static void knob_value_name(const tt__knob *k, int32_t v, char *out, size_t len) {
    snprintf(out, len, "%d", (int)v);
    if (!k->names || v < k->min) return;
    const char *p = k->names;
    for (int32_t i = k->min; i < v && p; i++) {
        p = strchr(p, '|');
        if (p) p++;
    }
    if (!p) return;
    size_t n = strcspn(p, "|");
    if (n && n < len) {
        memcpy(out, p, n);
        out[n] = '\0';
    }
}

int tt_fleet_csv_header(char *buf, size_t len) {
    int n = snprintf(buf, len, "kind,gpu,rev,dtype,hdim,causal,seqlen_q,seqlen_k,group");
    for (int i = 0; n >= 0 && (size_t)n < len && i < tt__knob_count(); i++)
        n += snprintf(buf + n, len - (size_t)n, ",%s", tt__knob_at(i)->name);
    if (n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n,
                      ",batch,heads,time_ms,time_min_ms,spread,reps,tflops,status,measured_at,node,"
                      "sm_clock_mhz,temp_c,busy,regs,smem_bytes,spill_bytes,gpu_name,cc,sm_count,"
                      "mem_bytes,driver,cuda,nvrtc,shard\n");
    return n < 0 || (size_t)n >= len ? TT_ERR_RANGE : n;
}

int tt_fleet_csv_row(const tt_fleet_rec *f, char *buf, size_t len) {
    const tt_record *r = &f->rec;
    size_t at = 0;
    const char *dt = tt__dtype_name(r->key.dtype);
    if (!dt || len < 2) return TT_ERR_INVAL;
    len--; /* room for the NUL */
    csv_str(buf, len, &at, f->kind == TT_FLEET_BEST ? "best" : "measurement", 1);
    csv_str(buf, len, &at, r->key.gpu, 0);
    csv_str(buf, len, &at, r->key.rev, 0);
    csv_str(buf, len, &at, dt, 0);
    csv_fmt(buf, len, &at, "%d", (int)r->key.head_dim);
    csv_fmt(buf, len, &at, "%d", (int)r->key.causal);
    csv_fmt(buf, len, &at, "%lld", (long long)r->key.seqlen_q);
    csv_fmt(buf, len, &at, "%lld", (long long)r->key.seqlen_k);
    csv_fmt(buf, len, &at, "%d", r->key.group > 1 ? (int)r->key.group : 1);
    for (int i = 0; i < tt__knob_count(); i++) {
        char name[32];
        knob_value_name(tt__knob_at(i), tt__knob_get(tt__knob_at(i), &r->config), name, sizeof name);
        csv_str(buf, len, &at, name, 0);
    }
    csv_fmt(buf, len, &at, "%d", (int)r->batch);
    csv_fmt(buf, len, &at, "%d", (int)r->heads);
    csv_opt(buf, len, &at, r->time_ms > 0 ? r->time_ms : -1, 0);
    csv_opt(buf, len, &at, r->time_min_ms > 0 ? r->time_min_ms : -1, 0);
    csv_opt(buf, len, &at, r->spread, 0);
    csv_fmt(buf, len, &at, "%d", (int)r->reps);
    csv_opt(buf, len, &at, r->tflops, 0);
    csv_str(buf, len, &at, tt_meas_status_name(r->status), 0);
    csv_fmt(buf, len, &at, "%lld", (long long)r->measured_at);
    csv_str(buf, len, &at, r->node, 0);
    csv_opt(buf, len, &at, r->sm_clock_mhz, 1);
    csv_opt(buf, len, &at, r->temp_c, 1);
    csv_opt(buf, len, &at, r->busy, 1);
    csv_opt(buf, len, &at, r->regs, 1);
    csv_opt(buf, len, &at, r->smem_bytes, 1);
    csv_opt(buf, len, &at, r->spill_bytes, 1);
    csv_str(buf, len, &at, f->gpu.name, 0);
    csv_fmt(buf, len, &at, "%d.%d", (int)f->gpu.cc_major, (int)f->gpu.cc_minor);
    csv_fmt(buf, len, &at, "%d", (int)f->gpu.sm_count);
    csv_fmt(buf, len, &at, "%lld", (long long)f->gpu.mem_bytes);
    csv_str(buf, len, &at, r->driver, 0);
    csv_str(buf, len, &at, r->cuda, 0);
    csv_str(buf, len, &at, r->nvrtc, 0);
    csv_str(buf, len, &at, f->shard, 0);
    if (at + 1 > len) return TT_ERR_RANGE;
    buf[at++] = '\n';
    buf[at] = '\0';
    return (int)at;
}
