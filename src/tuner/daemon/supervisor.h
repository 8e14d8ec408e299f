/*
 * The worker supervisor: the seam between the daemon and the measurement
 * workers (docs/worker-protocol.md). The daemon never touches a GPU; one
 * worker process per GPU does (`tiletune-worker`).
 *
 * The supervisor spawns the worker program with uv_spawn, one process per
 * GPU ("--gpu I"), talks to each over its stdin/stdout with a line
 * protocol, claims queued job keys from the store for the GPU's model,
 * hands them out one at a time (so one job's keys spread over the GPUs), stores every measurement that comes back
 * (tt_store_add_measurement) and tells the daemon through a callback so it
 * can update its in-memory index. A worker that dies is restarted with
 * exponential back-off; the variant it was running when it died is
 * recorded as `fault` (or `timeout` when the supervisor killed it for
 * silence), and its key is handed to the restarted worker, which skips
 * that variant; unless the key's job was cancelled meanwhile (the key ends
 * cancelled) or the restarted worker finds no GPU or dies before its
 * HELLO (the key goes back to pending). With no worker program, or a
 * worker that reports no GPU, jobs stay queued and the status says
 * `waiting` / `no-gpu`. A GPU whose worker had it and then finds it gone
 * (fallen off the bus) is reported lost; its key goes back to the queue
 * for the other GPUs, and the GPU is probed again every few seconds.
 *
 * Runs on the daemon's libuv loop; not thread-safe.
 */
#ifndef TT_TUNER_SUPERVISOR_H
#define TT_TUNER_SUPERVISOR_H

#include <stddef.h>
#include <uv.h>

#include "tuner/store/store.h"
#include "tiletune.h"

typedef struct tt_supervisor tt_supervisor;

typedef struct tt_supervisor_opts {
    /* The worker program; NULL or "": none (tuning waits for a GPU). */
    const char *worker_path;
    /* Passed to the worker as --cache-dir (cubin cache); may be NULL. */
    const char *cache_dir;
    /* A busy worker silent this long (no line) is killed; the variant it
     * was trying is recorded as `timeout`. <= 0: 300. */
    int measure_timeout_s;
    /* A worker that has not said HELLO this long is killed. <= 0: 30. */
    int hello_timeout_s;
    /* Restart back-off: doubles from min to max after each failure;
     * <= 0: 500 ms and 60 s. */
    int backoff_min_ms, backoff_max_ms;
    /* A key whose worker died this many times is finished as failed.
     * <= 0: 3. */
    int max_key_crashes;
} tt_supervisor_opts;

typedef struct tt_supervisor_events {
    void *ud;
    /* A measurement was stored; became_best says it is now the winner of
     * rec->key (gpu and rev filled). May be NULL. */
    void (*on_measurement)(void *ud, const tt_record *rec, int became_best);
    /* A worker process started, or died / was killed (failed = 1) or
     * exited cleanly (failed = 0). May be NULL. */
    void (*on_worker)(void *ud, int gpu_index, int started, int failed);
    /* The workers' kernel revision or GPU 0's fingerprint may have changed
     * (a HELLO, worker 0 gone): what tt_supervisor_rev/gpu now say. May be
     * NULL. */
    void (*on_identity)(void *ud, const char *rev, const char *gpu);
} tt_supervisor_events;

typedef enum tt_tuning_state {
    TT_TUNING_IDLE = 0,    /* workers ready, nothing to do */
    TT_TUNING_RUNNING = 1, /* some worker is measuring a key */
    TT_TUNING_WAITING = 2, /* cannot tune now; reason says why */
} tt_tuning_state;

typedef struct tt_supervisor_status {
    tt_tuning_state state;
    /* "none", "no-gpu" (no worker program, or it found no GPU),
     * "starting" (waiting for the worker's HELLO), "restarting" (a worker
     * died; back-off running). */
    const char *reason;
    int gpus;            /* GPUs with a worker that said HELLO */
    int busy;            /* workers measuring a key now */
    int lost;            /* GPUs a worker had and then found gone */
    int models;          /* distinct GPU models among the GPUs with a worker */
    char rev[TT_ID_MAX]; /* the workers' kernel revision; "" before HELLO */
    char gpu[TT_ID_MAX]; /* fingerprint of GPU 0; "" if none */
} tt_supervisor_status;

/* "idle", "running", "waiting". */
const char *tt_tuning_state_name(tt_tuning_state st);

/*
 * Starts supervising: spawns the first worker (GPU 0), whose HELLO says
 * how many GPUs there are; the others follow. `store` must outlive the
 * supervisor. The options are copied. *out is the caller's until
 * tt_supervisor_stop has called its `done`.
 */
int tt_supervisor_start(uv_loop_t *loop, tt_store *store, const tt_supervisor_opts *opts,
                        const tt_supervisor_events *ev, tt_supervisor **out, char *err, size_t errlen);
/* Jobs were queued (or cancelled): hand keys to idle workers, and probe
 * for a GPU again if none was found (at most every few seconds). */
void tt_supervisor_kick(tt_supervisor *s);
void tt_supervisor_get_status(const tt_supervisor *s, tt_supervisor_status *out);
/* The same rev and gpu as the status, without copying (the lookup path
 * asks for them on every key without gpu=/rev=): "" when unknown. The
 * strings stay valid until the supervisor is freed. */
const char *tt_supervisor_rev(const tt_supervisor *s);
/* The distinct GPU models (fingerprints) of the GPUs with a ready worker,
 * GPU order, at most `cap`: a node of mixed models tunes each model's
 * keys apart. Returns how many. */
int tt_supervisor_models(const tt_supervisor *s, char (*fps)[TT_ID_MAX], int cap);
/* Index and state of GPU i's worker for STATUS: "starting", "ready",
 * "busy", "restarting", "lost", "no-gpu" or "none"; NULL past the last. */
const char *tt_supervisor_gpu_state(const tt_supervisor *s, int i);
const char *tt_supervisor_gpu(const tt_supervisor *s);
/*
 * Stops every worker: EOF on its stdin, SIGTERM, SIGKILL after a grace of
 * two seconds. Keys in flight stay `running` in the store; the next start
 * returns them to the queue (tt_store_job_recover). Calls done(ud) once
 * every process and handle is gone, then frees the supervisor.
 */
void tt_supervisor_stop(tt_supervisor *s, void (*done)(void *ud), void *ud);

/* The default worker program: `tiletune-worker` next to the running
 * binary. Writes into buf; TT_ERR_RANGE if it does not fit. */
int tt_supervisor_default_worker(char *buf, size_t len);

#endif
