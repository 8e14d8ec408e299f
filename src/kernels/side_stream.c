#include "kernels/side_stream.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/fail.h"
#include "tiletune.h"

struct tt__side {
    struct tt__side *next;
    CUcontext ctx;
    CUstream stream; /* the caller's */
    CUstream side;
    CUevent fork, join;
};

/* Entries are never freed: a side stream may still run, or belong to a
 * graph being captured, after any call returns. */
static pthread_mutex_t side_lock = PTHREAD_MUTEX_INITIALIZER;
static tt__side *side_head;

static int side_of_locked(const tt__cuda *cu, CUcontext ctx, CUstream stream, tt__side **out, char *err,
                          size_t errlen) {
    for (tt__side *s = side_head; s; s = s->next)
        if (s->ctx == ctx && s->stream == stream) {
            *out = s;
            return 0;
        }
    tt__side *s = calloc(1, sizeof *s);
    if (!s) return tt__fail(TT_ERR_NOMEM, err, errlen, "out of memory");
    /* non-blocking: a blocking stream would wait for, and hold up, the
     * legacy default stream, which is the caller's in PyTorch's default */
    CUresult r = cu->StreamCreate(&s->side, CU_STREAM_NON_BLOCKING);
    if (r) {
        free(s);
        return tt__cuda_fail(cu, r, "cuStreamCreate(side stream)", err, errlen);
    }
    if ((r = cu->EventCreate(&s->fork, CU_EVENT_DISABLE_TIMING)) ||
        (r = cu->EventCreate(&s->join, CU_EVENT_DISABLE_TIMING))) {
        if (s->fork) cu->EventDestroy(s->fork);
        cu->StreamDestroy(s->side);
        free(s);
        return tt__cuda_fail(cu, r, "cuEventCreate(side stream)", err, errlen);
    }
    s->ctx = ctx;
    s->stream = stream;
    s->next = side_head;
    side_head = s;
    *out = s;
    return 0;
}

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static int side_on = 1;

static void env_read(void) {
    const char *v = getenv("TILETUNE_SIDE_STREAM");
    side_on = !(v && strcmp(v, "0") == 0);
}

static int side_enabled(void) {
    pthread_once(&env_once, env_read);
    return side_on;
}

int tt__side_fork(const tt__cuda *cu, CUcontext ctx, CUstream stream, tt__side **side, CUstream *out,
                  char *err, size_t errlen) {
    if (!side_enabled() || stream == CU_STREAM_PER_THREAD) return 0;
    int pushed, rc = tt__ctx_enter(cu, ctx, &pushed, err, errlen);
    if (rc < 0) return rc;
    pthread_mutex_lock(&side_lock);
    tt__side *s = NULL;
    rc = side_of_locked(cu, ctx, stream, &s, err, errlen);
    pthread_mutex_unlock(&side_lock);
    /* Two threads on one stream may interleave these records: each wait
     * then takes a later record on the same stream, never an earlier one,
     * so it waits for at least its own work. */
    CUresult r = CUDA_SUCCESS;
    if (rc == 0 && (r = cu->EventRecord(s->fork, stream)))
        rc = tt__cuda_fail(cu, r, "cuEventRecord(fork)", err, errlen);
    if (rc == 0 && (r = cu->StreamWaitEvent(s->side, s->fork, 0)))
        rc = tt__cuda_fail(cu, r, "cuStreamWaitEvent(side stream)", err, errlen);
    tt__ctx_leave(cu, pushed);
    if (rc < 0) return rc;
    *side = s;
    *out = s->side;
    return 1;
}

int tt__side_join(const tt__cuda *cu, tt__side *s, CUstream stream, char *err, size_t errlen) {
    int pushed, rc = tt__ctx_enter(cu, s->ctx, &pushed, err, errlen);
    if (rc < 0) return rc;
    CUresult r = cu->EventRecord(s->join, s->side);
    if (r) rc = tt__cuda_fail(cu, r, "cuEventRecord(join)", err, errlen);
    else if ((r = cu->StreamWaitEvent(stream, s->join, 0)))
        rc = tt__cuda_fail(cu, r, "cuStreamWaitEvent(join)", err, errlen);
    tt__ctx_leave(cu, pushed);
    return rc;
}
