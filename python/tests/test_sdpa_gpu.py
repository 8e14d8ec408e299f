"""tiletune.sdpa against torch.nn.functional.scaled_dot_product_attention on a
GPU: the relative error against a float64 reference at most twice torch's own
same-dtype error on the same inputs, LSE within 1e-3, never a NaN (the output
is poisoned first). Skips without torch or CUDA."""
import math
import os
import sys

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

if os.environ.get("TILETUNE_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tiletune  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DEV = "cuda"
HDIMS = (32, 64, 96, 128, 256)
DTYPES = (torch.float16, torch.bfloat16)


def reference(q, k, v, causal, scale, gqa):
    """float64 attention and LSE (natural log, scale included)."""
    q, k, v = q.double(), k.double(), v.double()
    if gqa and q.shape[1] != k.shape[1]:
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        Lq, Lk = s.shape[-2], s.shape[-1]
        mask = torch.ones(Lq, Lk, dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.matmul(torch.softmax(s, dim=-1), v), lse


def rel(a, b):
    return ((a.double() - b).norm() / b.norm().clamp_min(1e-30)).item()


def check(q, k, v, causal=False, scale=None, gqa=False, config=None):
    sc = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    ref, ref_lse = reference(q, k, v, causal, sc, gqa)
    torch_out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                               enable_gqa=gqa)
    out = torch.full_like(q, float("nan"))  # poison: an unwritten element stays NaN
    got, lse = tiletune.sdpa(q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa,
                             config=config, return_lse=True, out=out)
    assert got.shape == torch_out.shape and got.dtype == q.dtype
    assert not torch.isnan(got).any(), "NaN in the output (unwritten or broken)"
    assert not torch.isnan(lse).any()
    err, torch_err = rel(got, ref), rel(torch_out, ref)
    assert err <= 2 * torch_err + 1e-5, f"rel error {err:.3g} > 2 x torch's {torch_err:.3g}"
    lse_err = (lse.double() - ref_lse).abs().max().item()
    assert lse_err <= 1e-3, f"LSE error {lse_err:.3g}"
    return err, torch_err


def rand(*shape, dtype):
    return torch.randn(*shape, dtype=dtype, device=DEV)


@pytest.mark.parametrize("D", HDIMS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", (False, True))
@pytest.mark.parametrize("L", (1, 17, 128, 1000, 4096))
def test_against_torch(D, dtype, causal, L):
    torch.manual_seed(L * 1000 + D)
    B, H = (1, 2) if L >= 1000 else (2, 3)
    check(rand(B, H, L, D, dtype=dtype), rand(B, H, L, D, dtype=dtype), rand(B, H, L, D, dtype=dtype),
          causal)


@pytest.mark.parametrize("D", HDIMS)
@pytest.mark.parametrize("Lq,Lk", ((17, 1000), (1000, 17), (128, 4097), (1, 300)))
@pytest.mark.parametrize("causal", (False, True))
def test_seqlen_q_differs(D, Lq, Lk, causal):
    dt = torch.bfloat16 if Lq < Lk else torch.float16
    check(rand(2, 2, Lq, D, dtype=dt), rand(2, 2, Lk, D, dtype=dt), rand(2, 2, Lk, D, dtype=dt), causal)


@pytest.mark.parametrize("D", HDIMS)
@pytest.mark.parametrize("causal", (False, True))
def test_gqa(D, causal):
    check(rand(2, 8, 300, D, dtype=torch.float16), rand(2, 2, 257, D, dtype=torch.float16),
          rand(2, 2, 257, D, dtype=torch.float16), causal, gqa=True)


@pytest.mark.parametrize("D", HDIMS)
def test_blhd_layout_without_copy(D):
    B, L, H = 2, 333, 4
    q, k, v = (rand(B, L, H, D, dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
    check(q, k, v, causal=True)
    out = tiletune.sdpa(q, k, v)
    assert out.stride() == q.stride()  # allocated like the input, as torch does


def test_explicit_scale_and_3d_inputs():
    q, k, v = (rand(4, 100, 64, dtype=torch.float16) for _ in range(3))
    check(q, k, v, scale=0.3)
    out = tiletune.sdpa(q, k, v, scale=0.0)  # uniform attention: the mean of v
    torch.testing.assert_close(out.float(), v.float().mean(dim=1, keepdim=True).expand_as(out),
                               atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("D", HDIMS)
@pytest.mark.parametrize("dtype,causal", ((torch.float16, False), (torch.bfloat16, True)))
def test_every_variant(D, dtype, causal):
    space = tiletune.variants(D, dtype, causal=causal, seqlen_q=257, seqlen_k=300)
    assert len(space) >= 4
    q, k, v = rand(1, 2, 257, D, dtype=dtype), rand(1, 2, 300, D, dtype=dtype), rand(1, 2, 300, D, dtype=dtype)
    for cfg in space:
        check(q, k, v, causal, config=cfg)


def test_config_forms():
    q, k, v = (rand(1, 2, 64, 64, dtype=torch.float16) for _ in range(3))
    text = tiletune.default_config(64, torch.float16, seqlen_q=64)
    a = tiletune.sdpa(q, k, v, config=text)
    b = tiletune.sdpa(q, k, v, config={"block_n": 32, "stages": 1})
    c = tiletune.sdpa(q, k, v)
    torch.testing.assert_close(a, b, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(a, c, atol=2e-3, rtol=2e-3)
    with pytest.raises(ValueError):
        tiletune.sdpa(q, k, v, config="block_m=64")
    with pytest.raises(ValueError):
        tiletune.sdpa(q, k, v, config={"block_m": 48})  # 12 rows per warp: illegal
    with pytest.raises(ValueError):
        tiletune.sdpa(q, k, v, config={"blockm": 64})


def test_runs_on_the_current_stream():
    q, k, v = (rand(1, 4, 512, 128, dtype=torch.bfloat16) for _ in range(3))
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        out = tiletune.sdpa(q, k, v)
    s.synchronize()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=2e-2, rtol=2e-2)


def test_bad_arguments():
    q = rand(1, 2, 16, 64, dtype=torch.float16)
    with pytest.raises(TypeError, match="CUDA"):
        tiletune.sdpa(q.cpu(), q.cpu(), q.cpu())
    with pytest.raises(TypeError, match="mixed dtypes"):
        tiletune.sdpa(q, q.bfloat16(), q)
    with pytest.raises(TypeError, match="float16 or torch.bfloat16"):
        tiletune.sdpa(q.float(), q.float(), q.float())
    with pytest.raises(TypeError):
        tiletune.sdpa(q, "k", q)
    with pytest.raises(ValueError, match="enable_gqa"):
        tiletune.sdpa(q, q[:, :1], q[:, :1])
    with pytest.raises(ValueError, match="multiple"):
        tiletune.sdpa(rand(1, 3, 16, 64, dtype=torch.float16), q, q, enable_gqa=True)
    with pytest.raises(ValueError):
        tiletune.sdpa(q, q[..., :32], q[..., :32])
    with pytest.raises(ValueError):
        tiletune.sdpa(q[0, 0], q[0, 0], q[0, 0])  # 2-D
    with pytest.raises(ValueError, match="head_dim"):
        x = rand(1, 2, 16, 80, dtype=torch.float16)
        tiletune.sdpa(x, x, x)
    with pytest.raises(ValueError):
        tiletune.sdpa(q, q, q, scale=float("nan"))


@pytest.mark.parametrize("causal", (False, True))
def test_negative_scale_as_in_torch(causal):
    q, k, v = (rand(2, 3, 77, 64, dtype=torch.bfloat16) for _ in range(3))
    check(q, k, v, causal, scale=-0.2)


def test_strided_inputs_are_handled():
    base = rand(2, 4, 100, 128, dtype=torch.float16)
    q = base[:, :, ::2]  # row stride 256: readable in place
    k = base[..., :64].contiguous()[:, :, :50]
    nc = rand(2, 4, 64, 50, dtype=torch.float16).transpose(-1, -2)  # last dim not contiguous
    check(q[..., :64], k, nc)


def test_empty_batch():
    q = rand(0, 2, 16, 64, dtype=torch.float16)
    assert tiletune.sdpa(q, q, q).shape == q.shape
