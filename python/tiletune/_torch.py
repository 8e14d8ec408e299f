"""tiletune.sdpa for PyTorch: the eager path, the torch.library op
(tiletune::sdpa) that torch.compile traces, and the switch that routes
F.scaled_dot_product_attention to tiletune.

The eager path keeps a plan per call shape (shapes, strides, dtypes,
devices, flags): the checks, the launch arguments but the pointers and the
stream, and the config with why it was chosen. A call whose shape has a
plan reads a few tensor attributes, allocates the output and launches."""

import contextlib
import ctypes
import math
import os
import sys
import threading
import time
import warnings
from collections import Counter
from typing import Optional

import torch
import torch.nn.functional as F

from . import _lib
from ._lib import TT_DTYPE_BF16, TT_DTYPE_FP16, TT_SEQLEN_MAX, HEAD_DIMS, _Args

_DTYPES = {torch.float16: TT_DTYPE_FP16, torch.bfloat16: TT_DTYPE_BF16}
_FORWARD_ONLY = ("tiletune.sdpa is forward-only (the kernel has no backward), and {what} requires "
                 "grad while grad mode is enabled: run it under torch.no_grad() or "
                 "torch.inference_mode(), or detach the inputs")
# Answers that are not exact are asked again after this long, as
# libtiletune's cache does: a key tuned meanwhile gets its new config.
_REASK_S = 1.0


# ---- checks -----------------------------------------------------------------------------

def _check_tensors(q, k, v, enable_gqa):
    for name, t in (("query", q), ("key", k), ("value", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, not {type(t).__name__}")
    for name, t in (("query", q), ("key", k), ("value", v)):
        if t.device.type not in ("cuda", "meta"):
            raise TypeError(f"{name} is on {t.device}: tiletune.sdpa needs CUDA tensors")
        if t.dtype not in _DTYPES:
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


def _check_supported(q, k):
    """What the kernel takes, past what attention itself needs."""
    if q.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"head_dim {q.shape[-1]} is not supported: tiletune takes "
                         f"{', '.join(map(str, HEAD_DIMS))}")
    if k.shape[-2] == 0 and q.numel() != 0:
        raise ValueError("key and value have seqlen 0: attention over no keys is undefined")


def _check_args(query, key, value, attn_mask, dropout_p, scale):
    """What the kernel does not do, named by its argument; and the
    forward-only rule. Runs on every call (cheap), traced or eager."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, not {type(t).__name__}")
    if attn_mask is not None:
        hint = (" (tiletune.sdpa takes torch's argument order: query, key, value, attn_mask, "
                "dropout_p, is_causal, scale, enable_gqa)") if isinstance(attn_mask, (bool, int, float)) else ""
        raise ValueError("attn_mask is not supported by tiletune's kernel: pass attn_mask=None "
                         "(is_causal=True for a causal mask), or call "
                         f"torch.nn.functional.scaled_dot_product_attention{hint}")
    if dropout_p != 0.0:
        raise ValueError(f"dropout_p={dropout_p}: tiletune's kernel has no dropout; pass "
                         "dropout_p=0.0 (as in eval mode)")
    if scale is not None and not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be None or a number, not {type(scale).__name__}")
    if torch.is_grad_enabled():
        for name, t in (("query", query), ("key", key), ("value", value)):
            if isinstance(t, torch.Tensor) and t.requires_grad:
                raise RuntimeError(_FORWARD_ONLY.format(what=name))


# ---- the eager path -----------------------------------------------------------------------

def _in_place(t):
    """Whether the kernel reads t in place, pointer aside: the last dim
    contiguous, every other stride a non-negative multiple of 8 elements."""
    s = t.stride()
    return s[-1] == 1 and all(x % 8 == 0 and x >= 0 for x in s[:-1])


def _launchable(t):
    """t itself if the kernel can read it in place (16-byte aligned too),
    else a contiguous copy: any strided input works, as in torch."""
    return t if _in_place(t) and t.data_ptr() % 16 == 0 else t.contiguous()


def _strides3(t):
    """(batch, head, row) strides; a 3-D tensor is one batch."""
    s = t.stride()
    return (0,) + tuple(s[:2]) if t.dim() == 3 else tuple(s[:3])


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream(index):
    if _raw_stream is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(index).cuda_stream


class _Plan:
    """What does not change between two calls of one shape."""
    __slots__ = ("empty", "fast", "template", "lse_shape", "dev", "key", "cfg", "cfg_ptr",
                 "explicit", "negate", "scale", "choice")


class _Choice:
    __slots__ = ("cfg", "ptr", "why", "expires", "logged", "tuned", "size")


_plans = {}
_choices = {}  # (lookup key fields, device, (batch, query heads)) -> _Choice
_logged = set()
_stats = Counter()
_tls = threading.local()


def _err_buf():
    b = getattr(_tls, "err", None)
    if b is None:
        b = _tls.err = ctypes.create_string_buffer(1024)
    return b


def _log(text):
    if os.environ.get("TILETUNE_LOG", "") not in ("", "0"):
        sys.stderr.write(f"tiletune: {text}\n")
        sys.stderr.flush()


def _key_text(lkey, dev):
    return (f"{'fp16' if lkey[0] == TT_DTYPE_FP16 else 'bf16'} hdim={lkey[1]} causal={lkey[2]} "
            f"seqlen_q={lkey[3]} seqlen_k={lkey[4]}" + (f" group={lkey[5]}" if lkey[5] > 1 else "") +
            f" on cuda:{dev}")


def _choose(lkey, dev, size=None):
    """The config for a key on a device: the daemon's tuned one (exact or
    nearest), else the device's built-in default for a call of `size`
    (batch, query heads), with the reason. As tt_sdpa_fwd chooses with no
    config given, but done once per key (and call size) here (again
    after _REASK_S when the answer was not exact). The default may follow
    the size (tt_sdpa_default_config_at: a chunk that fills the GPU runs a
    dense family); a plan is one shape, so this is one choice a plan."""
    ch = _choices.get((lkey, dev, size))
    if ch is not None and ch.expires == 0:
        return ch
    now = time.monotonic()
    if ch is not None and now < ch.expires:
        return ch
    dtype, hdim, causal, lq, lk, group = lkey
    # the GQA group is part of the key: decode and chunk schedules pack it
    key = _lib._key(hdim, "fp16" if dtype == TT_DTYPE_FP16 else "bf16", causal, lq, lk,
                    rev=_lib.revision(), group=group)
    cfg, why, expires, tuned = None, None, now + _REASK_S, False
    if lq > TT_SEQLEN_MAX or lk > TT_SEQLEN_MAX:
        why = f"default: seqlens over the tuner's range ({TT_SEQLEN_MAX})"
    else:
        try:
            ans = _lib._lookup_key(key)
        except ValueError as e:
            why = f"default: the key was refused ({e})"
        else:
            if ans.fallback or ans.match == "default":
                why = f"default: {ans.reason}"
            else:
                cfg, why, tuned = _lib._parse(ans.config), f"{ans.match}: {ans.reason}", True
                if ans.match == "exact":
                    expires = 0
    if cfg is None:
        cfg = _lib._device_default(key, dev, *(size or (0, 0)))
        why += " (this device's built-in default)"
    if ch is None:
        ch = _Choice()
        ch.logged = None
    ch.cfg, ch.why, ch.expires, ch.tuned, ch.size = cfg, why, expires, tuned, size
    ch.ptr = ctypes.pointer(cfg)
    _choices[(lkey, dev, size)] = ch
    _stats["lookups"] += 1
    _note(ch, lkey, dev)
    return ch


def _note(ch, lkey, dev):
    """TILETUNE_LOG: one line per key per process, again only if its config
    changes."""
    text = _lib.format_config(ch.cfg)
    if ch.logged != text:
        ch.logged = text
        _log(f"{_key_text(lkey, dev)}: {text} ({ch.why})")


def _refused(ch, lkey, dev, msg):
    """The tuned config did not fit this device (a record from another GPU
    model or an older schedule): the device's default from now on."""
    dtype, hdim, causal, lq, lk, group = lkey
    key = _lib._key(hdim, "fp16" if dtype == TT_DTYPE_FP16 else "bf16", causal, lq, lk, group=group)
    ch.cfg = _lib._device_default(key, dev, *(ch.size or (0, 0)))
    ch.ptr = ctypes.pointer(ch.cfg)
    ch.why = f"default: the tuned config was refused on this device ({msg})"
    ch.expires = 0
    ch.tuned = False
    _note(ch, lkey, dev)


def _make_plan(q, k, v, is_causal, scale, config):
    p = _Plan()
    p.empty = q.numel() == 0
    B = q.shape[0] if q.dim() == 4 else 1
    Hq, Lq, D = q.shape[-3:]
    Hkv, Lk = k.shape[-3], k.shape[-2]
    p.lse_shape = q.shape[:-1]
    p.dev = q.device.index if q.device.index is not None else torch.cuda.current_device()
    p.key = (_DTYPES[q.dtype], D, 1 if is_causal else 0, Lq, Lk, max(1, Hq // max(1, Hkv)))
    p.explicit = config is not None
    p.cfg = _lib._parse(config) if config is not None else None
    p.cfg_ptr = ctypes.pointer(p.cfg) if p.cfg is not None else None
    if p.explicit and ("explicit", p.key, p.dev, config) not in _logged:
        _logged.add(("explicit", p.key, p.dev, config))
        _log(f"{_key_text(p.key, p.dev)}: {config} (the config= argument)")
    p.negate = scale is not None and scale < 0
    if scale is None:
        s = 0.0  # the library's default: 1/sqrt(D)
    else:
        s = abs(float(scale))
        if not math.isfinite(s):
            raise ValueError(f"scale must be finite, got {scale}")
        # 0 means "default" in the C ABI; a zero scale (uniform attention) is
        # the same as one so small that every exp() rounds to 1
        s = s if s != 0.0 else 1e-30
    p.scale = s
    a = _Args()
    a.batch, a.heads_q, a.heads_kv, a.seqlen_q, a.seqlen_k, a.head_dim = B, Hq, Hkv, Lq, Lk, D
    a.dtype = _DTYPES[q.dtype]
    a.causal = 1 if is_causal else 0
    a.scale = s
    # The output is allocated like the query (as torch does); its strides
    # are a function of the query's, so one probe tells them for the shape.
    o = torch.empty_like(q, device="meta")
    p.fast = not p.negate and all(_in_place(t) for t in (q, k, v, o))
    if p.fast:
        for field, t in (("q_stride", q), ("k_stride", k), ("v_stride", v), ("o_stride", o)):
            getattr(a, field)[:] = _strides3(t)
    p.template = bytes(a)
    # the key's config (shared by the plans of one key; refreshed in place)
    p.choice = None if p.explicit or p.empty else _choose(p.key, p.dev, (B, Hq))
    return p


def _plan_for(q, k, v, is_causal, scale, enable_gqa, config):
    # key's and value's devices are left to tt_sdpa_fwd, which checks every
    # pointer's device on each call; dtypes it cannot see, so they are here
    pk = (q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype,
          v.dtype, q.device, is_causal, scale, enable_gqa, config)
    p = _plans.get(pk)
    if p is None:
        _check_tensors(q, k, v, enable_gqa)
        _check_supported(q, k)
        if q.device.type != "cuda":
            raise TypeError(f"query is on {q.device}: tiletune.sdpa needs CUDA tensors")
        p = _make_plan(q, k, v, is_causal, scale, config)
        if len(_plans) >= 4096:  # shapes of a long-running server: bounded
            _plans.clear()
        _plans[pk] = p
        _stats["plans"] += 1
    return p


def _launch(p, a, cfg_choice):
    """tt_sdpa_fwd with the plan's config (explicit, or chosen for the key);
    a tuned config the device refuses falls back to the device default."""
    lib = _lib._lib
    ch = cfg_choice
    a.config = p.cfg_ptr if ch is None else ch.ptr
    err = _err_buf()
    rc = lib.tt_sdpa_fwd(ctypes.byref(a), err, 1024)
    if rc < 0 and ch is not None and ch.tuned and rc in (_lib._ERR_INVAL, _lib._ERR_RANGE):
        # checked before any launch: nothing ran; the same call with the
        # device default tells whether the config or the arguments are bad
        msg = err.value.decode(errors="replace")
        _refused(ch, p.key, p.dev, msg)
        a.config = ch.ptr
        rc = lib.tt_sdpa_fwd(ctypes.byref(a), err, 1024)
    if rc < 0:
        _lib._raise(rc, err, "tiletune.sdpa")


def _run(q, k, v, is_causal=False, scale=None, enable_gqa=False, config=None,
         return_lse=False, out=None):
    """The eager implementation (real CUDA tensors)."""
    p = _plan_for(q, k, v, is_causal, scale, enable_gqa, config)
    _stats["calls"] += 1
    if out is not None:
        if not isinstance(out, torch.Tensor) or out.shape != q.shape or out.dtype != q.dtype \
                or out.device != q.device:
            raise ValueError("out must be a tensor of query's shape, dtype and device")
    if p.empty:
        o = torch.empty_like(q) if out is None else out
        lse = torch.empty(p.lse_shape, dtype=torch.float32, device=q.device)
        return (o, lse) if return_lse else o
    ch = p.choice
    if ch is not None and ch.expires and time.monotonic() >= ch.expires:
        _choose(p.key, p.dev, ch.size)  # asks again; updates ch
    lse = torch.empty(p.lse_shape, dtype=torch.float32, device=q.device) if return_lse else None
    qp, kp, vp = q.data_ptr(), k.data_ptr(), v.data_ptr()
    if p.fast and out is None and not (qp | kp | vp) & 15:
        o = torch.empty_like(q)
        a = _Args.from_buffer_copy(p.template)
        a.q, a.k, a.v, a.o = qp, kp, vp, o.data_ptr()
        if lse is not None:
            a.lse = lse.data_ptr()
        a.stream = _stream(p.dev)
        _launch(p, a, ch)
        return (o, lse) if return_lse else o
    # The general path: inputs the kernel cannot read in place are copied
    # (any strided input works, as in torch); a negative scale runs as a
    # positive one on the negated query (the kernel takes the row maximum
    # before scaling).
    _stats["slow_calls"] += 1
    # laid out like the query as given (as the fake implementation says)
    o = torch.empty_like(q) if out is None else out
    if p.negate:
        q = torch.neg(q)
    q, k, v = (_launchable(t) for t in (q, k, v))
    dst = o if _in_place(o) and o.data_ptr() % 16 == 0 else \
        torch.empty_like(q, memory_format=torch.contiguous_format)
    a = _Args.from_buffer_copy(p.template)
    a.q, a.k, a.v, a.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), dst.data_ptr()
    for field, t in (("q_stride", q), ("k_stride", k), ("v_stride", v), ("o_stride", dst)):
        getattr(a, field)[:] = _strides3(t)
    if lse is not None:
        a.lse = lse.data_ptr()
    a.stream = _stream(p.dev)
    _launch(p, a, ch)
    if dst is not o:
        o.copy_(dst)
    return (o, lse) if return_lse else o


def flush():
    """Forget the plans and configs chosen so far and the client's cached
    answers: the next call of each shape asks the daemon again (e.g. after
    a tune)."""
    _plans.clear()
    _choices.clear()
    _lib.flush_client()


# ---- the torch op ------------------------------------------------------------------------

_OP_OK = hasattr(torch, "library") and hasattr(torch.library, "custom_op")


def _fake_out(query, key, value, enable_gqa):
    _check_tensors(query, key, value, enable_gqa)
    _check_supported(query, key)
    return torch.empty_like(query)


if _OP_OK:
    @torch.library.custom_op("tiletune::sdpa", mutates_args=(), device_types="cuda")
    def _op_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 is_causal: bool = False, scale: Optional[float] = None, enable_gqa: bool = False,
                 config: Optional[str] = None) -> torch.Tensor:
        return _run(query, key, value, is_causal, scale, enable_gqa, config)

    @_op_sdpa.register_fake
    def _(query, key, value, is_causal=False, scale=None, enable_gqa=False, config=None):
        return _fake_out(query, key, value, enable_gqa)

    @torch.library.custom_op("tiletune::sdpa_lse", mutates_args=(), device_types="cuda")
    def _op_sdpa_lse(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     is_causal: bool = False, scale: Optional[float] = None,
                     enable_gqa: bool = False,
                     config: Optional[str] = None) -> tuple[torch.Tensor, torch.Tensor]:
        return _run(query, key, value, is_causal, scale, enable_gqa, config, return_lse=True)

    @_op_sdpa_lse.register_fake
    def _(query, key, value, is_causal=False, scale=None, enable_gqa=False, config=None):
        o = _fake_out(query, key, value, enable_gqa)
        return o, query.new_empty(query.shape[:-1], dtype=torch.float32)

    def _forward_only(ctx, *grads):
        raise RuntimeError("tiletune::sdpa has no backward: the kernel is forward-only")

    for _o in (_op_sdpa, _op_sdpa_lse):
        _o.register_autograd(_forward_only)


def _find_is_compiling():
    fn = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if fn is not None:
        return fn
    try:
        from torch._dynamo import is_compiling
        return is_compiling
    except ImportError:  # torch without torch.compile
        return lambda: False


_is_compiling = _find_is_compiling()
_dispatch_depth = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)


def _through_op(q):
    """Traced (torch.compile, export), a tensor subclass (fake, functional),
    a dispatch mode active, or meta tensors: go through the registered op,
    which these understand (its fake implementation gives the shapes). A
    plain eager call skips the dispatcher's cost."""
    return _is_compiling() or type(q) is not torch.Tensor or _dispatch_depth() > 0 or q.is_meta


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
         enable_gqa=False, *, config=None, return_lse=False, out=None):
    """torch.nn.functional.scaled_dot_product_attention with tiletune's
    kernel: same arguments in the same order, forward only.

    query [B, Hq, Lq, D], key/value [B, Hkv, Lk, D] (or without B), fp16 or
    bf16 CUDA tensors with any strides (a [B, L, H, D] tensor's
    .transpose(1, 2) is read in place); D in 32, 64, 96, 128, 256.
    attn_mask must be None and dropout_p 0 (a clear error otherwise); inputs
    that require grad while grad mode is on are refused (forward-only).
    is_causal: query i sees keys j <= i (torch's top-left alignment).
    scale: None (1/sqrt(D)) or any finite number, negative included.
    enable_gqa: Hq may be a multiple of Hkv.
    config: None (the tuned config for this key from tiletuned, else the
    device's built-in default), canonical text, or a dict of knobs over
    the default (eager only; under torch.compile pass text).
    return_lse: also return the log-sum-exp per row, fp32 [B, Hq, Lq].
    out: optional tensor of query's shape and dtype to write the result into.
    The kernel runs on torch's current stream for the tensors' device."""
    _check_args(query, key, value, attn_mask, dropout_p, scale)
    if config is not None and not isinstance(config, str):
        if _is_compiling():
            raise TypeError("under torch.compile, pass config as canonical text "
                            "(tiletune.config_text(dict, ...) makes it)")
        config = _lib.config_text(config, query.shape[-1], query.dtype, is_causal,
                                  query.shape[-2], key.shape[-2])
    if _through_op(query):
        if not _OP_OK:
            raise RuntimeError(f"torch {torch.__version__} has no torch.library.custom_op (2.4+): "
                               "tiletune.sdpa runs eagerly only")
        scale = None if scale is None else float(scale)
        is_causal, enable_gqa = bool(is_causal), bool(enable_gqa)  # the schema's types
        if return_lse:
            o, lse = torch.ops.tiletune.sdpa_lse(query, key, value, is_causal, scale, enable_gqa,
                                                 config)
        else:
            o, lse = torch.ops.tiletune.sdpa(query, key, value, is_causal, scale, enable_gqa,
                                             config), None
        if out is not None:
            out.copy_(o)
            o = out
        return (o, lse) if return_lse else o
    return _run(query, key, value, is_causal, scale, enable_gqa, config, return_lse, out)


# ---- the switch ---------------------------------------------------------------------------

class AttentionCounts:
    """Calls of F.scaled_dot_product_attention under a tiletune.attention()
    block: how many ran on tiletune, how many on torch, and why those did."""

    def __init__(self):
        self.tiletune = 0
        self.torch = 0
        self.reasons = Counter()

    def __repr__(self):
        return (f"AttentionCounts(tiletune={self.tiletune}, torch={self.torch}, "
                f"reasons={dict(self.reasons)})")


_switch_lock = threading.Lock()
_active = []  # the AttentionCounts of the blocks now open
_torch_sdpa = None  # F.scaled_dot_product_attention as it was before the first block
_totals = AttentionCounts()


def _why_torch(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """None if tiletune runs this call, else the reason (a short word)."""
    if attn_mask is not None:
        return "attn_mask"
    if dropout_p != 0.0:
        return "dropout"
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        return "not tensors"
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return "requires_grad"
    if not (q.device.type in ("cuda", "meta") and q.device == k.device == v.device):
        return "device"
    if q.dtype not in _DTYPES or not (q.dtype == k.dtype == v.dtype):
        return "dtype"
    if not (q.dim() == k.dim() == v.dim()) or q.dim() not in (3, 4):
        return "rank"
    if q.shape[-1] not in HEAD_DIMS:
        return "head_dim"
    if k.shape != v.shape or q.shape[-1] != k.shape[-1] or q.shape[:-3] != k.shape[:-3]:
        return "shape"
    hq, hkv = q.shape[-3], k.shape[-3]
    if hq != hkv and (not enable_gqa or hkv == 0 or hq % hkv):
        return "heads"
    if k.shape[-2] == 0:
        return "no keys"
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale)):
        return "scale"
    return None


def _count(ran_tiletune, why=None):
    with _switch_lock:
        for c in _active + [_totals]:
            if ran_tiletune:
                c.tiletune += 1
            else:
                c.torch += 1
                c.reasons[why] += 1


def _switched(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False, **kwargs):
    why = "arguments" if kwargs else \
        _why_torch(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    compiling = _is_compiling()
    if why is None:
        if compiling:
            return sdpa(query, key, value, None, 0.0, is_causal, scale, enable_gqa)
        try:
            out = sdpa(query, key, value, None, 0.0, is_causal, scale, enable_gqa)
        except (_lib.TileTuneError, ValueError) as e:
            why = "error"
            if (why, str(e)) not in _logged:
                _logged.add((why, str(e)))
                warnings.warn(f"tiletune.attention(): ran torch's attention instead: {e}",
                              RuntimeWarning, stacklevel=2)
        else:
            _count(True)
            return out
    if not compiling:
        _count(False, why)
        if ("torch", why) not in _logged:
            _logged.add(("torch", why))
            _log(f"F.scaled_dot_product_attention ran on torch: {why}")
    extra = dict(kwargs)
    if enable_gqa:
        extra["enable_gqa"] = True
    return _torch_sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                       is_causal=is_causal, scale=scale, **extra)


@contextlib.contextmanager
def attention():
    """Within the block, torch.nn.functional.scaled_dot_product_attention
    runs on tiletune where it can and on torch where it cannot (a mask,
    dropout, fp32, an unsupported head dim, inputs that require grad),
    counting both: `with tiletune.attention() as counts: ...` then
    counts.tiletune, counts.torch, counts.reasons. The switch is process-wide
    while a block is open (every thread's calls go through it); blocks may
    nest. Calls compiled by torch.compile inside a block are routed but not
    counted."""
    global _torch_sdpa
    counts = AttentionCounts()
    with _switch_lock:
        if not _active:
            _torch_sdpa = F.scaled_dot_product_attention
            F.scaled_dot_product_attention = _switched
        _active.append(counts)
    try:
        yield counts
    finally:
        with _switch_lock:
            _active.remove(counts)
            if not _active:
                F.scaled_dot_product_attention = _torch_sdpa


def stats():
    """Counters of the binding: eager calls, plans made, calls on the general
    (copying) path, configs chosen; and the switch's totals."""
    out = {k: _stats[k] for k in ("calls", "plans", "slow_calls", "lookups")}
    out["switch_tiletune"] = _totals.tiletune
    out["switch_torch"] = _totals.torch
    out["switch_reasons"] = dict(_totals.reasons)
    return out
