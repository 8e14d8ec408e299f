/*
 * The tuning data model without the database: GPU models, records
 * (measurements and winners) and the names of measurement statuses, job
 * modes and job states. The store keeps these; the fleet's table format
 * and the CLI read and write them without linking SQLite.
 */
#ifndef TT_TUNER_STORE_RECORD_H
#define TT_TUNER_STORE_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "tiletune.h"

#define TT_NAME_MAX 128 /* GPU names, hostnames, version strings, with NUL */

typedef struct tt_gpu_info {
    char fingerprint[TT_ID_MAX]; /* tt_gpu_fingerprint() of the fields below */
    char name[TT_NAME_MAX];      /* "NVIDIA H200" */
    int32_t cc_major, cc_minor;  /* compute capability */
    int32_t sm_count;
    int64_t mem_bytes;
    /* What this model was last seen with (informational, not identity). */
    char driver[TT_NAME_MAX]; /* "570.86.15" */
    char cuda[TT_NAME_MAX];   /* "13.0" */
    char nvrtc[TT_NAME_MAX];  /* "13.0" */
} tt_gpu_info;

/*
 * The GPU model's identity: a hex hash of name, compute capability, SM
 * count and memory, so GPUs of one model on different nodes share records,
 * while a different model (or a MIG slice) gets its own. Writes 17 bytes.
 */
void tt_gpu_fingerprint(const char *name, int cc_major, int cc_minor, int sm_count, int64_t mem_bytes,
                        char out[TT_ID_MAX]);

typedef enum tt_meas_status {
    TT_MEAS_OK = 0,      /* correct and timed */
    TT_MEAS_WRONG = 1,   /* computed a wrong result */
    TT_MEAS_FAULT = 2,   /* faulted (illegal address, ...): worker died */
    TT_MEAS_TIMEOUT = 3, /* did not finish within its time limit */
    TT_MEAS_SKIPPED = 4, /* not run (pruned, invalid for the device) */
} tt_meas_status;

/* "ok", "wrong", "fault", "timeout", "skipped"; NULL if out of range. */
const char *tt_meas_status_name(tt_meas_status st);
/* TT_ERR_INVAL for an unknown name. */
int tt_meas_status_parse(const char *name, tt_meas_status *out);

/*
 * One measurement, or one winner (then status is TT_MEAS_OK). Optional
 * fields use -1 (ints) or a negative value (doubles) for "not recorded";
 * they are stored as NULL.
 */
typedef struct tt_record {
    tt_key_v2 key; /* gpu and rev filled */
    tt_config config;
    int32_t batch, heads; /* the problem timed; 0 = unknown (not for ok) */
    double time_ms;       /* median */
    double time_min_ms;   /* optional */
    double spread;        /* (p80 - p20) / median; optional */
    int32_t reps;         /* timed repetitions */
    double tflops;
    tt_meas_status status;
    int64_t measured_at;    /* unix seconds */
    char node[TT_NAME_MAX]; /* hostname that measured it */
    /* Optional conditions of the run (NVML). */
    int32_t sm_clock_mhz;
    int32_t temp_c;
    int32_t busy; /* 1: other processes used the GPU; never becomes best */
    /* Optional compile report of the variant. */
    int32_t regs, smem_bytes, spill_bytes;
    /* The software it was measured with ("" = not recorded): a winner
     * carries its own, whatever the GPU model's row says now. */
    char driver[TT_NAME_MAX], cuda[TT_NAME_MAX], nvrtc[TT_NAME_MAX];
    int64_t id; /* measurement id; set by the store; 0 for imported winners */
} tt_record;

/* A record with every optional field "not recorded" and the rest zero. */
void tt_record_init(tt_record *r);

typedef enum tt_job_mode { TT_JOB_EXHAUSTIVE = 0, TT_JOB_FAST = 1 } tt_job_mode;

typedef enum tt_job_state {
    TT_JOB_QUEUED = 0,  /* no key claimed yet (or all returned by recovery) */
    TT_JOB_RUNNING = 1, /* some key claimed or finished, some pending */
    TT_JOB_DONE = 2,    /* every key finished, none failed */
    TT_JOB_FAILED = 3,  /* every key finished, at least one failed */
    TT_JOB_CANCELLED = 4,
} tt_job_state;

typedef enum tt_jkey_state {
    TT_JKEY_PENDING = 0,
    TT_JKEY_RUNNING = 1,
    TT_JKEY_DONE = 2,
    TT_JKEY_FAILED = 3,
    TT_JKEY_CANCELLED = 4,
} tt_jkey_state;

const char *tt_job_mode_name(tt_job_mode m); /* "exhaustive", "fast" */
int tt_job_mode_parse(const char *name, tt_job_mode *out);
const char *tt_job_state_name(tt_job_state st);   /* "queued", ... */
const char *tt_jkey_state_name(tt_jkey_state st); /* "pending", ... */
/* TT_ERR_INVAL for an unknown name. */
int tt_job_state_parse(const char *name, tt_job_state *out);
int tt_jkey_state_parse(const char *name, tt_jkey_state *out);

#endif
