#!/usr/bin/env python3
"""CPU test of bench/inference/plot.py: the inference run's SVG drawn from
a CSV laid out as decode.py writes it (shape rows, then the paged and
varlen lines), with a run that failed (an empty cell)."""
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
    return result()


if __name__ == "__main__":
    sys.exit(main())
