#!/usr/bin/env python3
"""The built-in default against the tuned winner over the inference grid
(docs/tuning.md, "The inference grid").

On a GPU machine: a fresh database, tiletuned with the real
tiletune-worker, the grid queued (`tiletune tune --inference-grid`; with
--dtype the same keys of one dtype, as lists), tuned until done or
--cap-s (what is left is cancelled, and the summary says how many keys
were done). Exhaustive by default: every candidate, the built-in default
among them, is timed with the full count, so the default's time is as good
as the winner's. Then, from the database, per tuned key: the winner's
time and the time of the built-in default (what tt_sdpa_fwd runs there
with nothing tuned for a call of the size the tune measured:
`tiletune.default_config(..., device=0, group=G, batch=B, heads=H)`, as a
chunk's default follows the batch) measured in the same tune, and their
ratio.

A default the tune did not time (it is not among the key's candidates, or
fast mode dropped it after a partial timing) is timed here, with its
winner, through tt_sdpa_fwd at the batch and heads the worker measured the
key with (CUDA graphs over copies of the inputs, replayed interleaved,
median): the ratio's source says which (`tune` or `bench`).

    bench/inference/grid.py --build BUILD --out OUT [--mode exhaustive|fast]
        [--dtype bf16|fp16 [--seqlen LIST] [--seqlen-k LIST] [--group LIST] [--hdim LIST]]
        [--shard I/N] [--cap-s 420] [--bench-s 60]
    bench/inference/grid.py --analyse DB --defaults CSV --out OUT
    bench/inference/grid.py --analyse DB --build BUILD --defaults-at 90:132 --out OUT

Writes OUT/grid-defaults.csv (a row a key of the job), OUT/grid-defaults.md
(per regime decode/chunk/prefill and overall: geometric mean and worst of
default/winner, keys within 1.15, the worst 10, and why any default has
no time), OUT/defaults.csv (each key's device default: --analyse reads it
back on a machine without the GPU), OUT/grid.db and OUT/daemon.log.
"""
import argparse
import csv
import json
import math
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

from tune import Daemon, fresh_db, regime  # noqa: E402

WITHIN = 1.15  # the target: the built-in default within 15% of tuned
KEY_COLS = ("dtype", "head_dim", "causal", "seqlen_q", "seqlen_k", "gqa_group")
# The inference grid as `tune` lists, for one dtype (`tune --inference-grid`
# takes no --dtype). tests: bench_inference_grid checks that both dtypes of
# these lists queue exactly the keys of --inference-grid.
GRID_LISTS = ["--seqlen", "1,2,4,8,16,64,512", "--seqlen-k", "1024,4096,16384,32768,131072",
              "--group", "1,4,8", "--hdim", "128,64", "--causal=bottom-right"]
STATUSES = ("measured", "measured, not kept", "not in the space", "dropped", "failed", "busy")


def knob_names():
    """The config knobs in text order: src/common/knobs.def, the one list
    (each is a column of `measurement` and `best`, docs/schema.md)."""
    text = open(os.path.join(ROOT, "src/common/knobs.def")).read()
    names = re.findall(r"^TT_KNOB\((\w+),", text, re.M)
    if not names:
        raise SystemExit("src/common/knobs.def: no TT_KNOB rows")
    return names


def key_text(k):
    dt, d, c, lq, lk, g = k
    return f"{dt} d{d} causal{c} q{lq} k{lk} g{g}"


# ---- the tune (GPU machine) ---------------------------------------------------

def tune_args(mode, dtype=None, shard=None, narrow=None):
    """The `tiletune tune` arguments that queue the grid (or one dtype of
    it; narrow: {list option: values} replacing the grid's, a sub-grid)."""
    lists = list(GRID_LISTS)
    for opt, values in (narrow or {}).items():
        if values:
            lists[lists.index(opt) + 1] = values
    args = ["tune"] + (lists + ["--dtype", dtype] if dtype else ["--inference-grid"])
    args += ["--mode", mode]
    if shard:
        args += ["--shard", shard]
    return args


def queue(d, mode, dtype=None, shard=None, narrow=None):
    """Queues the grid on daemon d: (job id, keys)."""
    out = d.call(*tune_args(mode, dtype, shard, narrow)).stdout
    m = re.search(r"job (\d+) queued: (\d+) keys", out)
    if not m:
        raise RuntimeError(f"tiletune tune: unexpected reply {out!r}")
    return int(m.group(1)), int(m.group(2))


def job_state(d, job):
    for j in json.loads(d.call("jobs", "--all", "--json").stdout or "[]"):
        if j["job"] == job:
            return j
    return None


def running_keys(db, job):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute("SELECT count(*) FROM job_key WHERE job_id = ? AND state = 'running'",
                           (job,)).fetchone()[0]
    finally:
        con.close()


def wait_capped(d, db, job, cap_s, have_gpu):
    """Waits for the job until cap_s; cancels it at the cap and lets the key
    in flight finish (at most a minute). Returns (wall s, capped)."""
    t0 = time.time()
    last = t0
    capped = False
    while True:
        j = job_state(d, job)
        if j is None or j["state"] not in ("queued", "running"):
            break
        now = time.time()
        if now - t0 >= cap_s or not have_gpu:
            capped = True
            d.call("cancel", str(job), check=False)
            break
        if now - last >= 30:
            print(f"  {now - t0:.0f} s: {j['done']} of {j['keys']} keys done", flush=True)
            last = now
        time.sleep(2)
    wall = time.time() - t0
    if capped:
        for _ in range(60):
            if running_keys(db, job) == 0:
                break
            time.sleep(1)
    return wall, capped


def device_defaults(keys, device=0, sizes=None):
    """key -> the config tt_sdpa_fwd runs for it with nothing tuned on
    `device` (the arch's own rows: sm_90's splitkv/ws defaults), at the
    call size (batch, query heads) of `sizes` (key -> the sizes the tune
    measured) where given: a chunk's default follows the batch."""
    import tiletune
    out = {}
    for k in keys:
        dt, d, c, lq, lk, g = k
        b, h = (sizes or {}).get(k, (None, None))
        out[k] = tiletune.default_config(d, dt, c, lq, lk, device=device, group=g, batch=b, heads=h)
    return out


def measured_sizes(db):
    """key -> (batch, query heads) the database's winners were measured at
    (the newest winner of a key, as analyse takes it)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    out = {}
    for r in con.execute(f"SELECT {', '.join(KEY_COLS)}, batch, heads FROM best ORDER BY measured_at"):
        out[tuple(r[:len(KEY_COLS)])] = (r[-2], r[-1])
    con.close()
    return out


def write_defaults(path, defaults):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(list(KEY_COLS) + ["default_config"])
        for k in sorted(defaults):
            w.writerow(list(k) + [defaults[k]])


def read_defaults(path):
    out = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            out[(r["dtype"], int(r["head_dim"]), int(r["causal"]), int(r["seqlen_q"]), int(r["seqlen_k"]),
                 int(r["gqa_group"]))] = r["default_config"]
    return out


# ---- the analysis (database -> rows) ------------------------------------------

def canon(text, head_dim, dtype):
    """The canonical text of a config (libtiletune's own formatting)."""
    import tiletune
    return tiletune.config_text(text, head_dim, dtype)


def config_of(row, knobs, head_dim, dtype):
    return canon(",".join(f"{n}={row[n]}" for n in knobs), head_dim, dtype)


def latest_job(con):
    r = con.execute("SELECT max(id) FROM job").fetchone()
    if not r or r[0] is None:
        raise SystemExit("the database holds no tuning job")
    return r[0]


def analyse(db, defaults, job=None):
    """Rows, one a key of the job, in job order; and the job's id."""
    knobs = knob_names()
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    if job is None:
        job = latest_job(con)
    where = " AND ".join(f"{c} = ?" for c in KEY_COLS)
    # exhaustive: every candidate timed with its full count, so a default
    # reported skipped at the winner's batch is a full timing (a decode
    # key's default faster there than the config kept for both batches)
    exhaustive = (con.execute("SELECT mode FROM job WHERE id = ?", (job,)).fetchone() or [""])[0] == "exhaustive"
    rows = []
    for jk in con.execute(f"SELECT {', '.join(KEY_COLS)}, state FROM job_key WHERE job_id = ? ORDER BY seq",
                          (job,)).fetchall():
        k = tuple(jk[c] for c in KEY_COLS)
        dt, d, c, lq, lk, g = k
        r = dict(key=key_text(k), dtype=dt, head_dim=d, causal=c, seqlen_q=lq, seqlen_k=lk, group=g,
                 regime=regime(lq, lk), key_state=jk["state"], batch="", heads="", winner_config="",
                 winner_ms="", default_config="", default_ms="", ratio="", default_status="", default_note="",
                 bench_default_ms="", bench_winner_ms="", ratio_source="")
        rows.append(r)
        # the newest winner of the key (a fresh database has one)
        best = con.execute(f"SELECT * FROM best WHERE {where} ORDER BY measured_at DESC LIMIT 1", k).fetchone()
        dflt = defaults.get(k)
        if dflt is None:
            r["default_status"] = "no default"
            r["default_note"] = "no default config given for the key"
            continue
        r["default_config"] = canon(dflt, d, dt)
        if best is None:
            continue
        r["batch"], r["heads"] = best["batch"], best["heads"]
        r["winner_config"] = config_of(best, knobs, d, dt)
        r["winner_ms"] = best["time_ms"]
        seen = {}
        for m in con.execute(f"SELECT * FROM measurement WHERE {where} AND gpu = ? AND rev = ? ORDER BY id",
                             k + (best["gpu"], best["rev"])):
            if config_of(m, knobs, d, dt) == r["default_config"]:
                seen.setdefault(m["status"], []).append(m)
        ok = [m for m in seen.get("ok", []) if not m["busy"]]
        if ok:
            # the store's rule for the winner: the fastest ok timing
            r["default_ms"] = min(m["time_ms"] for m in ok)
            r["default_status"] = "measured"
            r["ratio"] = r["default_ms"] / r["winner_ms"]
            r["ratio_source"] = "tune"
        elif any(seen.get(s) for s in ("wrong", "fault", "timeout")):
            fail = next(s for s in ("wrong", "fault", "timeout") if seen.get(s))
            r["default_status"] = "failed"
            r["default_note"] = f"recorded {fail}"
        elif seen.get("ok"):
            r["default_status"] = "busy"
            r["default_note"] = "timed only while the GPU was shared"
        elif seen.get("skipped"):
            # skipped at the tune's batch: dropped by fast mode after a
            # partial timing, or (a decode key) faster there than the
            # config kept for both batches; a decode key's timings at its
            # second batch are skipped too, and are not this batch's
            t = [m["time_ms"] for m in seen["skipped"]
                 if m["time_ms"] and m["batch"] == best["batch"] and m["heads"] == best["heads"] and not m["busy"]]
            if exhaustive and t and r["regime"] == "decode":
                r["default_ms"] = min(t)
                r["default_status"] = "measured, not kept"
                r["default_note"] = "full timing reported skipped: faster at the tune's batch than the config kept"
                r["ratio"] = r["default_ms"] / r["winner_ms"]
                r["ratio_source"] = "tune"
            else:
                r["default_status"] = "dropped"
                r["default_note"] = "skipped by the tune" + (f" (its timing there {min(t):.4f} ms)" if t else "")
        else:
            r["default_status"] = "not in the space"
            r["default_note"] = "no measurement: not a candidate of the key, or dropped at compile"
    con.close()
    return rows, job


def needs_bench(r):
    return r["winner_config"] and r["default_status"] in ("not in the space", "dropped", "busy")


# ---- timing what the tune did not (GPU, torch) --------------------------------

def bench(rows, budget_s, check=0):
    """Times the default and the winner of each key whose default has no
    time from the tune (and of `check` keys that have one, to compare the two
    sources), at the key's measured batch and heads. In place."""
    try:
        import torch
        import decode  # graph-replay helpers of the inference benchmark
    except Exception as e:  # noqa: BLE001
        print(f"bench: skipped ({type(e).__name__}: {e})", flush=True)
        return
    if not torch.cuda.is_available():
        print("bench: skipped (no CUDA device)", flush=True)
        return
    todo = [r for r in rows if needs_bench(r)]
    measured = [r for r in rows if r["ratio_source"] == "tune"]
    todo += measured[:: max(1, len(measured) // check)][:check] if check and measured else []
    t0 = time.time()
    precompile(torch, todo)
    done = 0
    for r in todo:
        if time.time() - t0 > budget_s:
            print(f"bench: cap of {budget_s:.0f} s reached, {len(todo) - done} keys not timed", flush=True)
            break
        try:
            td, tw = time_pair(torch, decode, r)
        except Exception as e:  # noqa: BLE001
            r["default_note"] += f"; bench failed: {type(e).__name__}: {str(e)[:120]}"
            print(f"bench {r['key']}: {type(e).__name__}: {str(e)[:160]}", flush=True)
            done += 1
            continue
        r["bench_default_ms"], r["bench_winner_ms"] = td, tw
        if not r["ratio"]:
            r["ratio"] = td / tw
            r["ratio_source"] = "bench"
        done += 1
        tuned = f"{r['ratio']:.3f}" if r["ratio_source"] == "tune" else "-"
        print(f"bench {r['key']}: default {td:.4f} ms, winner {tw:.4f} ms ({td / tw:.3f}x; tune's ratio {tuned})",
              flush=True)
        torch.cuda.empty_cache()
    print(f"bench: {done} keys in {time.time() - t0:.0f} s", flush=True)


def calls(torch, r, text, batch, heads_q, seqlen_q, seqlen_k, copies):
    """One callable a copy of fresh inputs [batch, heads, seqlen, head_dim]:
    tt_sdpa_fwd with config `text` on the current stream (graph capture
    takes it)."""
    import ctypes
    import tiletune
    lib = tiletune._load()
    dt = torch.bfloat16 if r["dtype"] == "bf16" else torch.float16
    g, D = int(r["group"]), int(r["head_dim"])
    Hkv = heads_q // g if r["regime"] != "prefill" else heads_q
    dev = torch.device("cuda:0")
    cfg = tiletune._parse(text)
    out = []
    for _ in range(copies):
        q = torch.randn(batch, heads_q, seqlen_q, D, device=dev, dtype=dt)
        k = torch.randn(batch, Hkv, seqlen_k, D, device=dev, dtype=dt)
        v = torch.randn(batch, Hkv, seqlen_k, D, device=dev, dtype=dt)
        o = torch.empty_like(q)
        lse = torch.empty(batch, heads_q, seqlen_q, device=dev, dtype=torch.float32)
        a = tiletune._Args()
        a.q, a.k, a.v, a.o, a.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
        a.batch, a.heads_q, a.heads_kv, a.seqlen_q, a.seqlen_k, a.head_dim = batch, heads_q, Hkv, seqlen_q, seqlen_k, D
        for name, t in (("q_stride", q), ("k_stride", k), ("v_stride", v), ("o_stride", o)):
            getattr(a, name)[:] = list(t.stride()[:3])
        a.dtype = 1 if r["dtype"] == "bf16" else 0
        a.causal = int(r["causal"])
        a.config = ctypes.pointer(cfg)

        def call(a=a, keep=(cfg, q, k, v, o, lse)):
            a.stream = torch.cuda.current_stream().cuda_stream
            err = ctypes.create_string_buffer(512)
            rc = lib.tt_sdpa_fwd(ctypes.byref(a), err, len(err))
            if rc < 0:
                raise RuntimeError(f"tt_sdpa_fwd: {err.value.decode()} ({rc})")
        out.append(call)
    return out


def precompile(torch, rows):
    """Compiles (or loads from the cubin cache) each config the timing will
    run, on threads (ctypes drops the GIL; NVRTC runs in parallel), on a
    small problem of the same kernel (head_dim, dtype, mask, group)."""
    precompile_configs(torch, [(r, t) for r in rows for t in (r["default_config"], r["winner_config"])])


def precompile_configs(torch, pairs):
    """precompile's work for (key row, config text) pairs."""
    import concurrent.futures as cf
    jobs = {}
    for r, text in pairs:
        jobs[(text, r["dtype"], r["head_dim"], r["causal"], r["group"], r["regime"])] = r

    def one(item):
        (text, *_), r = item
        try:
            f = calls(torch, r, text, 1, int(r["group"]), min(int(r["seqlen_q"]), 64), 1024, 1)[0]
            f()
        except Exception:  # noqa: BLE001 (the timing reports it)
            pass
    t0 = time.time()
    with cf.ThreadPoolExecutor(max(1, min(16, (os.cpu_count() or 2) - 1))) as ex:
        list(ex.map(one, jobs.items()))
    torch.cuda.synchronize()
    print(f"bench: {len(jobs)} kernels ready in {time.time() - t0:.0f} s", flush=True)


def time_pair(torch, decode, r):
    """(default ms, winner ms): tt_sdpa_fwd with each config at the key's
    measured batch and heads, over enough copies of the inputs to read
    256 MB a replay; each timed three times, alternately (the GPU clock
    drifts within seconds), the median."""
    B, Hq, g = int(r["batch"]), int(r["heads"]), int(r["group"])
    Lq, Lk, D = int(r["seqlen_q"]), int(r["seqlen_k"]), int(r["head_dim"])
    Hkv = Hq // g if r["regime"] != "prefill" else Hq
    copies = decode.copies_for(2 * (2 * B * Hq * Lq * D + 2 * B * Hkv * Lk * D))
    fa = calls(torch, r, r["default_config"], B, Hq, Lq, Lk, copies)
    fb = calls(torch, r, r["winner_config"], B, Hq, Lq, Lk, copies)
    ta, tb = [], []
    for _ in range(3):
        ta.append(decode.graph_time(fa, reps=5))
        tb.append(decode.graph_time(fb, reps=5))
    ta.sort()
    tb.sort()
    return ta[1], tb[1]


# ---- outputs ---------------------------------------------------------------------

COLUMNS = ["key", "dtype", "head_dim", "causal", "seqlen_q", "seqlen_k", "group", "regime", "key_state", "batch",
           "heads", "winner_config", "winner_ms", "default_config", "default_ms", "ratio", "default_status",
           "default_note", "bench_default_ms", "bench_winner_ms", "ratio_source"]


def fmt(v):
    return f"{v:.5g}" if isinstance(v, float) else v


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def summary(rows, meta):
    """The markdown summary (and its lines for the log)."""
    tuned = [r for r in rows if r["winner_config"]]
    lines = ["# Built-in default against tuned, the inference grid", "",
             f"{meta}", "",
             f"Keys in the job: {len(rows)}; with a winner: {len(tuned)}; "
             + ", ".join(f"{s}: {n}" for s, n in sorted(count(rows, 'key_state').items())) + ".", "",
             "| regime | keys with a winner | with a ratio | geomean default/winner | worst | key of the worst "
             f"| within {WITHIN} |", "|---|--:|--:|--:|--:|---|--:|"]
    for name in ("decode", "chunk", "prefill", "all"):
        sel = [r for r in tuned if name == "all" or r["regime"] == name]
        rat = [r for r in sel if r["ratio"] != ""]
        if not sel:
            lines.append(f"| {name} | 0 | 0 | | | | |")
            continue
        worst = max(rat, key=lambda r: r["ratio"]) if rat else None
        within = sum(1 for r in rat if r["ratio"] <= WITHIN)
        lines.append(f"| {name} | {len(sel)} | {len(rat)} | "
                     + (f"{geomean([r['ratio'] for r in rat]):.3f} | {worst['ratio']:.3f} | {worst['key']} | "
                        f"{within} of {len(rat)} |" if rat else "| | | |"))
    src = count([r for r in tuned if r["ratio"] != ""], "ratio_source")
    lines += ["", "Ratio from the tune's own timings (same pass, same count): "
              f"{src.get('tune', 0)} keys; timed here through tt_sdpa_fwd (default not timed by the tune): "
              f"{src.get('bench', 0)} keys.", "",
              "Built-in default, per tuned key:", "", "| default | keys | why |", "|---|--:|---|"]
    why = {"measured": "timed by the tune with the other candidates",
           "measured, not kept": "timed by the exhaustive tune with its full count, reported skipped: (decode) "
                                 "faster at the tune's batch than the config kept for both batches "
                                 "(docs/tuning.md)",
           "not in the space": "no measurement: not among the key's candidates, or dropped at compile "
                               "(spills, shared memory)",
           "dropped": "skipped by the tune: fast mode dropped it after a partial timing, or (decode) it ran "
                      "faster at the tune's batch than the config kept for both batches (docs/tuning.md)",
           "failed": "recorded wrong, fault or timeout: a bug",
           "busy": "timed only while another process used the GPU",
           "no default": "no default config for the key"}
    for s, n in sorted(count(tuned, "default_status").items()):
        lines.append(f"| {s} | {n} | {why.get(s, '')} |")
    unt = [r for r in tuned if r["ratio"] == ""]
    if unt:
        lines += ["", f"Keys with a winner and no ratio: {len(unt)} ("
                  + ", ".join(f"{s}: {n}" for s, n in sorted(count(unt, 'default_status').items())) + ")."]
    both = [r for r in tuned if r["ratio_source"] == "tune" and r["bench_default_ms"] != ""]
    if both:
        lines += ["", "The two sources on the same keys (default/winner from the tune, and timed here):", "",
                  "| key | tune | here |", "|---|--:|--:|"]
        for r in both:
            lines.append(f"| {r['key']} | {r['ratio']:.3f} | {r['bench_default_ms'] / r['bench_winner_ms']:.3f} |")
    worst = sorted((r for r in tuned if r["ratio"] != ""), key=lambda r: -r["ratio"])[:10]
    lines += ["", "The worst 10:", "", "| key | regime | default/winner | source | default | winner |",
              "|---|---|--:|---|---|---|"]
    for r in worst:
        lines.append(f"| {r['key']} | {r['regime']} | {r['ratio']:.3f} | {r['ratio_source']} | "
                     f"`{r['default_config']}` | `{r['winner_config']}` |")
    return "\n".join(lines) + "\n"


def count(rows, field):
    out = {}
    for r in rows:
        out[r[field]] = out.get(r[field], 0) + 1
    return out


def write(rows, out, meta):
    with open(os.path.join(out, "grid-defaults.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({c: fmt(r[c]) for c in COLUMNS})
    md = summary(rows, meta)
    with open(os.path.join(out, "grid-defaults.md"), "w") as f:
        f.write(md)
    print(md, flush=True)


# ---- main -------------------------------------------------------------------------

def narrow(args):
    return {"--seqlen": args.seqlen, "--seqlen-k": args.seqlen_k, "--group": args.group, "--hdim": args.hdim}


def tune_main(args):
    db = fresh_db(os.path.join(args.out, "grid.db"))
    os.environ.setdefault("TILETUNE_LIB", os.path.join(args.build, "src/client/libtiletune.so"))
    run = tempfile.mkdtemp(prefix="tt-bench-grid.")
    cache = os.environ.get("TILETUNE_CACHE_DIR") or os.path.join(run, "cache")
    os.makedirs(cache, exist_ok=True)
    d = Daemon(args.build, run, db, os.path.join(args.out, "daemon.log"), cache=cache)
    try:
        have_gpu = d.wait_gpu()
        job, nkeys = queue(d, args.mode, args.dtype, args.shard, narrow(args))
        print(f"job {job}: {nkeys} keys, mode {args.mode}, cap {args.cap_s:.0f} s"
              f"{'' if have_gpu else ' (no GPU: nothing is tuned)'}", flush=True)
        wall, capped = wait_capped(d, db, job, args.cap_s, have_gpu)
        st = job_state(d, job) or {}
        done = st.get("done", 0)
        print(f"tuned {done} of {nkeys} keys in {wall:.0f} s" + (" (capped: the rest cancelled)" if capped else ""),
              flush=True)
    finally:
        d.stop()
        shutil.rmtree(run, ignore_errors=True)
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    keys = [tuple(r) for r in con.execute(f"SELECT {', '.join(KEY_COLS)} FROM job_key WHERE job_id = ? ORDER BY seq",
                                          (job,))]
    con.close()
    source = "device"
    try:
        defaults = device_defaults(keys, sizes=measured_sizes(db))
    except Exception as e:  # noqa: BLE001
        # no GPU (a dry run): nothing was tuned, the portable table stands in
        print(f"no device default ({e}): the portable one", flush=True)
        defaults, source = device_defaults(keys, None), "portable (no GPU)"
    write_defaults(os.path.join(args.out, "defaults.csv"), defaults)
    rows, _ = analyse(db, defaults, job)
    if args.bench_s > 0:
        bench(rows, args.bench_s, args.bench_check)
    import tiletune
    meta = (f"{time.strftime('%Y-%m-%d')}, job {job}: `{' '.join(tune_args(args.mode, args.dtype, args.shard, narrow(args)))}`, "
            f"{done} of {nkeys} keys done in {wall:.0f} s" + (f" (capped at {args.cap_s:.0f} s)" if capped else "")
            + f"; kernel revision {tiletune.revision()}; built-in defaults: {source}.")
    write(rows, args.out, meta)


def defaults_at(build, arch_sms, db, out):
    """key -> the default tt_sdpa_fwd runs at the size the tune measured the
    key, on a nominal device "ARCH:SMS" (no GPU: tt_default_at, built from
    bench/inference/default_at.c); written to out as defaults.csv."""
    arch, _, sms = arch_sms.partition(":")
    if not (arch.isdigit() and sms.isdigit()):
        raise SystemExit(f"--defaults-at {arch_sms!r}: give ARCH:SMS, e.g. 90:132")
    tool = os.path.join(build, "bench", "inference", "tt_default_at")
    if not os.access(tool, os.X_OK):
        raise SystemExit(f"--defaults-at: {tool} not built (target tt_default_at)")
    sizes = measured_sizes(db)
    rows = "".join(",".join(str(x) for x in k + sizes[k]) + "\n" for k in sorted(sizes))
    r = subprocess.run([tool, arch, sms], input="dtype,head_dim,causal,seqlen_q,seqlen_k,gqa_group,batch,heads\n"
                       + rows, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"tt_default_at: {r.stderr.strip()}")
    with open(out, "w") as f:
        f.write(r.stdout)
    return read_defaults(out)


def analyse_main(args):
    if args.defaults_at:
        if not args.build:
            raise SystemExit("--defaults-at: give --build (where tt_default_at is)")
        defaults = defaults_at(args.build, args.defaults_at, args.analyse, os.path.join(args.out, "defaults.csv"))
    elif args.defaults:
        defaults = read_defaults(args.defaults)
    else:
        con = sqlite3.connect(f"file:{args.analyse}?mode=ro", uri=True)
        job = args.job or latest_job(con)
        keys = [tuple(r) for r in con.execute(f"SELECT {', '.join(KEY_COLS)} FROM job_key WHERE job_id = ?", (job,))]
        con.close()
        try:
            defaults = device_defaults(keys, sizes=measured_sizes(args.analyse))
        except Exception as e:  # noqa: BLE001
            raise SystemExit(f"no --defaults and no device default ({e}): give the run's defaults.csv")
    rows, job = analyse(args.analyse, defaults, args.job)
    if args.bench_s > 0:
        bench(rows, args.bench_s, args.bench_check)
    write(rows, args.out, f"Database {os.path.basename(args.analyse)}, job {job}.")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--build", help="a build directory (tiletuned, tiletune-worker, tiletune, libtiletune)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", default="exhaustive", choices=("exhaustive", "fast"))
    ap.add_argument("--dtype", choices=("bf16", "fp16"), help="only this dtype's half of the grid")
    ap.add_argument("--shard", help="I/N: only shard I of N of the (narrowed) grid, dealt by work")
    ap.add_argument("--seqlen", help="with --dtype: these seqlen_q only (a comma list from the grid's)")
    ap.add_argument("--seqlen-k", help="with --dtype: these seqlen_k only (a comma list from the grid's)")
    ap.add_argument("--group", help="with --dtype: these GQA groups only (a comma list from the grid's)")
    ap.add_argument("--hdim", help="with --dtype: these head dims only (a comma list from the grid's)")
    ap.add_argument("--cap-s", type=float, default=420, help="tuning wall time; the rest is cancelled")
    ap.add_argument("--bench-s", type=float, default=60,
                    help="seconds for timing the defaults the tune did not time (0: none)")
    ap.add_argument("--bench-check", type=int, default=4,
                    help="also time this many keys whose default the tune timed, to compare the sources")
    ap.add_argument("--analyse", metavar="DB", help="only read DB (a tiletune database) and write the summary")
    ap.add_argument("--defaults", metavar="CSV", help="with --analyse: the run's defaults.csv")
    ap.add_argument("--defaults-at", metavar="ARCH:SMS",
                    help="with --analyse and --build: the defaults of this tree on a nominal device (90:132, an "
                    "H100 SXM or H200) at the sizes the tune measured, not the run's")
    ap.add_argument("--job", type=int, help="with --analyse: the job (default: the newest)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if (args.seqlen or args.seqlen_k or args.group or args.hdim) and not args.dtype:
        ap.error("--seqlen, --seqlen-k, --group and --hdim narrow the lists of one dtype: give --dtype")
    if args.analyse:
        analyse_main(args)
    elif args.build:
        args.build = os.path.abspath(args.build)
        tune_main(args)
    else:
        ap.error("give --build (tune, then analyse) or --analyse DB")


if __name__ == "__main__":
    main()
