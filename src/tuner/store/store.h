/*
 * The tuning database (db/schema.sql, docs/schema.md): GPU models, kernel
 * revisions, every measurement, the winner per key, and the persistent
 * tuning job queue, in one SQLite file.
 *
 * A tt_store is one connection: use it from one thread at a time. Several
 * processes may open the same file (WAL: readers never wait for the
 * writer; writers queue behind busy_timeout). Every function returns 0 or
 * a negative TT_ERR_* code; the message of the last failure is kept on the
 * handle (tt_store_errmsg). Out-parameters are written only on success.
 * Nothing here prints.
 *
 * Keys given to the measurement/best functions must name their GPU
 * fingerprint and kernel revision (key.gpu, key.rev non-empty), and both
 * must have been registered with tt_store_put_gpu / tt_store_put_rev
 * first (TT_ERR_NOTFOUND otherwise). Job keys may leave them empty: ""
 * means "whichever GPU runs it" / "the current kernel source".
 */
#ifndef TT_TUNER_STORE_H
#define TT_TUNER_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "tiletune.h"
#include "tuner/store/record.h"

/* PRAGMA application_id of a tiletune database: "TTdb" in ASCII. */
#define TT_STORE_APPLICATION_ID 0x54546462
/* The schema version this build writes (PRAGMA user_version). */
#define TT_STORE_SCHEMA_VERSION 4

typedef struct tt_store tt_store;

/*
 * Opens the database at `path`, creating it if it does not exist, and
 * migrates it to TT_STORE_SCHEMA_VERSION. Refuses, leaving the file
 * byte-for-byte untouched: a schema newer than this build
 * (TT_ERR_VERSION), a file that is not a tiletune database or a corrupt
 * one (TT_ERR_CORRUPT). The message goes to err (may be NULL). On success
 * *out is the caller's; close it with tt_store_close.
 */
int tt_store_open(const char *path, tt_store **out, char *err, size_t errlen);
/*
 * A second, read-only handle on a database a tt_store_open already opened
 * (and migrated) in this process: no checks beyond the ids and version,
 * no writes, no locks taken. tt_store_begin on it starts a read
 * transaction (one consistent snapshot until tt_store_rollback), for long
 * reads off the daemon's loop (EXPORT).
 */
int tt_store_open_reader(const char *path, tt_store **out, char *err, size_t errlen);
/* Finalizes the statements and closes the file. NULL is a no-op. */
void tt_store_close(tt_store *s);
/* The message of the last failed call on `s` ("" if none). */
const char *tt_store_errmsg(const tt_store *s);

/*
 * Explicit transactions, for work that must land whole (an import merges
 * every record or none). Between begin and commit, the other functions
 * run as nested savepoints: a failing one undoes only its own part and the
 * caller decides to roll back all. Other writers wait (busy_timeout).
 */
int tt_store_begin(tt_store *s);
int tt_store_commit(tt_store *s);
void tt_store_rollback(tt_store *s);

/* A consistent copy of the whole database at `dest` (VACUUM INTO a temp
 * file, fsync, rename: `dest` is replaced atomically), taken while other
 * connections keep writing. Not inside a transaction. */
int tt_store_snapshot(tt_store *s, const char *dest);

/* ---- GPU models and kernel revisions ----------------------------------- */

/* Inserts or updates a GPU model (driver/CUDA/NVRTC versions are updated to
 * the given ones). `gpu->fingerprint` must be set (tt_gpu_fingerprint). */
int tt_store_put_gpu(tt_store *s, const tt_gpu_info *gpu);
/* TT_ERR_NOTFOUND if the fingerprint is unknown. */
int tt_store_get_gpu(tt_store *s, const char *fingerprint, tt_gpu_info *out);
/* Registers a kernel revision (source hash, hex) once; a later call keeps
 * the first description. `description` may be NULL. */
int tt_store_put_rev(tt_store *s, const char *rev, const char *description);

/* ---- measurements and winners ------------------------------------------ */

/*
 * Records a measurement and, in the same transaction, makes it the winner
 * of its key if it is ok, not busy, and faster than the current winner (or
 * there is none). A reader sees the new winner as soon as this returns.
 * *became_best (may be NULL) says whether it did. rec->id is ignored.
 */
int tt_store_add_measurement(tt_store *s, const tt_record *rec, int *became_best);
/* Sets the winner of rec->key unconditionally (import, tests); rec->id is
 * ignored: the winner refers to no local measurement. */
int tt_store_put_best(tt_store *s, const tt_record *rec);
/* The winner of `key`, or TT_ERR_NOTFOUND. */
int tt_store_get_best(tt_store *s, const tt_key_v2 *key, tt_record *out);
/* Deletes the winner of `key` (measurements stay as history); *forgot
 * (may be NULL) is 1 if there was one. */
int tt_store_forget(tt_store *s, const tt_key_v2 *key, int *forgot);

/* Iteration callbacks: return 0 to go on; anything else stops the
 * iteration and is returned by the iterating function. The record is
 * valid only during the call, and the callback must not call into the same
 * tt_store (its statement is in use): collect, then act. */
typedef int (*tt_store_record_cb)(void *ud, const tt_record *rec);
typedef int (*tt_store_config_cb)(void *ud, const tt_config *cfg, tt_meas_status st);

/* Every winner of every GPU and revision (the daemon filters). */
int tt_store_each_best(tt_store *s, tt_store_record_cb cb, void *ud);
/* Every measurement, oldest first; `gpu` NULL or "" = every GPU. */
int tt_store_each_measurement(tt_store *s, const char *gpu, tt_store_record_cb cb, void *ud);
/* The distinct configs ever recorded wrong, fault or timeout for this key
 * (same GPU and revision; any batch/heads): the worker skips them. */
int tt_store_failed_configs(tt_store *s, const tt_key_v2 *key, tt_store_config_cb cb, void *ud);

/* The keys of `gpu` (NULL or "": every GPU) that have a winner only from
 * other kernel revisions than `rev`, each once, with key.rev = rev: what
 * "tune --stale" re-tunes. */
typedef int (*tt_store_key_cb)(void *ud, const tt_key_v2 *key);
int tt_store_stale_keys(tt_store *s, const char *rev, const char *gpu, tt_store_key_cb cb, void *ud);

/* The winners counted by GPU and kernel revision, in that order (one
 * query; metrics group them further, e.g. stale = rev not the current). */
typedef int (*tt_store_group_cb)(void *ud, const char *gpu, const char *rev, int64_t count);
int tt_store_count_best_by(tt_store *s, tt_store_group_cb cb, void *ud);

/* Counts for STATUS. */
int tt_store_count_best(tt_store *s, int64_t *out);
int tt_store_count_measurements(tt_store *s, int64_t *out);

/* ---- the persistent job queue ------------------------------------------ */

typedef struct tt_job_info {
    int64_t id;
    tt_job_state state;
    tt_job_mode mode;
    int32_t batch, heads;                                    /* 0: the worker's default rule */
    int64_t created_at, updated_at;                          /* unix seconds */
    int64_t keys, pending, running, done, failed, cancelled; /* key counts */
} tt_job_info;

/* A key handed to a worker by tt_store_job_next_key. */
typedef struct tt_job_claim {
    int64_t job_id;
    int32_t seq;   /* the key's index in its job */
    tt_key_v2 key; /* gpu/rev as queued: "" = the worker's own */
    tt_job_mode mode;
    int32_t batch, heads;
} tt_job_claim;

/* Queues a job of `nkeys` keys (checked with tt__key_check; duplicates are
 * kept once). batch/heads >= 0. *job_id is the new job's id. */
int tt_store_job_create(tt_store *s, const tt_key_v2 *keys, int nkeys, tt_job_mode mode, int32_t batch,
                        int32_t heads, int64_t *job_id);
/* TT_ERR_NOTFOUND for an unknown id. */
int tt_store_job_get(tt_store *s, int64_t job_id, tt_job_info *out);
/* Jobs in id order; finished ones (done, failed, cancelled) only if
 * include_finished. */
typedef int (*tt_store_job_cb)(void *ud, const tt_job_info *job);
int tt_store_job_list(tt_store *s, int include_finished, tt_store_job_cb cb, void *ud);
/* Every key of a job in seq order, with its state (progress display). */
typedef int (*tt_store_jkey_cb)(void *ud, int32_t seq, const tt_key_v2 *key, tt_jkey_state st);
int tt_store_job_keys(tt_store *s, int64_t job_id, tt_store_jkey_cb cb, void *ud);
/* Cancels a queued or running job: its pending keys are cancelled; keys
 * already claimed may still be finished. TT_ERR_NOTFOUND for an unknown
 * or finished job. */
int tt_store_job_cancel(tt_store *s, int64_t job_id);
/*
 * Claims the next pending key of the oldest queued/running job, marking it
 * running (and the job running). `gpu` NULL or "": any key; else only keys
 * queued for that fingerprint or for "". TT_ERR_NOTFOUND if none.
 */
int tt_store_job_next_key(tt_store *s, const char *gpu, tt_job_claim *out);
/* Finishes a claimed key as TT_JKEY_DONE or TT_JKEY_FAILED; when the job's
 * last key finishes, the job becomes done or failed. TT_ERR_NOTFOUND if
 * the key is not running (never claimed, already finished). */
int tt_store_job_key_finish(tt_store *s, int64_t job_id, int32_t seq, tt_jkey_state st);
/*
 * At start, before any worker runs: keys left running by a crash go back
 * to pending (cancelled, in a cancelled job) and their jobs back to queued
 * unless some key of theirs already finished. *requeued (may be NULL) is
 * how many keys went back.
 */
int tt_store_job_recover(tt_store *s, int64_t *requeued);
/* The same for one claimed key whose worker gave it up unfinished (no GPU
 * any more, its job cancelled): pending again, or cancelled in a cancelled
 * job. TT_ERR_NOTFOUND if the key is not running. */
int tt_store_job_key_release(tt_store *s, int64_t job_id, int32_t seq);

/* Progress of one key of a job (the JOB verb). */
typedef struct tt_jkey_progress {
    int32_t seq;
    tt_key_v2 key; /* as queued: gpu/rev may be "" */
    tt_jkey_state state;
    int64_t measured;   /* measurements of the key stored since the job was made */
    int64_t claimed_at; /* unix seconds; 0: not yet */
    int64_t finished_at;
} tt_jkey_progress;
typedef int (*tt_store_progress_cb)(void *ud, const tt_jkey_progress *p);
/* Every key of a job in seq order with its progress; keys queued without
 * gpu/rev count the measurements of `gpu`/`rev` (the daemon's own).
 * TT_ERR_NOTFOUND for an unknown job. */
int tt_store_job_progress(tt_store *s, int64_t job_id, const char *gpu, const char *rev,
                          tt_store_progress_cb cb, void *ud);

typedef struct tt_job_counts {
    int64_t queued, running, done, failed, cancelled;
} tt_job_counts;
int tt_store_job_counts(tt_store *s, tt_job_counts *out);

#endif
