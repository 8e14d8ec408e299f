#!/usr/bin/env python3
"""The tuning half of the inference benchmark: what a node does before the
timing script compares tiletune with torch on inference shapes.

For each shape of --shapes (a CSV: batch, seqlen_q, seqlen_k, heads_q,
heads_kv, head_dim, dtype) the tuning key is (seqlen_q, seqlen_k, GQA group
= heads_q / heads_kv, head_dim, dtype, causal bottom-right where seqlen_q >
1, else none): a key has no batch. For each --tuned-at value, a fresh
database and tiletuned with the real tiletune-worker tune every distinct
key (`tiletune tune ... --group G --causal=bottom-right`), at the worker's
per-regime batch and heads ("rule", docs/tuning.md) or at a given batch
(a number: decode and chunk keys are timed at that batch). Tuning at two
batches and timing each winner at every batch of the shapes shows how far
a choice made at one batch is from the other's.

Writes --out/winners.csv, one row per (shape, tuned_at):

  batch,seqlen_q,seqlen_k,heads_q,heads_kv,head_dim,dtype,causal,group,
  regime,tuned_at,match,tuned_config,default_config,default_source

`tuned_config` is what a LOOKUP of the shape's key answers (match exact,
nearest or default), `default_config` what tt_sdpa_fwd runs there with
nothing tuned (default_source: "device", or "portable" without a GPU). The
timing script runs both at the shape's batch and heads. Also keeps each
database (tuned-<at>.db: `tiletune export` reads it) and the daemon logs.

  bench/inference/tune.py --build BUILD --out OUT [--tuned-at rule,1,64]
      [--mode fast] [--cap-s 900] [--shapes bench/inference/shapes.csv]
"""
import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# The regimes of docs/protocol.md (src/common/key.c tt__key_regime).
DECODE_MAX_Q, CHUNK_RATIO = 16, 4


def regime(lq, lk):
    if lq <= DECODE_MAX_Q:
        return "decode"
    return "chunk" if lk // CHUNK_RATIO >= lq else "prefill"


def read_shapes(path):
    shapes = []
    with open(path) as f:
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            s = {k: int(v) if k != "dtype" else v.strip() for k, v in row.items()}
            if s["heads_q"] % s["heads_kv"]:
                raise SystemExit(f"{path}: heads_q {s['heads_q']} is not a multiple of heads_kv {s['heads_kv']}")
            s["group"] = s["heads_q"] // s["heads_kv"]
            s["causal"] = 2 if s["seqlen_q"] > 1 else 0
            shapes.append(s)
    return shapes


def key_of(s):
    return (s["seqlen_q"], s["seqlen_k"], s["group"], s["head_dim"], s["dtype"], s["causal"])


def key_args(k):
    lq, lk, g, d, dt, causal = k
    return ["--seqlen", str(lq), "--seqlen-k", str(lk), "--hdim", str(d), "--dtype", dt, "--group", str(g)]


class Daemon:
    def __init__(self, build, run, db, log, cache=None):
        self.cli = os.path.join(build, "src/client/tiletune")
        self.sock = os.path.join(run, "tt.sock")
        self.logf = open(log, "w")
        self.proc = subprocess.Popen(
            [os.path.join(build, "src/tuner/tiletuned"), "--socket", self.sock, "--db", db, "--cache-dir",
             cache or os.path.join(run, "cache"), "--worker-timeout", "300", "--log-level", "info"],
            stderr=self.logf)
        for _ in range(100):
            if self.call("ping", check=False).returncode == 0:
                break
            time.sleep(0.1)

    def call(self, *args, check=True):
        r = subprocess.run([self.cli, "--socket", self.sock] + list(args), capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"tiletune {' '.join(args)}: rc {r.returncode}: {r.stderr.strip()}")
        return r

    def gpus(self):
        for line in self.call("status", check=False).stdout.splitlines():
            if line.startswith("gpus"):
                return int(line.split()[1])
        return 0

    def wait_gpu(self, seconds=30):
        """True once the daemon's worker reports a GPU, False after `seconds`."""
        for _ in range(int(seconds * 10)):
            if self.gpus() > 0:
                return True
            time.sleep(0.1)
        return self.gpus() > 0

    def wait_idle(self, cap_s, t0=None):
        """Until no job is queued or running, at most cap_s from t0 (now)."""
        t0 = time.time() if t0 is None else t0
        while time.time() - t0 < cap_s:
            if json.loads(self.call("jobs", "--json").stdout or "[]") == []:
                return
            time.sleep(2)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        self.logf.close()


def default_of(s, device_ok):
    """The config tt_sdpa_fwd runs for the shape with nothing tuned."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import tiletune
    args = (s["head_dim"], s["dtype"], s["causal"], s["seqlen_q"], s["seqlen_k"])
    if device_ok:
        try:
            return tiletune.default_config(*args, device=0), "device"
        except tiletune.TileTuneError:
            pass
    return tiletune.default_config(*args), "portable"


def fresh_db(db):
    """db's path with no database (nor its WAL files) left from a run before."""
    for sfx in ("", "-wal", "-shm"):
        if os.path.exists(db + sfx):
            os.unlink(db + sfx)
    return db


def tune_at(args, shapes, at, run):
    db = fresh_db(os.path.join(args.out, f"tuned-{at}.db"))
    d = Daemon(args.build, run, db, os.path.join(args.out, f"tuned-{at}.log"))
    rows = []
    try:
        have_gpu = d.wait_gpu()
        keys = sorted({key_of(s) for s in shapes})
        t0 = time.time()
        for k in keys:
            causal = ["--causal=bottom-right"] if k[5] == 2 else []
            extra = ["--batch", at] if at != "rule" and regime(k[0], k[1]) != "prefill" else []
            d.call("tune", *key_args(k), *causal, "--mode", args.mode, *extra)
        if have_gpu:
            d.wait_idle(args.cap_s, t0)
        wall = time.time() - t0
        print(f"tuned-at {at}: {len(keys)} keys, {wall:.0f} s{'' if have_gpu else ' (no GPU: nothing tuned)'}",
              flush=True)
        for s in shapes:
            k = key_of(s)
            look = ["--causal=bottom-right"] if k[5] == 2 else []
            r = json.loads(d.call("lookup", *key_args(k), *look, "--json").stdout)
            dflt, src = default_of(s, have_gpu)
            rows.append(dict(batch=s["batch"], seqlen_q=s["seqlen_q"], seqlen_k=s["seqlen_k"],
                             heads_q=s["heads_q"], heads_kv=s["heads_kv"], head_dim=s["head_dim"],
                             dtype=s["dtype"], causal=s["causal"], group=s["group"],
                             regime=regime(s["seqlen_q"], s["seqlen_k"]), tuned_at=at, match=r["match"],
                             tuned_config=r["config_text"], default_config=dflt, default_source=src))
    finally:
        d.stop()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default=os.path.join(HERE, "shapes.csv"))
    ap.add_argument("--tuned-at", default="rule", help="comma list: rule and/or batch sizes")
    ap.add_argument("--mode", default="fast", choices=("fast", "exhaustive"))
    ap.add_argument("--cap-s", type=float, default=900, help="per tuned-at; what finished stays")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("TILETUNE_LIB", os.path.join(args.build, "src/client/libtiletune.so"))
    shapes = read_shapes(args.shapes)
    ats = [a.strip() for a in args.tuned_at.split(",") if a.strip()]
    for a in ats:
        if a != "rule" and not (a.isdigit() and 1 <= int(a) <= 65535):
            raise SystemExit(f"--tuned-at: '{a}' is neither rule nor a batch size")
    run = tempfile.mkdtemp(prefix="tt-bench-infer.")
    rows = []
    try:
        os.makedirs(os.path.join(run, "cache"))
        for at in ats:
            rows += tune_at(args, shapes, at, run)
    finally:
        shutil.rmtree(run, ignore_errors=True)
    path = os.path.join(args.out, "winners.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} rows: {path}")


if __name__ == "__main__":
    main()
