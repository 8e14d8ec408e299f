#!/usr/bin/env python3
"""CPU test of bench/inference/targets.py: a CSV laid out as decode.py
writes it, each target once met and once missed, a failed run (an empty
cell) counted as neither, and the exit status a script can act on."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import targets  # noqa: E402
from cpu_test import check, result  # noqa: E402

HEADER = ("kind,batch,Lq,Lk,torch_auto,torch_flash,torch_cudnn,tt_default,tt_default_kv,tt_best,"
          "torch_auto_TBps,tt_default_TBps,tt_best_TBps,best_config,default_config\n")
MET = HEADER + (
    # decode over 2.1 GB: 0.475 ms at 4.52 TB/s, 1.002x torch auto
    'decode,16,1,32768,0.476,0.49,0.476,0.476,0.476,0.475,4.51,4.51,4.52,"a","b"\n'
    # a short cache (under 1 GB): no rate target
    'decode,1,1,4096,0.0118,0.02,0.0118,0.0116,0.0116,0.0115,1.4,1.4,1.46,"a","b"\n'
    'spec,8,16,8192,0.2178,0.43,0.2178,0.086,0.086,0.0837,1,1,3.21,"a","b"\n'
    'chunk,1,512,8192,0.1144,0.27,0.1144,0.1056,0.1056,0.1056,1,1,0.32,"a","b"\n'
    "contiguous,1,,32768,,,,,,0.0380,,,,page=0,\n"
    "paged16,1,,32768,,,,,,0.0400,,,,page=16,\n"
    "varlen,8,,111616,,,,,,0.3156,,,,page=0,\n"
    "varlen_dense_sum,8,,111616,,,,,,0.3200,,,,page=0,\n"
    "cross,1,1,8192,,,,0.0170,,0.0173,,,,,\n"
    "host,1,1,,,,,,,0.00460,,,,,\n")
MISSED = HEADER + (
    # 0.9996x torch auto: parity, but under the target, shown so
    'decode,64,1,8192,0.4820,0.79,0.4820,0.4822,0.4822,0.48219,4.45,4.45,4.45,"a","b"\n'
    # a GB cache read at 3.11 TB/s (an H100's rate)
    'decode,8,1,65536,0.70,0.70,0.70,0.70,0.70,0.69,3.1,3.1,3.11,"a","b"\n'
    # 1.99x cuDNN, and the default 1.2x the tuned best
    'spec,8,16,8192,0.2102,0.41,0.2102,0.1266,0.1266,0.1055,1,1,2.54,"a","b"\n'
    'chunk,1,512,32768,0.40,1.0,0.40,0.41,0.41,0.41,1,1,0.3,"a","b"\n'
    # cuDNN's run failed: its ratio is n/a, neither met nor missed
    'spec,1,8,32768,0.37,0.13,,0.058,0.058,0.055,1,1,2.4,"a","b"\n'
    "contiguous,1,,32768,,,,,,0.0380,,,,page=0,\n"
    "paged16,1,,32768,,,,,,0.0420,,,,page=16,\n"
    "varlen,8,,111616,,,,,,0.3600,,,,page=0,\n"
    "varlen_dense_sum,8,,111616,,,,,,0.3200,,,,page=0,\n"
    "cross,64,1,8192,,,,0.480,,0.540,,,,,\n"
    "host,1,1,,,,,,,0.00556,,,,,\n")


def lines_of(tmp, name, text):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text)
    return path, targets.check(*targets.read(path))


def find(lines, target, where=None):
    hits = [x for x in lines if x["target"].startswith(target) and (where is None or x["where"] == where)]
    return hits[0] if len(hits) == 1 else None


def main():
    with tempfile.TemporaryDirectory(prefix="tt-targets-") as tmp:
        path, lines = lines_of(tmp, "met.csv", MET)
        check(all(x["ok"] for x in lines), f"a run that meets every target has no miss ({len(lines)} lines)")
        kinds = {x["target"].split(":")[0].split(" (")[0] for x in lines}
        for k in ("decode", "speculative", "chunked prefill", "built-in default / tuned best", "paged",
                  "varlen batch / its sequences alone", "decode key tuned at another batch / own winner", "host"):
            check(k in kinds, f"the {k} target has a line")
        rate = [x for x in lines if x["target"].startswith("decode: KV read")]
        check(len(rate) == 1 and rate[0]["where"] == "B16 Lq1 Lk32768",
              "the KV rate is held only where the cache is 1 GB or more")
        check(subprocess.run([sys.executable, os.path.join(HERE, "targets.py"), path],
                             capture_output=True).returncode == 0, "targets.py exits 0 when all are met")

        path, lines = lines_of(tmp, "missed.csv", MISSED)
        parity = find(lines, "decode: tuned best", "B64 Lq1 Lk8192")
        check(parity is not None and parity["ok"] is False and parity["shown"] == "0.9996",
              f"0.9996x torch auto is missed and shown as 0.9996, not rounded up to 1.000 ({parity})")
        for target, where in (("decode: KV read", "B8 Lq1 Lk65536"),
                              ("speculative: tuned best / cuDNN", "B8 Lq16 Lk8192"),
                              ("built-in default", "B8 Lq16 Lk8192"), ("chunked prefill", "B1 Lq512 Lk32768"),
                              ("paged (page 16)", "B1 Lk32768"), ("varlen", None), ("decode key tuned", None),
                              ("host", None)):
            x = find(lines, target, where)
            named = f"{target} {where}" if where else target
            check(x is not None and x["ok"] is False, f"{named} is missed ({x and x['shown']})")
        na = find(lines, "speculative: tuned best / cuDNN", "B1 Lq8 Lk32768")
        check(na is not None and na["ok"] is None and na["shown"] == "n/a", "a failed peer's ratio is n/a")
        check(find(lines, "speculative: tuned best / torch flash", "B1 Lq8 Lk32768")["ok"] is True,
              "the same row's other ratio still counts")
        md = targets.markdown(lines, "test GPU")
        check("## Targets (test GPU)" in md and "| n/a |" in md and "**MISSED**" in md,
              "the markdown names the device and marks n/a and misses")
        check(md.rstrip().endswith(f"{sum(1 for x in lines if x['ok'])} met, "
                                   f"{sum(1 for x in lines if x['ok'] is False)} missed."),
              "the markdown ends with the counts")
        run = subprocess.run([sys.executable, os.path.join(HERE, "targets.py"), path], capture_output=True, text=True)
        check(run.returncode == 1 and "MISSED" in run.stdout, "targets.py exits 1 when one is missed")

        path, _ = lines_of(tmp, "empty.csv", HEADER)
        run = subprocess.run([sys.executable, os.path.join(HERE, "targets.py"), path], capture_output=True, text=True)
        check(run.returncode == 2 and "no decode" in run.stderr, "a CSV with no shape rows is an error, not a pass")
        run = subprocess.run([sys.executable, os.path.join(HERE, "targets.py"), os.path.join(tmp, "absent.csv")],
                             capture_output=True, text=True)
        check(run.returncode != 0 and "Traceback" not in run.stderr, "a missing file is a clear error")
    return result()


if __name__ == "__main__":
    sys.exit(main())
