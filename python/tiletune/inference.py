"""Inference attention in flash-attn's terms: a KV cache (contiguous or
paged with a block table) and variable-length packed batches.

    out = tiletune.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens,
                                           block_table=table, causal=True)
    out = tiletune.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, causal=True)

Names, argument order and layouts are flash-attn's; `causal=True` is its
bottom-right alignment (query i sees keys j <= i + Lk - Lq). Arguments
flash-attn has and this kernel does not serve (appending to the cache,
rotary, windows, softcap, ALiBi, dropout) are refused with a clear error
rather than ignored. Both run family splitkv (libtiletune's
tt_sdpa_fwd_kvcache / tt_sdpa_fwd_varlen) on torch's current stream; a
contiguous cache of one length for all (cache_seqlens None or an int) runs
where tiletune.sdpa would, a dense family for a long chunk.

The lengths and page numbers on the device (cache_seqlens, block_table,
cu_seqlens_*) are read there and trusted, as flash-attn does: lengths are
clamped to the host's maxima, so a bad one never reads past the cache,
but it gives a wrong row, and a page number past k_cache is read where it
points. check_inputs=True (or TILETUNE_CHECK_INPUTS=1 in the environment)
checks them on the host first and raises ValueError naming the first bad
entry: it copies them to the host, a synchronization, for tests and
staging rather than a serving loop, and not under CUDA graph capture.
"""

import ctypes
import math
import os

from ._lib import _Config, _load, _raise, _parse, TT_DTYPE_FP16, TT_DTYPE_BF16

__all__ = ["flash_attn_with_kvcache", "flash_attn_varlen_func"]

# check_inputs=None follows the environment, read once at import
_CHECK_ENV = os.environ.get("TILETUNE_CHECK_INPUTS", "") not in ("", "0")

_i64 = ctypes.c_int64


class _KVArgs(ctypes.Structure):
    _fields_ = [("q", ctypes.c_void_p), ("k_cache", ctypes.c_void_p), ("v_cache", ctypes.c_void_p),
                ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p),
                ("cache_seqlens", ctypes.c_void_p), ("block_table", ctypes.c_void_p),
                ("batch", _i64), ("heads_q", _i64), ("heads_kv", _i64), ("seqlen_q", _i64),
                ("seqlen_k", _i64), ("head_dim", _i64), ("page_size", _i64), ("num_pages", _i64),
                ("max_pages", _i64), ("block_table_stride", _i64),
                ("q_stride", _i64 * 3), ("k_stride", _i64 * 3), ("v_stride", _i64 * 3),
                ("o_stride", _i64 * 3), ("lse_stride", _i64 * 2),
                ("dtype", ctypes.c_int32), ("causal", ctypes.c_int32), ("scale", ctypes.c_float),
                ("reserved0", ctypes.c_int32), ("config", ctypes.POINTER(_Config)),
                ("stream", ctypes.c_void_p), ("workspace", ctypes.c_void_p),
                ("workspace_bytes", ctypes.c_size_t), ("reserved", _i64 * 8)]


class _VarlenArgs(ctypes.Structure):
    _fields_ = [("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
                ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p),
                ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
                ("batch", _i64), ("heads_q", _i64), ("heads_kv", _i64), ("total_q", _i64),
                ("total_k", _i64), ("max_seqlen_q", _i64), ("max_seqlen_k", _i64), ("head_dim", _i64),
                ("q_stride", _i64 * 2), ("k_stride", _i64 * 2), ("v_stride", _i64 * 2),
                ("o_stride", _i64 * 2), ("lse_stride", _i64 * 2),
                ("dtype", ctypes.c_int32), ("causal", ctypes.c_int32), ("scale", ctypes.c_float),
                ("reserved0", ctypes.c_int32), ("config", ctypes.POINTER(_Config)),
                ("stream", ctypes.c_void_p), ("workspace", ctypes.c_void_p),
                ("workspace_bytes", ctypes.c_size_t), ("reserved", _i64 * 8)]


def _declare():
    lib = _load()
    if not getattr(lib, "_tt_inference_declared", False):
        err_t = [ctypes.c_char_p, ctypes.c_size_t]
        lib.tt_sdpa_fwd_kvcache.argtypes = [ctypes.POINTER(_KVArgs)] + err_t
        lib.tt_sdpa_fwd_kvcache.restype = ctypes.c_int
        lib.tt_sdpa_fwd_varlen.argtypes = [ctypes.POINTER(_VarlenArgs)] + err_t
        lib.tt_sdpa_fwd_varlen.restype = ctypes.c_int
        lib._tt_inference_declared = True
    return lib


def _refuse(name, value, default):
    if value != default and value is not None:
        raise NotImplementedError(f"tiletune: {name}={value!r} is not supported by the inference kernel "
                                  f"(only {name}={default!r})")


def _common(q, what):
    import torch
    if not isinstance(q, torch.Tensor) or not q.is_cuda:
        raise ValueError(f"{what}: q must be a CUDA tensor")
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"{what}: dtype {q.dtype} is not float16 or bfloat16")
    return TT_DTYPE_FP16 if q.dtype == torch.float16 else TT_DTYPE_BF16


def _rows_ok(t):
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all(s % 8 == 0 and s >= 0 for s in t.stride()[:-1])


def _launchable(t):
    return t if _rows_ok(t) else t.contiguous()


def _int32(t, name, device):
    import torch
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.device != device:
        raise ValueError(f"{name} must be an int32 tensor on {device}")
    return t.contiguous()


def _scale(softmax_scale):
    if softmax_scale is None:
        return 0.0
    s = float(softmax_scale)
    if not math.isfinite(s) or s < 0:
        raise ValueError(f"softmax_scale must be finite and >= 0, got {s}")
    return s if s != 0.0 else 1e-30


def _check_kvcache_lists(lens, capacity, table=None, page_size=0, num_pages=0):
    """A KV cache's per-sequence lengths and page numbers, as lists: lens
    (cache_seqlens, or None: every sequence holds `capacity` tokens) and
    table (block_table's rows, or None: contiguous). ValueError names the
    first entry the kernel would read wrong; pages past a sequence's last
    are not read, so they may hold anything (vLLM pads with them)."""
    if lens is not None:
        for b, n in enumerate(lens):
            if not 0 <= n <= capacity:
                raise ValueError(f"cache_seqlens[{b}] = {n}: not within 0..{capacity}, the tokens the cache holds")
    for b, row in enumerate(table or ()):
        n = capacity if lens is None else lens[b]
        used = -(-n // page_size)
        for i, pg in enumerate(row[:used]):
            if not 0 <= pg < num_pages:
                raise ValueError(f"block_table[{b}][{i}] = {pg}: not a page of k_cache (0..{num_pages - 1}); "
                                 f"sequence {b}'s {n} tokens read its first {used} entries")


def _check_varlen_lists(cu_q, cu_k, total_q, total_k, max_q, max_k):
    """A packed batch's cumulative lengths, as lists: each from 0,
    nondecreasing, within its tensor's rows, no sequence longer than its
    max_seqlen (the kernel sizes its grid by it and clamps longer ones).
    ValueError names the first bad entry."""
    for side, cu, total, most in (("q", cu_q, total_q, max_q), ("k", cu_k, total_k, max_k)):
        name = f"cu_seqlens_{side}"
        if cu[0] != 0:
            raise ValueError(f"{name}[0] = {cu[0]}: the first sequence starts at row 0")
        for b in range(len(cu) - 1):
            n = cu[b + 1] - cu[b]
            if n < 0:
                raise ValueError(f"{name} decreases at {b + 1}: {cu[b + 1]} after {cu[b]}")
            if n > most:
                raise ValueError(f"sequence {b} has {n} rows of {side} ({name}[{b + 1}] - {name}[{b}]), "
                                 f"more than max_seqlen_{side} = {most}")
        if cu[-1] > total:
            raise ValueError(f"{name}[{len(cu) - 1}] = {cu[-1]}: past {side}'s {total} rows")


def _checking(check_inputs):
    """Whether this call checks its device-side inputs on the host."""
    import torch
    on = _CHECK_ENV if check_inputs is None else bool(check_inputs)
    if on and torch.cuda.is_current_stream_capturing():
        if check_inputs:
            raise ValueError("check_inputs copies lengths and pages to the host: not under CUDA graph capture")
        return False  # the environment's setting gives way to a capture
    return on


def _config(config):
    if config is None:
        return None
    if isinstance(config, dict):
        config = ",".join(f"{k}={v}" for k, v in config.items())
    cfg = _parse(config)
    return ctypes.pointer(cfg)


def _launch(a, fn, what, dt, causal, causal_align, softmax_scale, config, dev):
    """Fills the fields both argument structs share and calls libtiletune."""
    import torch
    if causal_align not in ("bottom_right", "top_left"):
        raise ValueError("causal_align must be 'bottom_right' or 'top_left'")
    a.dtype = dt
    a.causal = (2 if causal_align == "bottom_right" else 1) if causal else 0
    a.scale = _scale(softmax_scale)
    cfg = _config(config)
    a.config = cfg
    a.stream = torch.cuda.current_stream(dev).cuda_stream
    err = ctypes.create_string_buffer(1024)
    rc = getattr(_declare(), fn)(ctypes.byref(a), err, len(err))
    if rc < 0:
        _raise(rc, err, what)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None,
                            block_table=None, softmax_scale=None, causal=False, window_size=(-1, -1),
                            softcap=0.0, rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False, config=None, causal_align="bottom_right",
                            check_inputs=None):
    """flash_attn.flash_attn_with_kvcache, forward only, reading the cache.

    q [batch, seqlen_q, heads_q, d]; k_cache / v_cache [batch, seqlen_cache,
    heads_kv, d], or paged [num_pages, page_size, heads_kv, d] with
    block_table int32 [batch, max_pages] (page_size a power of two);
    cache_seqlens: None, an int, or int32 [batch]. d in 32, 64, 128, 256.
    causal aligns bottom-right as flash-attn does; causal_align="top_left"
    gives PyTorch's is_causal instead. config: tiletune config text or dict
    (family splitkv); None = tuned or built-in. check_inputs: check
    cache_seqlens and block_table on the host first (module docstring).
    Returns out (and the log-sum-exp [batch, heads_q, seqlen_q] with
    return_softmax_lse)."""
    import torch
    for name, value, default in (("k", k, None), ("v", v, None), ("rotary_cos", rotary_cos, None),
                                 ("rotary_sin", rotary_sin, None), ("cache_batch_idx", cache_batch_idx, None),
                                 ("cache_leftpad", cache_leftpad, None), ("softcap", softcap, 0.0),
                                 ("alibi_slopes", alibi_slopes, None), ("num_splits", num_splits, 0)):
        _refuse(name, value, default)
    if tuple(window_size) != (-1, -1):
        raise NotImplementedError("tiletune: window_size (local attention) is not supported")
    dt = _common(q, "flash_attn_with_kvcache")
    if q.dim() != 4 or k_cache.dim() != 4 or v_cache.dim() != 4:
        raise ValueError("q, k_cache and v_cache must be 4-D (batch or pages, seqlen, heads, head_dim)")
    if k_cache.shape != v_cache.shape or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError("k_cache and v_cache must have one shape and q's dtype")
    B, Lq, Hq, D = q.shape
    Hkv = k_cache.shape[2]
    if k_cache.shape[3] != D:
        raise ValueError(f"head_dim of q ({D}) and the cache ({k_cache.shape[3]}) differ")
    dev = q.device
    a = _KVArgs()
    keep = []
    if block_table is not None:
        block_table = _int32(block_table, "block_table", dev)
        if block_table.dim() != 2 or block_table.shape[0] != B:
            raise ValueError("block_table must be int32 [batch, max_pages]")
        a.block_table = block_table.data_ptr()
        a.page_size = k_cache.shape[1]
        a.num_pages = k_cache.shape[0]
        a.max_pages = block_table.shape[1]
        a.block_table_stride = block_table.stride(0)
        Lk = a.max_pages * a.page_size
        keep.append(block_table)
    else:
        if k_cache.shape[0] != B:
            raise ValueError(f"k_cache batch {k_cache.shape[0]} != q batch {B} (cache_batch_idx is not supported)")
        Lk = k_cache.shape[1]
    if isinstance(cache_seqlens, int) and not 0 <= cache_seqlens <= Lk:
        raise ValueError(f"cache_seqlens = {cache_seqlens}: not within 0..{Lk}, the tokens the cache holds")
    if isinstance(cache_seqlens, int) and block_table is None and 0 < cache_seqlens <= Lk:
        # one length for all: the cache's first rows, a dense problem that
        # libtiletune may run on a dense family (a long chunk)
        Lk, cache_seqlens = cache_seqlens, None
    if cache_seqlens is not None:
        if isinstance(cache_seqlens, int):
            cache_seqlens = torch.full((B,), cache_seqlens, dtype=torch.int32, device=dev)
        cache_seqlens = _int32(cache_seqlens, "cache_seqlens", dev)
        if cache_seqlens.shape != (B,):
            raise ValueError("cache_seqlens must be int32 [batch]")
        a.cache_seqlens = cache_seqlens.data_ptr()
        keep.append(cache_seqlens)
    if _checking(check_inputs):
        _check_kvcache_lists(None if cache_seqlens is None else cache_seqlens.tolist(), Lk,
                            None if block_table is None else block_table.tolist(), a.page_size, a.num_pages)
    out = torch.empty_like(q)
    lse = torch.empty((B, Hq, Lq), dtype=torch.float32, device=dev)
    if B == 0 or Lq == 0:
        return (out, lse) if return_softmax_lse else out
    qq, kc, vc = _launchable(q), _launchable(k_cache), _launchable(v_cache)
    o = out if _rows_ok(out) else torch.empty_like(q, memory_format=torch.contiguous_format)
    a.q, a.k_cache, a.v_cache, a.o, a.lse = qq.data_ptr(), kc.data_ptr(), vc.data_ptr(), o.data_ptr(), lse.data_ptr()
    a.batch, a.heads_q, a.heads_kv, a.seqlen_q, a.seqlen_k, a.head_dim = B, Hq, Hkv, Lq, Lk, D
    for field, t in (("q_stride", qq), ("k_stride", kc), ("v_stride", vc), ("o_stride", o)):
        getattr(a, field)[:] = [t.stride(0), t.stride(2), t.stride(1)]
    _launch(a, "tt_sdpa_fwd_kvcache", "tiletune.flash_attn_with_kvcache", dt, causal, causal_align, softmax_scale,
            config, dev)
    if o is not out:
        out.copy_(o)
    return (out, lse) if return_softmax_lse else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                           alibi_slopes=None, deterministic=False, return_attn_probs=False, block_table=None,
                           config=None, causal_align="bottom_right", check_inputs=None):
    """flash_attn.flash_attn_varlen_func, forward only.

    q [total_q, heads_q, d], k / v [total_k, heads_kv, d]; cu_seqlens_q /
    cu_seqlens_k int32 [batch + 1] (sequence b is rows cu[b] .. cu[b+1]);
    max_seqlen_q / max_seqlen_k bound every sequence. Sequences may be
    empty. causal is bottom-right per sequence (causal_align="top_left":
    PyTorch's). return_attn_probs: (out, softmax_lse [heads_q, total_q], None).
    check_inputs: check cu_seqlens_* on the host first (module docstring)."""
    import torch
    _refuse("dropout_p", dropout_p, 0.0)
    _refuse("softcap", softcap, 0.0)
    _refuse("alibi_slopes", alibi_slopes, None)
    _refuse("block_table", block_table, None)
    if tuple(window_size) != (-1, -1):
        raise NotImplementedError("tiletune: window_size (local attention) is not supported")
    dt = _common(q, "flash_attn_varlen_func")
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3 or k.shape != v.shape:
        raise ValueError("q must be [total_q, heads_q, d], k and v [total_k, heads_kv, d]")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError("q, k and v must have one dtype")
    dev = q.device
    cu_q = _int32(cu_seqlens_q, "cu_seqlens_q", dev)
    cu_k = _int32(cu_seqlens_k, "cu_seqlens_k", dev)
    if cu_q.dim() != 1 or cu_q.shape != cu_k.shape or cu_q.shape[0] < 2:
        raise ValueError("cu_seqlens_q and cu_seqlens_k must be int32 [batch + 1]")
    Tq, Hq, D = q.shape
    Tk, Hkv = k.shape[0], k.shape[1]
    if k.shape[2] != D:
        raise ValueError("head_dim of q and k differ")
    if _checking(check_inputs):
        _check_varlen_lists(cu_q.tolist(), cu_k.tolist(), Tq, Tk, int(max_seqlen_q), int(max_seqlen_k))
    out = torch.empty_like(q)
    lse = torch.empty((Hq, Tq), dtype=torch.float32, device=dev)
    if Tq > 0 and Tk == 0:
        out.zero_()
        lse.fill_(float("inf"))
    elif Tq > 0:
        qq, kk, vv = _launchable(q), _launchable(k), _launchable(v)
        o = out if _rows_ok(out) else torch.empty_like(q, memory_format=torch.contiguous_format)
        a = _VarlenArgs()
        a.q, a.k, a.v, a.o, a.lse = qq.data_ptr(), kk.data_ptr(), vv.data_ptr(), o.data_ptr(), lse.data_ptr()
        a.cu_seqlens_q, a.cu_seqlens_k = cu_q.data_ptr(), cu_k.data_ptr()
        a.batch, a.heads_q, a.heads_kv = cu_q.shape[0] - 1, Hq, Hkv
        a.total_q, a.total_k, a.head_dim = Tq, Tk, D
        a.max_seqlen_q, a.max_seqlen_k = max(1, int(max_seqlen_q)), max(1, int(max_seqlen_k))
        for field, t in (("q_stride", qq), ("k_stride", kk), ("v_stride", vv), ("o_stride", o)):
            getattr(a, field)[:] = [t.stride(1), t.stride(0)]
        _launch(a, "tt_sdpa_fwd_varlen", "tiletune.flash_attn_varlen_func", dt, causal, causal_align,
                softmax_scale, config, dev)
        if o is not out:
            out.copy_(o)
    return (out, lse, None) if return_attn_probs else out
