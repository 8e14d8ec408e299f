/* The worker's lines to the daemon: TRY, RESULT and DONE
 * (docs/worker-protocol.md), each written from the pipe protocol's table
 * (common/pipe.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tuner/worker/run.h"

int tt__wk_send(tt_wemit emit, void *ud, const tt__pipe_msg *m) {
    char line[TT_LINE_MAX + 1], err[256];
    int n = tt__pipe_format(m, line, sizeof line, err, sizeof err);
    if (n < 0) {
        /* a bug of this worker: the daemon would refuse the line anyway */
        fprintf(stderr, "tiletune-worker: a line not sent (%s)\n", err);
        return n;
    }
    emit(ud, line);
    return 0;
}

int tt__wk_emitf(tt_wemit emit, void *ud, const char *fmt, ...) {
    char line[TT_LINE_MAX + 2], err[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    tt__pipe_msg m;
    int rc = n < 0 || (size_t)n >= sizeof line ? TT_ERR_RANGE
                                               : tt__pipe_parse(line, (size_t)n, &m, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "tiletune-worker: a line not sent: not a message of the pipe protocol's table (%s)\n",
                rc == TT_ERR_RANGE && n >= (int)sizeof line - 1 ? "too long" : err);
        return rc;
    }
    return tt__wk_send(emit, ud, &m);
}

int tt__wk_say_done(tt_wemit emit, void *ud, int64_t id, const char *reason) {
    tt__pipe_msg m;
    tt__pipe_init(&m, TT_PIPE_DONE);
    TT_PIPE_SET(&m, done, id, id);
    TT_PIPE_SET(&m, done, status, reason ? TT_PIPE_KEY_FAILED : TT_PIPE_KEY_DONE);
    if (reason) TT_PIPE_SET(&m, done, reason, reason);
    return tt__wk_send(emit, ud, &m);
}

void tt__wk_say_try(keyrun *r, const cand *c) {
    tt__pipe_msg m;
    tt__pipe_init(&m, TT_PIPE_TRY);
    TT_PIPE_SET(&m, try, id, r->t->id);
    TT_PIPE_SET(&m, try, config, c->v.config);
    tt__wk_send(r->emit, r->ud, &m);
}

void tt__wk_result(tt__pipe_msg *m, int status) {
    tt__pipe_init(m, TT_PIPE_RESULT);
    TT_PIPE_SET(m, result, status, status);
}

void tt__wk_say_result(keyrun *r, const cand *c, tt__pipe_msg *m) {
    TT_PIPE_SET(m, result, id, r->t->id);
    TT_PIPE_SET(m, result, config, c->v.config);
    TT_PIPE_SET(m, result, batch, r->in.B);
    TT_PIPE_SET(m, result, heads, r->H);
    const tt__report *rp = c->cubin ? &c->cubin->report : c->k ? &c->k->report : NULL;
    if (rp && rp->registers >= 0) TT_PIPE_SET(m, result, regs, rp->registers);
    if (rp && rp->static_smem >= 0 && rp->dynamic_smem >= 0)
        TT_PIPE_SET(m, result, smem_bytes, (int64_t)rp->static_smem + rp->dynamic_smem);
    if (rp && rp->spill_stores >= 0 && rp->spill_loads >= 0)
        TT_PIPE_SET(m, result, spill_bytes, (int64_t)rp->spill_stores + rp->spill_loads);
    tt__wk_send(r->emit, r->ud, m);
}

/* A timed variant's RESULT: status ok, or skipped for one the fast search
 * dropped after a partial timing (its numbers are kept as history, but
 * a few launches in an early round, at that moment's boost clock, must
 * not beat the finalists' full timing as the key's winner). */
void tt__wk_say_timed(keyrun *r, cand *c, const char *status) {
    const tt_nvml_sample *cond = &c->cond;
    tt__pipe_msg m;
    int st = 0;
    while (tt__pipe_meas_words[st] && strcmp(tt__pipe_meas_words[st], status) != 0) st++;
    tt__wk_result(&m, st); /* a word not in the list: refused when sent */
    TT_PIPE_SET(&m, result, time_ms, c->st.median_ms);
    TT_PIPE_SET(&m, result, tflops,
                tt_wtflops(r->in.B, r->H, r->Lq, r->Lk, r->D, r->t->key.causal, c->st.median_ms));
    TT_PIPE_SET(&m, result, time_min_ms, c->st.min_ms);
    TT_PIPE_SET(&m, result, spread, c->st.spread);
    TT_PIPE_SET(&m, result, reps, c->st.reps);
    if (isfinite(c->rel)) TT_PIPE_SET(&m, result, rel_err, c->rel);
    if (cond->sm_clock_mhz >= 0) TT_PIPE_SET(&m, result, sm_clock_mhz, cond->sm_clock_mhz);
    if (cond->temp_c >= 0) TT_PIPE_SET(&m, result, temp_c, cond->temp_c);
    if (cond->processes >= 0) TT_PIPE_SET(&m, result, busy, c->busy ? 1 : 0);
    tt__wk_say_result(r, c, &m);
    c->out = 1;
}

void tt__wk_say_ok(keyrun *r, cand *c) { tt__wk_say_timed(r, c, "ok"); }
