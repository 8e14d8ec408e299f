-- tiletune's tuning database: migration 2 -> 3 (docs/schema.md).
--
-- The key gains the GQA group (gqa_group: heads_q / heads_kv, 1..256) and
-- causal gains 2, bottom-right alignment (query i sees keys
-- j <= i + seqlen_k - seqlen_q); 1 stays PyTorch's top-left. Every row of
-- version 2 keeps its meaning: group 1, its causal as it was, and the
-- driver, CUDA and NVRTC versions step 2 gave it.
--
-- SQLite cannot alter a CHECK or a primary key, so measurement, best and
-- job_key are rebuilt. The store runs this with foreign keys on, inside
-- one transaction: dropping a parent table would fire the children's ON
-- DELETE actions (best.measurement_id SET NULL), so best is set aside as a
-- plain copy first, measurement rebuilt while nothing references it, and
-- best rebuilt from the copy. Applied once, never edited once released.

CREATE TABLE best_old AS SELECT * FROM best;
DROP TABLE best;

CREATE TABLE measurement_new (
    id           INTEGER PRIMARY KEY,
    gpu          TEXT NOT NULL REFERENCES gpu (fingerprint),
    rev          TEXT NOT NULL REFERENCES kernel_rev (rev),
    dtype        TEXT NOT NULL CHECK (dtype IN ('fp16', 'bf16')),
    head_dim     INTEGER NOT NULL CHECK (head_dim IN (32, 64, 96, 128, 256)),
    causal       INTEGER NOT NULL CHECK (causal IN (0, 1, 2)),
    seqlen_q     INTEGER NOT NULL CHECK (seqlen_q BETWEEN 1 AND 16777216),
    seqlen_k     INTEGER NOT NULL CHECK (seqlen_k BETWEEN 1 AND 16777216),
    gqa_group    INTEGER NOT NULL DEFAULT 1 CHECK (gqa_group BETWEEN 1 AND 256),
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
    driver       TEXT NOT NULL DEFAULT '',
    cuda         TEXT NOT NULL DEFAULT '',
    nvrtc        TEXT NOT NULL DEFAULT '',
    -- An ok measurement has a time and its problem size; the others may not.
    CHECK (status <> 'ok' OR (time_ms IS NOT NULL AND batch >= 1 AND heads >= 1))
);
INSERT INTO measurement_new (id, gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k, gqa_group, batch,
                            heads, family, block_m, block_n, warps, stages, layout, q_in_regs, time_ms,
                            time_min_ms, spread, reps, tflops, measured_at, node, sm_clock_mhz, temp_c, busy,
                            regs, smem_bytes, spill_bytes, status, driver, cuda, nvrtc)
SELECT id, gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k, 1, batch,
       heads, family, block_m, block_n, warps, stages, layout, q_in_regs, time_ms,
       time_min_ms, spread, reps, tflops, measured_at, node, sm_clock_mhz, temp_c, busy,
       regs, smem_bytes, spill_bytes, status, driver, cuda, nvrtc
FROM measurement;
DROP TABLE measurement;
ALTER TABLE measurement_new RENAME TO measurement;
CREATE INDEX measurement_key ON measurement (gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k, gqa_group);

CREATE TABLE best (
    gpu            TEXT NOT NULL REFERENCES gpu (fingerprint),
    rev            TEXT NOT NULL REFERENCES kernel_rev (rev),
    dtype          TEXT NOT NULL CHECK (dtype IN ('fp16', 'bf16')),
    head_dim       INTEGER NOT NULL CHECK (head_dim IN (32, 64, 96, 128, 256)),
    causal         INTEGER NOT NULL CHECK (causal IN (0, 1, 2)),
    seqlen_q       INTEGER NOT NULL CHECK (seqlen_q BETWEEN 1 AND 16777216),
    seqlen_k       INTEGER NOT NULL CHECK (seqlen_k BETWEEN 1 AND 16777216),
    gqa_group      INTEGER NOT NULL DEFAULT 1 CHECK (gqa_group BETWEEN 1 AND 256),
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
    driver         TEXT NOT NULL DEFAULT '',
    cuda           TEXT NOT NULL DEFAULT '',
    nvrtc          TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k, gqa_group)
);
INSERT INTO best (gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k, gqa_group, batch, heads, family,
                  block_m, block_n, warps, stages, layout, q_in_regs, time_ms, time_min_ms, spread, reps,
                  tflops, measured_at, node, sm_clock_mhz, temp_c, busy, regs, smem_bytes, spill_bytes,
                  measurement_id, driver, cuda, nvrtc)
SELECT gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k, 1, batch, heads, family,
       block_m, block_n, warps, stages, layout, q_in_regs, time_ms, time_min_ms, spread, reps,
       tflops, measured_at, node, sm_clock_mhz, temp_c, busy, regs, smem_bytes, spill_bytes,
       measurement_id, driver, cuda, nvrtc
FROM best_old;
DROP TABLE best_old;
CREATE INDEX best_measurement ON best (measurement_id);

CREATE TABLE job_key_new (
    job_id      INTEGER NOT NULL REFERENCES job (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL CHECK (seq >= 0),
    gpu         TEXT NOT NULL DEFAULT '' CHECK (gpu NOT GLOB '*[^0-9a-f]*' AND length(gpu) <= 32),
    rev         TEXT NOT NULL DEFAULT '' CHECK (rev NOT GLOB '*[^0-9a-f]*' AND length(rev) <= 32),
    dtype       TEXT NOT NULL CHECK (dtype IN ('fp16', 'bf16')),
    head_dim    INTEGER NOT NULL CHECK (head_dim IN (32, 64, 96, 128, 256)),
    causal      INTEGER NOT NULL CHECK (causal IN (0, 1, 2)),
    seqlen_q    INTEGER NOT NULL CHECK (seqlen_q BETWEEN 1 AND 16777216),
    seqlen_k    INTEGER NOT NULL CHECK (seqlen_k BETWEEN 1 AND 16777216),
    gqa_group   INTEGER NOT NULL DEFAULT 1 CHECK (gqa_group BETWEEN 1 AND 256),
    state       TEXT NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'running', 'done', 'failed', 'cancelled')),
    claimed_at  INTEGER,
    finished_at INTEGER,
    PRIMARY KEY (job_id, seq),
    UNIQUE (job_id, gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k, gqa_group)
);
INSERT INTO job_key_new (job_id, seq, gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k, gqa_group, state,
                        claimed_at, finished_at)
SELECT job_id, seq, gpu, rev, dtype, head_dim, causal, seqlen_q, seqlen_k, 1, state, claimed_at, finished_at
FROM job_key;
DROP TABLE job_key;
ALTER TABLE job_key_new RENAME TO job_key;
CREATE INDEX job_key_state ON job_key (state, job_id, seq);
