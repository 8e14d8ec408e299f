"""tiletune inside PyTorch on a GPU: torch's argument order and semantics
against a float64 reference, torch.compile(fullgraph=True) with no graph
break, CUDA graph capture and replay, the switch under a real transformer
block, TILETUNE_LOG, and the per-shape plans. Skips without torch or CUDA."""
import math
import os
import subprocess
import sys
import textwrap
import threading

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("TILETUNE_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.dirname(HERE))
import tiletune  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DEV = "cuda"


def rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, dtype=dtype, device=DEV)


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def ref64(*args, **kwargs):
    """torch's own SDPA on float64 copies: the semantics to match."""
    up = [a.double() if isinstance(a, torch.Tensor) else a for a in args]
    return F.scaled_dot_product_attention(*up, **kwargs)


def assert_matches(got, q, k, v, *args, **kwargs):
    """got within 2x torch's own same-dtype error of the float64 result."""
    want = ref64(q, k, v, *args, **kwargs)
    mine = rel(got, want)
    theirs = rel(F.scaled_dot_product_attention(q, k, v, *args, **kwargs), want)
    if math.isnan(theirs):
        # torch's fused backends return NaN for some scales (a negative or
        # zero scale in bf16 on the H200, torch 2.11): hold ours to torch's
        # math backend in the same dtype instead
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.MATH):
            theirs = rel(F.scaled_dot_product_attention(q, k, v, *args, **kwargs), want)
    assert not torch.isnan(got).any()
    assert mine <= 2 * theirs + 1e-5, f"rel error {mine:.3g} vs torch's {theirs:.3g}"


# ---- semantics -------------------------------------------------------------------------------

def test_positional_order_is_torchs():
    q, k, v = rand(2, 4, 100, 64), rand(2, 4, 130, 64), rand(2, 4, 130, 64)
    # (q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa); torch
    # itself takes scale and enable_gqa by keyword only, tiletune either way
    got = tiletune.sdpa(q, k, v, None, 0.0, True)
    assert_matches(got, q, k, v, None, 0.0, True)
    got = tiletune.sdpa(q, k, v, None, 0.0, False, 0.05)
    assert_matches(got, q, k, v, None, 0.0, False, scale=0.05)


@pytest.mark.parametrize("causal", (False, True))
@pytest.mark.parametrize("scale", (None, 0.3, -0.125, 0.0))
def test_scales_as_in_torch(causal, scale):
    q, k, v = rand(1, 3, 64, 128), rand(1, 3, 96, 128), rand(1, 3, 96, 128)
    got = tiletune.sdpa(q, k, v, is_causal=causal, scale=scale)
    assert_matches(got, q, k, v, is_causal=causal, scale=scale)


@pytest.mark.parametrize("D", (64, 128))
def test_gqa_and_3d_as_in_torch(D):
    q, k, v = rand(2, 8, 33, D, dtype=torch.float16), rand(2, 2, 70, D, dtype=torch.float16), \
        rand(2, 2, 70, D, dtype=torch.float16)
    assert_matches(tiletune.sdpa(q, k, v, is_causal=True, enable_gqa=True), q, k, v,
                   is_causal=True, enable_gqa=True)
    q3, k3 = rand(6, 20, D), rand(6, 40, D)
    assert_matches(tiletune.sdpa(q3, k3, k3), q3, k3, k3)


def test_errors_name_the_argument():
    q = rand(1, 2, 16, 64)
    with pytest.raises(ValueError, match="attn_mask"):
        tiletune.sdpa(q, q, q, torch.ones(16, 16, dtype=torch.bool, device=DEV))
    with pytest.raises(ValueError, match="argument order"):
        tiletune.sdpa(q, q, q, True)  # is_causal in the attn_mask slot
    with pytest.raises(ValueError, match="dropout_p"):
        tiletune.sdpa(q, q, q, dropout_p=0.1)
    g = q.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="forward-only"):
        tiletune.sdpa(g, q, q)
    with torch.no_grad():
        torch.testing.assert_close(tiletune.sdpa(g, q, q), tiletune.sdpa(q, q, q))
    with torch.inference_mode():
        torch.testing.assert_close(tiletune.sdpa(g, q, q), tiletune.sdpa(q, q, q))


def test_output_laid_out_like_the_query_as_the_fake_says():
    # dense, but the last dim is not contiguous: the kernel needs a copy, the
    # output still takes the query's layout (what the fake implementation
    # tells torch.compile)
    q = rand(1, 4, 64, 48).transpose(-1, -2)  # [1, 4, 48, 64], strides (.., .., 1, 48)
    k = rand(1, 4, 80, 64)
    got = tiletune.sdpa(q, k, k)
    assert got.stride() == torch.empty_like(q).stride()
    assert_matches(got, q, k, k)
    if hasattr(torch.library, "opcheck"):
        torch.library.opcheck(torch.ops.tiletune.sdpa.default, (q, k, k),
                              test_utils=("test_schema", "test_faketensor"))


def test_out_and_lse():
    q, k = rand(1, 4, 50, 64), rand(1, 4, 60, 64)
    out = torch.full_like(q, float("nan"))
    o, lse = tiletune.sdpa(q, k, k, return_lse=True, out=out)
    assert o is out and not torch.isnan(o).any()
    s = (q.double() @ k.double().transpose(-1, -2)) / 8.0
    torch.testing.assert_close(lse.double(), torch.logsumexp(s, -1), atol=1e-3, rtol=1e-3)


# ---- torch.compile and CUDA graphs ------------------------------------------------------------

def test_compile_fullgraph_no_graph_break():
    from torch._dynamo.testing import CompileCounterWithBackend

    def f(q, k, v):
        o = tiletune.sdpa(q, k, v, is_causal=True, enable_gqa=True)
        return o.float().sum(-1) * 2

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    cf = torch.compile(f, backend=counter, fullgraph=True)
    q, k = rand(2, 8, 128, 64), rand(2, 2, 256, 64)
    with torch.no_grad():
        got, want = cf(q, k, k), f(q, k, k)
        torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2)
        cf(rand(2, 8, 128, 64), k, k)  # same shape: no recompile
    assert counter.frame_count == 1, counter.frame_count


def test_compile_with_lse_and_explained():
    def f(q, k, v):
        o, lse = tiletune.sdpa(q, k, v, None, 0.0, False, None, False, return_lse=True)
        return o * 2, lse

    torch._dynamo.reset()
    q = rand(1, 4, 64, 128, dtype=torch.float16)
    explanation = torch._dynamo.explain(f)(q, q, q)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    with torch.no_grad():
        o, lse = torch.compile(f, fullgraph=True)(q, q, q)
        o2, lse2 = f(q, q, q)
    torch.testing.assert_close(o, o2)
    torch.testing.assert_close(lse, lse2)


def test_cuda_graph_capture_and_replay():
    q, k, v = rand(1, 8, 1, 128), rand(1, 8, 512, 128), rand(1, 8, 512, 128)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up: compile and load the variant before capture
        for _ in range(3):
            tiletune.sdpa(q, k, v)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = tiletune.sdpa(q, k, v)
    for _ in range(3):  # new inputs in the same buffers, then replay
        q.copy_(rand(1, 8, 1, 128))
        k.copy_(rand(1, 8, 512, 128))
        g.replay()
        torch.cuda.synchronize()
        assert_matches(out, q, k, v)


def test_compile_reduce_overhead():
    def f(q, k, v):
        return tiletune.sdpa(q, k, v, is_causal=True) + 1

    torch._dynamo.reset()
    cf = torch.compile(f, mode="reduce-overhead", fullgraph=True)
    q = rand(2, 4, 64, 64)
    with torch.no_grad():
        for _ in range(4):
            x = rand(2, 4, 64, 64)
            q.copy_(x)
            torch.testing.assert_close(cf(q, q, q).clone(), f(q, q, q))


# ---- the switch ---------------------------------------------------------------------------------

def test_switch_runs_a_transformer_encoder_layer():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=512, dropout=0.0,
                                       batch_first=True).to(DEV, torch.float16).eval()
    x = rand(3, 70, 256, dtype=torch.float16)
    was = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # else the fused native path skips F.sdpa
    try:
        with torch.no_grad():
            want = layer(x)
            with tiletune.attention() as counts:
                got = layer(x)
                # a padding mask is an attn_mask: that call stays on torch
                pad = torch.zeros(3, 70, dtype=torch.bool, device=DEV)
                pad[:, 60:] = True
                masked = layer(x, src_key_padding_mask=pad)
            want_masked = layer(x, src_key_padding_mask=pad)
    finally:
        torch.backends.mha.set_fastpath_enabled(was)
    assert counts.tiletune == 1 and counts.torch == 1, counts
    assert counts.reasons["attn_mask"] == 1, counts
    assert rel(got, want) < 1e-2, rel(got, want)
    torch.testing.assert_close(masked, want_masked)


class GQABlock(nn.Module):
    """A decoder block of the Llama kind: RMSNorm, grouped-query attention
    with a KV cache, a gated MLP."""

    def __init__(self, dim=512, heads=8, kv_heads=2):
        super().__init__()
        self.h, self.kvh, self.d = heads, kv_heads, dim // heads
        self.wq = nn.Linear(dim, heads * self.d, bias=False)
        self.wkv = nn.Linear(dim, 2 * kv_heads * self.d, bias=False)
        self.wo = nn.Linear(heads * self.d, dim, bias=False)
        self.up = nn.Linear(dim, 2 * 4 * dim, bias=False)
        self.down = nn.Linear(4 * dim, dim, bias=False)
        self.n1, self.n2 = nn.RMSNorm(dim), nn.RMSNorm(dim)

    def forward(self, x, cache=None):
        B, L, _ = x.shape
        h = self.n1(x)
        q = self.wq(h).view(B, L, self.h, self.d).transpose(1, 2)
        k, v = self.wkv(h).view(B, L, 2, self.kvh, self.d).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        if cache is not None:
            k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None, enable_gqa=True)
        x = x + self.wo(a.transpose(1, 2).reshape(B, L, -1))
        g, u = self.up(self.n2(x)).chunk(2, -1)
        return x + self.down(F.silu(g) * u), (k, v)


def run_decoder(block, prompt, steps):
    x, cache = block(prompt)
    outs = [x]
    for i in range(steps):
        x, cache = block(x[:, -1:], cache)
        outs.append(x)
    return torch.cat(outs, 1)


def test_switch_runs_a_gqa_decoder_block_with_fallbacks():
    torch.manual_seed(1)
    block = GQABlock().to(DEV, torch.bfloat16).eval()
    prompt = rand(2, 40, 512)
    with torch.inference_mode():
        want = run_decoder(block, prompt, 6)
        with tiletune.attention() as counts:
            got = run_decoder(block, prompt, 6)
    assert (counts.tiletune, counts.torch) == (7, 0), counts
    assert rel(got, want) < 3e-2, rel(got, want)  # bf16 through 7 steps
    # what tiletune cannot run goes to torch, counted with its reason
    f32 = GQABlock().to(DEV).eval()
    with tiletune.attention() as counts:
        with torch.no_grad():
            f32(rand(1, 8, 512, dtype=torch.float32))
        out, _ = block(prompt)  # grad enabled, parameters require grad
        out.float().sum().backward()
    assert counts.tiletune == 0 and counts.reasons == {"dtype": 1, "requires_grad": 1}, counts
    assert block.wq.weight.grad is not None  # torch's backward ran


def test_switch_under_compile():
    torch.manual_seed(2)
    block = GQABlock().to(DEV, torch.float16).eval()
    x = rand(1, 64, 512, dtype=torch.float16)
    with torch.no_grad():
        want, _ = block(x)
        torch._dynamo.reset()
        with tiletune.attention():
            got, _ = torch.compile(block, fullgraph=True)(x)
    assert rel(got, want) < 1e-2, rel(got, want)


# ---- visibility and plans ---------------------------------------------------------------------

def test_tiletune_log_once_per_key():
    code = textwrap.dedent("""
        import torch, tiletune
        q = torch.randn(1, 4, 1, 128, dtype=torch.bfloat16, device="cuda")
        k = torch.randn(1, 4, 512, 128, dtype=torch.bfloat16, device="cuda")
        for _ in range(5):
            tiletune.sdpa(q, k, k)
        tiletune.sdpa(q, k[:, :, :300], k[:, :, :300])
        tiletune.sdpa(q, k, k, config=tiletune.default_config(128, torch.bfloat16))
        torch.cuda.synchronize()
        print(tiletune.stats())
    """)
    env = dict(os.environ, TILETUNE_LOG="1", TILETUNE_SOCKET="/nonexistent/tiletune.sock")
    if os.environ.get("TILETUNE_TEST_INSTALLED") != "1":
        env["PYTHONPATH"] = os.path.dirname(HERE) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("tiletune: ")]
    assert len(lines) == 3, r.stderr
    assert "seqlen_q=1 seqlen_k=512" in lines[0] and "family=" in lines[0]
    assert "default: no answer from the daemon at /nonexistent/tiletune.sock" in lines[0], lines[0]
    assert "built-in default" in lines[0]
    assert "seqlen_k=300" in lines[1]
    assert "the config= argument" in lines[2]


def test_plans_are_reused_and_counted():
    before = tiletune.stats()["torch"]
    q, k = rand(1, 32, 1, 128), rand(1, 8, 512, 128)
    for _ in range(10):
        tiletune.sdpa(q, k, k, enable_gqa=True)
    after = tiletune.stats()["torch"]
    assert after["calls"] - before["calls"] == 10
    assert after["plans"] - before["plans"] <= 1
    assert after["slow_calls"] == before["slow_calls"]


def test_threads_share_plans():
    q, k = rand(2, 8, 64, 64), rand(2, 8, 64, 64)
    want = F.scaled_dot_product_attention(q, k, k)
    errors = []

    def work():
        try:
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                for _ in range(50):
                    out = tiletune.sdpa(q, k, k)
            s.synchronize()
            torch.testing.assert_close(out, want, atol=2e-2, rtol=2e-2)
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def test_lookup_and_client_counters():
    r = tiletune.lookup(128, torch.bfloat16, seqlen_q=1, seqlen_k=512)
    assert r.match in ("exact", "nearest", "default") and r.config.startswith("family=")
    c = tiletune.stats()["client"]
    assert c["lookups"] >= 1 and c["lookups"] == c["cache_hits"] + c["daemon_answers"] + \
        c["fallbacks"] + c["key_errors"]
    assert math.isfinite(r.tflops)
