"""Launch src/kernels/sdpa.cu from PyTorch without libtiletune.

Cubins come from a directory built on the CPU machine by nvrtc_build.py
(names from variant_name) or, when missing, are compiled here with CuPy's
NVRTC. Launches go through libcuda by ctypes on the tensors' stream: the
kernel takes its parameter struct by value, which CuPy cannot pass.
"""
import ctypes
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from nvrtc_build import variant_name  # noqa: E402
import space  # noqa: E402

_cuda = ctypes.CDLL("libcuda.so.1")
_P = ctypes.c_void_p


def _ck(rc, what):
    if rc != 0:
        s = ctypes.c_char_p()
        _cuda.cuGetErrorString(rc, ctypes.byref(s))
        raise RuntimeError(f"{what}: CUDA error {rc} {s.value}")


class Params(ctypes.Structure):
    _fields_ = ([(n, ctypes.c_void_p) for n in ("q", "k", "v", "o", "lse")] +
                [(f"{t}_{s}_stride", ctypes.c_int64) for t in "qkvo"
                 for s in ("batch", "head", "row")] +
                [("lse_batch_stride", ctypes.c_int64), ("lse_head_stride", ctypes.c_int64)] +
                [(n, ctypes.c_int) for n in ("batch", "heads_q", "heads_kv", "seqlen_q",
                                             "seqlen_k")] +
                [("scale", ctypes.c_float), ("scale_log2", ctypes.c_float)])


class Kernels:
    def __init__(self, cubin_dir=None):
        self.cubin_dir = cubin_dir
        self.cache = {}
        torch.zeros(1, device="cuda")  # primary context current on this thread

    def function(self, v, hdim, dtype, causal, fault=0, defines=""):
        name = variant_name(v, hdim, dtype, causal, fault, defines)
        if name in self.cache:
            return self.cache[name]
        data = None
        if self.cubin_dir:
            path = os.path.join(self.cubin_dir, name + ".cubin")
            if os.path.exists(path):
                data = open(path, "rb").read()
        if data is None:
            # No prebuilt cubin: CuPy's NVRTC compiles and loads it.
            import cupy
            mod = cupy.RawModule(code=open(os.path.join(ROOT, "src/kernels/sdpa.cu")).read(),
                                 options=self._options(v, hdim, dtype, causal, fault, defines))
            f = mod.get_function("tt_sdpa_fwd_kernel")
            fn = _P(f.ptr)
            smem = space.smem_bytes(v[0], v[1], hdim, v[3], v[4])
            _ck(_cuda.cuFuncSetAttribute(fn, 8, smem), f"smem attr {name}")
            self.cache[name] = (fn, smem, mod, f)
            return self.cache[name]
        mod = _P()
        buf = ctypes.create_string_buffer(data, len(data))
        _ck(_cuda.cuModuleLoadData(ctypes.byref(mod), buf), f"load {name}")
        fn = _P()
        _ck(_cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"tt_sdpa_fwd_kernel"), name)
        smem = space.smem_bytes(v[0], v[1], hdim, v[3], v[4])
        # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
        _ck(_cuda.cuFuncSetAttribute(fn, 8, smem), f"smem attr {name}")
        self.cache[name] = (fn, smem)
        return self.cache[name]

    @staticmethod
    def _options(v, hdim, dtype, causal, fault, defines):
        bm, bn, w, st, lay, qr = v
        return ("-arch=sm_90", "-std=c++17", f"-I{os.path.join(ROOT, 'src/kernels')}",
                "-DTT_FAMILY=0", '-DTT_MAINLOOP="mma/mainloop.cuh"', f"-DTT_BLOCK_M={bm}", f"-DTT_BLOCK_N={bn}",
                f"-DTT_WARPS={w}", f"-DTT_STAGES={st}", f"-DTT_LAYOUT={lay}",
                f"-DTT_Q_IN_REGS={qr}", f"-DTT_HEAD_DIM={hdim}", f"-DTT_DTYPE={dtype}",
                f"-DTT_CAUSAL={causal}", f"-DTT_FAULT_INJECT={fault}",
                *[f"-DTT_{d}" for d in defines.split(",") if d])

    def sdpa(self, q, k, v, is_causal=False, scale=None, variant=None, out=None,
             lse=None, fault=0, defines=""):
        """q [B,Hq,Lq,D], k/v [B,Hkv,Lk,D] (any strides, last dim contiguous)."""
        B, Hq, Lq, D = q.shape
        Hkv, Lk = k.shape[1], k.shape[2]
        dt = {torch.float16: 0, torch.bfloat16: 1}[q.dtype]
        if variant is None:
            variant = (64, 64, 4, 2, 1, 0)
        fn, smem = self.function(variant, D, dt, int(bool(is_causal)), fault, defines)[:2]
        if out is None:
            out = torch.empty_like(q)
        if lse is None:
            lse = torch.empty((B, Hq, Lq), device=q.device, dtype=torch.float32)
        sc = scale if scale is not None else 1.0 / math.sqrt(D)
        p = Params()
        p.q, p.k, p.v, p.o, p.lse = (q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                     out.data_ptr(), lse.data_ptr())
        for t, x in zip("qkvo", (q, k, v, out)):
            setattr(p, f"{t}_batch_stride", x.stride(0))
            setattr(p, f"{t}_head_stride", x.stride(1))
            setattr(p, f"{t}_row_stride", x.stride(2))
        p.lse_batch_stride, p.lse_head_stride = lse.stride(0), lse.stride(1)
        p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k = B, Hq, Hkv, Lq, Lk
        p.scale, p.scale_log2 = sc, sc * 1.4426950408889634
        bm = variant[0]
        args = (ctypes.c_void_p * 1)(ctypes.addressof(p))
        stream = torch.cuda.current_stream().cuda_stream
        _ck(_cuda.cuLaunchKernel(fn, (Lq + bm - 1) // bm, Hq, B, variant[2] * 32, 1, 1,
                                 smem, _P(stream), args, None), "launch")
        return out, lse
