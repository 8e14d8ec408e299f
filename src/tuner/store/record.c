/* The tuning data model's plain parts: names and constructors. */
#include "tuner/store/record.h"

#include <stdio.h>
#include <string.h>

#include "common/hash.h"
#include "common/wire.h"

/* ---- names ----------------------------------------------------------------- */

static const char *const meas_names[] = {
#define X(e, s) s,
    TT_WIRE_MEAS_STATUSES(X)
#undef X
};
#define X(e, s) \
    _Static_assert((int)TT_MEAS_##e == (int)TT__N_MEAS_##e, "TT_WIRE_MEAS_STATUSES follows tt_meas_status");
TT_WIRE_MEAS_STATUSES(X)
#undef X
static const char *const mode_names[] = {
#define X(e, s) s,
    TT_WIRE_JOB_MODES(X)
#undef X
};
#define X(e, s) \
    _Static_assert((int)TT_JOB_##e == (int)TT__N_MODE_##e, "TT_WIRE_JOB_MODES follows tt_job_mode");
TT_WIRE_JOB_MODES(X)
#undef X
static const char *const job_names[] = {
#define X(e, s) s,
    TT_WIRE_JOB_STATES(X)
#undef X
};
#define X(e, s) \
    _Static_assert((int)TT_JOB_##e == (int)TT__N_JOB_##e, "TT_WIRE_JOB_STATES follows tt_job_state");
TT_WIRE_JOB_STATES(X)
#undef X
static const char *const jkey_names[] = {"pending", "running", "done", "failed", "cancelled"};
#define NNAMES(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *name_of(const char *const *names, int n, int v) {
    return v >= 0 && v < n ? names[v] : NULL;
}

static int index_of(const char *const *names, int n, const char *s) {
    if (!s) return -1;
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], s) == 0) return i;
    return -1;
}

const char *tt_meas_status_name(tt_meas_status st) {
    return name_of(meas_names, NNAMES(meas_names), (int)st);
}
const char *tt_job_mode_name(tt_job_mode m) { return name_of(mode_names, NNAMES(mode_names), (int)m); }
const char *tt_job_state_name(tt_job_state st) { return name_of(job_names, NNAMES(job_names), (int)st); }
const char *tt_jkey_state_name(tt_jkey_state st) { return name_of(jkey_names, NNAMES(jkey_names), (int)st); }

int tt_meas_status_parse(const char *name, tt_meas_status *out) {
    int i = index_of(meas_names, NNAMES(meas_names), name);
    if (i < 0) return TT_ERR_INVAL;
    *out = (tt_meas_status)i;
    return 0;
}

int tt_job_state_parse(const char *name, tt_job_state *out) {
    int i = index_of(job_names, NNAMES(job_names), name);
    if (i < 0) return TT_ERR_INVAL;
    *out = (tt_job_state)i;
    return 0;
}

int tt_jkey_state_parse(const char *name, tt_jkey_state *out) {
    int i = index_of(jkey_names, NNAMES(jkey_names), name);
    if (i < 0) return TT_ERR_INVAL;
    *out = (tt_jkey_state)i;
    return 0;
}

int tt_job_mode_parse(const char *name, tt_job_mode *out) {
    int i = index_of(mode_names, NNAMES(mode_names), name);
    if (i < 0) return TT_ERR_INVAL;
    *out = (tt_job_mode)i;
    return 0;
}

void tt_record_init(tt_record *r) {
    if (!r) return;
    memset(r, 0, sizeof *r);
    r->time_min_ms = -1;
    r->spread = -1;
    r->tflops = -1;
    r->sm_clock_mhz = -1;
    r->temp_c = -1;
    r->busy = -1;
    r->regs = -1;
    r->smem_bytes = -1;
    r->spill_bytes = -1;
}

void tt_gpu_fingerprint(const char *name, int cc_major, int cc_minor, int sm_count, int64_t mem_bytes,
                        char out[TT_ID_MAX]) {
    /* Memory in MiB: drivers differ by a few reserved KiB for one model. */
    char ident[64];
    snprintf(ident, sizeof ident, "cc=%d.%d sm=%d mem_mib=%lld", cc_major, cc_minor, sm_count,
             (long long)(mem_bytes >> 20));
    uint64_t h = tt__hash_str(TT_HASH_INIT, name ? name : "");
    h = tt__hash_str(h, ident);
    tt__hash_hex(h, out);
}
