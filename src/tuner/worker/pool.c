/* The compile pool: a key's candidates compile on CPU threads while the
 * GPU checks and times those already compiled. */
#include <stdio.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tuner/worker/run.h"

static void *compile_thread(void *arg) {
    pool *p = arg;
    /* Compiles use every core but one; at nice 10 they yield to the daemon
     * answering lookups on the same node (docs/perf.md: lookup p99 while
     * tuning) and to the thread timing the GPU. Linux nices threads one by
     * one; failing to is harmless. */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    tt__jit_opts jo = {.source = p->w->src, .cache_dir = p->w->o.cache_dir};
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int i = p->next < p->n ? p->next++ : -1;
        pthread_mutex_unlock(&p->mu);
        if (i < 0) return NULL;
        cand *c = &p->c[i];
        tt__cubin *cb = NULL;
        int st = C_OK;
        if (tt__jit_compile(&jo, &c->v, &cb, c->why, sizeof c->why) < 0) st = C_COMPILE_ERROR;
        else if (!tt__report_clean(&cb->report)) {
            snprintf(c->why, sizeof c->why, "spills %d bytes, stack frame %d bytes",
                         (int)(cb->report.spill_stores + cb->report.spill_loads), (int)cb->report.stack_frame);
            st = C_INVALID;
        } else if ((long)cb->report.static_smem + cb->report.dynamic_smem > p->w->dev.limits.smem_optin) {
            snprintf(c->why, sizeof c->why, "shared memory over the device limit");
            st = C_INVALID;
        }
        if (st != C_OK) {
            tt__cubin_free(cb);
            cb = NULL;
        }
        pthread_mutex_lock(&p->mu);
        c->cubin = cb;
        c->state = st;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

void tt__wk_pool_start(pool *p) {
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    int t = p->w->o.compile_threads;
    if (t > p->n) t = p->n;
    if (t > 64) t = 64;
    for (p->nthreads = 0; p->nthreads < t; p->nthreads++)
        if (pthread_create(&p->tid[p->nthreads], NULL, compile_thread, p) != 0) break;
}

int tt__wk_pool_wait(pool *p, int i) {
    pthread_mutex_lock(&p->mu);
    while (p->c[i].state == C_PENDING) {
        if (p->nthreads == 0) { /* no thread could start: compile here */
            pthread_mutex_unlock(&p->mu);
            compile_thread(p);
            pthread_mutex_lock(&p->mu);
            continue;
        }
        pthread_cond_wait(&p->cv, &p->mu);
    }
    int st = p->c[i].state;
    pthread_mutex_unlock(&p->mu);
    return st;
}

void tt__wk_pool_stop(pool *p) {
    pthread_mutex_lock(&p->mu);
    p->next = p->n; /* nothing new starts */
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nthreads; i++) pthread_join(p->tid[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
}
