#!/usr/bin/env python3
"""Where a Python caller's host time goes: tt_sdpa_fwd through ctypes
against the driver's own floor (cuLaunchKernel of an empty kernel, also
through ctypes), each minus a trivial ctypes call, in a process with torch
imported or without it (--no-torch: the driver and libtiletune alone),
the tensors from cuMemAlloc or from torch's allocator (--torch-memory).

    python3 bench/host/ctypes_floor.py [--no-torch | --torch-memory]

Prints microseconds per call, medians of 31 bursts of 200 calls (each
burst then synchronised, so the launch queue never fills). A decode
problem: 1 x 32 query heads x 1 token, 8 K/V heads x 256 keys, d128, bf16;
the splitkv config with 8 splits a KV head (as bench/host/host_cost.c).
"""
import argparse
import ctypes
import importlib.util
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BURSTS, CALLS = 31, 200
HQ, HKV, LK, D = 32, 8, 256, 128
CFG = "family=splitkv,block_m=16,block_n=64,warps=4,stages=2,layout=pad,q_in_regs=1,split_ctas=8"


def load_lib_module():
    """tiletune/_lib.py by path: importing the package would import torch."""
    spec = importlib.util.spec_from_file_location("tt_lib", os.path.join(ROOT, "python", "tiletune", "_lib.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def per_call(fn, sync):
    res = []
    for _ in range(BURSTS):
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        res.append((time.perf_counter() - t0) / CALLS * 1e6)
        sync()
    res.sort()
    return res[len(res) // 2]


def check(r, what):
    if r != 0:
        raise SystemExit(f"{what}: CUresult {r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--torch-memory", action="store_true", help="tensors from torch's allocator, not cuMemAlloc")
    a = ap.parse_args()
    if a.no_torch and a.torch_memory:
        raise SystemExit("--torch-memory needs torch")
    cu = ctypes.CDLL("libcuda.so.1")
    if not a.no_torch:
        global torch
        import torch
        torch.cuda.init()
        torch.zeros(1, device="cuda")  # torch's context current on this thread
    check(cu.cuInit(0), "cuInit")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    check(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    stream = ctypes.c_void_p()
    check(cu.cuStreamCreate(ctypes.byref(stream), 1), "cuStreamCreate")

    ptx = (b".version 7.0\n.target sm_80\n.address_size 64\n"
           b".visible .entry tt_empty8(.param .u64 p) { ret; }\n")
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    check(cu.cuModuleLoadData(ctypes.byref(mod), ptx), "cuModuleLoadData")
    check(cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"tt_empty8"), "cuModuleGetFunction")
    one = ctypes.c_uint64(0)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(one), ctypes.c_void_p))
    launch = cu.cuLaunchKernel
    launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3

    def empty():
        launch(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, None)

    def sync():
        cu.cuStreamSynchronize(stream)

    L = load_lib_module()
    lib = L._load()
    nq, nk = HQ * D, HKV * LK * D
    bufs, keep = [], []
    for n in (nq, nk, nq):
        if a.torch_memory:
            keep.append(torch.zeros(n, dtype=torch.bfloat16, device="cuda"))
            bufs.append(keep[-1].data_ptr())
            continue
        p = ctypes.c_uint64()
        check(cu.cuMemAlloc_v2(ctypes.byref(p), n * 2), "cuMemAlloc")
        check(cu.cuMemsetD8_v2(p, 0, n * 2), "cuMemsetD8")
        bufs.append(p.value)
    args = L._Args()
    args.q, args.k, args.v, args.o = bufs[0], bufs[1], bufs[1], bufs[2]
    args.batch, args.heads_q, args.heads_kv, args.seqlen_q, args.seqlen_k, args.head_dim = 1, HQ, HKV, 1, LK, D
    args.q_stride[:] = [HQ * D, D, D]
    args.k_stride[:] = [HKV * LK * D, LK * D, D]
    args.v_stride[:] = [HKV * LK * D, LK * D, D]
    args.o_stride[:] = [HQ * D, D, D]
    args.dtype = L.TT_DTYPE_BF16
    cfg = L._parse(CFG)
    args.config = ctypes.pointer(cfg)
    args.stream = stream.value
    err = ctypes.create_string_buffer(256)
    fwd, ref = lib.tt_sdpa_fwd, ctypes.byref(args)
    if fwd(ref, err, 256) < 0:
        raise SystemExit(f"tt_sdpa_fwd: {err.value.decode()}")
    sync()

    def call():
        fwd(ref, err, 256)

    base_fn = lib.tt_strerror
    base = per_call(lambda: base_fn(0), lambda: None)
    t_empty = per_call(empty, sync)
    t_fwd = per_call(call, sync)
    mem = "torch's allocator" if a.torch_memory else "cuMemAlloc"
    print(f"process: {'no torch' if a.no_torch else 'torch imported, its context current'}; memory from {mem}")
    print(f"{'a trivial ctypes call (tt_strerror)':58s} {base:6.2f} us")
    print(f"{'cuLaunchKernel, empty kernel, through ctypes (- trivial)':58s} {t_empty - base:6.2f} us")
    print(f"{'tt_sdpa_fwd, splitkv 8 splits, through ctypes (- trivial)':58s} {t_fwd - base:6.2f} us")


if __name__ == "__main__":
    sys.exit(main())
