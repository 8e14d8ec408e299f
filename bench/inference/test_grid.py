#!/usr/bin/env python3
"""CPU test of bench/inference/grid.py: the grid it queues and its analysis
half (database -> grid-defaults.csv / .md).

The real tiletuned creates the database (the store's own schema and
migrations) and queues the jobs, on a machine without a GPU, where they
stay queued. The test then writes the measurements and winners a tune
would have left for a few keys of the bf16 job, with the columns named
(a schema change that breaks them fails here), and checks what
`grid.py --analyse` reports for each case: the default timed, the default
the winner, a default that differs from a measured candidate only in
split_ctas (not in the space), one dropped by fast mode, one recorded
wrong, a key that failed, keys never reached.

Needs TT_GRID_BUILD (a build directory with tiletuned, tiletune and
libtiletune; ctest sets it); exits 77 without it, sqlite3 or the library.
"""
import csv
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from cpu_test import build_dir, check, run_in_temp  # noqa: E402

build = build_dir("TT_GRID_BUILD")
import sqlite3  # noqa: E402

import grid  # noqa: E402
import tiletune  # noqa: E402


def job_keys(db, job):
    con = sqlite3.connect(db)
    keys = [tuple(r) for r in con.execute(f"SELECT {', '.join(grid.KEY_COLS)} FROM job_key WHERE job_id = ?",
                                          (job,))]
    con.close()
    return keys


def run(tmp):
    db = os.path.join(tmp, "grid.db")
    os.makedirs(os.path.join(tmp, "run"))
    d = grid.Daemon(build, os.path.join(tmp, "run"), db, os.path.join(tmp, "daemon.log"))
    try:
        all_job, n_all = grid.queue(d, "exhaustive")
        bf16_job, n_bf16 = grid.queue(d, "exhaustive", "bf16")
        fp16_job, n_fp16 = grid.queue(d, "fast", "fp16")
        shard_job, n_shard = grid.queue(d, "exhaustive", "bf16", "1/2")
        sub_job, n_sub = grid.queue(d, "exhaustive", "bf16", None, {"--seqlen-k": "131072", "--seqlen": None})
        d64_job, n_d64 = grid.queue(d, "exhaustive", "bf16", None,
                                    {"--seqlen-k": "32768,131072", "--seqlen": "16,64,512", "--hdim": "64"})
        spec_job, n_spec = grid.queue(d, "exhaustive", "bf16", None, {"--seqlen": "8,16", "--group": "4,8"})
    finally:
        d.stop()
    full, bf16, fp16 = set(job_keys(db, all_job)), set(job_keys(db, bf16_job)), set(job_keys(db, fp16_job))
    check(n_all == len(full) == 412, f"--inference-grid queues 412 keys ({n_all}, {len(full)} distinct)")
    check(bf16 | fp16 == full and not bf16 & fp16,
          f"the lists of --dtype bf16 and fp16 queue exactly the grid's keys ({n_bf16} + {n_fp16})")
    check(all(k[0] == "bf16" for k in bf16), "--dtype bf16 queues bf16 keys only")
    check(n_shard == 103 and set(job_keys(db, shard_job)) <= bf16, f"--shard 1/2 of bf16: 103 keys ({n_shard})")
    sub = set(job_keys(db, sub_job))
    check(sub == {k for k in bf16 if k[4] == 131072} and n_sub == len(sub) > 0,
          f"--seqlen-k 131072 narrows bf16 to its 131072-key keys ({n_sub})")
    d64 = set(job_keys(db, d64_job))
    check(d64 == {k for k in bf16 if k[1] == 64 and k[3] in (16, 64, 512) and k[4] in (32768, 131072)}
          and n_d64 == len(d64) == 18, f"--hdim 64 with two seqlen lists narrows bf16 to 18 keys ({n_d64})")
    spec = set(job_keys(db, spec_job))
    check(spec == {k for k in bf16 if k[3] in (8, 16) and k[5] in (4, 8)} and n_spec == len(spec) == 40,
          f"--group 4,8 with --seqlen 8,16 narrows bf16 to 40 keys ({n_spec})")

    defaults = grid.device_defaults(sorted(bf16), None)  # the portable table: no GPU here
    dpath = os.path.join(tmp, "defaults.csv")
    grid.write_defaults(dpath, defaults)
    check(grid.read_defaults(dpath) == defaults, "defaults.csv reads back")

    con = sqlite3.connect(db)
    con.execute("PRAGMA foreign_keys = ON")
    now = int(time.time())
    con.execute("INSERT INTO gpu (fingerprint, name, cc_major, cc_minor, sm_count, mem_bytes, first_seen, "
                "last_seen) VALUES ('ab12', 'NVIDIA H200', 9, 0, 132, 150000000000, ?, ?)", (now, now))
    con.execute("INSERT INTO kernel_rev (rev, first_seen) VALUES ('cd34', ?)", (now,))
    knobs = grid.knob_names()

    def knob_values(text):
        cfg = tiletune._parse(text)
        return [getattr(cfg, n) for n in knobs]

    def other(text, **change):
        """text with knobs changed (the binding's dict form over the text)."""
        kv = tiletune.parse_config(text)
        kv.update(change)
        return tiletune.format_config(tiletune._parse(",".join(f"{k}={v}" for k, v in kv.items())))

    def measure(k, text, status, ms, busy=0, batch=2):
        cols = ["gpu", "rev", *grid.KEY_COLS, "batch", "heads", *knobs, "time_ms", "reps", "measured_at",
                "status", "busy"]
        vals = ["ab12", "cd34", *k, batch, 32, *knob_values(text), ms, 100 if ms else 0, now, status, busy]
        cur = con.execute(f"INSERT INTO measurement ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                          vals)
        return cur.lastrowid

    def win(k, text, ms, mid):
        cols = ["gpu", "rev", *grid.KEY_COLS, "batch", "heads", *knobs, "time_ms", "measured_at",
                "measurement_id"]
        vals = ["ab12", "cd34", *k, 2, 32, *knob_values(text), ms, now, mid]
        con.execute(f"INSERT INTO best ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", vals)

    def key(lq, lk, g, d=128, causal=2):
        k = ("bf16", d, 0 if lq == 1 else causal, lq, lk, g)
        assert k in bf16, k
        return k

    cases = {}

    def case(name, k, winner, default_rows):
        """Key k's winner (text, ms) and the default's measurements
        [(status, ms, busy)]; the winner may be the default."""
        cases[name] = k
        for status, ms, busy, *batch in default_rows:
            measure(k, defaults[k], status, ms, busy, *batch)
        if winner:
            win(k, winner[0], winner[1], measure(k, winner[0], "ok", winner[1]))

    # decode: the default timed 1.25x the winner
    k = key(1, 4096, 1)
    case("slower", k, (other(defaults[k], block_n=128), 0.100), [("ok", 0.125, 0)])
    # decode: the default is the winner (another candidate slower)
    k = key(8, 32768, 4)
    measure(k, other(defaults[k], stages=3), "ok", 0.300)
    case("winner", k, (defaults[k], 0.200), [])
    # decode: a candidate differs from the default in split_ctas only
    k = key(8, 1024, 4, d=64)
    split = other(defaults[k], split_ctas=tiletune.parse_config(defaults[k]).get("split_ctas", 0) + 2)
    check(split != defaults[k], f"the split_ctas candidate differs from the default ({split})")
    case("split", k, (split, 0.050), [])
    # decode: the default ran faster at the tune's batch than the config
    # kept for both batches (reported skipped there, and at the second batch)
    k = key(2, 4096, 8)
    case("not kept", k, (other(defaults[k], block_n=64 if "block_n=128" in defaults[k] else 128), 0.100),
         [("skipped", 0.090, 0), ("skipped", 1.500, 0, 132)])
    # chunk: fast mode dropped the default
    k = key(64, 16384, 1)
    case("dropped", k, (other(defaults[k], block_n=128), 0.500), [("skipped", 0.700, 0)])
    # chunk: timed 1.1x, once more while the GPU was shared (not counted)
    k = key(512, 4096, 8)
    case("chunk", k, (other(defaults[k], stages=3), 0.500), [("ok", 0.550, 0), ("ok", 0.400, 1)])
    # prefill: the default recorded wrong
    k = key(512, 1024, 1)
    case("wrong", k, (other(defaults[k], warps=8), 1.000), [("wrong", None, 0)])
    # a key every candidate of which failed
    case("failed", key(16, 131072, 8), None, [("fault", None, 0)])
    for name, k in cases.items():
        con.execute("UPDATE job_key SET state = ? WHERE job_id = ? AND dtype = ? AND head_dim = ? AND causal = ? "
                    "AND seqlen_q = ? AND seqlen_k = ? AND gqa_group = ?",
                    ("failed" if name == "failed" else "done", bf16_job, *k))
    con.execute("UPDATE job SET state = 'cancelled' WHERE id = ?", (bf16_job,))
    con.execute("UPDATE job_key SET state = 'cancelled' WHERE job_id = ? AND state = 'pending'", (bf16_job,))
    con.commit()
    con.close()

    out = os.path.join(tmp, "out")
    r = subprocess.run([sys.executable, os.path.join(HERE, "grid.py"), "--analyse", db, "--defaults", dpath,
                        "--job", str(bf16_job), "--bench-s", "0", "--out", out], capture_output=True, text=True)
    check(r.returncode == 0, f"grid.py --analyse exits 0 ({r.returncode}: {r.stderr.strip()[-300:]})")
    if r.returncode:
        return
    with open(os.path.join(out, "grid-defaults.csv")) as f:
        rows = {(x["dtype"], int(x["head_dim"]), int(x["causal"]), int(x["seqlen_q"]), int(x["seqlen_k"]),
                 int(x["group"])): x for x in csv.DictReader(f)}
    check(set(rows) == bf16, f"a row for every key of the job ({len(rows)})")

    def row(name):
        return rows[cases[name]]
    x = row("slower")
    check(x["default_status"] == "measured" and abs(float(x["ratio"]) - 1.25) < 1e-9 and x["ratio_source"] == "tune"
          and x["regime"] == "decode", f"default timed by the tune: 1.25 ({x['default_status']}, {x['ratio']})")
    check(x["default_config"] == defaults[cases["slower"]] and x["batch"] == "2" and x["heads"] == "32",
          "the row names the default and the measured batch and heads")
    x = row("winner")
    check(x["default_status"] == "measured" and float(x["ratio"]) == 1.0, f"default is the winner: 1.0 ({x['ratio']})")
    x = row("split")
    check(x["default_status"] == "not in the space" and x["ratio"] == "",
          f"split_ctas alone makes another config: not in the space ({x['default_status']})")
    x = row("dropped")
    check(x["default_status"] == "dropped" and x["ratio"] == "" and "0.7000" in x["default_note"]
          and x["regime"] == "chunk", f"dropped by fast mode ({x['default_status']}, {x['default_note']})")
    x = row("not kept")
    check(x["default_status"] == "measured, not kept" and abs(float(x["ratio"]) - 0.9) < 1e-9
          and x["ratio_source"] == "tune",
          f"a decode default faster at the tune's batch than the kept config: 0.9 ({x['default_status']}, "
          f"{x['ratio']})")
    x = row("chunk")
    check(x["default_status"] == "measured" and abs(float(x["ratio"]) - 1.1) < 1e-9,
          f"a busy timing does not count: 1.1 ({x['ratio']})")
    x = row("wrong")
    check(x["default_status"] == "failed" and "wrong" in x["default_note"] and x["regime"] == "prefill",
          f"recorded wrong: failed ({x['default_status']}, {x['default_note']})")
    x = row("failed")
    check(x["key_state"] == "failed" and x["winner_config"] == "" and x["ratio"] == "", "a failed key has no winner")
    rest = [x for k, x in rows.items() if k not in cases.values()]
    check(all(x["key_state"] == "cancelled" and x["winner_config"] == "" for x in rest),
          f"the {len(rest)} keys never reached: cancelled, no winner")

    md = open(os.path.join(out, "grid-defaults.md")).read()
    g = math.exp((math.log(1.25) + math.log(1.0) + math.log(1.1) + math.log(0.9)) / 4)
    check(f"| all | 7 | 4 | {g:.3f} | 1.250 | bf16 d128 causal0 q1 k4096 g1 | 3 of 4 |" in md,
          "the summary's overall row: 7 keys with a winner, 4 ratios, geomean, worst, within 1.15")
    check(f"| decode | 4 | 3 | {(1.25 * 0.9) ** (1 / 3):.3f} | 1.250 |" in md, "the decode row")
    check("| prefill | 1 | 0 | | | | |" in md, "the prefill row: a winner, no ratio")
    check("| not in the space | 1 |" in md and "| dropped | 1 |" in md and "| failed | 1 |" in md
          and "| measured | 3 |" in md and "| measured, not kept | 1 |" in md, "the default statuses are counted")
    check("Keys with a winner and no ratio: 3" in md, "keys without a ratio are counted")


    # the same timings in a fast job: a skipped default may be a partial
    # timing, so it is not a ratio (the bench times it)
    con = sqlite3.connect(db)
    con.execute("UPDATE job SET mode = 'fast' WHERE id = ?", (bf16_job,))
    con.commit()
    con.close()
    r = subprocess.run([sys.executable, os.path.join(HERE, "grid.py"), "--analyse", db, "--defaults", dpath,
                        "--job", str(bf16_job), "--bench-s", "0", "--out", out], capture_output=True, text=True)
    check(r.returncode == 0, f"grid.py --analyse of the fast job exits 0 ({r.returncode})")
    with open(os.path.join(out, "grid-defaults.csv")) as f:
        x = next(x for x in csv.DictReader(f) if x["key"] == grid.key_text(cases["not kept"]))
    check(x["default_status"] == "dropped" and x["ratio"] == "" and "0.0900" in x["default_note"],
          f"fast mode: the skipped default is dropped, its timing noted ({x['default_status']}, {x['default_note']})")

    # --defaults-at: this tree's defaults on a nominal device at the sizes
    # the tune measured, no GPU (tt_default_at)
    tool = os.path.join(build, "bench", "inference", "tt_default_at")
    if not os.access(tool, os.X_OK):
        print(f"skip --defaults-at: {tool} not built")
        return
    at = grid.defaults_at(build, "90:132", db, os.path.join(tmp, "defaults-at.csv"))
    sizes = grid.measured_sizes(db)
    check(set(at) == set(sizes) and all(c.startswith("family=") for c in at.values()),
          f"--defaults-at 90:132: a default for each key the tune measured ({len(at)} of {len(sizes)})")

    def default_at(*rows, arch="90"):
        text = "".join(",".join(str(x) for x in r) + "\n" for r in rows)
        return subprocess.run([tool, arch, "132"], input=text, capture_output=True, text=True)
    # 8 tokens of group 4 over 4096 keys: at batch 8 (64 units, under half a
    # wave of 132 SMs) the 16-row tile, at batch 1 the 32-row row
    r = default_at(("bf16", 128, 2, 8, 4096, 4, 8, 32), ("bf16", 128, 2, 8, 4096, 4, 1, 32))
    got = [x.split(",")[6:8] for x in r.stdout.splitlines()[1:]]
    check(r.returncode == 0 and got == [['"family=splitkv', "block_m=16"], ['"family=splitkv', "block_m=32"]],
          f"tt_default_at follows the call's batch ({r.returncode}: {got})")
    r = default_at(("bf16", 128, 2, 8, 4096))
    check(r.returncode == 1 and "line 1" in r.stderr, f"a short row: exit 1, the line named ({r.stderr.strip()})")
    r = default_at(("bf16", 100, 2, 8, 4096, 4, 8, 32))
    check(r.returncode == 1, f"a head dim with no kernel: exit 1 ({r.stderr.strip()})")
    r = default_at(("bf16", 128, 2, 8, 4096, 4, 8, 32), arch="7")
    check(r.returncode == 2 and "arch 7" in r.stderr, f"an arch with no nominal device: exit 2 ({r.stderr.strip()})")


if __name__ == "__main__":
    sys.exit(run_in_temp(run, "tt-test-grid.", "TT_GRID_KEEP"))
