#!/usr/bin/env python3
"""Summarizes bench/tune/run.sh's databases (OUT/fast.db, OUT/exhaustive.db)
as markdown: wall times, keys tuned, fast against exhaustive, tuned against
the built-in default, whether the space matters, every winner, lookup
latency idle (before and after each tune) and while tuning.

    bench/tune/analyze.py OUT [--defaults CSV]

Everything is judged inside the exhaustive run, on its own timings (a
config's time on a key: its fastest ok timing not taken while the GPU was
shared, the store's rule for the winner):
- fast against exhaustive: for each key, the time of the fast run's winner
  over the exhaustive winner's;
- tuned against the built-in default: the time of the default (what
  tt_sdpa_fwd runs with nothing tuned, at the batch and heads the key was
  measured with) over the winner's; matched knob for knob, with
  bench/inference/grid.py's statuses where it has no time (dropped, not in
  the space, ...). The defaults come from --defaults CSV, else
  OUT/defaults.csv, else the device through libtiletune
  (tiletune.default_config on device 0), then written to OUT/defaults.csv
  so the analysis re-runs from the folder on a machine without the GPU;
- the space matters: per head dim (configs are head-dim specific), the one
  config that is best over all of the head dim's keys (timed on every one
  of them; smallest geometric mean of its time over the winner's), and per
  key the winner's margin over it.

Configs are compared with every knob of src/common/knobs.def, as canonical
text (libtiletune's tt_config_format; found as $TILETUNE_LIB or in a build
directory). A database of an older schema reads its missing knobs and
group as their neutral values."""
import argparse
import math
import os
import sqlite3
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "inference"))

import grid  # noqa: E402  (the config and default helpers of the inference grid)

BENCH_GPU = "0bec0bec0bec0bec"  # bench/lookup's seeded winners, looked up during the run
DEFAULT_WITHIN = 1.05  # the target: the sm_90 built-in default within 5% of tuned at every key
FAST_WITHIN = 1.02  # the target: fast's winner within 2% of exhaustive's on >= 95% of keys
MARGINS = (1.02, 1.05)  # the winner's margins over the single config that are counted
NEUTRAL = {"gqa_group": 1}  # columns an older schema lacks; a knob's neutral value is 0


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def select(con, table, names):
    """The columns `names` of `table`; one the table lacks (an older schema)
    reads as its neutral value."""
    have = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
    return ", ".join(n if n in have else f"{NEUTRAL.get(n, 0)} AS {n}" for n in names)


class Run:
    """One mode's database: `best` {key: winner row} (the newest winner of
    a key, bench/lookup's seeded ones left out), `times` {key: {config
    text: ms}} of the winner's GPU and kernel revision, `status` counts."""

    def __init__(self, path, knobs, texts=True):
        """texts False (no libtiletune): the winners counted, no config read."""
        self.path = path
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        con.row_factory = sqlite3.Row
        keys = list(grid.KEY_COLS)
        self.status = dict(con.execute("SELECT status, count(*) FROM measurement GROUP BY status").fetchall())
        self.best = {}
        for r in con.execute(f"SELECT gpu, rev, {select(con, 'best', keys + knobs)}, batch, heads, time_ms, tflops "
                             f"FROM best WHERE gpu <> ? ORDER BY measured_at", (BENCH_GPU,)):
            k = tuple(r[c] for c in keys)
            self.best[k] = dict(r, config=text_of(r, knobs, k) if texts else None)
        self.times = {}
        q = (f"SELECT gpu, rev, {select(con, 'measurement', keys + knobs)}, time_ms FROM measurement "
             "WHERE status = 'ok' AND coalesce(busy, 0) = 0 AND gpu <> ?")
        for r in con.execute(q, (BENCH_GPU,)) if texts else []:
            k = tuple(r[c] for c in keys)
            b = self.best.get(k)
            if b is None or (r["gpu"], r["rev"]) != (b["gpu"], b["rev"]):
                continue
            t = self.times.setdefault(k, {})
            text = text_of(r, knobs, k)
            t[text] = min(t.get(text, r["time_ms"]), r["time_ms"])
        self.has_group = "gqa_group" in {r[1] for r in con.execute("PRAGMA table_info(job_key)")}
        con.close()


_texts = {}


def text_of(row, knobs, key):
    vals = tuple(row[n] for n in knobs)
    if vals not in _texts:
        _texts[vals] = grid.config_of(dict(zip(knobs, vals)), knobs, key[1], key[0])
    return _texts[vals]


def seqlen(k):
    return str(k[3]) if k[3] == k[4] else f"{k[3]}/{k[4]}"


def walls_table(out, runs):
    walls = {}
    if os.path.exists(os.path.join(out, "wall.txt")):
        for line in open(os.path.join(out, "wall.txt")):
            f = dict(kv.split("=") for kv in line.split())
            walls[f["mode"]] = (float(f["wall_s"]), int(f["rc"]))
    print("| mode | keys with a winner | measurements (by status) | wall time | finished |")
    print("|---|---|---|---|---|")
    for mode in ("exhaustive", "fast"):
        if mode not in runs:
            continue
        run = runs[mode]
        w, rc = walls.get(mode, (float("nan"), -1))
        st = ", ".join(f"{k} {v}" for k, v in sorted(run.status.items()))
        print(f"| {mode} | {len(run.best)} | {st} | {w:.0f} s | "
              f"{'yes' if rc == 0 else 'NO (rc %d: capped or failed)' % rc} |")
    print()


def fast_vs_exhaustive(ex, fa):
    ratios, untimed = [], 0
    for k, b in fa.best.items():
        if k not in ex.best:
            continue
        t = ex.times.get(k, {}).get(b["config"])
        if t is None:
            untimed += 1
            continue
        ratios.append((t / ex.best[k]["time_ms"], k))
    if not ratios:
        return
    within = sum(1 for r, _ in ratios if r <= FAST_WITHIN)
    worst = max(ratios)
    print(f"Fast against exhaustive, on {len(ratios)} keys tuned by both: fast's winner within 2% of "
          f"exhaustive's on {within}/{len(ratios)} = {100.0 * within / len(ratios):.1f}% of keys; "
          f"worst {100 * (worst[0] - 1):.1f}% slower ({grid.key_text(worst[1])})."
          + (f" Fast's winner has no ok timing in the exhaustive run on {untimed} more keys." if untimed else ""))
    print()


def builtin_defaults(ex, out, csv_path):
    """(key -> default config text, where from), or (None, why not)."""
    own = os.path.join(out, "defaults.csv")
    if not ex.has_group:
        return None, "the exhaustive database predates the GQA group column (an older schema)"
    for path, what in ((csv_path, "given"), (own, "written by the run")):
        if path and os.path.exists(path):
            return grid.read_defaults(path), f"read from {path} ({what})"
    if csv_path:
        return None, f"{csv_path} does not exist"
    try:
        con = sqlite3.connect(f"file:{ex.path}?mode=ro", uri=True)
        keys = [tuple(r) for r in con.execute(f"SELECT DISTINCT {', '.join(grid.KEY_COLS)} FROM job_key")]
        con.close()
        dflt = grid.device_defaults(keys, sizes=grid.measured_sizes(ex.path))
    except Exception as e:  # noqa: BLE001 (no GPU, no library)
        return None, f"no {own} and no device default ({type(e).__name__}: {e})"
    grid.write_defaults(own, dflt)
    return dflt, (f"the device's (tiletune.default_config on device 0 at each key's measured batch and heads), "
                  f"written to {own}")


def default_rows(ex, defaults):
    """key -> grid.analyse's row (default_config, ratio, default_status) for
    the keys this run tuned."""
    rows, _ = grid.analyse(ex.path, defaults)
    out = {}
    for r in rows:
        k = (r["dtype"], r["head_dim"], r["causal"], r["seqlen_q"], r["seqlen_k"], r["group"])
        if k in ex.best:  # a key left untuned keeps bench/lookup's seeded winner
            out[k] = r
    return out


def default_section(rows, source):
    print("## Tuned against the built-in default")
    print()
    print(f"Built-in defaults: {source}.")
    print()
    rat = {k: r for k, r in rows.items() if r["ratio"] != ""}
    if not rat:
        print(f"No key of the {len(rows)} tuned has a default timed by the exhaustive run.")
        print()
    else:
        worst = max(rat, key=lambda k: rat[k]["ratio"])
        within = [k for k in rat if rat[k]["ratio"] <= DEFAULT_WITHIN]
        print(f"Default time over the winner's, exhaustive run, {len(rat)} of {len(rows)} tuned keys: geometric mean "
              f"{geomean([r['ratio'] for r in rat.values()]):.3f}x, worst {rat[worst]['ratio']:.3f}x "
              f"({grid.key_text(worst)}), the default is the winner on "
              f"{sum(1 for r in rat.values() if r['default_config'] == r['winner_config'])}; "
              f"within 5% of tuned on {len(within)}/{len(rat)} keys (target: all).")
        print()
    missing = {}
    for r in rows.values():
        if r["ratio"] == "":
            missing[r["default_status"]] = missing.get(r["default_status"], 0) + 1
    if missing:
        print("Tuned keys whose default has no time from the exhaustive run: "
              + ", ".join(f"{s} {n}" for s, n in sorted(missing.items()))
              + " (dropped: fast mode dropped it; not in the space: never measured, not a candidate of the key "
              "or dropped at compile; failed: recorded wrong, fault or timeout; busy: timed only while the GPU "
              "was shared).")
        print()
    beyond = sorted((k for k in rat if rat[k]["ratio"] > DEFAULT_WITHIN), key=lambda k: -rat[k]["ratio"])
    if beyond:
        print("Keys where the default is more than 5% slower than the winner:")
        print()
        print("| key | default/winner | default | winner |")
        print("|---|--:|---|---|")
        for k in beyond:
            r = rat[k]
            print(f"| {grid.key_text(k)} | {r['ratio']:.3f} | `{r['default_config']}` | `{r['winner_config']}` |")
        print()
    elif rat:
        print("No key where the default is more than 5% slower than the winner.")
        print()


def single_config(ex, keys):
    """The config with the smallest geometric mean of t(config)/t(winner)
    over `keys`, among those timed on every one of them: (config, {key:
    margin}, how many configs qualified), or (None, {}, the most keys any
    config was timed on)."""
    counts = {}
    for k in keys:
        for c in ex.times.get(k, {}):
            counts[c] = counts.get(c, 0) + 1
    full = sorted(c for c, n in counts.items() if n == len(keys))
    if not full:
        return None, {}, max(counts.values(), default=0)
    score = {c: geomean([ex.times[k][c] / ex.best[k]["time_ms"] for k in keys]) for c in full}
    best = min(full, key=lambda c: (score[c], c))
    return best, {k: ex.times[k][best] / ex.best[k]["time_ms"] for k in keys}, len(full)


def space_section(ex):
    """Prints the single-config table; returns key -> the winner's margin
    over its head dim's single config."""
    print("## The space matters")
    print()
    print("Per head dim, the single config best over all its keys: among the configs timed (ok, not busy) on every "
          "key of the head dim in the exhaustive run, the one with the smallest geometric mean of t(config) / "
          "t(winner). Its margin on a key is t(single)/t(winner). The rows per mask are the same choice made "
          "over the keys of one mask.")
    print()
    print("| hdim | causal | keys | configs on every key | single config | geomean | worst | key of the worst "
          "| > 2% | > 5% |")
    print("|---|---|--:|--:|---|--:|--:|---|--:|--:|")
    margins = {}
    for d in sorted({k[1] for k in ex.best}):
        for causal in ("all", 0, 1):
            keys = sorted(k for k in ex.best if k[1] == d and causal in ("all", k[2]))
            if not keys:
                continue
            cfg, m, n = single_config(ex, keys)
            if cfg is None:
                print(f"| {d} | {causal} | {len(keys)} | 0 | none: the most keys a config was timed on is {n} "
                      "| | | | | |")
                continue
            if causal == "all":
                margins.update(m)
            worst = max(m, key=lambda k: m[k])
            over = " | ".join(str(sum(1 for x in m.values() if x > t)) for t in MARGINS)
            print(f"| {d} | {causal} | {len(keys)} | {n} | `{cfg}` | {geomean(list(m.values())):.3f} | "
                  f"{m[worst]:.3f} | {grid.key_text(worst)} | {over} |")
    print()
    return margins


def winners_table(ex, margins, drows):
    print("| dtype | hdim | causal | seqlen | winner | TFLOP/s | single-config margin | default/winner |")
    print("|---|---|---|---|---|--:|--:|--:|")
    for k in sorted(ex.best):
        b = ex.best[k]
        m = f"{margins[k]:.3f}" if k in margins else ""
        r = drows.get(k)
        dr = "" if r is None else f"{r['ratio']:.3f}" if r["ratio"] != "" else r["default_status"]
        tf = f"{b['tflops']:.1f}" if b["tflops"] is not None else ""
        print(f"| {k[0]} | {k[1]} | {k[2]} | {seqlen(k)} | `{b['config']}` | {tf} | {m} | {dr} |")
    print()


def lookup_section(out):
    lk = os.path.join(out, "lookup.txt")
    if not os.path.exists(lk):
        return
    rows = {}
    for line in open(lk):
        tag, rest = line.split(":", 1)
        f = dict(kv.split("=", 1) for kv in rest.split() if "=" in kv)
        if "p99_us" in f:
            rows.setdefault(tag, []).append(f)
    print("| lookup load (4 clients) | samples | rps (median) | p50 us (median) | p99 us (median) | p99 us (worst) |")
    print("|---|---|---|---|---|---|")

    def med(xs):
        xs = sorted(xs)
        n = len(xs)
        return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])

    for tag in sorted(rows):
        fs = rows[tag]
        p99 = [float(f["p99_us"]) for f in fs]
        print(f"| {tag} | {len(fs)} | {med([float(f['rps']) for f in fs]):.0f} | "
              f"{med([float(f['p50_us']) for f in fs]):.1f} | {med(p99):.1f} | {max(p99):.1f} |")
    print()
    # The idle baseline moves between moments (p99 32.8 us in one set of
    # samples, 42.9 in another on the same machine): the baseline is the
    # median of all of a mode's idle samples, before and after its tune
    # ("idle-MODE" is the tag of runs that sampled before only).
    for mode in ("fast", "exhaustive"):
        p99 = {part: [float(f["p99_us"]) for f in rows.get(f"idle-{part}{mode}", [])]
               for part in ("", "before-", "after-")}
        idle = p99[""] + p99["before-"] + p99["after-"]
        t = [float(f["p99_us"]) for f in rows.get(f"tuning-{mode}", [])]
        if idle and t:
            parts = ", ".join(f"{part} the tune {med(p99[part + '-']):.1f} us ({len(p99[part + '-'])})"
                              for part in ("before", "after") if p99[part + "-"])
            print(f"Lookup p99 while tuning ({mode}): median {med(t):.1f} us of {len(t)} samples; idle: median "
                  f"{med(idle):.1f} us of {len(idle)} samples ({parts or 'before the tune only'}); "
                  f"tuning / idle {med(t) / med(idle):.2f} (target <= 1.10)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("out", help="bench/tune/run.sh's output folder")
    ap.add_argument("--defaults", metavar="CSV",
                    help="the built-in defaults per key (grid.py's defaults.csv; default: OUT/defaults.csv, "
                         "else the device's)")
    args = ap.parse_args()
    out = args.out
    try:
        import tiletune
        tiletune.revision()
        lib = None
    except Exception as e:  # noqa: BLE001
        lib = f"{type(e).__name__}: {e}"
    runs = {}
    for mode in ("exhaustive", "fast"):
        path = os.path.join(out, f"{mode}.db")
        if os.path.exists(path):
            runs[mode] = Run(path, grid.knob_names(), texts=lib is None)
    walls_table(out, runs)
    if lib is not None:
        print(f"libtiletune does not load ({lib}): configs are compared as its canonical text, so only the wall "
              "times and the lookup latency are summarized here; set TILETUNE_LIB to a build's "
              "src/client/libtiletune.so.")
        print()
        runs = {}
    if "exhaustive" in runs and "fast" in runs:
        fast_vs_exhaustive(runs["exhaustive"], runs["fast"])
    if "exhaustive" in runs and not runs["exhaustive"].best:
        print("The exhaustive run has no winner: no default, single-config or winner table.")
        print()
    elif "exhaustive" in runs:
        ex = runs["exhaustive"]
        defaults, source = builtin_defaults(ex, out, args.defaults)
        drows = {}
        if defaults is None:
            print("## Tuned against the built-in default")
            print()
            print(f"Skipped: no built-in defaults ({source}). On the GPU machine the device gives them (libtiletune "
                  "and device 0); elsewhere give the run's defaults.csv (--defaults CSV or OUT/defaults.csv).")
            print()
        else:
            drows = default_rows(ex, defaults)
            default_section(drows, source)
        margins = space_section(ex)
        winners_table(ex, margins, drows)
    elif lib is None:
        print("No exhaustive database: tuned against the default and the single-config margins need one.")
        print()
    lookup_section(out)


if __name__ == "__main__":
    main()
