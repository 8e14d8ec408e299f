-- tiletune's tuning database, schema version 1 (docs/schema.md).
--
-- The store applies this file as migration 1, inside one transaction, and
-- then sets PRAGMA user_version = 1 and PRAGMA application_id. Later
-- versions are migration steps in src/tuner/store.c; this file is never
-- edited once released, so that version 1 always means the same schema.
--
-- A key is (gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k). The
-- config knob columns (family .. q_in_regs) are the rows of
-- src/common/knobs.def, same names, same order; tests/store checks it.

-- One row per GPU model (tt_gpu_fingerprint: name, compute capability,
-- SM count, memory), with the software it was last seen with.
CREATE TABLE gpu (
    fingerprint TEXT PRIMARY KEY
        CHECK (length(fingerprint) BETWEEN 1 AND 32 AND fingerprint NOT GLOB '*[^0-9a-f]*'),
    name        TEXT NOT NULL,
    cc_major    INTEGER NOT NULL CHECK (cc_major >= 0),
    cc_minor    INTEGER NOT NULL CHECK (cc_minor >= 0),
    sm_count    INTEGER NOT NULL CHECK (sm_count >= 0),
    mem_bytes   INTEGER NOT NULL CHECK (mem_bytes >= 0),
    driver      TEXT NOT NULL DEFAULT '',
    cuda        TEXT NOT NULL DEFAULT '',
    nvrtc       TEXT NOT NULL DEFAULT '',
    first_seen  INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL
);

-- One row per kernel source revision (hash of the kernel source).
CREATE TABLE kernel_rev (
    rev         TEXT PRIMARY KEY
        CHECK (length(rev) BETWEEN 1 AND 32 AND rev NOT GLOB '*[^0-9a-f]*'),
    description TEXT NOT NULL DEFAULT '',
    first_seen  INTEGER NOT NULL
);

-- Every timing ever taken, whatever its outcome.
CREATE TABLE measurement (
    id           INTEGER PRIMARY KEY,
    gpu          TEXT NOT NULL REFERENCES gpu (fingerprint),
    rev          TEXT NOT NULL REFERENCES kernel_rev (rev),
    dtype        TEXT NOT NULL CHECK (dtype IN ('fp16', 'bf16')),
    head_dim     INTEGER NOT NULL CHECK (head_dim IN (32, 64, 96, 128, 256)),
    causal       INTEGER NOT NULL CHECK (causal IN (0, 1)),
    seqlen_q     INTEGER NOT NULL CHECK (seqlen_q BETWEEN 1 AND 16777216),
    seqlen_k     INTEGER NOT NULL CHECK (seqlen_k BETWEEN 1 AND 16777216),
    -- 0 = not known (a variant that crashed before it reported them).
    batch        INTEGER NOT NULL CHECK (batch >= 0),
    heads        INTEGER NOT NULL CHECK (heads >= 0),
    family       INTEGER NOT NULL,
    block_m      INTEGER NOT NULL,
    block_n      INTEGER NOT NULL,
    warps        INTEGER NOT NULL,
    stages       INTEGER NOT NULL,
    layout       INTEGER NOT NULL,
    q_in_regs    INTEGER NOT NULL,
    time_ms      REAL CHECK (time_ms IS NULL OR time_ms > 0),
    time_min_ms  REAL CHECK (time_min_ms IS NULL OR time_min_ms > 0),
    spread       REAL CHECK (spread IS NULL OR spread >= 0),
    reps         INTEGER NOT NULL DEFAULT 0 CHECK (reps >= 0),
    tflops       REAL CHECK (tflops IS NULL OR tflops >= 0),
    measured_at  INTEGER NOT NULL,
    node         TEXT NOT NULL DEFAULT '',
    sm_clock_mhz INTEGER CHECK (sm_clock_mhz IS NULL OR sm_clock_mhz >= 0),
    temp_c       INTEGER,
    busy         INTEGER CHECK (busy IS NULL OR busy IN (0, 1)),
    regs         INTEGER CHECK (regs IS NULL OR regs >= 0),
    smem_bytes   INTEGER CHECK (smem_bytes IS NULL OR smem_bytes >= 0),
    spill_bytes  INTEGER CHECK (spill_bytes IS NULL OR spill_bytes >= 0),
    status       TEXT NOT NULL CHECK (status IN ('ok', 'wrong', 'fault', 'timeout', 'skipped')),
    -- An ok measurement has a time and its problem size; the others may not.
    CHECK (status <> 'ok' OR (time_ms IS NOT NULL AND batch >= 1 AND heads >= 1))
);
-- failed_configs and per-key history; also serves "every measurement of a GPU".
CREATE INDEX measurement_key ON measurement (gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k);

-- The winner per key. Rows of an older kernel revision stay (stale: never
-- served as exact) until re-tuned or forgotten.
CREATE TABLE best (
    gpu            TEXT NOT NULL REFERENCES gpu (fingerprint),
    rev            TEXT NOT NULL REFERENCES kernel_rev (rev),
    dtype          TEXT NOT NULL CHECK (dtype IN ('fp16', 'bf16')),
    head_dim       INTEGER NOT NULL CHECK (head_dim IN (32, 64, 96, 128, 256)),
    causal         INTEGER NOT NULL CHECK (causal IN (0, 1)),
    seqlen_q       INTEGER NOT NULL CHECK (seqlen_q BETWEEN 1 AND 16777216),
    seqlen_k       INTEGER NOT NULL CHECK (seqlen_k BETWEEN 1 AND 16777216),
    batch          INTEGER NOT NULL CHECK (batch >= 1),
    heads          INTEGER NOT NULL CHECK (heads >= 1),
    family         INTEGER NOT NULL,
    block_m        INTEGER NOT NULL,
    block_n        INTEGER NOT NULL,
    warps          INTEGER NOT NULL,
    stages         INTEGER NOT NULL,
    layout         INTEGER NOT NULL,
    q_in_regs      INTEGER NOT NULL,
    time_ms        REAL NOT NULL CHECK (time_ms > 0),
    time_min_ms    REAL CHECK (time_min_ms IS NULL OR time_min_ms > 0),
    spread         REAL CHECK (spread IS NULL OR spread >= 0),
    reps           INTEGER NOT NULL DEFAULT 0 CHECK (reps >= 0),
    tflops         REAL CHECK (tflops IS NULL OR tflops >= 0),
    measured_at    INTEGER NOT NULL,
    node           TEXT NOT NULL DEFAULT '',
    sm_clock_mhz   INTEGER CHECK (sm_clock_mhz IS NULL OR sm_clock_mhz >= 0),
    temp_c         INTEGER,
    busy           INTEGER CHECK (busy IS NULL OR busy = 0),
    regs           INTEGER CHECK (regs IS NULL OR regs >= 0),
    smem_bytes     INTEGER CHECK (smem_bytes IS NULL OR smem_bytes >= 0),
    spill_bytes    INTEGER CHECK (spill_bytes IS NULL OR spill_bytes >= 0),
    -- The measurement that won; NULL for an imported winner.
    measurement_id INTEGER REFERENCES measurement (id) ON DELETE SET NULL,
    PRIMARY KEY (gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k)
);
CREATE INDEX best_measurement ON best (measurement_id);

-- The tuning queue. AUTOINCREMENT: a job id is never reused, so a CANCEL
-- for an old id cannot hit a newer job.
CREATE TABLE job (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    state      TEXT NOT NULL DEFAULT 'queued'
        CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),
    mode       TEXT NOT NULL CHECK (mode IN ('exhaustive', 'fast')),
    batch      INTEGER NOT NULL DEFAULT 0 CHECK (batch >= 0),
    heads      INTEGER NOT NULL DEFAULT 0 CHECK (heads >= 0),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX job_state ON job (state, id);

-- The keys of a job. gpu/rev '' = whichever GPU runs it / the current
-- kernel source, so no foreign key to gpu or kernel_rev here.
CREATE TABLE job_key (
    job_id      INTEGER NOT NULL REFERENCES job (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL CHECK (seq >= 0),
    gpu         TEXT NOT NULL DEFAULT '' CHECK (gpu NOT GLOB '*[^0-9a-f]*' AND length(gpu) <= 32),
    rev         TEXT NOT NULL DEFAULT '' CHECK (rev NOT GLOB '*[^0-9a-f]*' AND length(rev) <= 32),
    dtype       TEXT NOT NULL CHECK (dtype IN ('fp16', 'bf16')),
    head_dim    INTEGER NOT NULL CHECK (head_dim IN (32, 64, 96, 128, 256)),
    causal      INTEGER NOT NULL CHECK (causal IN (0, 1)),
    seqlen_q    INTEGER NOT NULL CHECK (seqlen_q BETWEEN 1 AND 16777216),
    seqlen_k    INTEGER NOT NULL CHECK (seqlen_k BETWEEN 1 AND 16777216),
    state       TEXT NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'running', 'done', 'failed', 'cancelled')),
    claimed_at  INTEGER,
    finished_at INTEGER,
    PRIMARY KEY (job_id, seq),
    UNIQUE (job_id, gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k)
);
-- The claim query: the first pending key of the oldest job.
CREATE INDEX job_key_state ON job_key (state, job_id, seq);
