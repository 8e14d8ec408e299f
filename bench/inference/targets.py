#!/usr/bin/env python3
"""The inference run's figures held against the inference targets, one
line a target and shape, from the CSV bench/inference/decode.py writes:

    python3 bench/inference/targets.py inference.csv

The targets are set for the H200 (docs/perf.md, "Inference shapes"): on
another GPU the absolute KV rate and the host time read against that
card's own memory and host, so a miss there says where it stands, not
that the H200's target failed. Ratios are medians' ratios from one run;
one run's ratio within a few tenths of a percent of 1.0 is at parity,
and whether it lands above or below moves from run to run (compare.py's
interleaved rounds in several processes settle it).

Each line: the target, where, the measured value, what it needs, and
`met` or `MISSED`. Exit status 0 when every target with a figure is met,
1 when one is missed, 2 when the CSV has no shape rows."""
import csv
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from plot import number  # noqa: E402  (a cell as a float, NaN where empty or not positive)

# (what, ratio needed): higher is better unless noted
DECODE_VS_AUTO = 1.0    # Lq 1: tuned best against torch auto
DECODE_TBPS = 4.0       # Lq 1, a KV cache of 1 GB or more: TB/s read
SPEC_VS_CUDNN = 2.0     # Lq 8 and 16: tuned best against cuDNN
SPEC_VS_FLASH = 1.0     #   and against torch flash
CHUNK_VS_AUTO = 1.0     # Lq 512: tuned best against torch auto
PAGED_OVER = 1.10       # paged / contiguous, at most
VARLEN_OVER = 1.10      # a varlen batch / the sum of its sequences alone, at most
DEFAULT_OVER = 1.15     # built-in default / tuned best, at most
CROSS_OVER = 1.10       # a key tuned at one batch run at the other / that batch's own winner, at most
HOST_US = 5.0           # tt_sdpa_fwd with a given config, µs a call, at most
GB = 1e9


def read(path):
    """(shape rows, extra lines) of a decode.py CSV: each a dict, times as
    floats (NaN where a run failed or the cell is empty)."""
    shapes, extra = [], []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            d = dict(r)
            for k, v in r.items():
                if k not in ("kind", "best_config", "default_config"):
                    d[k] = number(v)
            (shapes if r.get("kind") in ("decode", "spec", "chunk") else extra).append(d)
    return shapes, extra


def _line(target, where, value, need, ok, fmt="{:.4f}"):
    shown = "n/a" if value != value else fmt.format(value)
    return {"target": target, "where": where, "value": value, "shown": shown, "need": need,
            "ok": None if value != value else ok}


def check(shapes, extra):
    """The target lines of one run (read's two lists), in the issue's order."""
    out = []
    for r in shapes:
        kind, B, Lq, Lk = r["kind"], int(r["batch"]), int(r["Lq"]), int(r["Lk"])
        where = f"B{B} Lq{Lq} Lk{Lk}"
        best, auto = r.get("tt_best", math.nan), r.get("torch_auto", math.nan)
        if kind == "decode" and Lq == 1:
            v = auto / best
            out.append(_line("decode: tuned best / torch auto", where, v, f">= {DECODE_VS_AUTO:.2f}",
                             v >= DECODE_VS_AUTO))
            kv_bytes = r.get("tt_best_TBps", math.nan) * 1e12 * best * 1e-3
            if kv_bytes == kv_bytes and kv_bytes >= 1 * GB:
                v = r.get("tt_best_TBps", math.nan)
                out.append(_line("decode: KV read, cache >= 1 GB (TB/s)", where, v, f">= {DECODE_TBPS:.1f}",
                                 v >= DECODE_TBPS, "{:.2f}"))
        elif kind == "spec" and Lq in (8, 16):
            v = r.get("torch_cudnn", math.nan) / best
            out.append(_line("speculative: tuned best / cuDNN", where, v, f">= {SPEC_VS_CUDNN:.1f}",
                             v >= SPEC_VS_CUDNN))
            v = r.get("torch_flash", math.nan) / best
            out.append(_line("speculative: tuned best / torch flash", where, v, f">= {SPEC_VS_FLASH:.1f}",
                             v >= SPEC_VS_FLASH))
        elif kind == "chunk" and Lq == 512:
            v = auto / best
            out.append(_line("chunked prefill: tuned best / torch auto", where, v, f">= {CHUNK_VS_AUTO:.1f}",
                             v >= CHUNK_VS_AUTO))
        v = r.get("tt_default", math.nan) / best
        out.append(_line("built-in default / tuned best", where, v, f"<= {DEFAULT_OVER:.2f}", v <= DEFAULT_OVER))
    contiguous = {(int(e["batch"]), int(e["Lk"])): e["tt_best"] for e in extra if e["kind"] == "contiguous"}
    dense = next((e["tt_best"] for e in extra if e["kind"] == "varlen_dense_sum"), math.nan)
    for e in extra:
        kind = e["kind"]
        if kind.startswith("paged"):
            B, Lk = int(e["batch"]), int(e["Lk"])
            v = e["tt_best"] / contiguous.get((B, Lk), math.nan)
            out.append(_line(f"paged (page {kind[5:]}) / contiguous", f"B{B} Lk{Lk}", v,
                             f"<= {PAGED_OVER:.2f}", v <= PAGED_OVER))
        elif kind == "varlen":
            v = e["tt_best"] / dense
            out.append(_line("varlen batch / its sequences alone", f"{int(e['batch'])} sequences", v,
                             f"<= {VARLEN_OVER:.2f}", v <= VARLEN_OVER))
        elif kind == "cross":
            # tt_default: the batch's own winner; tt_best: the winner of the
            # batch it was not tuned at (decode.py's cross lines)
            v = e["tt_best"] / e["tt_default"]
            out.append(_line("decode key tuned at another batch / own winner", f"B{int(e['batch'])} Lk{int(e['Lk'])}",
                             v, f"<= {CROSS_OVER:.2f}", v <= CROSS_OVER))
        elif kind == "host":
            v = e["tt_best"] * 1e3  # ms a call, as every time in the file
            out.append(_line("host: tt_sdpa_fwd with a config (µs)", "split launch", v, f"<= {HOST_US:.1f}",
                             v <= HOST_US, "{:.2f}"))
    return out


def markdown(lines, device=""):
    """The lines as a markdown table, with a count of the missed."""
    head = f"## Targets{' (' + device + ')' if device else ''}\n\n"
    body = "| target | where | measured | needs | |\n|---|---|---|---|---|\n"
    for x in lines:
        mark = "n/a" if x["ok"] is None else "met" if x["ok"] else "**MISSED**"
        body += f"| {x['target']} | {x['where']} | {x['shown']} | {x['need']} | {mark} |\n"
    missed = sum(1 for x in lines if x["ok"] is False)
    met = sum(1 for x in lines if x["ok"])
    return head + body + f"\n{met} met, {missed} missed.\n"


def main(argv):
    if len(argv) != 2:
        print("usage: targets.py inference.csv", file=sys.stderr)
        return 2
    try:
        shapes, extra = read(argv[1])
    except (OSError, csv.Error, ValueError) as e:
        print(f"{argv[1]}: {e}", file=sys.stderr)
        return 2
    if not shapes:
        print(f"{argv[1]}: no decode, spec or chunk rows", file=sys.stderr)
        return 2
    lines = check(shapes, extra)
    print(markdown(lines), end="")
    return 1 if any(x["ok"] is False for x in lines) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
