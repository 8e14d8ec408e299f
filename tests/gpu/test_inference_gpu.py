"""Family splitkv on a GPU against torch in float64, sequence by sequence:
a contiguous KV cache with per-sequence lengths, a paged cache (pages 8,
16, 32, 64, 256: a lookup a row, a page of two passes, a pointer stepped
over a page's rows; the page table shuffled; pages over 4 GB apart), variable-length
packed batches, GQA, causal none / top-left / bottom-right, empty and
one-token sequences, split and unsplit launches, runs of key tiles
started mid-run, the dense tt_sdpa_fwd route, a CUDA graph capture, layouts the kernel refuses and
bad lengths and pages check_inputs names; then all of
it again in a second process with the balanced grid on
(TILETUNE_SPLITKV_BALANCE=1: one wave of CTAs over the (sequence, KV head)
units laid end to end). Outputs are poisoned
(NaN) first, so a row the kernel does not write fails.

Exits 77 (skipped) without torch or a GPU.
"""

import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

try:
    import torch
except ImportError:
    print("skip: torch is not installed")
    sys.exit(77)
if not torch.cuda.is_available():
    print("skip: no CUDA device")
    sys.exit(77)

import tiletune  # noqa: E402


def _poisoning(make):
    """torch.empty / empty_like whose floating tensors start as NaN: the
    binding allocates its outputs with them, and a row or LSE entry the
    kernel leaves unwritten must fail the check, not pass on what the
    caching allocator handed back from the previous call's correct run."""
    def f(*args, **kwargs):
        t = make(*args, **kwargs)
        if t.is_floating_point() and t.numel():
            t.fill_(float("nan"))
        return t
    return f


torch.empty = _poisoning(torch.empty)
torch.empty_like = _poisoning(torch.empty_like)

DEV = torch.device("cuda:0")
FAILS = []
CHECKS = [0]

# splitkv configs that force each path: one split (split_ctas 1 on a large
# batch), many splits (split_ctas 16), 16/32/64/128-row tiles, 2 and 8 warps.
CONFIGS = [
    None,
    "family=splitkv,block_m=16,block_n=64,warps=4,stages=2,layout=pad,q_in_regs=1,split_ctas=16",
    "family=splitkv,block_m=32,block_n=128,warps=4,stages=3,layout=pad,q_in_regs=0,split_ctas=1",
    "family=splitkv,block_m=64,block_n=64,warps=4,stages=3,layout=pad,q_in_regs=0,split_ctas=8",
    "family=splitkv,block_m=128,block_n=64,warps=8,stages=2,layout=pad,q_in_regs=0,split_ctas=0",
    "family=splitkv,block_m=16,block_n=32,warps=2,stages=4,layout=pad,q_in_regs=1,split_ctas=4",
]


def ref_seq(q, k, v, causal, scale):
    """q [Lq, Hq, D], k/v [Lk, Hkv, D] -> (o [Lq, Hq, D], lse [Hq, Lq]) in
    float64; causal 1 top-left, 2 bottom-right; rows with no key: 0, +inf."""
    Lq, Hq, D = q.shape
    Lk, Hkv = k.shape[0], k.shape[1]
    q, k, v = q.double(), k.double(), v.double()
    g = Hq // Hkv
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, k) * scale
    if causal:
        off = Lk - Lq if causal == 2 else 0
        i = torch.arange(Lq, device=q.device)[:, None]
        j = torch.arange(Lk, device=q.device)[None, :]
        s = s.masked_fill(j > i + off, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # [Hq, Lq]
    empty = torch.isinf(lse)
    p = torch.exp(s - torch.where(empty, torch.zeros_like(lse), lse)[..., None])
    p = torch.where(empty[..., None], torch.zeros_like(p), p)
    o = torch.einsum("hqk,khd->qhd", p, v)
    lse = torch.where(empty, torch.full_like(lse, float("inf")), lse)
    return o, lse


def check(name, o, lse, ro, rlse, dtype):
    CHECKS[0] += 1
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    o = o.double()
    if not torch.isfinite(o).all():
        FAILS.append(f"{name}: non-finite output (unwritten row?)")
        return
    err = (o - ro).abs().max().item() if o.numel() else 0.0
    if err > tol:
        FAILS.append(f"{name}: max |O - ref| = {err:.3g} > {tol}")
        return
    if lse is not None and lse.numel():
        fin = torch.isfinite(rlse)
        if not torch.equal(torch.isinf(lse) & (lse > 0), ~fin):
            FAILS.append(f"{name}: LSE of empty rows is not +inf (or a non-empty row is)")
            return
        if fin.any():
            le = (lse.double()[fin] - rlse[fin]).abs().max().item()
            if le > 1e-3 * max(1.0, rlse[fin].abs().max().item()):
                FAILS.append(f"{name}: max |LSE - ref| = {le:.3g}")


def rnd(*shape, dtype):
    return torch.randn(*shape, device=DEV, dtype=torch.float32).to(dtype)


KVCACHE_HEADS = ((torch.bfloat16, 128, (8, 2)), (torch.bfloat16, 64, (4, 4)), (torch.float16, 128, (8, 2)),
                 (torch.bfloat16, 256, (16, 2)), (torch.float16, 32, (8, 1)))


def test_kvcache(paged_sizes=(0, 8, 16, 32, 64, 256)):
    torch.manual_seed(1)
    for dtype, D, (Hq, Hkv) in KVCACHE_HEADS:
        if True:
            if True:
                for Lq in (1, 4, 16):
                    lens = [0, 1, 300, 1000]
                    B = len(lens)
                    Lmax = 1024
                    q = rnd(B, Lq, Hq, D, dtype=dtype)
                    kc = rnd(B, Lmax, Hkv, D, dtype=dtype)
                    vc = rnd(B, Lmax, Hkv, D, dtype=dtype)
                    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
                    for causal in (0, 1, 2):
                        scale = 1.0 / math.sqrt(D)
                        refs = [ref_seq(q[b], kc[b, :lens[b]], vc[b, :lens[b]], causal, scale) for b in range(B)]
                        for page in paged_sizes:
                            if page:
                                npg = Lmax // page
                                perm = torch.randperm(B * npg, device=DEV)
                                table = perm.view(B, npg).to(torch.int32)
                                kp = torch.empty(B * npg, page, Hkv, D, device=DEV, dtype=dtype)
                                vp = torch.empty_like(kp)
                                kp[perm] = kc.reshape(B * npg, page, Hkv, D)
                                vp[perm] = vc.reshape(B * npg, page, Hkv, D)
                                args = (kp, vp)
                            else:
                                table, args = None, (kc, vc)
                            cfgs = CONFIGS if D in (64, 128) else [CONFIGS[0], CONFIGS[1], CONFIGS[5]]
                            for cfg in cfgs if page in (0, 16) else cfgs[:2]:
                                name = (f"kvcache {dtype} D{D} Hq{Hq}/{Hkv} Lq{Lq} causal{causal} page{page} "
                                        f"cfg={cfg}")
                                try:
                                    o, lse = tiletune.flash_attn_with_kvcache(
                                        q, *args, cache_seqlens=seqlens, block_table=table, causal=causal > 0,
                                        causal_align="top_left" if causal == 1 else "bottom_right",
                                        return_softmax_lse=True, config=cfg)
                                except ValueError as e:
                                    # a config the family refuses for this head dim (registers,
                                    # shared memory) is a clear refusal, not a failure
                                    if cfg is not None and D not in (64, 128) and "splitkv" in str(e) \
                                            or "shared memory" in str(e):
                                        continue
                                    FAILS.append(f"{name}: raised {e}")
                                    continue
                                except Exception as e:  # noqa: BLE001
                                    FAILS.append(f"{name}: raised {e}")
                                    continue
                                for b in range(B):
                                    check(f"{name} seq{b}(len {lens[b]})", o[b], lse[b], refs[b][0], refs[b][1], dtype)


def test_pages_far_apart():
    """A paged cache whose two pages lie over 4 GB apart, shared by 264
    sequences (so no launch splits them: every CTA copies most of its tiles
    in the main loop, not the prologue): the page offsets need 64 bits, and
    every sequence must read the same keys."""
    torch.manual_seed(4)
    dtype, D, Hq, Hkv, page, B = torch.bfloat16, 128, 4, 1, 1024, 264
    psize = page * Hkv * D
    gap = (1 << 31) + psize  # elements from one page's start to the next: over 4 GB of bf16
    try:
        buf = torch.empty(gap + psize, device=DEV, dtype=dtype)
    except torch.cuda.OutOfMemoryError:
        print("pages 4 GB apart: not checked, the GPU has no room for the 4 GB cache")
        return
    kp = buf.as_strided((2, page, Hkv, D), (gap, Hkv * D, D, 1))
    vp = torch.empty(2, page, Hkv, D, device=DEV, dtype=dtype)
    kc, vc = rnd(2 * page, Hkv, D, dtype=dtype), rnd(2 * page, Hkv, D, dtype=dtype)
    # the table out of order: every sequence's first page is the cache's second
    kp[1], kp[0] = kc[:page].view(page, Hkv, D), kc[page:].view(page, Hkv, D)
    vp[1], vp[0] = vc[:page].view(page, Hkv, D), vc[page:].view(page, Hkv, D)
    table = torch.tensor([[1, 0]] * B, dtype=torch.int32, device=DEV)
    lens = [2 * page - b % 7 for b in range(B)]
    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    for Lq in (1, 4):
        q = rnd(B, Lq, Hq, D, dtype=dtype)
        seqs = list(range(0, B, 37)) + [B - 1]
        refs = {b: ref_seq(q[b], kc[:lens[b]], vc[:lens[b]], 2, 1.0 / math.sqrt(D)) for b in seqs}
        for cfg in CONFIGS[:3]:
            name = f"pages 4 GB apart Lq{Lq} cfg={cfg}"
            try:
                o, lse = tiletune.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=seqlens, block_table=table,
                                                          causal=True, return_softmax_lse=True, config=cfg)
            except Exception as e:  # noqa: BLE001
                FAILS.append(f"{name}: raised {e}")
                continue
            for b in seqs:
                check(f"{name} seq{b}", o[b], lse[b], *refs[b], dtype)
    del buf, kp
    torch.cuda.empty_cache()


def packed_batch(lq, lk, Hq, Hkv, D, dtype, pad_q):
    """A varlen batch of these lengths: (cu_seqlens_q, cu_seqlens_k, q with
    pad_q rows past the last sequence, k, v)."""
    cu_q = torch.tensor([0] + list(torch.tensor(lq).cumsum(0)), dtype=torch.int32, device=DEV)
    cu_k = torch.tensor([0] + list(torch.tensor(lk).cumsum(0)), dtype=torch.int32, device=DEV)
    return (cu_q, cu_k, rnd(sum(lq) + pad_q, Hq, D, dtype=dtype), rnd(sum(lk), Hkv, D, dtype=dtype),
            rnd(sum(lk), Hkv, D, dtype=dtype))


def varlen_call(q, k, v, cu_q, cu_k, lq, lk, causal, cfg):
    """flash_attn_varlen_func with causal 0, 1 (top-left) or 2: (o, lse)."""
    o, lse, _ = tiletune.flash_attn_varlen_func(
        q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal > 0,
        causal_align="top_left" if causal == 1 else "bottom_right", return_attn_probs=True, config=cfg)
    return o, lse


def varlen_outputs(name, call, lq, count_launches=False):
    """(o, lse, the attention kernels it launched when asked) of call(), a
    check counted and a written padding row past the last sequence failed;
    None where it raised (the failure recorded)."""
    try:
        o, lse = call()
        launched = sdpa_kernels_launched(call) if count_launches else None
    except Exception as e:  # noqa: BLE001
        FAILS.append(f"{name}: raised {e}")
        return None
    CHECKS[0] += 1
    if not torch.isnan(o[sum(lq):]).all():
        FAILS.append(f"{name}: wrote the padding rows past the last sequence")
    return o, lse, launched


def test_varlen():
    torch.manual_seed(2)
    dtype = torch.bfloat16
    for D in (128, 64):
        for (Hq, Hkv) in ((8, 2), (6, 6)):
            lq = [0, 1, 5, 33, 200, 1]
            lk = [0, 1, 100, 700, 200, 0]
            # three rows of padding past the last sequence: no sequence's,
            # so never written (they stay the NaN the output starts as)
            cu_q, cu_k, q, k, v = packed_batch(lq, lk, Hq, Hkv, D, dtype, 3)
            for causal in (0, 1, 2):
                for cfg in CONFIGS:
                    name = f"varlen D{D} Hq{Hq}/{Hkv} causal{causal} cfg={cfg}"
                    out = varlen_outputs(name, lambda: varlen_call(q, k, v, cu_q, cu_k, lq, lk, causal, cfg), lq)
                    if out is None:
                        continue
                    o, lse, _ = out
                    for b in range(len(lq)):
                        qs, qe = int(cu_q[b]), int(cu_q[b + 1])
                        ks, ke = int(cu_k[b]), int(cu_k[b + 1])
                        if qe == qs:
                            continue
                        ro, rl = ref_seq(q[qs:qe], k[ks:ke], v[ks:ke], causal, 1.0 / math.sqrt(D))
                        check(f"{name} seq{b}", o[qs:qe], lse[:, qs:qe], ro, rl, dtype)


def sdpa_kernels_launched(fn):
    """The names of tt_sdpa_fwd_kernel launches fn makes (CUDA activity
    under torch.profiler); None where the profiler sees no kernel at all."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if str(e.device_type).endswith("CUDA")]
    return [n for n in names if n == "tt_sdpa_fwd_kernel"] if names else None


def test_varlen_long_sequences():
    """Sequences of more packed rows than splitkv runs a chunk of (1024 on
    sm_90: 257 tokens of group 4, 1025 of group 1) run on family ws in a
    launch of their own, the rest of the batch on splitkv; long sequences
    ws does not take (no key; bottom-right over fewer keys than queries)
    stay on splitkv. Every sequence against torch, the padding rows past
    the last one never written, and the call launching both kernels where
    the batch's longest sequence has a ws default (on sm_90 a chunk has,
    and so has a prefill but for some masks); splitkv's sequences in one
    launch, or two where the short ones (at most 16 packed rows) get a
    smaller tile of their own (on sm_90 the first batch's do); with a
    splitkv config, splitkv runs all of it, in one launch."""
    torch.manual_seed(5)
    cases = [
        # D, Hq, Hkv, lq, lk
        (128, 8, 2, [1, 300, 0, 7, 520, 260, 1, 300], [50, 900, 10, 0, 600, 200, 3000, 0]),
        (64, 8, 2, [300, 3, 520], [1000, 40, 2100]),
        (64, 8, 2, [300, 3, 520], [1000, 40, 530]),
        (128, 4, 4, [1100, 2, 1030], [1500, 4000, 1030]),
        (256, 8, 2, [400, 1], [700, 100]),
    ]
    routed = classed = 0
    for (D, Hq, Hkv, lq, lk) in cases:
        for dtype in ((torch.bfloat16, torch.float16) if D == 128 else (torch.bfloat16,)):
            cu_q, cu_k, q, k, v = packed_batch(lq, lk, Hq, Hkv, D, dtype, 5)
            for causal in (0, 1, 2):
                refs = {}
                for b in range(len(lq)):
                    qs, qe, ks, ke = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
                    if qe > qs:
                        refs[b] = ref_seq(q[qs:qe], k[ks:ke], v[ks:ke], causal, 1.0 / math.sqrt(D))
                dense = tiletune.default_config(D, dtype, causal=causal, seqlen_q=max(lq), seqlen_k=max(lk),
                                                device=DEV, group=Hq // Hkv, batch=len(lq), heads=Hq)
                # 1024: the packed rows sm_90 runs a chunk of on splitkv
                two = dense.startswith("family=ws,") and max(lq) * (Hq // Hkv) > 1024
                routed += two
                for cfg in (None, CONFIGS[4]):
                    name = f"varlen long D{D} {dtype} Hq{Hq}/{Hkv} lq{lq} lk{lk} causal{causal} cfg={cfg}"

                    def call():
                        return varlen_call(q, k, v, cu_q, cu_k, lq, lk, causal, cfg)
                    out = varlen_outputs(name, call, lq, count_launches=True)
                    if out is None:
                        continue
                    o, lse, launched = out
                    if launched is None:
                        print(f"note: {name}: the profiler saw no kernel; launches not checked")
                    else:
                        # ws where routed; splitkv once, or once a row class
                        want = (1 + two, 2 + two) if cfg is None else (1,)
                        if len(launched) not in want:
                            FAILS.append(f"{name}: {len(launched)} attention kernels launched, expected "
                                         f"one of {want}")
                        classed += cfg is None and len(launched) == 2 + two
                    for b, (ro, rl) in refs.items():
                        qs, qe = int(cu_q[b]), int(cu_q[b + 1])
                        check(f"{name} seq{b}", o[qs:qe], lse[:, qs:qe], ro, rl, dtype)
    if torch.cuda.get_device_capability(DEV) == (9, 0) and not routed:
        FAILS.append("varlen long: no batch gave ws its long sequences on sm_90")
    if torch.cuda.get_device_capability(DEV) == (9, 0) and not classed:
        FAILS.append("varlen long: no batch ran its short sequences in a launch of their own on sm_90")


def kernel_streams(fn):
    """{kernel name: the set of streams it ran on} for fn()'s CUDA kernels
    (torch.profiler's kineto events); None where the profiler gives no
    stream."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    streams = {}
    try:
        for e in prof.profiler.kineto_results.events():
            if e.device_type() == torch.autograd.DeviceType.CUDA:
                streams.setdefault(e.name(), set()).add(e.device_resource_id())
    except AttributeError:
        return None
    return streams


def test_varlen_side_stream():
    """A varlen batch whose long sequences run on ws: that launch goes on a
    stream of its own, alongside splitkv's on the caller's, and joins the
    caller's stream again before the call returns: work queued next on the
    caller's stream sees every sequence's output, eagerly and in a captured
    graph replayed with new inputs. With TILETUNE_SIDE_STREAM=0 (a process
    of its own) all of it runs on the caller's stream."""
    if torch.cuda.get_device_capability(DEV) != (9, 0):
        print("note: varlen side stream: ws runs on sm_90 only; skipped")
        return
    torch.manual_seed(9)
    dtype = torch.bfloat16
    lq, lk = [1, 300, 520, 7, 1], [3000, 900, 600, 50, 8192]
    cu_q, cu_k, q, k, v = packed_batch(lq, lk, 8, 2, 128, dtype, 0)
    sc = 1.0 / math.sqrt(128)

    def check_all(name, o, lse):
        for b in range(len(lq)):
            qs, qe, ks, ke = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
            ro, rl = ref_seq(q[qs:qe], k[ks:ke], v[ks:ke], 2, sc)
            check(f"{name} seq{b}", o[qs:qe], lse[:, qs:qe], ro, rl, dtype)

    def call():
        return varlen_call(q, k, v, cu_q, cu_k, lq, lk, 2, None)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        streams = kernel_streams(call)
        o, lse = call()
        # queued behind the call on its stream: the copy must see the ws
        # launch's rows, which ran on another stream
        o2, lse2 = o.clone(), lse.clone()
    torch.cuda.synchronize()
    check_all("varlen side stream, a copy queued after", o2, lse2)
    want_two = os.environ.get("TILETUNE_SIDE_STREAM") != "0"
    if streams is None:
        print("note: varlen side stream: the profiler gives no streams; not checked")
    else:
        used = set().union(*(v for n, v in streams.items() if n == "tt_sdpa_fwd_kernel")) if streams else set()
        CHECKS[0] += 1
        if len(used) != (2 if want_two else 1):
            FAILS.append(f"varlen side stream: attention kernels ran on streams {sorted(used)}, expected "
                         f"{2 if want_two else 1}")
    # the per-thread default stream (handle 2, one stream a thread): no
    # side stream can follow it, so the call queues all of it there
    import ctypes
    from tiletune.inference import _declare
    o3, lse3, a = raw_varlen_args(q, k, v, cu_q, cu_k, lq, lk)
    a.stream = 2  # CU_STREAM_PER_THREAD
    err = ctypes.create_string_buffer(512)
    if _declare().tt_sdpa_fwd_varlen(ctypes.byref(a), err, len(err)) < 0:
        FAILS.append(f"varlen on the per-thread default stream: {err.value.decode()}")
    else:
        torch.cuda.synchronize()
        check_all("varlen on the per-thread default stream", o3, lse3)
    s2 = torch.cuda.Stream()
    with torch.cuda.stream(s2):
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g, stream=s2):
                og, lseg = call()
        except Exception as e:  # noqa: BLE001
            FAILS.append(f"varlen side stream: capture raised {e}")
            return
    for rep in range(2):
        q.copy_(rnd(*q.shape, dtype=dtype))
        g.replay()
        torch.cuda.synchronize()
        check_all(f"varlen side stream, graph replay {rep}", og, lseg)


def raw_varlen_args(q, k, v, cu_q, cu_k, lq, lk):
    """(o, lse, tt_sdpa_varlen_args) for libtiletune called directly
    (bottom-right causal; o and lse NaN, so a row never written shows)."""
    from tiletune.inference import _VarlenArgs
    o = torch.full_like(q, float("nan"))
    lse = torch.full((q.shape[1], q.shape[0]), float("nan"), dtype=torch.float32, device=DEV)
    a = _VarlenArgs()
    a.q, a.k, a.v, a.o, a.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    a.cu_seqlens_q, a.cu_seqlens_k = cu_q.data_ptr(), cu_k.data_ptr()
    a.batch, a.heads_q, a.heads_kv, a.total_q, a.total_k = len(lq), q.shape[1], k.shape[1], q.shape[0], k.shape[0]
    a.head_dim, a.max_seqlen_q, a.max_seqlen_k = q.shape[2], max(lq), max(lk)
    for field, t in (("q_stride", q), ("k_stride", k), ("v_stride", v), ("o_stride", o)):
        getattr(a, field)[:] = [t.stride(1), t.stride(0)]
    a.dtype, a.causal = 1 if q.dtype == torch.bfloat16 else 0, 2
    return o, lse, a


def test_varlen_caller_workspace():
    """tt_sdpa_fwd_varlen with the caller's workspace: the bytes
    tt_sdpa_fwd_varlen_workspace gives are enough (every sequence right),
    a byte less or an address off 256-byte alignment is refused with a
    message naming the workspace, and nothing is written then."""
    import ctypes
    from tiletune.inference import _VarlenArgs, _declare
    torch.manual_seed(11)
    dtype = torch.bfloat16
    lq, lk = [1, 4, 0, 1, 16], [8192, 3000, 5, 1, 700]
    cu_q, cu_k, q, k, v = packed_batch(lq, lk, 8, 2, 128, dtype, 0)
    lib = _declare()
    lib.tt_sdpa_fwd_varlen_workspace.argtypes = [ctypes.POINTER(_VarlenArgs), ctypes.POINTER(ctypes.c_size_t),
                                                 ctypes.c_char_p, ctypes.c_size_t]
    lib.tt_sdpa_fwd_varlen_workspace.restype = ctypes.c_int
    o, lse, a = raw_varlen_args(q, k, v, cu_q, cu_k, lq, lk)
    a.stream = torch.cuda.current_stream(DEV).cuda_stream
    err = ctypes.create_string_buffer(512)
    need = ctypes.c_size_t(0)
    CHECKS[0] += 1
    if lib.tt_sdpa_fwd_varlen_workspace(ctypes.byref(a), ctypes.byref(need), err, len(err)) < 0:
        FAILS.append(f"varlen workspace size: {err.value.decode()}")
        return
    if need.value == 0:
        FAILS.append("varlen caller workspace: the batch split nothing (0 bytes); the test needs a split")
        return
    buf = torch.zeros(need.value + 512, dtype=torch.uint8, device=DEV)
    base = (buf.data_ptr() + 255) // 256 * 256
    for name, ptr, size in (("a byte short", base, need.value - 1), ("off alignment", base + 16, need.value)):
        a.workspace, a.workspace_bytes = ptr, size
        CHECKS[0] += 1
        rc = lib.tt_sdpa_fwd_varlen(ctypes.byref(a), err, len(err))
        torch.cuda.synchronize()
        if rc >= 0 or "workspace" not in err.value.decode():
            FAILS.append(f"varlen caller workspace {name}: rc {rc}, {err.value.decode()!r}")
        if not torch.isnan(o).all():
            FAILS.append(f"varlen caller workspace {name}: refused, yet wrote the output")
    a.workspace, a.workspace_bytes = base, need.value
    if lib.tt_sdpa_fwd_varlen(ctypes.byref(a), err, len(err)) < 0:
        FAILS.append(f"varlen caller workspace: {err.value.decode()}")
        return
    torch.cuda.synchronize()
    for b in range(len(lq)):
        qs, qe, ks, ke = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        if qe > qs:
            ro, rl = ref_seq(q[qs:qe], k[ks:ke], v[ks:ke], 2, 1.0 / math.sqrt(128))
            check(f"varlen caller workspace seq{b}", o[qs:qe], lse[:, qs:qe], ro, rl, dtype)


def child_run(label, env, test=None, lines=12):
    """The whole set, or one test, again in a process of its own with `env`
    added (the library reads its switches once a process): its last lines
    printed, a failure recorded where it exits nonzero."""
    env = dict(os.environ, **env)
    here = os.path.abspath(__file__)
    cmd = [sys.executable, here]
    if test:
        cmd = [sys.executable, "-c",
               f"import sys, runpy; m = runpy.run_path({here!r}); m[{test!r}]();"
               " [print('FAIL', f) for f in m['FAILS']]; print(m['CHECKS'][0], 'checks');"
               " sys.exit(1 if m['FAILS'] else 0)"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    for line in (r.stdout + r.stderr).strip().splitlines()[-lines:]:
        print(f"{label}:", line)
    if r.returncode != 0:
        FAILS.append(f"{label} run: exit {r.returncode}")


def test_dense_route():
    """tt_sdpa_fwd with a splitkv config: the dense [B, H, L, D] layout."""
    torch.manual_seed(3)
    dtype = torch.bfloat16
    for (B, Hq, Hkv, Lq, Lk) in ((2, 32, 8, 1, 4096), (1, 8, 2, 8, 777), (3, 4, 4, 3, 65)):
        q = rnd(B, Hq, Lq, 128, dtype=dtype)
        k = rnd(B, Hkv, Lk, 128, dtype=dtype)
        v = rnd(B, Hkv, Lk, 128, dtype=dtype)
        for cfg in CONFIGS[1:]:
            for causal in (False, True):
                name = f"dense B{B} Hq{Hq}/{Hkv} Lq{Lq} Lk{Lk} causal{causal} cfg={cfg}"
                try:
                    o, lse = tiletune.sdpa(q, k, v, is_causal=causal, enable_gqa=True, config=cfg, return_lse=True)
                except Exception as e:  # noqa: BLE001
                    FAILS.append(f"{name}: raised {e}")
                    continue
                for b in range(B):
                    ro, rl = ref_seq(q[b].transpose(0, 1), k[b].transpose(0, 1), v[b].transpose(0, 1),
                                     1 if causal else 0, 1.0 / math.sqrt(128))
                    check(f"{name} b{b}", o[b].transpose(0, 1), lse[b], ro, rl, dtype)


def test_balanced_grid():
    """The balanced grid (one wave of CTAs over the (sequence, KV head)
    units laid end to end): more units than CTAs, so a CTA walks several
    units and a unit's keys are split across CTAs at arbitrary tiles; with
    per-sequence lengths (short, empty and full sequences of the nominal
    one), paged and contiguous, the merge in the kernel and in the combine
    kernel (32-row tile: 4 query tokens x group 8). Batch 16 of 8 KV heads
    is batch-16 decode's 128 units on more CTAs (the H200's 132 SMs), each
    CTA within two units, on decode's own one-CTA-an-SM 16x128 tile."""
    torch.manual_seed(4)
    dtype = torch.bfloat16
    decode_tile = "family=splitkv,block_m=16,block_n=128,warps=4,stages=3,layout=pad,q_in_regs=1,split_ctas=0"
    for (B, Hq, Hkv, Lq, Lmax) in ((80, 16, 4, 1, 700), (9, 8, 1, 4, 5000), (33, 32, 8, 1, 2048),
                                   (16, 32, 8, 1, 4096)):
        lens = [(b * 977) % (Lmax + 1) for b in range(B)]
        lens[1] = Lmax
        lens[2] = 0
        q = rnd(B, Lq, Hq, 128, dtype=dtype)
        kc = rnd(B, Lmax, Hkv, 128, dtype=dtype)
        vc = rnd(B, Lmax, Hkv, 128, dtype=dtype)
        seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
        for causal in (0, 2):
            sc = 1.0 / math.sqrt(128)
            refs = {True: [ref_seq(q[b], kc[b, :lens[b]], vc[b, :lens[b]], causal, sc) for b in range(B)],
                    False: [ref_seq(q[b], kc[b], vc[b], causal, sc) for b in range(B)]}
            for with_lens in (True, False):
                for cfg in (None, CONFIGS[1], CONFIGS[2], decode_tile):
                    name = f"balanced B{B} Hq{Hq}/{Hkv} Lq{Lq} Lk{Lmax} lens{with_lens} causal{causal} cfg={cfg}"
                    try:
                        o, lse = tiletune.flash_attn_with_kvcache(
                            q, kc, vc, cache_seqlens=seqlens if with_lens else None, causal=causal > 0,
                            return_softmax_lse=True, config=cfg)
                    except Exception as e:  # noqa: BLE001
                        FAILS.append(f"{name}: raised {e}")
                        continue
                    for b in range(B):
                        ro, rl = refs[with_lens][b]
                        check(f"{name} seq{b}(len {lens[b] if with_lens else Lmax})", o[b], lse[b], ro, rl, dtype)


def test_run_order():
    """Grids of at most two splits a unit start each CTA's run of key tiles
    (a contiguous cache's) 37c tiles in and wrap, so a run's tile past the
    keys' end, its masked tiles and its first tile come in any order.
    Batch 24 and 8 of 8 KV heads (192 and 64 units), lengths that end
    mid-tile, 1 and 3 query tokens, causal none / top-left / bottom-right,
    the KV-cache route and the dense one."""
    torch.manual_seed(5)
    dtype = torch.bfloat16
    decode_tile = "family=splitkv,block_m=16,block_n=128,warps=4,stages=3,layout=pad,q_in_regs=1,split_ctas=0"
    Hq, Hkv, D = 32, 8, 128
    sc = 1.0 / math.sqrt(D)
    for (B, Lmax) in ((24, 3000), (8, 9000)):
        lens = [Lmax - (b * 613) % 1500 for b in range(B)]
        seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
        kc = rnd(B, Lmax, Hkv, D, dtype=dtype)
        vc = rnd(B, Lmax, Hkv, D, dtype=dtype)
        for Lq in (1, 3):
            q = rnd(B, Lq, Hq, D, dtype=dtype)
            for causal in (0, 1, 2):
                refs = [ref_seq(q[b], kc[b, :lens[b]], vc[b, :lens[b]], causal, sc) for b in range(B)]
                for cfg in (None, decode_tile):
                    name = f"run order B{B} Lq{Lq} Lk{Lmax} causal{causal} cfg={cfg}"
                    try:
                        o, lse = tiletune.flash_attn_with_kvcache(
                            q, kc, vc, cache_seqlens=seqlens, causal=causal > 0,
                            causal_align="top_left" if causal == 1 else "bottom_right",
                            return_softmax_lse=True, config=cfg)
                    except Exception as e:  # noqa: BLE001
                        FAILS.append(f"{name}: raised {e}")
                        continue
                    for b in range(B):
                        check(f"{name} seq{b}(len {lens[b]})", o[b], lse[b], refs[b][0], refs[b][1], dtype)
    B, Lk = 16, 4000
    q = rnd(B, Hq, 1, D, dtype=dtype)
    k = rnd(B, Hkv, Lk, D, dtype=dtype)
    v = rnd(B, Hkv, Lk, D, dtype=dtype)
    for cfg in (None, decode_tile):
        name = f"run order dense B{B} Lk{Lk} cfg={cfg}"
        try:
            o, lse = tiletune.sdpa(q, k, v, enable_gqa=True, config=cfg, return_lse=True)
        except Exception as e:  # noqa: BLE001
            FAILS.append(f"{name}: raised {e}")
            continue
        for b in range(B):
            ro, rl = ref_seq(q[b].transpose(0, 1), k[b].transpose(0, 1), v[b].transpose(0, 1), 0, sc)
            check(f"{name} b{b}", o[b].transpose(0, 1), lse[b], ro, rl, dtype)


def test_kvcache_dense_route():
    """A contiguous cache of one length for all (cache_seqlens None or an
    int) is tt_sdpa_fwd's dense problem: a chunk of 512 tokens runs where
    tiletune.sdpa would (a dense family on sm_90: the same output, bit for
    bit, from the same strided views), the cache's first rows when the
    length is an int; where a row sees no key (bottom-right, more queries
    than keys) it stays on splitkv, whose LSE for such rows is +inf."""
    torch.manual_seed(6)
    cases = ((torch.bfloat16, 128, 1, 32, 8, 8192, 512, None), (torch.bfloat16, 128, 2, 16, 4, 3000, 512, 2500),
             (torch.bfloat16, 128, 2, 16, 4, 3000, 300, 200), (torch.float16, 64, 2, 8, 8, 3000, 512, None))
    for (dtype, D, B, Hq, Hkv, Lmax, Lq, lens) in cases:
        sc = 1.0 / math.sqrt(D)
        kc = rnd(B, Lmax, Hkv, D, dtype=dtype)
        vc = rnd(B, Lmax, Hkv, D, dtype=dtype)
        Lk = Lmax if lens is None else lens
        q = rnd(B, Lq, Hq, D, dtype=dtype)
        for causal in (0, 1, 2):
            name = f"kvcache dense {dtype} D{D} B{B} Hq{Hq}/{Hkv} Lq{Lq} Lk{Lk} causal{causal}"
            try:
                o, lse = tiletune.flash_attn_with_kvcache(
                    q, kc, vc, cache_seqlens=lens, causal=causal > 0,
                    causal_align="top_left" if causal == 1 else "bottom_right", return_softmax_lse=True)
            except Exception as e:  # noqa: BLE001
                FAILS.append(f"{name}: raised {e}")
                continue
            for b in range(B):
                ro, rl = ref_seq(q[b], kc[b, :Lk], vc[b, :Lk], causal, sc)
                check(f"{name} seq{b}", o[b], lse[b], ro, rl, dtype)
            if B == 1 and causal < 2:
                CHECKS[0] += 1
                od = tiletune.sdpa(q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2),
                                   is_causal=causal == 1, enable_gqa=True).transpose(1, 2)
                if not torch.equal(o, od):
                    FAILS.append(f"{name}: not tiletune.sdpa's output (max diff "
                                 f"{(o.float() - od.float()).abs().max().item():.3g}): not the dense route")


def test_graph_capture():
    """A split launch captured into a CUDA graph and replayed: on a stream
    that ran it before (its workspace reused), and on a fresh stream with
    no workspace (as torch captures: the graph allocates its own), replayed
    twice with new inputs."""
    dtype = torch.bfloat16
    cfg = CONFIGS[1]
    q = rnd(1, 1, 32, 128, dtype=dtype)
    kc = rnd(1, 8192, 8, 128, dtype=dtype)
    vc = rnd(1, 8192, 8, 128, dtype=dtype)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        tiletune.flash_attn_with_kvcache(q, kc, vc, config=cfg)  # sizes the workspace
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            out = tiletune.flash_attn_with_kvcache(q, kc, vc, config=cfg)
    q.copy_(rnd(1, 1, 32, 128, dtype=dtype))
    g.replay()
    torch.cuda.synchronize()
    ro, rl = ref_seq(q[0], kc[0], vc[0], 0, 1.0 / math.sqrt(128))
    check("graph replay", out[0], None, ro, rl, dtype)
    s2 = torch.cuda.Stream()
    q2 = rnd(2, 1, 32, 128, dtype=dtype)
    kb = rnd(2, 8192, 8, 128, dtype=dtype)
    vb = rnd(2, 8192, 8, 128, dtype=dtype)
    with torch.cuda.stream(s2):
        g2 = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g2, stream=s2):
                out2 = tiletune.flash_attn_with_kvcache(q2, kb, vb, config=cfg)
        except Exception as e:  # noqa: BLE001
            FAILS.append(f"capture on a stream with no workspace: {e}")
            out2 = None
    for rep in range(2 if out2 is not None else 0):
        q2.copy_(rnd(2, 1, 32, 128, dtype=dtype))
        g2.replay()
        torch.cuda.synchronize()
        for b in range(2):
            ro, rl = ref_seq(q2[b], kb[b], vb[b], 0, 1.0 / math.sqrt(128))
            check(f"graph's own workspace, replay {rep} b{b}", out2[b], None, ro, rl, dtype)
    CHECKS[0] += 1


def test_refusals():
    dtype = torch.bfloat16
    q = rnd(1, 1, 8, 96, dtype=dtype)
    kc = rnd(1, 64, 2, 96, dtype=dtype)
    cases = []
    try:
        tiletune.flash_attn_with_kvcache(q, kc, kc)
        cases.append("head_dim 96 accepted")
    except ValueError as e:
        if "head_dim" not in str(e):
            cases.append(f"head_dim 96: unclear {e}")
    q = rnd(1, 1, 8, 128, dtype=dtype)
    kp = rnd(10, 24, 2, 128, dtype=dtype)
    table = torch.zeros(1, 4, dtype=torch.int32, device=DEV)
    try:
        tiletune.flash_attn_with_kvcache(q, kp, kp, block_table=table)
        cases.append("page 24 accepted")
    except ValueError as e:
        if "power of two" not in str(e):
            cases.append(f"page 24: unclear {e}")
    kc = rnd(1, 64, 2, 128, dtype=dtype)
    try:
        tiletune.flash_attn_with_kvcache(q, kc, kc, config="family=mma,block_m=64,block_n=64,warps=4,stages=2,"
                                                           "layout=pad,q_in_regs=0,split_ctas=0")
        cases.append("mma config accepted")
    except ValueError as e:
        if "splitkv" not in str(e):
            cases.append(f"mma config: unclear {e}")
    for name, kw in (("window_size", {"window_size": (8, 0)}), ("softcap", {"softcap": 1.0})):
        try:
            tiletune.flash_attn_with_kvcache(q, kc, kc, **kw)
            cases.append(f"{name} accepted")
        except NotImplementedError:
            pass
    CHECKS[0] += 1
    FAILS.extend(cases)


def test_input_checks():
    """check_inputs: device-side lengths and pages checked on the host, a
    clear ValueError for a bad one, the same output for good ones, refused
    under graph capture; an int cache_seqlens past the cache always."""
    dtype = torch.bfloat16
    B, page, npg = 2, 64, 4
    q = rnd(B, 1, 8, 128, dtype=dtype)
    kp = rnd(B * npg, page, 2, 128, dtype=dtype)
    table = torch.tensor([[5, 2, 7, 0], [1, 3, 4, 6]], dtype=torch.int32, device=DEV)
    lens = torch.tensor([130, 256], dtype=torch.int32, device=DEV)
    cases = []

    def refused(what, want, fn):
        try:
            fn()
            cases.append(f"{what} accepted")
        except ValueError as e:
            if want not in str(e):
                cases.append(f"{what}: unclear {e}")

    plain = tiletune.flash_attn_with_kvcache(q, kp, kp, cache_seqlens=lens, block_table=table)
    checked = tiletune.flash_attn_with_kvcache(q, kp, kp, cache_seqlens=lens, block_table=table, check_inputs=True)
    if not torch.allclose(plain.float(), checked.float(), atol=2e-2, rtol=0):
        cases.append("check_inputs changed the output of a good call")
    bad = table.clone()
    bad[1, 2] = B * npg
    refused("a page past k_cache", "block_table[1][2] = 8",
            lambda: tiletune.flash_attn_with_kvcache(q, kp, kp, cache_seqlens=lens, block_table=bad,
                                                     check_inputs=True))
    refused("a length past the pages", "cache_seqlens[0] = 257",
            lambda: tiletune.flash_attn_with_kvcache(q, kp, kp, block_table=table, check_inputs=True,
                                                     cache_seqlens=torch.tensor([257, 1], dtype=torch.int32,
                                                                                device=DEV)))
    kc = rnd(B, 256, 2, 128, dtype=dtype)
    refused("an int cache_seqlens past the cache", "cache_seqlens = 300",
            lambda: tiletune.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=300))
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    tiletune.flash_attn_with_kvcache(q, kp, kp, cache_seqlens=lens, block_table=table)  # sizes the workspace
    try:
        with torch.cuda.graph(g, stream=s):
            tiletune.flash_attn_with_kvcache(q, kp, kp, cache_seqlens=lens, block_table=table, check_inputs=True)
        cases.append("check_inputs accepted under graph capture")
    except ValueError as e:
        if "graph capture" not in str(e):
            cases.append(f"check_inputs under capture: unclear {e}")
    except Exception as e:  # noqa: BLE001
        cases.append(f"check_inputs under capture: {type(e).__name__} {e}")
    torch.cuda.synchronize()

    lq, lk = [3, 0, 5], [40, 7, 0]
    cu_q, cu_k, qv, kv, vv = packed_batch(lq, lk, 8, 2, 128, dtype, 0)
    plain = tiletune.flash_attn_varlen_func(qv, kv, vv, cu_q, cu_k, 5, 40)
    checked = tiletune.flash_attn_varlen_func(qv, kv, vv, cu_q, cu_k, 5, 40, check_inputs=True)
    if not torch.allclose(plain.float(), checked.float(), atol=2e-2, rtol=0):
        cases.append("check_inputs changed the output of a good varlen call")
    refused("a sequence past max_seqlen_k", "more than max_seqlen_k = 39",
            lambda: tiletune.flash_attn_varlen_func(qv, kv, vv, cu_q, cu_k, 5, 39, check_inputs=True))
    CHECKS[0] += 1
    FAILS.extend(cases)


def precompile(pages=()):
    """Compile the variants the checks use on threads (ctypes drops the GIL,
    NVRTC compiles in parallel) so the checks do not wait on them one by one:
    the contiguous cache's programs, and test_kvcache's paged ones for each
    of `pages` (a program of its own a page size), the defaults among them
    at its shapes (the paged default follows the page size and the rows)."""
    import concurrent.futures as cf
    jobs = []
    for dtype, D, _ in KVCACHE_HEADS:
        for cfg in CONFIGS:
            for causal in ("none", "top_left", "bottom_right"):
                jobs.append((dtype, D, 2, 1, cfg, causal, 0, 1))
    for dtype, D, (Hq, Hkv) in KVCACHE_HEADS:
        for page in pages:
            for cfg in CONFIGS if page == 16 else CONFIGS[:2]:
                for causal in ("none", "top_left", "bottom_right"):
                    for Lq in (1, 4, 16) if cfg is None else (1,):
                        jobs.append((dtype, D, Hq, Hkv, cfg, causal, page, Lq))

    def one(j):
        dtype, D, Hq, Hkv, cfg, causal, page, Lq = j
        kw = {}
        if page:
            # test_kvcache's shape: 4 sequences of up to 1024 keys
            npg = 1024 // page
            q = rnd(4, Lq, Hq, D, dtype=dtype)
            k = rnd(4 * npg, page, Hkv, D, dtype=dtype)
            kw = {"block_table": torch.arange(4 * npg, dtype=torch.int32, device=DEV).view(4, npg),
                  "cache_seqlens": torch.tensor([0, 1, 300, 1000], dtype=torch.int32, device=DEV)}
        else:
            q = rnd(1, 1, Hq, D, dtype=dtype)
            k = rnd(1, 64, Hkv, D, dtype=dtype)
        try:
            tiletune.flash_attn_with_kvcache(q, k, k, causal=causal != "none",
                                             causal_align=causal if causal != "none" else "bottom_right",
                                             config=cfg, **kw)
        except Exception:  # noqa: BLE001
            pass
    with cf.ThreadPoolExecutor(16) as ex:
        list(ex.map(one, jobs))
    torch.cuda.synchronize()


if __name__ == "__main__":
    quick = os.environ.get("TT_QUICK", "0")
    pages = () if quick == "2" else (16,) if quick == "1" else (16, 64, 256)
    precompile(pages)
    if quick != "2":
        test_kvcache((0,) + pages)
        test_pages_far_apart()
    test_varlen()
    test_varlen_long_sequences()
    test_varlen_side_stream()
    test_varlen_caller_workspace()
    test_dense_route()
    test_balanced_grid()
    test_run_order()
    test_kvcache_dense_route()
    if quick != "2":
        test_graph_capture()
        test_refusals()
        test_input_checks()
    if not os.environ.get("TT_BALANCED_CHILD"):
        # the balanced grid's child runs the whole set but no child of its own
        child_run("balanced grid", {"TILETUNE_SPLITKV_BALANCE": "1", "TT_BALANCED_CHILD": "1"}, lines=42)
        child_run("side stream off", {"TILETUNE_SIDE_STREAM": "0"}, "test_varlen_side_stream")
    for f in FAILS[:40]:
        print("FAIL", f)
    print(f"{CHECKS[0]} checks, {len(FAILS)} failures")
    sys.exit(1 if FAILS else 0)
