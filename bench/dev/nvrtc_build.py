#!/usr/bin/env python3
"""Compile variants of src/kernels/sdpa.cu (the root file over the skeleton
and each family's mainloop, found on the include path src/kernels) with
NVRTC (ctypes, stdlib only).

Used on the CPU machine to check every variant compiles, read ptxas' report
(registers, spills, shared memory) and build sm_90 cubins that the device
harness loads, so no device time goes into compiling.

    python3 bench/dev/nvrtc_build.py --arch sm_90 --out build-kernels/cubins \
        --hdim 128 --dtype 0 --causal 0 BM,BN,W,ST,LAYOUT,QREGS ...

A variant is "BM,BN,W,ST,LAYOUT,QREGS[,FAMILY]" (family 1, wgmma, builds
for sm_90a). Without variants the whole space of
space.py is built for the given keys. Writes <name>.cubin and report.json.
"""
import argparse
import ctypes
import json
import os
import re
import sys
from concurrent.futures import ProcessPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KDIR = os.path.join(ROOT, "src", "kernels")
SRC = os.path.join(KDIR, "sdpa.cu")
MAINLOOP = {0: "mma/mainloop.cuh", 1: "wgmma/mainloop.cuh", 2: "ws/mainloop.cuh", 3: "splitkv/mainloop.cuh"}
sys.path.insert(0, HERE)
import space  # noqa: E402


def _lib():
    for name in ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"):
        for d in ("/usr/local/cuda/lib64", ""):
            try:
                return ctypes.CDLL(os.path.join(d, name) if d else name)
            except OSError:
                pass
    import glob
    for d in sys.path:  # the pip wheel (nvidia-cuda-nvrtc) next to torch
        for f in sorted(glob.glob(os.path.join(d, "nvidia", "*", "lib", "libnvrtc.so*")) +
                        glob.glob(os.path.join(d, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*"))):
            if "builtins" not in f:
                try:
                    return ctypes.CDLL(f)
                except OSError:
                    pass
    raise OSError("libnvrtc not found")


def variant_name(v, hdim, dtype, causal, fault=0, defines=""):
    """defines: extra "NAME=VAL,..." (-DTT_NAME=VAL), for A/B builds."""
    bm, bn, w, st, lay, qr = v[:6]
    n = ("wg_" if len(v) > 6 and v[6] == 1 else "") + f"d{hdim}_t{dtype}_c{causal}_m{bm}_n{bn}_w{w}_s{st}_l{lay}_q{qr}"
    n += f"_f{fault}" if fault else ""
    return n + ("_" + defines.replace("=", "").replace(",", "_") if defines else "")


def extra_defines(defines):
    return [f"-DTT_{d}" for d in defines.split(",") if d]


def compile_one(args):
    v, hdim, dtype, causal, arch, fault, defines = args
    lib = _lib()
    src = open(SRC, "rb").read()
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"sdpa.cu", 0, None, None)
    if rc:
        return {"ok": False, "log": f"nvrtcCreateProgram {rc}"}
    bm, bn, w, st, lay, qr = v[:6]
    fam = v[6] if len(v) > 6 else 0
    if fam in (1, 2) and arch == "sm_90":
        arch = "sm_90a"  # wgmma
    opts = [f"-arch={arch}", "-std=c++17", "--ptxas-options=-v", f"--include-path={KDIR}",
            f'-DTT_MAINLOOP="{MAINLOOP[fam]}"', f"-DTT_FAMILY={fam}", f"-DTT_BLOCK_M={bm}", f"-DTT_BLOCK_N={bn}",
            f"-DTT_WARPS={w}", f"-DTT_STAGES={st}", f"-DTT_LAYOUT={lay}",
            f"-DTT_Q_IN_REGS={qr}", f"-DTT_HEAD_DIM={hdim}", f"-DTT_DTYPE={dtype}",
            f"-DTT_CAUSAL={causal}", f"-DTT_FAULT_INJECT={fault}"] + extra_defines(defines)
    if fam == 3 and "SKV_PAGED=" not in defines:
        # the contiguous cache's program; --defines SKV_PAGED=1,SKV_PAGE_SHIFT=4: pages of 16
        opts.append("-DTT_SKV_PAGED=0")
    copts = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    rc = lib.nvrtcCompileProgram(prog, len(opts), copts)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, buf)
    log = buf.value.decode(errors="replace")
    out = {"ok": rc == 0, "log": log}
    if rc == 0:
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        cub = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetCUBIN(prog, cub)
        out["cubin"] = cub.raw
        # ptxas reports each entry function (a family may have a second,
        # splitkv's merge): the main kernel's section only
        sec = log
        m = re.search(r"Compiling entry function '(\w*tt_sdpa_fwd_kernel\w*)'", log)
        if m:
            sec = log[m.start():]
            nxt = sec.find("Compiling entry function", 1)
            sec = sec if nxt < 0 else sec[:nxt]
        m = re.search(r"Used (\d+) registers", sec)
        out["regs"] = int(m.group(1)) if m else -1
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", sec)
        out["spill"] = int(m.group(1)) + int(m.group(2)) if m else 0
        m = re.search(r"(\d+) bytes stack frame", sec)
        out["stack"] = int(m.group(1)) if m else 0
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--out", default=None)
    ap.add_argument("--hdim", type=int, nargs="+", default=[128])
    ap.add_argument("--dtype", type=int, nargs="+", default=[0])
    ap.add_argument("--causal", type=int, nargs="+", default=[0])
    ap.add_argument("--fault", type=int, default=0)
    ap.add_argument("--defines", default="", help="extra NAME=VAL,... for A/B")
    ap.add_argument("--space", default="variants", help="function of space.py")
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("variants", nargs="*")
    a = ap.parse_args()
    jobs = []
    for hd in a.hdim:
        vs = ([tuple(int(x) for x in s.split(",")) for s in a.variants]
              if a.variants else getattr(space, a.space)(hd))
        for dt in a.dtype:
            for c in a.causal:
                for v in vs:
                    jobs.append((v, hd, dt, c, a.arch, a.fault, a.defines))
    report = {}
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        rp = os.path.join(a.out, "report.json")
        if os.path.exists(rp):
            report = json.load(open(rp))
    bad = 0
    with ProcessPoolExecutor(max_workers=a.jobs) as ex:
        for job, res in zip(jobs, ex.map(compile_one, jobs)):
            name = variant_name(job[0], job[1], job[2], job[3], job[5], job[6])
            if not res["ok"]:
                bad += 1
                print(f"FAIL {name}\n{res['log']}")
                continue
            if res["regs"] < 0:
                # No ptxas report in the log (seen once for a variant that
                # spilled 888 B in another build): never count it as clean.
                res["spill"] = res["spill"] or -1
            line = f"{name}: regs {res['regs']} spill {res['spill']} stack {res['stack']}"
            if res["spill"] or res["stack"]:
                bad += 1
                line += "  <-- SPILL"
            print(line, flush=True)
            if a.out:
                with open(os.path.join(a.out, name + ".cubin"), "wb") as f:
                    f.write(res["cubin"])
                report[name] = {k: res[k] for k in ("regs", "spill", "stack")}
    if a.out:
        with open(os.path.join(a.out, "report.json"), "w") as f:
            json.dump(report, f, indent=1, sort_keys=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
