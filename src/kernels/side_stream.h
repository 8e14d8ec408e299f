/* A second stream for a call whose launches do not depend on each other:
 * the library's side stream of the caller's stream, forked from it and
 * joined back into it with events, so the two launches share the GPU and a
 * stream capture records them as parallel branches of its graph. */
#ifndef TT_KERNELS_SIDE_STREAM_H
#define TT_KERNELS_SIDE_STREAM_H

#include <stddef.h>

#include "kernels/cuda_api.h"

typedef struct tt__side tt__side;

/* The side stream of (ctx, stream), made to wait for the work queued on
 * `stream` so far: launches queued on *out run after it and alongside
 * what `stream` queues next. Its stream and events are the library's, one
 * set per (context, stream) for the life of the process. 1 when forked; 0
 * (the caller queues everything on `stream`) where TILETUNE_SIDE_STREAM=0
 * (read once), or where `stream` is the per-thread default stream, one
 * handle for a stream of each thread, which one side stream cannot
 * follow. */
int tt__side_fork(const tt__cuda *cu, CUcontext ctx, CUstream stream, tt__side **side, CUstream *out,
                  char *err, size_t errlen);

/* Makes `stream` wait for what was queued on the side stream. */
int tt__side_join(const tt__cuda *cu, tt__side *side, CUstream stream, char *err, size_t errlen);

#endif
