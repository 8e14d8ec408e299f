"""tiletune for PyTorch: tuned scaled-dot-product attention.

A pure-Python ctypes binding over libtiletune.so (no compile step of its own):

    import tiletune
    out = tiletune.sdpa(q, k, v, is_causal=True)          # like F.scaled_dot_product_attention
    out, lse = tiletune.sdpa(q, k, v, return_lse=True)
    for cfg in tiletune.variants(head_dim=128, dtype="bf16", seqlen_q=4096, seqlen_k=4096):
        tiletune.sdpa(q, k, v, config=cfg)                  # one schedule explicitly

Configs travel as their canonical text ("family=mma,block_m=128,..."); sdpa()
also takes a dict of knobs, applied over the built-in default for the key.

The library is found through $TILETUNE_LIB, next to this package, in a build
directory of the source tree (build*/src/client/), or on the loader's path.
"""

import ctypes
import ctypes.util
import glob
import math
import os

__all__ = ["sdpa", "variants", "default_config", "parse_config", "format_config", "revision",
           "library_path", "TileTuneError", "flash_attn_with_kvcache", "flash_attn_varlen_func"]

# ---- the C ABI (include/tiletune.h) -------------------------------------------------

TT_DTYPE_FP16, TT_DTYPE_BF16 = 0, 1
TT_ID_MAX = 33
TT_CONFIG_TEXT_MAX = 160
_ERR_INVAL, _ERR_UNSUPPORTED, _ERR_RANGE, _ERR_NOGPU = -1, -7, -15, -8


class _Config(ctypes.Structure):
    _fields_ = [("family", ctypes.c_int32), ("block_m", ctypes.c_int32),
                ("block_n", ctypes.c_int32), ("warps", ctypes.c_int32),
                ("stages", ctypes.c_int32), ("layout", ctypes.c_int32),
                ("q_in_regs", ctypes.c_int32), ("split_ctas", ctypes.c_int32),
                ("reserved", ctypes.c_int32 * 8)]


class _Key(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int32), ("head_dim", ctypes.c_int32),
                ("causal", ctypes.c_int32), ("seqlen_q", ctypes.c_int64),
                ("seqlen_k", ctypes.c_int64), ("gpu", ctypes.c_char * TT_ID_MAX),
                ("rev", ctypes.c_char * TT_ID_MAX)]


class _Args(ctypes.Structure):
    _fields_ = [("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
                ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p),
                ("batch", ctypes.c_int64), ("heads_q", ctypes.c_int64),
                ("heads_kv", ctypes.c_int64), ("seqlen_q", ctypes.c_int64),
                ("seqlen_k", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("q_stride", ctypes.c_int64 * 3), ("k_stride", ctypes.c_int64 * 3),
                ("v_stride", ctypes.c_int64 * 3), ("o_stride", ctypes.c_int64 * 3),
                ("lse_stride", ctypes.c_int64 * 2),
                ("dtype", ctypes.c_int32), ("causal", ctypes.c_int32),
                ("scale", ctypes.c_float), ("reserved0", ctypes.c_int32),
                ("config", ctypes.POINTER(_Config)), ("stream", ctypes.c_void_p),
                ("reserved", ctypes.c_int64 * 8)]


class TileTuneError(RuntimeError):
    """libtiletune returned an error; .code is the negative TT_ERR_* value."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


_lib = None
_lib_path = None


def _candidates():
    env = os.environ.get("TILETUNE_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "libtiletune.so*")))
    root = os.path.dirname(os.path.dirname(here))
    builds = glob.glob(os.path.join(root, "build*", "src", "client", "libtiletune.so"))
    builds += glob.glob(os.path.join(root, "build", "*", "src", "client", "libtiletune.so"))
    found += sorted(builds, key=os.path.getmtime, reverse=True)  # the newest build first
    sys_lib = ctypes.util.find_library("tiletune")
    if sys_lib:
        found.append(sys_lib)
    return found


def _load():
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    tried = _candidates()
    errors = []
    for path in tried:
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        _declare(lib)
        _lib, _lib_path = lib, path
        return lib
    raise OSError("libtiletune.so not found; set TILETUNE_LIB to its path "
                  f"(tried: {', '.join(tried) or 'nothing'}; {'; '.join(errors)})")


def _declare(lib):
    err_t = [ctypes.c_char_p, ctypes.c_size_t]
    lib.tt_sdpa_fwd.argtypes = [ctypes.POINTER(_Args)] + err_t
    lib.tt_sdpa_fwd.restype = ctypes.c_int
    lib.tt_sdpa_variants.argtypes = [ctypes.POINTER(_Key), ctypes.c_int, ctypes.POINTER(_Config),
                                     ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)] + err_t
    lib.tt_sdpa_variants.restype = ctypes.c_int
    lib.tt_kernel_revision.argtypes = [ctypes.c_char_p]
    lib.tt_kernel_revision.restype = ctypes.c_int
    lib.tt_config_default.argtypes = [ctypes.POINTER(_Key), ctypes.POINTER(_Config)]
    lib.tt_config_default.restype = ctypes.c_int
    lib.tt_sdpa_default_config.argtypes = [ctypes.POINTER(_Key), ctypes.c_int, ctypes.POINTER(_Config)] + err_t
    lib.tt_sdpa_default_config.restype = ctypes.c_int
    lib.tt_config_format.argtypes = [ctypes.POINTER(_Config), ctypes.c_char_p, ctypes.c_size_t]
    lib.tt_config_format.restype = ctypes.c_int
    lib.tt_config_parse.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Config)]
    lib.tt_config_parse.restype = ctypes.c_int
    lib.tt_strerror.argtypes = [ctypes.c_int]
    lib.tt_strerror.restype = ctypes.c_char_p


def library_path():
    """The path of the libtiletune.so in use (loading it if needed)."""
    _load()
    return _lib_path


def _raise(code, err, what):
    msg = err.value.decode(errors="replace") if err is not None and err.value else ""
    if not msg:
        msg = _load().tt_strerror(code).decode()
    text = f"{what}: {msg}"
    if code in (_ERR_INVAL, _ERR_RANGE, _ERR_UNSUPPORTED):
        raise ValueError(text)
    raise TileTuneError(code, text)


# ---- configs -------------------------------------------------------------------------

def _dtype_code(dtype):
    if isinstance(dtype, str):
        table = {"fp16": TT_DTYPE_FP16, "float16": TT_DTYPE_FP16, "half": TT_DTYPE_FP16,
                 "bf16": TT_DTYPE_BF16, "bfloat16": TT_DTYPE_BF16}
        if dtype in table:
            return table[dtype]
        raise TypeError(f"unsupported dtype {dtype!r}: tiletune takes fp16 or bf16")
    name = str(dtype)
    if name == "torch.float16":
        return TT_DTYPE_FP16
    if name == "torch.bfloat16":
        return TT_DTYPE_BF16
    raise TypeError(f"unsupported dtype {name}: tiletune takes torch.float16 or torch.bfloat16")


def _key(head_dim, dtype, causal, seqlen_q, seqlen_k):
    key = _Key()
    key.dtype = _dtype_code(dtype)
    key.head_dim = int(head_dim)
    key.causal = 1 if causal else 0
    key.seqlen_q = int(seqlen_q)
    key.seqlen_k = int(seqlen_k if seqlen_k is not None else seqlen_q)
    return key


def format_config(cfg):
    """A config's canonical text."""
    buf = ctypes.create_string_buffer(TT_CONFIG_TEXT_MAX)
    rc = _load().tt_config_format(ctypes.byref(cfg), buf, len(buf))
    if rc < 0:
        _raise(rc, None, "tt_config_format")
    return buf.value.decode()


def _parse(text):
    cfg = _Config()
    rc = _load().tt_config_parse(str(text).encode(), ctypes.byref(cfg))
    if rc < 0:
        raise ValueError(f"invalid config {text!r}: expected the canonical text, e.g. "
                         "'family=mma,block_m=128,block_n=64,warps=4,stages=2,layout=swizzle,q_in_regs=0'")
    return cfg


def parse_config(text):
    """Canonical text -> dict of knobs (symbolic values, e.g. layout='swizzle', as text)."""
    _parse(text)  # validates
    out = {}
    for item in str(text).split(","):
        name, value = item.split("=", 1)
        out[name] = int(value) if value.lstrip("-").isdigit() else value
    return out


def default_config(head_dim, dtype, causal=False, seqlen_q=1024, seqlen_k=None, device=None):
    """The built-in default config for a key, as canonical text. Without a
    device: the portable default (valid on every sm_80+ GPU, what a daemon
    answers when nothing is tuned); with a device (an ordinal, "cuda:N" or a
    torch.device): the one sdpa() runs there when nothing is tuned (sm_90
    has its own)."""
    cfg = _Config()
    key = _key(head_dim, dtype, causal, seqlen_q, seqlen_k)
    if device is None:
        rc = _load().tt_config_default(ctypes.byref(key), ctypes.byref(cfg))
        if rc < 0:
            _raise(rc, None, "default_config")
    else:
        err = ctypes.create_string_buffer(1024)
        rc = _load().tt_sdpa_default_config(ctypes.byref(key), _device_index(device), ctypes.byref(cfg),
                                            err, len(err))
        if rc < 0:
            _raise(rc, err, "default_config")
    return format_config(cfg)


def _config_struct(config, head_dim, dtype, causal, seqlen_q, seqlen_k):
    if isinstance(config, _Config):
        return config
    if isinstance(config, str):
        return _parse(config)
    if isinstance(config, dict):
        merged = parse_config(default_config(head_dim, dtype, causal, seqlen_q, seqlen_k))
        unknown = set(config) - set(merged)
        if unknown:
            raise ValueError(f"unknown config knobs {sorted(unknown)}; knobs are {list(merged)}")
        merged.update(config)
        return _parse(",".join(f"{k}={v}" for k, v in merged.items()))
    raise TypeError(f"config must be None, canonical text or a dict, not {type(config).__name__}")


def variants(head_dim, dtype, causal=False, seqlen_q=0, seqlen_k=None, device=None):
    """The variant space for a key on a CUDA device (default: torch's current
    one, else 0): every config the tuner measures, compiled (or taken from the
    cubin cache) and checked to fit the device without spills, as canonical
    text. seqlen 0 = no seqlen pruning."""
    device = _device_index(device)
    lib = _load()
    key = _key(head_dim, dtype, causal, seqlen_q, seqlen_k)
    err = ctypes.create_string_buffer(1024)
    n = ctypes.c_size_t(0)
    rc = lib.tt_sdpa_variants(ctypes.byref(key), device, None, 0, ctypes.byref(n), err, len(err))
    if rc < 0:
        _raise(rc, err, "variants")
    arr = (_Config * max(1, n.value))()
    rc = lib.tt_sdpa_variants(ctypes.byref(key), device, arr, n.value, ctypes.byref(n), err, len(err))
    if rc < 0:
        _raise(rc, err, "variants")
    return [format_config(arr[i]) for i in range(n.value)]


def _device_index(device):
    """None, an int, "cuda[:N]" or a torch.device -> a CUDA ordinal. A string
    has no usable .index (str.index is a method) and "cuda" alone means the
    current device, not 0."""
    if device is None:
        return _current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        kind, _, idx = device.partition(":")
        if kind != "cuda" or (idx and not idx.isdigit()):
            raise ValueError(f"device {device!r} is not a CUDA device ('cuda' or 'cuda:N')")
        return int(idx) if idx else _current_device()
    if getattr(device, "type", "cuda") != "cuda":
        raise ValueError(f"device {device} is not a CUDA device")
    index = getattr(device, "index", None)
    return index if index is not None else _current_device()


def revision():
    """The kernel revision in use (hex hash of the kernel source)."""
    buf = ctypes.create_string_buffer(TT_ID_MAX)
    rc = _load().tt_kernel_revision(buf)
    if rc < 0:
        _raise(rc, None, "revision")
    return buf.value.decode()


def _current_device():
    try:
        import torch
        if torch.cuda.is_available():
            return torch.cuda.current_device()
    except ImportError:
        pass
    return 0


# ---- attention ------------------------------------------------------------------------

def _check_tensors(q, k, v, enable_gqa):
    import torch
    for name, t in (("query", q), ("key", k), ("value", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, not {type(t).__name__}")
        if t.device.type != "cuda":
            raise TypeError(f"{name} is on {t.device}: tiletune.sdpa needs CUDA tensors")
        if t.dtype not in (torch.float16, torch.bfloat16):
            raise TypeError(f"{name} has dtype {t.dtype}: tiletune takes torch.float16 or torch.bfloat16")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"mixed dtypes: query {q.dtype}, key {k.dtype}, value {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"tensors on different devices: {q.device}, {k.device}, {v.device}")
    if not (q.dim() == k.dim() == v.dim()) or q.dim() not in (3, 4):
        raise ValueError("query, key and value must all be [batch, heads, seqlen, head_dim] "
                         f"(or [heads, seqlen, head_dim]); got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"key {tuple(k.shape)} and value {tuple(v.shape)} must have the same shape "
                         "(tiletune needs the value head dim equal to the query's)")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"head_dim of query ({q.shape[-1]}) and key ({k.shape[-1]}) differ")
    if q.shape[:-3] != k.shape[:-3]:
        raise ValueError(f"batch sizes differ: query {tuple(q.shape)}, key {tuple(k.shape)}")
    hq, hkv = q.shape[-3], k.shape[-3]
    if hq != hkv:
        if not enable_gqa:
            raise ValueError(f"query has {hq} heads and key/value {hkv}: pass enable_gqa=True for "
                             "grouped-query attention")
        if hkv == 0 or hq % hkv != 0:
            raise ValueError(f"query heads ({hq}) must be a multiple of key/value heads ({hkv})")


def _launchable(t):
    """t itself if the kernel can read it in place (last dim contiguous, 16-byte
    aligned rows), else a contiguous copy: any strided input works, as in torch."""
    if t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and \
            all(s % 8 == 0 and s >= 0 for s in t.stride()[:-1]):
        return t
    return t.contiguous()


def sdpa(query, key, value, is_causal=False, scale=None, enable_gqa=False, config=None,
         return_lse=False, out=None):
    """torch.nn.functional.scaled_dot_product_attention(query, key, value,
    is_causal=, scale=, enable_gqa=) with tiletune's kernel, forward only (the
    result carries no autograd history).

    query [B, Hq, Lq, D], key/value [B, Hkv, Lk, D], fp16 or bf16 CUDA tensors
    with any strides (a [B, L, H, D] tensor's .transpose(1, 2) is read in
    place); D in 32, 64, 96, 128, 256. is_causal: query i sees keys j <= i.
    scale: None (1/sqrt(D)) or >= 0 (a negative scale is refused: the kernel
    takes the row maximum before scaling).
    config: None (the tuned config for this key from tiletuned, else the
    built-in default), canonical text, or a dict of knobs over the default.
    return_lse: also return the log-sum-exp per row, fp32 [B, Hq, Lq].
    out: optional tensor of query's shape and dtype to write the result into.
    The kernel runs on torch's current stream for the tensors' device."""
    import torch
    _check_tensors(query, key, value, enable_gqa)
    squeeze = query.dim() == 3
    q, k, v = (t.unsqueeze(0) if squeeze else t for t in (query, key, value))
    B, Hq, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    if out is None:
        out = torch.empty_like(q)
    else:
        if not isinstance(out, torch.Tensor) or out.shape != query.shape or out.dtype != query.dtype \
                or out.device != query.device:
            raise ValueError("out must be a tensor of query's shape, dtype and device")
        out = out.unsqueeze(0) if squeeze else out
    lse = torch.empty((B, Hq, Lq), dtype=torch.float32, device=q.device)
    if B == 0 or Hq == 0 or Lq == 0:
        pass
    elif Lk == 0:
        raise ValueError("key and value have seqlen 0: attention over no keys is undefined")
    else:
        q, k, v = _launchable(q), _launchable(k), _launchable(v)
        o = out if _launchable(out) is out else torch.empty_like(q, memory_format=torch.contiguous_format)
        a = _Args()
        a.q, a.k, a.v, a.o, a.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
        a.batch, a.heads_q, a.heads_kv, a.seqlen_q, a.seqlen_k, a.head_dim = B, Hq, Hkv, Lq, Lk, D
        for field, t in (("q_stride", q), ("k_stride", k), ("v_stride", v), ("o_stride", o)):
            getattr(a, field)[:] = list(t.stride()[:3])
        dt = TT_DTYPE_FP16 if q.dtype == torch.float16 else TT_DTYPE_BF16
        a.dtype = dt
        a.causal = 1 if is_causal else 0
        if scale is None:
            a.scale = 0.0  # the library's default: 1/sqrt(D)
        else:
            scale = float(scale)
            if not math.isfinite(scale):
                raise ValueError(f"scale must be finite, got {scale}")
            # 0 means "default" in the C ABI; a zero scale (uniform attention)
            # is the same as one so small that every exp() rounds to 1
            a.scale = scale if scale != 0.0 else 1e-30
        cfg = None
        if config is not None:
            cfg = _config_struct(config, D, q.dtype, is_causal, Lq, Lk)
            a.config = ctypes.pointer(cfg)
        a.stream = torch.cuda.current_stream(q.device).cuda_stream
        err = ctypes.create_string_buffer(1024)
        rc = _load().tt_sdpa_fwd(ctypes.byref(a), err, len(err))
        if rc < 0:
            _raise(rc, err, "tiletune.sdpa")
        if o is not out:
            out.copy_(o)  # an `out` the kernel cannot write in place
    if squeeze:
        out, lse = out.squeeze(0), lse.squeeze(0)
    return (out, lse) if return_lse else out


# Inference entry points (KV cache, varlen) in flash-attn's terms.
from .inference import flash_attn_with_kvcache, flash_attn_varlen_func  # noqa: E402
