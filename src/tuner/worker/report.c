/* The worker's lines to the daemon: TRY, RESULT and DONE
 * (docs/worker-protocol.md). */
#include <stdarg.h>
#include <stdio.h>

#include "tuner/worker/run.h"

void tt__wk_emitf(tt_wemit emit, void *ud, const char *fmt, ...) {
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    emit(ud, line);
}


static void report_fields(const cand *c, char *buf, size_t len) {
    const tt__report *rp = c->cubin ? &c->cubin->report : c->k ? &c->k->report : NULL;
    if (!rp) {
        buf[0] = '\0';
        return;
    }
    snprintf(buf, len, " regs=%d smem_bytes=%d spill_bytes=%d", (int)rp->registers,
             (int)(rp->static_smem + rp->dynamic_smem), (int)(rp->spill_stores + rp->spill_loads));
}

void tt__wk_say_try(keyrun *r, const cand *c) {
    char cfg[TT_CONFIG_TEXT_MAX];
    tt_config_format(&c->v.config, cfg, sizeof cfg);
    tt__wk_emitf(r->emit, r->ud, "TRY id=%lld config=%s", (long long)r->t->id, cfg);
}

void tt__wk_say_status(keyrun *r, const cand *c, const char *status, const char *extra) {
    char cfg[TT_CONFIG_TEXT_MAX], rep[96];
    tt_config_format(&c->v.config, cfg, sizeof cfg);
    report_fields(c, rep, sizeof rep);
    tt__wk_emitf(r->emit, r->ud, "RESULT id=%lld status=%s config=%s batch=%d heads=%d%s%s", (long long)r->t->id,
          status, cfg, (int)r->B, (int)r->H, rep, extra ? extra : "");
}


/* A timed variant's RESULT: status ok, or skipped for one the fast search
 * dropped after a partial timing (its numbers are kept as history, but
 * a few launches in an early round, at that moment's boost clock, must
 * not beat the finalists' full timing as the key's winner). */
void tt__wk_say_timed(keyrun *r, cand *c, const char *status) {
    const tt_nvml_sample *cond = &c->cond;
    char extra[256];
    int n = snprintf(extra, sizeof extra, " time_ms=%.6g tflops=%.4g time_min_ms=%.6g spread=%.4g reps=%d rel_err=%.3g",
                     c->st.median_ms,
                     tt_wtflops(r->B, r->H, r->Lq, r->Lk, r->D, r->t->key.causal, c->st.median_ms),
                     c->st.min_ms, c->st.spread, c->st.reps, c->rel);
    if (cond->sm_clock_mhz >= 0) n += snprintf(extra + n, sizeof extra - (size_t)n, " sm_clock_mhz=%d", cond->sm_clock_mhz);
    if (cond->temp_c >= 0) n += snprintf(extra + n, sizeof extra - (size_t)n, " temp_c=%d", cond->temp_c);
    if (cond->processes >= 0) snprintf(extra + n, sizeof extra - (size_t)n, " busy=%d", c->busy ? 1 : 0);
    tt__wk_say_status(r, c, status, extra);
    c->out = 1;
}

void tt__wk_say_ok(keyrun *r, cand *c) { tt__wk_say_timed(r, c, "ok"); }
