#!/usr/bin/env python3
"""Develop the `ws` family (src/kernels/sdpa_ws.cu) without libtiletune.

On the CPU machine, build cubins with NVRTC and read ptxas' report:
    python3 bench/dev/ws_dev.py build --out .wsdev [--only d128]
On the device (torch there), check each cubin against PyTorch and time it
beside cuDNN and FlashAttention-2 (triton's do_bench, median):
    python3 bench/dev/ws_dev.py run --cubins .wsdev --out $OUT/ws.csv

A variant is (head_dim, dtype, causal, block_n, consumers, stages,
pingpong, overlap). Tensor maps are encoded with cuTensorMapEncodeTiled
through ctypes, the launch passes the parameter struct and four maps.
"""
import argparse
import ctypes
import itertools
import json
import math
import os
import re
import sys
from concurrent.futures import ProcessPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KDIR = os.path.join(ROOT, "src", "kernels")
SRC = os.path.join(KDIR, "sdpa.cu")
HEADERS = ("sdpa_params.h", "skeleton.cuh", "ws/mainloop.cuh", "ws/wrappers.cuh", "ws/sched.h", "wgmma/wrappers.cuh")

# (head_dim) -> [(block_n, consumers, stages, pingpong, overlap, persistent)]
SPACE = {
    64: [(128, 3, 2, 0, 1, 0), (128, 3, 2, 0, 1, 1), (128, 3, 3, 0, 1, 1),
         (128, 2, 2, 1, 1, 0), (128, 2, 2, 1, 1, 1), (192, 2, 2, 1, 1, 0)],
    128: [(128, 2, 2, 1, 1, 0), (128, 2, 2, 1, 1, 1), (176, 2, 2, 1, 1, 0), (128, 2, 3, 1, 1, 0),
          (128, 2, 2, 0, 1, 0), (128, 2, 2, 1, 0, 0), (128, 2, 2, 0, 0, 0)],
    256: [(80, 2, 2, 1, 1, 0), (64, 2, 2, 1, 1, 0), (80, 2, 2, 0, 1, 0), (80, 2, 2, 1, 0, 0),
          (64, 2, 2, 0, 0, 0)],
}


def family_space(d):
    """The variants src/kernels/ws/family.c's space and rules give head_dim
    d (mirrored here: keep the two in step)."""
    out = []
    for bm, w in ((128, 12), (192, 16)):
        for bn in (80, 128, 176):
            for layout in (0, 1):
                for qr in (0, 1):
                    if layout and w != 12:
                        continue
                    if bn // 2 + bn // 4 + d // 2 > (196 if w == 12 else 136):
                        continue
                    if smem_bytes(d, bn, bm // 64, 2, qr) > 227 * 1024:
                        continue
                    out.append((bn, bm // 64, 2, layout, 1, qr))
    return out


def smem_bytes(d, bn, nc, st, pe=0):
    return 2 * d * (64 * nc * (2 if pe else 1) + 2 * st * bn) + 1024 + 32 + 32 * st


def name(d, dt, causal, v):
    bn, nc, st, pp, ov, pe = v
    return f"ws_d{d}_t{dt}_c{causal}_n{bn}_c{nc}_s{st}_p{pp}_o{ov}_r{pe}"


def _nvrtc():
    for n in ("/usr/local/cuda/lib64/libnvrtc.so", "libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"):
        try:
            return ctypes.CDLL(n)
        except OSError:
            pass
    import glob
    for d in sys.path:
        for f in sorted(glob.glob(os.path.join(d, "nvidia", "*", "lib", "libnvrtc.so*"))):
            if "builtins" not in f:
                return ctypes.CDLL(f)
    raise OSError("libnvrtc not found")


def compile_one(job):
    d, dt, causal, v, extra = job
    bn, nc, st, pp, ov, pe = v
    lib = _nvrtc()
    prog = ctypes.c_void_p()
    n = len(HEADERS)
    hdrs = (ctypes.c_char_p * n)(*[open(os.path.join(KDIR, h), "rb").read() for h in HEADERS])
    names = (ctypes.c_char_p * n)(*[h.encode() for h in HEADERS])
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), open(SRC, "rb").read(), b"sdpa.cu", n, hdrs, names)
    assert rc == 0
    opts = ["-arch=sm_90a", "-std=c++17", "--ptxas-options=-v", f"-DTT_BLOCK_M={64 * nc}",
            f"-DTT_BLOCK_N={bn}", f"-DTT_WARPS={4 * (nc + 1)}", f"-DTT_STAGES={st}",
            f"-DTT_HEAD_DIM={d}", f"-DTT_DTYPE={dt}", f"-DTT_CAUSAL={causal}",
            "-DTT_FAMILY=2", '-DTT_MAINLOOP="ws/mainloop.cuh"', "-DTT_FAULT_INJECT=0",
            f"-DTT_LAYOUT={pp}", f"-DTT_WS_OVERLAP={ov}", f"-DTT_Q_IN_REGS={pe}"] + extra
    copts = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    rc = lib.nvrtcCompileProgram(prog, len(opts), copts)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, buf)
    out = {"ok": rc == 0, "log": buf.value.decode(errors="replace")}
    if rc == 0:
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        cub = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetCUBIN(prog, cub)
        out["cubin"] = cub.raw
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return out


def build(a):
    os.makedirs(a.out, exist_ok=True)
    jobs = []
    space = {d: family_space(d) for d in SPACE} if a.family else SPACE
    for d, vs in space.items():
        if a.only and f"d{d}" not in a.only:
            continue
        for dt in (0, 1):
            for causal in (0, 1):
                for v in vs[:a.first]:
                    jobs.append((d, dt, causal, v, a.define))
    bad = 0
    report = {}
    for j in jobs:
        assert smem_bytes(j[0], *j[3][:3], j[3][5]) <= 232448, j
    with ProcessPoolExecutor(max_workers=a.jobs) as ex:
        for job, res in zip(jobs, ex.map(compile_one, jobs)):
            n = name(job[0], job[1], job[2], job[3])
            log = res["log"]
            if not res["ok"]:
                bad += 1
                print("FAIL", n, log[-3000:])
                continue
            regs = [int(x) for x in re.findall(r"Used (\d+) registers", log)]
            spill = sum(int(x) + int(y) for x, y in
                        re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log))
            warn = [ln for ln in log.splitlines() if "warning" in ln.lower()]
            report[n] = {"regs": regs, "spill": spill, "warn": warn}
            print(f"{n}: regs {regs} spill {spill} {'WARN ' + ' | '.join(warn) if warn else ''}")
            if spill or warn:
                bad += 1
            with open(os.path.join(a.out, n + ".cubin"), "wb") as f:
                f.write(res["cubin"])
    json.dump(report, open(os.path.join(a.out, "report.json"), "w"), indent=1)
    return 1 if bad else 0


# ---------------------------------------------------------------- device side

class Runner:
    def __init__(self, cubins):
        import torch
        self.torch = torch
        sys.path.insert(0, HERE)
        from ttk import Params  # noqa: E402
        self.Params = Params
        self.cu = ctypes.CDLL("libcuda.so.1")
        torch.zeros(1, device="cuda")
        self.cubins = cubins
        self.cache = {}
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count

    def ck(self, rc, what):
        if rc != 0:
            s = ctypes.c_char_p()
            self.cu.cuGetErrorString(rc, ctypes.byref(s))
            raise RuntimeError(f"{what}: CUDA error {rc} {s.value}")

    def fn(self, d, dt, causal, v):
        n = name(d, dt, causal, v)
        if n not in self.cache:
            data = open(os.path.join(self.cubins, n + ".cubin"), "rb").read()
            mod, f = ctypes.c_void_p(), ctypes.c_void_p()
            buf = ctypes.create_string_buffer(data, len(data))
            self.ck(self.cu.cuModuleLoadData(ctypes.byref(mod), buf), "load " + n)
            self.ck(self.cu.cuModuleGetFunction(ctypes.byref(f), mod, b"tt_sdpa_fwd_kernel"), n)
            sm = smem_bytes(d, v[0], v[1], v[2], v[5])
            self.ck(self.cu.cuFuncSetAttribute(f, 8, sm), "smem " + n)
            self.cache[n] = (f, sm, buf)
        return self.cache[n]

    def tmap(self, x, rows):
        """4-d map (D, L, H, B) of a [B, H, L, D] tensor view, 64-column boxes."""
        m = (ctypes.c_uint64 * 16)()
        B, H, L, D = x.shape
        dims = (ctypes.c_uint64 * 4)(D, L, H, B)
        es = x.element_size()
        strides = (ctypes.c_uint64 * 3)(x.stride(2) * es, x.stride(1) * es, x.stride(0) * es)
        box = (ctypes.c_uint32 * 4)(64, rows, 1, 1)
        one = (ctypes.c_uint32 * 4)(1, 1, 1, 1)
        # UINT16, interleave none, 128B swizzle, L2 promotion 256B, zero fill
        self.ck(self.cu.cuTensorMapEncodeTiled(m, 1, 4, ctypes.c_void_p(x.data_ptr()), dims, strides,
                                               box, one, 0, 3, 3, 0), "tensor map")
        return m

    def sdpa(self, q, k, v, causal, var, out=None, lse=None, prep=None):
        torch = self.torch
        B, Hq, Lq, D = q.shape
        Hkv, Lk = k.shape[1], k.shape[2]
        dt = {torch.float16: 0, torch.bfloat16: 1}[q.dtype]
        f, sm, _ = self.fn(D, dt, causal, var)
        bn, nc = var[0], var[1]
        if out is None:
            out = torch.empty_like(q)
        if lse is None:
            lse = torch.empty((B, Hq, Lq), device=q.device, dtype=torch.float32)
        sc = 1.0 / math.sqrt(D)
        p = self.Params()
        p.q, p.k, p.v, p.o, p.lse = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                                     lse.data_ptr())
        for tn, x in zip("qkvo", (q, k, v, out)):
            setattr(p, f"{tn}_batch_stride", x.stride(0))
            setattr(p, f"{tn}_head_stride", x.stride(1))
            setattr(p, f"{tn}_row_stride", x.stride(2))
        p.lse_batch_stride, p.lse_head_stride = lse.stride(0), lse.stride(1)
        p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k = B, Hq, Hkv, Lq, Lk
        p.scale, p.scale_log2 = sc, sc * 1.4426950408889634
        maps = [self.tmap(q, 64 * nc), self.tmap(k, bn), self.tmap(v, bn), self.tmap(out, 64)]
        keep = (p, maps)
        args = (ctypes.c_void_p * 5)(ctypes.addressof(p), *[ctypes.addressof(m) for m in maps])
        grid = ((Lq + 64 * nc - 1) // (64 * nc), Hq, B)
        if var[5]:
            grid = (min(grid[0] * Hq * B, self.sms), 1, 1)
        stream = torch.cuda.current_stream().cuda_stream

        def launch():
            self.ck(self.cu.cuLaunchKernel(f, *grid, 128 * (nc + 1), 1, 1, sm, ctypes.c_void_p(stream),
                                           args, None), "launch")
        launch()
        launch.keep = keep
        return out, lse, launch


def ref_attn(q, k, v, causal):
    import torch
    Hq, Hkv = q.shape[1], k.shape[1]
    if Hq != Hkv:
        k = k.repeat_interleave(Hq // Hkv, 1)
        v = v.repeat_interleave(Hq // Hkv, 1)
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    Lq, Lk = q.shape[2], k.shape[2]
    if causal:
        i = torch.arange(Lq, device=q.device)[:, None]
        j = torch.arange(Lk, device=q.device)[None, :]
        off = (Lk - Lq) if causal == 2 else 0
        s = s.masked_fill(j > i + off, float("-inf"))
    lse = torch.logsumexp(s, -1)
    return torch.softmax(s, -1).nan_to_num(0.0) @ v.float(), lse


def run(a):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench
    R = Runner(a.cubins)
    dts = {0: torch.float16, 1: torch.bfloat16}
    rows = []
    fails = 0
    only = a.only.split(",") if a.only else None
    space = {d: family_space(d) for d in SPACE} if a.family else SPACE
    # correctness: odd shapes, GQA, Lq != Lk, [B, L, H, D] strides, LSE
    shapes = [(2, 4, 2, 333, 517, False), (1, 2, 2, 1000, 1000, True), (1, 8, 8, 128, 64, False),
              (2, 6, 3, 257, 700, True)]
    for d, vs in space.items():
        if a.no_check or (only and f"d{d}" not in only):
            continue
        for dt in (0, 1):
            for causal in (0, 1):
                for var in vs[:a.first]:
                    for (B, Hq, Hkv, Lq, Lk, blhd) in shapes:
                        g = torch.Generator(device="cuda").manual_seed(1)

                        def mk(H, L):
                            if blhd:
                                return torch.randn(B, L, H, d, device="cuda", generator=g,
                                                   dtype=dts[dt]).transpose(1, 2)
                            return torch.randn(B, H, L, d, device="cuda", generator=g, dtype=dts[dt])
                        q, k, v = mk(Hq, Lq), mk(Hkv, Lk), mk(Hkv, Lk)
                        try:
                            o, lse, _ = R.sdpa(q, k, v, causal, var)
                            torch.cuda.synchronize()
                        except Exception as e:  # noqa: BLE001
                            print("ERROR", name(d, dt, causal, var), e)
                            fails += 1
                            break
                        ro, rl = ref_attn(q, k, v, causal)
                        err = (o.float() - ro).abs().max().item()
                        fin = torch.isfinite(rl)
                        lerr = (lse[fin] - rl[fin]).abs().max().item() if fin.any() else 0.0
                        if not (err < 2e-2 and lerr < 1e-3):
                            print(f"WRONG {name(d, dt, causal, var)} {(B, Hq, Hkv, Lq, Lk, blhd)} "
                                  f"err {err:.3g} lse {lerr:.3g}")
                            fails += 1
    print(f"correctness: {fails} failures", flush=True)
    # timing on the peers grid
    tot = 16384
    tspace = space if a.family_time else SPACE
    for d in sorted(tspace, key=lambda d: (d != 128, d != 256)):  # the targets first
        vs = tspace[d]
        if only and f"d{d}" not in only:
            continue
        H = 2048 // d
        for dt in a.dtypes:
            for causal in a.causals:
                for L in a.seqlens:
                    B = tot // L
                    q, k, v = (torch.randn(B, H, L, d, device="cuda", dtype=dts[dt]) for _ in range(3))
                    fl = 4 * B * H * L * L * d / (2 if causal else 1)
                    if a.prof:  # a few plain launches for ncu
                        for var in vs[:a.first]:
                            for _ in range(3):
                                R.sdpa(q, k, v, causal, var)
                        torch.cuda.synchronize()
                        continue
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        tc = do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)),
                                      rep=a.rep, warmup=a.warmup, return_mode="median")
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        tf = do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)),
                                      rep=a.rep, warmup=a.warmup, return_mode="median")
                    ref = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                    best = None
                    for var in vs[:a.first]:
                        o, lse, launch = R.sdpa(q, k, v, causal, var)
                        err = (o.float() - ref.float()).abs().max().item()
                        t = do_bench(launch, rep=a.rep, warmup=a.warmup, return_mode="median")
                        tf_ = fl / t / 1e9
                        row = dict(hdim=d, dtype=dt, causal=causal, seqlen=L, variant=name(d, dt, causal, var),
                                   ms=t, tflops=tf_, cudnn=fl / tc / 1e9, fa2=fl / tf / 1e9, err=err)
                        rows.append(row)
                        if a.out:  # as they come: a run cut short keeps its rows
                            import csv
                            new = not os.path.exists(a.out)
                            with open(a.out, "a", newline="") as f:
                                w = csv.DictWriter(f, fieldnames=list(row.keys()))
                                if new:
                                    w.writeheader()
                                w.writerow(row)
                        if best is None or t < best[0]:
                            best = (t, var)
                        print(f"d{d} t{dt} c{causal} L{L} {var}: {tf_:.0f} TF/s (cudnn {fl / tc / 1e9:.0f}, "
                              f"fa2 {fl / tf / 1e9:.0f}) err {err:.3g}", flush=True)
                    print(f"BEST d{d} t{dt} c{causal} L{L} {best[1]}: {fl / best[0] / 1e9:.0f} "
                          f"/ cudnn {fl / tc / 1e9:.0f} = {tc / best[0]:.3f}", flush=True)
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", required=True)
    b.add_argument("--only", default="")
    b.add_argument("--define", action="append", default=[])
    b.add_argument("--jobs", type=int, default=os.cpu_count())
    b.add_argument("--first", type=int, default=99)
    b.add_argument("--family", action="store_true", help="the family's whole space, not SPACE")
    r = sub.add_parser("run")
    r.add_argument("--cubins", required=True)
    r.add_argument("--out", default=None)
    r.add_argument("--only", default="")
    r.add_argument("--dtypes", type=int, nargs="+", default=[1])
    r.add_argument("--seqlens", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384])
    r.add_argument("--rep", type=int, default=100)
    r.add_argument("--warmup", type=int, default=10)
    r.add_argument("--first", type=int, default=99, help="only the first N variants of each head_dim")
    r.add_argument("--causals", type=int, nargs="+", default=[0, 1])
    r.add_argument("--no-check", action="store_true")
    r.add_argument("--family", action="store_true", help="check the family's whole space")
    r.add_argument("--family-time", action="store_true", help="and time it (else SPACE)")
    r.add_argument("--prof", action="store_true", help="launches only, for ncu")
    a = ap.parse_args()
    return build(a) if a.cmd == "build" else run(a)


if __name__ == "__main__":
    sys.exit(main())
