"""tiletune for PyTorch: tuned scaled-dot-product attention.

A ctypes binding over libtiletune.so (bundled in the wheel):

    import tiletune
    out = tiletune.sdpa(q, k, v, is_causal=True)     # F.scaled_dot_product_attention's arguments
    with tiletune.attention() as counts:             # existing models, unchanged
        y = model(x)
    tiletune.lookup(128, "bf16", seqlen_q=1, seqlen_k=4096)  # what the daemon serves

tiletune.sdpa is also the torch op torch.ops.tiletune.sdpa (torch.compile
traces it with fullgraph=True). Without torch the package still imports:
lookup, configs, variants and the counters work. docs/python.md is the
reference.

The library is found as $TILETUNE_LIB (an override), next to this package
(the wheel), in a build directory of the source tree, or on the loader's
path. TILETUNE_LOG=1 prints, once per key, which config ran and why.
"""

from ._version import __version__
from ._lib import (CAUSAL_BOTTOM_RIGHT, CAUSAL_NONE, CAUSAL_TOP_LEFT, HEAD_DIMS, TT_DTYPE_BF16, TT_DTYPE_FP16, TT_ID_MAX, TT_CONFIG_TEXT_MAX,  # noqa: F401
                   _ERR_INVAL, _ERR_NOGPU, _ERR_RANGE, _ERR_UNSUPPORTED, Lookup, TileTuneError,
                   _Args, _Config, _config_struct, _current_device, _device_index, _dtype_code, _Key,
                   _key, _load, _parse, _raise, client_stats, config_text, default_config, format_config, library_path,
                   lookup, parse_config, revision, socket_path, variants)

__all__ = ["__version__", "sdpa", "attention", "AttentionCounts", "lookup", "Lookup", "stats",
           "flush", "variants", "default_config", "parse_config", "format_config", "config_text",
           "revision", "library_path", "socket_path", "TileTuneError", "torch_available",
           "CAUSAL_NONE", "CAUSAL_TOP_LEFT", "CAUSAL_BOTTOM_RIGHT",
           "flash_attn_with_kvcache", "flash_attn_varlen_func"]

try:
    import torch as _torch  # noqa: F401
except ImportError as _e:
    _torch_missing = f"tiletune.{{}} needs torch, which is not installed ({_e})"
else:
    _torch_missing = None

if _torch_missing is None:
    from ._torch import (AttentionCounts, _check_tensors, _launchable, attention,  # noqa: F401
                         sdpa)
    from ._torch import flush as _flush_torch
    from ._torch import stats as _torch_stats
else:
    def sdpa(*args, **kwargs):
        raise ImportError(_torch_missing.format("sdpa"))

    def attention(*args, **kwargs):
        raise ImportError(_torch_missing.format("attention"))

    class AttentionCounts:  # the name exists; an instance needs torch
        def __init__(self):
            raise ImportError(_torch_missing.format("AttentionCounts"))


def torch_available():
    """True if torch imported, so sdpa and attention work."""
    return _torch_missing is None


def stats():
    """The counters: the client's (libtiletune's tt_client_stats: lookups,
    cache_hits, daemon_answers, fallbacks, connects, failures, key_errors,
    last_failure) under "client", and the binding's (eager calls, plans,
    the switch's tiletune/torch counts and reasons) under "torch"."""
    out = {"client": client_stats()}
    if _torch_missing is None:
        out["torch"] = _torch_stats()
    return out


def flush():
    """Drop what was cached about tuned configs (the client's answers, the
    binding's per-shape choices): the next calls ask the daemon again."""
    if _torch_missing is None:
        _flush_torch()
    else:
        from ._lib import flush_client
        flush_client()


# Paged and varlen attention in flash-attn's terms (inference.py).
from .inference import flash_attn_varlen_func, flash_attn_with_kvcache  # noqa: E402,F401
