"""The C ABI of libtiletune (include/tiletune.h) through ctypes, and what
needs no torch: loading the library, configs, the variant space, lookups
and the client's counters."""

import ctypes
import ctypes.util
import glob
import os
import threading
from typing import NamedTuple

TT_DTYPE_FP16, TT_DTYPE_BF16 = 0, 1
TT_ID_MAX = 33
TT_CONFIG_TEXT_MAX = 160
TT_FALLBACK = 1
TT_SEQLEN_MAX = 16 * 1024 * 1024
HEAD_DIMS = (32, 64, 96, 128, 256)
_ERR_INVAL, _ERR_UNSUPPORTED, _ERR_NOGPU, _ERR_RANGE = -1, -7, -8, -15
_MATCH_NAMES = ("exact", "nearest", "default")
# The daemon's socket when neither the caller nor $TILETUNE_SOCKET names
# one (src/client/conn.h).
SOCKET_DEFAULT = "/run/tiletune/tiletune.sock"


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


class _KeyV2(ctypes.Structure):
    """tt_key_v2: tt_key's fields, then the GQA group."""
    _fields_ = _Key._fields_ + [("group", ctypes.c_int32), ("reserved", ctypes.c_int32 * 7)]


class _LookupResult(ctypes.Structure):
    _fields_ = [("config", _Config), ("match", ctypes.c_int32), ("tflops", ctypes.c_double),
                ("seqlen_q", ctypes.c_int64), ("seqlen_k", ctypes.c_int64),
                ("group", ctypes.c_int32), ("reserved32", ctypes.c_int32),
                ("reserved", ctypes.c_int64 * 3)]


class _Stats(ctypes.Structure):
    _fields_ = [("cache_hits", ctypes.c_uint64), ("daemon_answers", ctypes.c_uint64),
                ("fallbacks", ctypes.c_uint64), ("connects", ctypes.c_uint64),
                ("failures", ctypes.c_uint64), ("lookups", ctypes.c_uint64),
                ("key_errors", ctypes.c_uint64), ("last_failure", ctypes.c_int64),
                ("reserved", ctypes.c_uint64 * 8)]


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
_load_lock = threading.Lock()


def _candidates():
    """$TILETUNE_LIB (an override), the copy bundled in this package (a
    wheel), a build directory of the source tree, the loader's path."""
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
    with _load_lock:
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
            _lib_path = path
            _lib = lib
            return lib
    raise OSError("libtiletune.so not found: install the package (pip install .) or set "
                  f"TILETUNE_LIB to its path (tried: {', '.join(tried) or 'nothing'}; "
                  f"{'; '.join(errors)})")


def _declare(lib):
    err_t = [ctypes.c_char_p, ctypes.c_size_t]
    P = ctypes.POINTER
    sigs = {
        "tt_sdpa_fwd": ([P(_Args)] + err_t, ctypes.c_int),
        "tt_sdpa_variants_v2": ([P(_KeyV2), ctypes.c_int, P(_Config), ctypes.c_size_t,
                                 P(ctypes.c_size_t)] + err_t, ctypes.c_int),
        "tt_kernel_revision": ([ctypes.c_char_p], ctypes.c_int),
        "tt_config_default": ([P(_Key), P(_Config)], ctypes.c_int),
        "tt_sdpa_default_config": ([P(_Key), ctypes.c_int, P(_Config)] + err_t, ctypes.c_int),
        "tt_sdpa_default_config_v2": ([P(_KeyV2), ctypes.c_int, P(_Config)] + err_t, ctypes.c_int),
        "tt_sdpa_default_config_at": ([P(_KeyV2), ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
                                       P(_Config)] + err_t, ctypes.c_int),
        "tt_config_default_v2": ([P(_KeyV2), P(_Config)], ctypes.c_int),
        "tt_config_format": ([P(_Config), ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int),
        "tt_config_parse": ([ctypes.c_char_p, P(_Config)], ctypes.c_int),
        "tt_strerror": ([ctypes.c_int], ctypes.c_char_p),
        "tt_client_open": ([ctypes.c_char_p, ctypes.c_int, P(ctypes.c_void_p)], ctypes.c_int),
        "tt_client_close": ([ctypes.c_void_p], None),
        "tt_lookup": ([ctypes.c_void_p, P(_Key), P(_LookupResult)], ctypes.c_int),
        "tt_lookup_v2": ([ctypes.c_void_p, P(_KeyV2), P(_LookupResult)], ctypes.c_int),
        "tt_client_get_stats": ([ctypes.c_void_p, P(_Stats)], ctypes.c_int),
        "tt_client_flush": ([ctypes.c_void_p], None),
    }
    for name, (args, res) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = res


def library_path():
    """The path of the libtiletune.so in use (loading it if needed)."""
    _load()
    return _lib_path


def strerror(code):
    return _load().tt_strerror(code).decode()


def _raise(code, err, what):
    msg = err.value.decode(errors="replace") if err is not None and err.value else ""
    if not msg:
        msg = strerror(code)
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


CAUSAL_NONE, CAUSAL_TOP_LEFT, CAUSAL_BOTTOM_RIGHT = 0, 1, 2
_CAUSAL_NAMES = {"none": 0, "top_left": 1, "bottom_right": 2}


def _causal_code(causal):
    """False/True (True: PyTorch's is_causal, top-left), 0/1/2, or "none",
    "top_left", "bottom_right" (flash-attn's: query i sees keys
    j <= i + seqlen_k - seqlen_q)."""
    if isinstance(causal, str):
        if causal not in _CAUSAL_NAMES:
            raise ValueError(f"causal must be one of {sorted(_CAUSAL_NAMES)}, not {causal!r}")
        return _CAUSAL_NAMES[causal]
    if isinstance(causal, bool) or causal is None:
        return 1 if causal else 0
    if causal in (0, 1, 2):
        return int(causal)
    raise ValueError(f"causal must be False, True, 0, 1, 2 or a name, not {causal!r}")


def _key(head_dim, dtype, causal, seqlen_q, seqlen_k, gpu="", rev="", group=None):
    """A tt_key, or with a group a tt_key_v2."""
    key = _Key() if group is None else _KeyV2()
    if group is not None:
        key.group = int(group)
    key.dtype = _dtype_code(dtype)
    key.head_dim = int(head_dim)
    key.causal = _causal_code(causal)
    key.seqlen_q = int(seqlen_q)
    key.seqlen_k = int(seqlen_k if seqlen_k is not None else seqlen_q)
    key.gpu = gpu.encode()
    key.rev = rev.encode()
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
    """Canonical text -> dict of every knob (symbolic values, e.g.
    layout='swizzle', as text). Knobs the text leaves out because they are 0
    (split_ctas) are in the dict as 0, so config_text(parse_config(t)) is t:
    merged over the key's portable default they would take its value."""
    cfg = _parse(text)  # validates
    out = {}
    for item in str(text).split(","):
        name, value = item.split("=", 1)
        out[name] = int(value) if value.lstrip("-").isdigit() else value
    for name, _ in _Config._fields_:
        if name != "reserved" and name not in out:
            out[name] = getattr(cfg, name)
    return out


def default_config(head_dim, dtype, causal=False, seqlen_q=1024, seqlen_k=None, device=None, group=1,
                   batch=None, heads=None):
    """The built-in default config for a key, as canonical text. Without a
    device: the portable default (valid on every sm_80+ GPU, what a daemon
    answers when nothing is tuned); with a device (an ordinal, "cuda:N" or a
    torch.device): the one sdpa() runs there when nothing is tuned (sm_90
    has its own). group: query heads per K/V head (GQA); decode and chunk
    defaults pack the group's rows into one tile. batch and heads (query
    heads), with a device: the default of a call that size (a chunk that
    fills the GPU runs a dense family on sm_90, and a decode call of more
    (batch, K/V head) units than SMs the tile that fits two CTAs an SM;
    the key has no batch)."""
    key = _key(head_dim, dtype, causal, seqlen_q, seqlen_k, group=group)
    if batch is not None or heads is not None:
        if device is None or batch is None or heads is None:
            raise ValueError("batch and heads go together, with a device")
        return format_config(_device_default(key, _device_index(device), batch, heads))
    if device is None:
        cfg = _Config()
        rc = _load().tt_config_default_v2(ctypes.byref(key), ctypes.byref(cfg))
        if rc < 0:
            _raise(rc, None, "default_config")
        return format_config(cfg)
    return format_config(_device_default(key, _device_index(device)))


def _device_default(key, device, batch=0, heads=0):
    """The device's default for the key, for a call of batch x heads query
    heads (0: the key's own)."""
    cfg = _Config()
    err = ctypes.create_string_buffer(1024)
    if isinstance(key, _KeyV2):
        rc = _load().tt_sdpa_default_config_at(ctypes.byref(key), device, int(batch), int(heads),
                                               ctypes.byref(cfg), err, len(err))
    else:
        rc = _load().tt_sdpa_default_config(ctypes.byref(key), device, ctypes.byref(cfg), err, len(err))
    if rc < 0:
        _raise(rc, err, "default_config")
    return cfg


def config_text(config, head_dim, dtype, causal=False, seqlen_q=1024, seqlen_k=None):
    """A config given as canonical text or as a dict of knobs over the
    portable default for the key, as checked canonical text."""
    if isinstance(config, str):
        return format_config(_parse(config))
    if isinstance(config, dict):
        merged = parse_config(default_config(head_dim, dtype, causal, seqlen_q, seqlen_k))
        unknown = set(config) - set(merged)
        if unknown:
            raise ValueError(f"unknown config knobs {sorted(unknown)}; knobs are {list(merged)}")
        merged.update(config)
        return format_config(_parse(",".join(f"{k}={v}" for k, v in merged.items())))
    raise TypeError(f"config must be None, canonical text or a dict, not {type(config).__name__}")


def _config_struct(config, head_dim, dtype, causal, seqlen_q, seqlen_k):
    """A _Config from a _Config, canonical text or a dict of knobs."""
    if isinstance(config, _Config):
        return config
    return _parse(config_text(config, head_dim, dtype, causal, seqlen_q, seqlen_k))


def variants(head_dim, dtype, causal=False, seqlen_q=0, seqlen_k=None, device=None, group=1):
    """The variant space for a key on a CUDA device (default: torch's current
    one, else 0): every config the tuner measures, compiled (or taken from the
    cubin cache) and checked to fit the device without spills, as canonical
    text. seqlen 0 = no seqlen pruning. group: the query heads a K/V head
    serves (heads_q / heads_kv); the packed-row tiles follow seqlen_q x group,
    so a GQA key's space is its own."""
    device = _device_index(device)
    lib = _load()
    key = _key(head_dim, dtype, causal, seqlen_q, seqlen_k, group=group)
    fn = lib.tt_sdpa_variants_v2
    err = ctypes.create_string_buffer(1024)
    n = ctypes.c_size_t(0)
    rc = fn(ctypes.byref(key), device, None, 0, ctypes.byref(n), err, len(err))
    if rc < 0:
        _raise(rc, err, "variants")
    arr = (_Config * max(1, n.value))()
    rc = fn(ctypes.byref(key), device, arr, n.value, ctypes.byref(n), err, len(err))
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


_revision = None


def revision():
    """The kernel revision in use (hex hash of the kernel source)."""
    global _revision
    if _revision is None:
        buf = ctypes.create_string_buffer(TT_ID_MAX)
        rc = _load().tt_kernel_revision(buf)
        if rc < 0:
            _raise(rc, None, "revision")
        _revision = buf.value.decode()
    return _revision


def _current_device():
    try:
        import torch
        if torch.cuda.is_available():
            return torch.cuda.current_device()
    except ImportError:
        pass
    return 0


# ---- lookups through the process's client -------------------------------------------

def socket_path():
    """The daemon's socket this process asks: $TILETUNE_SOCKET, else the
    system one."""
    return os.environ.get("TILETUNE_SOCKET") or SOCKET_DEFAULT


_client_handle = None
_client_lock = threading.Lock()
# What tt_sdpa_fwd's own process client waits: a lookup on the launch path
# must not hold a kernel launch up for long when the daemon is slow.
_CLIENT_TIMEOUT_MS = 50


def _client():
    """The process's tt_client, opened once (it connects lazily, so opening
    never fails because the daemon is down)."""
    global _client_handle
    if _client_handle is None:
        with _client_lock:
            if _client_handle is None:
                h = ctypes.c_void_p()
                rc = _load().tt_client_open(None, _CLIENT_TIMEOUT_MS, ctypes.byref(h))
                if rc < 0:
                    _raise(rc, None, "tt_client_open")
                _client_handle = h
    return _client_handle


class Lookup(NamedTuple):
    """The answer to a lookup: the config, how it matched the key (exact,
    nearest, default), the measured TFLOP/s (0 without a record), the key
    (seqlen_q, seqlen_k) the record was tuned for, and where it came from."""
    match: str
    config: str
    tflops: float
    seqlen_q: int
    seqlen_k: int
    fallback: bool  # True: the daemon could not be asked; config is the built-in default
    reason: str     # in words: the daemon's answer, or why there was none
    group: int = 1  # the GQA group the record was tuned for


def _fallback_reason(stats):
    why = stats.last_failure
    if why:
        return f"no answer from the daemon at {socket_path()}: {strerror(why)}"
    return f"the daemon at {socket_path()} was busy with another thread's request"


def _lookup_key(key):
    """tt_lookup through the process's client -> Lookup; ValueError for a key
    the library refuses."""
    lib = _load()
    res = _LookupResult()
    fn = lib.tt_lookup_v2 if isinstance(key, _KeyV2) else lib.tt_lookup
    rc = fn(_client(), ctypes.byref(key), ctypes.byref(res))
    if rc < 0:
        _raise(rc, None, "lookup")
    match = _MATCH_NAMES[res.match] if 0 <= res.match < 3 else str(res.match)
    cfg = format_config(res.config)
    if rc == TT_FALLBACK:
        reason = _fallback_reason(_stats_struct())
    elif match == "default":
        reason = f"nothing tuned for this key at the daemon at {socket_path()}"
    else:
        where = "" if match == "exact" else \
            f" for seqlen_q={res.seqlen_q} seqlen_k={res.seqlen_k}" + \
            (f" group={res.group}" if res.group > 1 else "")
        reason = f"tuned{where} ({res.tflops:.1f} TFLOP/s), from the daemon at {socket_path()}"
    return Lookup(match, cfg, float(res.tflops), int(res.seqlen_q), int(res.seqlen_k),
                  rc == TT_FALLBACK, reason, max(int(res.group), 1))


def lookup(head_dim, dtype, causal=False, seqlen_q=1024, seqlen_k=None, gpu="", rev=None, group=1):
    """The config the daemon serves for a key, as the kernel would get it:
    through this process's client (its cache, else one round trip, else the
    built-in default within 50 ms). causal: False/True (top-left), 0/1/2 or
    "none"/"top_left"/"bottom_right"; group: query heads per K/V head (GQA).
    gpu: the GPU fingerprint ("" = the daemon's own GPU); rev: the kernel
    revision (None = this library's). Needs no GPU and no torch."""
    key = _key(head_dim, dtype, causal, seqlen_q, seqlen_k, gpu,
               revision() if rev is None else rev, group=group)
    return _lookup_key(key)


def _stats_struct():
    s = _Stats()
    rc = _load().tt_client_get_stats(_client(), ctypes.byref(s))
    if rc < 0:
        _raise(rc, None, "stats")
    return s


def client_stats():
    """The counters of this process's client (libtiletune's tt_client_stats):
    lookups, cache_hits, daemon_answers, fallbacks, connects, failures,
    key_errors; last_failure (why the latest fallbacks came, in words, or
    None) and last_failure_code (its TT_ERR_* value, or 0)."""
    s = _stats_struct()
    out = {name: int(getattr(s, name)) for name, _ in _Stats._fields_
           if name not in ("reserved", "last_failure")}
    out["last_failure"] = strerror(s.last_failure) if s.last_failure else None
    out["last_failure_code"] = int(s.last_failure)
    return out


def flush_client():
    """Drops the client's cached answers (the next lookups ask the daemon)."""
    if _client_handle is not None:
        _load().tt_client_flush(_client_handle)
