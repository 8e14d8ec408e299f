#!/usr/bin/env python3
"""CPU test of bench/inference/plot.py: the inference run's SVG drawn from
a CSV laid out as decode.py writes it (shape rows, then the paged and
varlen lines), with a run that failed (an empty cell); the KV-rate panel
against the card's HBM peak."""
import os
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import plot  # noqa: E402
from cpu_test import check, result  # noqa: E402

NS = "{http://www.w3.org/2000/svg}"
HEADER = ("kind,batch,Lq,Lk,torch_auto,torch_flash,torch_cudnn,tt_default,tt_default_kv,tt_best,"
          "torch_auto_TBps,tt_default_TBps,tt_best_TBps,best_config,default_config\n")
CSV = HEADER + (
    # tiletune tuned 2x faster than torch auto, flash 2x slower
    'decode,1,1,4096,0.02,0.04,0.02,0.02,0.02,0.01,1.4,1.4,2.8,"family=splitkv","family=splitkv"\n'
    # cuDNN's run failed (empty), the tuned best 8x
    'spec,1,8,32768,0.4,0.1,,0.05,0.05,0.05,0.7,5.6,5.6,"family=splitkv","family=splitkv"\n'
    # the paged and varlen lines decode.py appends: not shapes
    "paged16,1,,32768,,,,,,0.0414,,,,page=16,\n"
    "varlen,8,,111616,,,,,,0.3156,,,,page=0,\n")


def bars(root, cls):
    return [e for e in root.iter(NS + "rect") if e.get("class") == cls]


def main():
    with tempfile.TemporaryDirectory(prefix="tt-plot-") as tmp:
        src, dst = os.path.join(tmp, "inference.csv"), os.path.join(tmp, "inference.svg")
        with open(src, "w") as f:
            f.write(CSV)
        n = plot.write(src, dst, "test run")
        check(n == 2, f"the two shape rows are drawn, the paged and varlen lines are not ({n})")
        root = ET.parse(dst).getroot()
        check(root.tag == NS + "svg", "the output is an SVG document")
        speed = bars(root, "bar")
        check(len(speed) == 7, f"a speed bar a run and shape but the failed one: 7 ({len(speed)})")
        na = [e.text for e in root.iter(NS + "text") if e.get("class") == "na"]
        check(na == ["cuDNN: n/a"], f"the failed run is marked n/a, not drawn as a bar ({na})")
        by = {(e.get("data-series"), round(float(e.get("data-value")), 3)): e for e in speed}
        best, flash = by.get(("tt_best", 2.0)), by.get(("torch_flash", 0.5))
        check(best is not None and flash is not None, "the decode row's speeds are torch auto's time / the run's")
        if best is not None and flash is not None:
            one = plot._x(1.0)
            check(float(best.get("x")) == round(one, 1), "a faster run's bar starts at the 1x line")
            check(float(flash.get("x")) + float(flash.get("width")) <= one + 0.1,
                  "a slower run's bar ends at the 1x line, to its left")
            check(abs(float(best.get("width")) - float(flash.get("width"))) < 0.2,
                  "2x and 0.5x are bars of one length (log scale)")
            eight = by.get(("tt_best", 8.0))
            check(eight is not None and abs(float(eight.get("width")) - 3 * float(best.get("width"))) < 0.3,
                  "8x is three times 2x's length")
        tb = bars(root, "tbps")
        check(len(tb) == 4, f"a KV-rate bar for torch auto and the tuned best a shape ({len(tb)})")
        widths = {(e.get("data-series"), float(e.get("data-value"))): float(e.get("width")) for e in tb}
        check(abs(widths.get(("tt_best_TBps", 2.8), 0) - 2 * widths.get(("torch_auto_TBps", 1.4), 0)) < 0.2,
              "the KV-rate panel is linear: 2.8 TB/s is twice 1.4's bar")
        check(not [e for e in root.iter(NS + "line") if e.get("class") == "peak"],
              "a card of unknown peak is drawn without a peak line")

        plot.write(src, dst, "test run", hbm_tbps=3.35)
        root = ET.parse(dst).getroot()
        peak = [e for e in root.iter(NS + "line") if e.get("class") == "peak"]
        left = plot.LEFT + plot.PANEL_W + plot.MID
        check(len(peak) == 1 and abs(float(peak[0].get("x1")) - (left + plot.TB_W * 3.35 / 6)) < 0.1,
              "the H100's 3.35 TB/s peak is drawn where 3.35 lies on the axis the 5.6 TB/s row widened to 6")

        # a faster card's rate is drawn to its length, the axis widened to hold it
        with open(src, "w") as f:
            f.write(CSV.replace(",1.4,1.4,2.8,", ",1.4,1.4,7.2,"))
        plot.write(src, dst, "test run", hbm_tbps=8.0)
        root = ET.parse(dst).getroot()
        tb = {e.get("data-series") + "@" + e.get("data-value"): float(e.get("width")) for e in bars(root, "tbps")}
        w72 = tb.get("tt_best_TBps@7.2000", 0)
        check(abs(w72 - plot.TB_W * 7.2 / 8) < 0.2, f"7.2 TB/s on an 8 TB/s card is not clamped ({w72:.1f} px)")

    check(plot.hbm_peak("NVIDIA H200") == 4.8 and plot.hbm_peak("NVIDIA H100 80GB HBM3") == 3.35,
          "the two Hopper cards the targets are measured on have their peaks")
    check(plot.hbm_peak("NVIDIA H100 NVL") == 3.9 and plot.hbm_peak("NVIDIA H100 PCIe") == 2.0,
          "the NVL and PCIe H100s are not read as the SXM part")
    check(plot.hbm_peak("NVIDIA A100-SXM4-80GB") is None, "a card not in the table has no peak")
    check(plot.main(["plot.py", "a.csv", "b.svg", "--hbm", "fast"]) == 2, "--hbm that is not a number is refused")
    return result()


if __name__ == "__main__":
    sys.exit(main())
