#!/usr/bin/env python3
"""The inference run's plot, as SVG, from its CSV (bench/inference/decode.py
writes both; this also redraws a stored run):

    python3 bench/inference/plot.py inference.csv inference.svg [title] [--hbm TBPS]

Left panel: each shape's speed against torch auto (torch auto's time / the
run's; right of the 1x line is faster than what PyTorch runs by default),
for torch flash, cuDNN, the built-in default and the tuned best, on a log
scale (speculative decode spans 0.3x to 9x). Right panel: the KV cache
read a second by torch auto and the tuned best, against the card's HBM
peak where it is known (a dashed line; decode.py passes its device's,
--hbm TBPS on a redraw).

Plain SVG written here: the plot needs no plotting library, so CI (and any
machine without matplotlib) draws it too."""
import csv
import math
import sys
from xml.sax.saxutils import escape

# the four runs against torch auto, and their colours
SERIES = [("torch_flash", "torch flash", "#9e9e9e"), ("torch_cudnn", "cuDNN", "#5b8ff9"),
          ("tt_default", "tiletune default", "#f6bd16"), ("tt_best", "tiletune tuned", "#e8684a")]
TBPS = [("torch_auto_TBps", "torch auto", "#5ad8a6"), ("tt_best_TBps", "tiletune tuned", "#e8684a")]
# HBM peaks (TB/s, the vendor's figures) by the name torch gives the card:
# what the KV rate is read against. A card not here is drawn without one.
HBM_PEAK_TBPS = [("H200", 4.8), ("H100 NVL", 3.9), ("H100 PCIe", 2.0), ("H100", 3.35)]
TB_AXIS_MIN = 5  # TB/s: the rate panel spans at least this, more for a faster card
# speedups drawn between these (log scale); a value outside is clamped to
# the edge with its label still exact
X_MIN, X_MAX = 0.25, 16.0
BAR_H, GAP, ROW_PAD = 7, 1, 8  # px: one bar, between bars, between shapes
LEFT, PANEL_W, TB_W, MID, TOP = 190, 440, 220, 50, 60


def number(text):
    try:
        v = float(text)
    except (TypeError, ValueError):
        return float("nan")
    return v if v > 0 else float("nan")


def read_rows(path):
    """The CSV's shape rows (decode, spec, chunk), each a dict with floats
    (NaN where a run failed or is missing); the paged and varlen lines
    that follow them in the file are left out."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("kind") not in ("decode", "spec", "chunk"):
                continue
            row = {"kind": r["kind"], "batch": int(r["batch"]), "Lq": int(r["Lq"]), "Lk": int(r["Lk"])}
            for col in ["torch_auto"] + [s[0] for s in SERIES] + [t[0] for t in TBPS]:
                row[col] = number(r.get(col))
            rows.append(row)
    return rows


def speedup(row, col):
    """torch auto's time / col's: > 1 is faster than torch auto."""
    a, t = row["torch_auto"], row[col]
    return a / t if a == a and t == t else float("nan")


def _x(v):
    v = min(max(v, X_MIN), X_MAX)
    return LEFT + PANEL_W * math.log(v / X_MIN) / math.log(X_MAX / X_MIN)


def hbm_peak(device_name):
    """The card's HBM peak in TB/s, or None for a card the table lacks."""
    for name, tbps in HBM_PEAK_TBPS:
        if name in device_name:
            return tbps
    return None


def svg(rows, title, hbm_tbps=None):
    """The plot of `rows` (read_rows) as SVG text, the KV rates against
    `hbm_tbps` (None: no peak line)."""
    rates = [row[col] for row in rows for col, _, _ in TBPS if row[col] == row[col]]
    tb_max = max([TB_AXIS_MIN, math.ceil(hbm_tbps or 0)] + [math.ceil(v) for v in rates])
    per_row = len(SERIES) * (BAR_H + GAP) + ROW_PAD
    height = TOP + per_row * len(rows) + 40
    tb_left = LEFT + PANEL_W + MID
    width = tb_left + TB_W + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="10">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{LEFT}" y="16" font-size="13">{escape(title)}</text>',
           f'<text x="{LEFT}" y="32">torch auto time / this run\'s (log scale; right of 1x is faster)</text>',
           f'<text x="{tb_left}" y="32">KV read, TB/s'
           f'{f" (HBM peak {hbm_tbps:g})" if hbm_tbps else ""}</text>']
    bottom = TOP + per_row * len(rows)
    for tick in (0.25, 0.5, 1, 2, 4, 8, 16):
        x = _x(tick)
        out.append(f'<line x1="{x:.1f}" y1="{TOP - 4}" x2="{x:.1f}" y2="{bottom}" '
                   f'stroke="{"#333" if tick == 1 else "#ddd"}" stroke-width="{1.5 if tick == 1 else 1}"/>')
        out.append(f'<text x="{x:.1f}" y="{bottom + 12}" text-anchor="middle">{tick:g}x</text>')
    for tick in range(0, tb_max + 1):
        x = tb_left + TB_W * tick / tb_max
        out.append(f'<line x1="{x:.1f}" y1="{TOP - 4}" x2="{x:.1f}" y2="{bottom}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{bottom + 12}" text-anchor="middle">{tick}</text>')
    if hbm_tbps:
        xp = tb_left + TB_W * hbm_tbps / tb_max
        out.append(f'<line class="peak" x1="{xp:.1f}" y1="{TOP - 4}" x2="{xp:.1f}" y2="{bottom}" stroke="#333" '
                   f'stroke-dasharray="3,2"/>')
    for i, row in enumerate(rows):
        y0 = TOP + i * per_row
        label = f'{row["kind"]} B{row["batch"]} Lq{row["Lq"]} Lk{row["Lk"]}'
        out.append(f'<text x="{LEFT - 6}" y="{y0 + 2 * (BAR_H + GAP) + 2}" text-anchor="end">{escape(label)}</text>')
        for j, (col, name, colour) in enumerate(SERIES):
            y = y0 + j * (BAR_H + GAP)
            v = speedup(row, col)
            if v != v:
                out.append(f'<text class="na" x="{LEFT + 2}" y="{y + BAR_H - 1}" fill="#999">{escape(name)}: n/a</text>')
                continue
            x1 = _x(1.0)
            x2 = _x(v)
            out.append(f'<rect class="bar" data-series="{col}" data-value="{v:.4f}" x="{min(x1, x2):.1f}" '
                       f'y="{y}" width="{abs(x2 - x1):.1f}" height="{BAR_H}" fill="{colour}"/>')
            # the value beyond the bar's far end, whichever side of 1x
            lx, anchor = (x2 + 3, "start") if v >= 1 else (x2 - 3, "end")
            out.append(f'<text x="{lx:.1f}" y="{y + BAR_H - 1}" font-size="8" text-anchor="{anchor}">{v:.2f}</text>')
        for j, (col, name, colour) in enumerate(TBPS):
            v = row[col]
            if v != v:
                continue
            y = y0 + j * (BAR_H + GAP)
            w = TB_W * v / tb_max
            out.append(f'<rect class="tbps" data-series="{col}" data-value="{v:.4f}" x="{tb_left}" y="{y}" '
                       f'width="{w:.1f}" height="{BAR_H}" fill="{colour}"/>')
            out.append(f'<text x="{tb_left + w + 3:.1f}" y="{y + BAR_H - 1}" font-size="8">{v:.2f}</text>')
    lx = LEFT
    for col, name, colour in SERIES:
        out.append(f'<rect x="{lx}" y="40" width="10" height="8" fill="{colour}"/>'
                   f'<text x="{lx + 13}" y="48">{escape(name)}</text>')
        lx += 20 + 6 * len(name)
    lx = tb_left
    for col, name, colour in TBPS:
        out.append(f'<rect x="{lx}" y="40" width="10" height="8" fill="{colour}"/>'
                   f'<text x="{lx + 13}" y="48">{escape(name)}</text>')
        lx += 20 + 6 * len(name)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write(csv_path, svg_path, title="Inference shapes", hbm_tbps=None):
    rows = read_rows(csv_path)
    with open(svg_path, "w") as f:
        f.write(svg(rows, title, hbm_tbps))
    return len(rows)


def main(argv):
    args, hbm = list(argv[1:]), None
    if "--hbm" in args:
        i = args.index("--hbm")
        try:
            hbm = float(args[i + 1])
        except (IndexError, ValueError):
            hbm = -1.0
        del args[i:i + 2]
        if not hbm > 0:
            print("plot.py: --hbm takes the card's HBM peak in TB/s, a positive number", file=sys.stderr)
            return 2
    if len(args) not in (2, 3):
        print("usage: plot.py inference.csv out.svg [title] [--hbm TBPS]", file=sys.stderr)
        return 2
    n = write(args[0], args[1], *(args[2:]), hbm_tbps=hbm)
    print(f"{args[1]}: {n} shapes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
