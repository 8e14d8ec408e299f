#include "kernels/pool.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/config.h"
#include "common/fail.h"
#include "kernels/family.h"

enum { P_WAITING = 0, P_RUNNING, P_DONE };

typedef struct prog {
    tt__variant v;   /* its first item's variant: the one compiled */
    tt__variant key; /* program_of(v): what its items have in common */
    int state;       /* P_*; the fields below are the compiler's until P_DONE */
    tt__variant_status status;
    tt__report report;
    tt__cubin *cubin;
    char error[256];
} prog;

struct tt__pool {
    tt__pool_opts o;
    prog *prog;
    size_t nprog, next; /* next: the first program not started */
    size_t *of, n;      /* item i is program of[i] */
    int cancelled;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t tid[TT_POOL_MAX_THREADS];
    int nthreads;
};

/* The program a variant compiles to: its host-only knobs zeroed, every
 * byte that is not a field too (compared bytewise). */
static tt__variant program_of(const tt__variant *v) {
    tt__variant p;
    memset(&p, 0, sizeof p);
    p.config = v->config;
    memset(p.config.reserved, 0, sizeof p.config.reserved);
    const tt__family *f = tt__family_of(v->config.family);
    for (int i = 0; f && i < TT__KNOB_COUNT; i++)
        if (f->host_knobs & (1u << i)) tt__knob_set(tt__knob_at(i), &p.config, 0);
    p.head_dim = v->head_dim;
    p.dtype = v->dtype;
    p.causal = v->causal;
    p.arch = v->arch;
    p.fault = v->fault;
    p.page_size = v->page_size;
    return p;
}

/* Under p->mu: the next program to compile, marked running; NULL when
 * none is left or the pool is cancelled. */
static prog *take_next(tt__pool *p) {
    if (p->cancelled || p->next >= p->nprog) return NULL;
    prog *g = &p->prog[p->next++];
    g->state = P_RUNNING;
    return g;
}

/* Called and returns with p->mu held; compiles g without it. */
static void compile_locked(tt__pool *p, prog *g) {
    pthread_mutex_unlock(&p->mu);
    tt__cubin *cb = NULL;
    if (tt__jit_compile(&p->o.jo, &g->v, &cb, g->error, sizeof g->error) < 0) {
        g->status = TT_VARIANT_COMPILE_ERROR;
    } else {
        g->report = cb->report;
        g->status = tt__variant_check_report(&cb->report, &p->o.dev, g->error, sizeof g->error);
        if (g->status != TT_VARIANT_OK || !p->o.keep_cubins) {
            tt__cubin_free(cb);
            cb = NULL;
        }
    }
    g->cubin = cb;
    pthread_mutex_lock(&p->mu);
    g->state = P_DONE;
    pthread_cond_broadcast(&p->cv);
}

static void *compile_thread(void *arg) {
    tt__pool *p = arg;
    /* Linux nices threads one by one; failing to is harmless. */
    if (p->o.nice > 0) (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), p->o.nice);
    pthread_mutex_lock(&p->mu);
    for (prog *g; (g = take_next(p));) compile_locked(p, g);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int tt__pool_start(const tt__variant *v, size_t n, const tt__pool_opts *o, tt__pool **out, char *err,
                   size_t errlen) {
    if ((n && !v) || !o || !out) return tt__fail(TT_ERR_INVAL, err, errlen, "missing argument");
    tt__pool *p = calloc(1, sizeof *p);
    if (!p) return tt__fail(TT_ERR_NOMEM, err, errlen, "out of memory");
    p->prog = calloc(n ? n : 1, sizeof *p->prog);
    p->of = calloc(n ? n : 1, sizeof *p->of);
    if (!p->prog || !p->of) {
        free(p->prog);
        free(p->of);
        free(p);
        return tt__fail(TT_ERR_NOMEM, err, errlen, "out of memory");
    }
    p->o = *o;
    p->n = n;
    for (size_t i = 0; i < n; i++) {
        tt__variant key = program_of(&v[i]);
        size_t j = 0;
        while (j < p->nprog && memcmp(&key, &p->prog[j].key, sizeof key) != 0) j++;
        if (j == p->nprog) {
            p->prog[j].v = v[i];
            p->prog[j].key = key;
            p->nprog++;
        }
        p->of[i] = j;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    int t = o->threads > 0 ? o->threads : 0;
    if ((size_t)t > p->nprog) t = (int)p->nprog;
    if (t > TT_POOL_MAX_THREADS) t = TT_POOL_MAX_THREADS;
    for (p->nthreads = 0; p->nthreads < t; p->nthreads++)
        if (pthread_create(&p->tid[p->nthreads], NULL, compile_thread, p) != 0) break;
    *out = p;
    return 0;
}

tt__variant_status tt__pool_wait(tt__pool *p, size_t i) {
    if (!p || i >= p->n) return TT_VARIANT_UNCHECKED;
    prog *g = &p->prog[p->of[i]];
    pthread_mutex_lock(&p->mu);
    while (g->state != P_DONE) {
        if (g->state == P_WAITING && p->cancelled) {
            pthread_mutex_unlock(&p->mu);
            return TT_VARIANT_UNCHECKED;
        }
        /* with no thread the caller compiles: g is then not started, next or later */
        prog *h = p->o.caller_compiles || p->nthreads == 0 ? take_next(p) : NULL;
        if (h) compile_locked(p, h);
        else pthread_cond_wait(&p->cv, &p->mu);
    }
    tt__variant_status st = g->status;
    pthread_mutex_unlock(&p->mu);
    return st;
}

/* Item i's program if it is compiled: its fields no longer change. */
static const prog *done_prog(tt__pool *p, size_t i) {
    if (!p || i >= p->n) return NULL;
    const prog *g = &p->prog[p->of[i]];
    pthread_mutex_lock(&p->mu);
    int done = g->state == P_DONE;
    pthread_mutex_unlock(&p->mu);
    return done ? g : NULL;
}

const tt__report *tt__pool_report(tt__pool *p, size_t i) {
    static const tt__report none;
    const prog *g = done_prog(p, i);
    return g ? &g->report : &none;
}

const char *tt__pool_error(tt__pool *p, size_t i) {
    const prog *g = done_prog(p, i);
    return g ? g->error : "";
}

const tt__cubin *tt__pool_cubin(tt__pool *p, size_t i) {
    const prog *g = done_prog(p, i);
    return g ? g->cubin : NULL;
}

size_t tt__pool_programs(const tt__pool *p) { return p ? p->nprog : 0; }

void tt__pool_cancel(tt__pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->cancelled = 1;
    pthread_cond_broadcast(&p->cv); /* a waiter on a program that will not start */
    pthread_mutex_unlock(&p->mu);
}

void tt__pool_free(tt__pool *p) {
    if (!p) return;
    tt__pool_cancel(p);
    for (int i = 0; i < p->nthreads; i++) pthread_join(p->tid[i], NULL);
    for (size_t j = 0; j < p->nprog; j++) tt__cubin_free(p->prog[j].cubin);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->prog);
    free(p->of);
    free(p);
}
