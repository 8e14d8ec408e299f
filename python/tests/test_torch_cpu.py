"""The torch side of the binding that needs no GPU: the op's registration
and its fake (meta) implementation, torch.compile(fullgraph=True) tracing
it on meta tensors, the argument errors, and the switch's fallback to torch
for CPU tensors. Exits 77 (skipped) without torch (torch 2.4+ for the op)."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("TILETUNE_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(os.path.dirname(HERE)))

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: torch is not installed (the binding's torch tests need it)")
    sys.exit(77)

import tiletune  # noqa: E402

HAS_OP = hasattr(torch.library, "custom_op")


def meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device="meta")


@unittest.skipUnless(HAS_OP, f"torch {torch.__version__} has no torch.library.custom_op (2.4+)")
class Op(unittest.TestCase):
    def test_registered_with_torchs_argument_names(self):
        schema = str(torch.ops.tiletune.sdpa.default._schema)
        for part in ("Tensor query", "Tensor key", "Tensor value", "bool is_causal=False",
                     "float? scale=None", "bool enable_gqa=False", "str? config=None"):
            self.assertIn(part, schema)
        self.assertIn("-> (Tensor, Tensor)", str(torch.ops.tiletune.sdpa_lse.default._schema))

    def test_fake_gives_shapes_dtypes_and_strides(self):
        q = meta(2, 8, 16, 64)
        k = meta(2, 2, 33, 64)
        out = torch.ops.tiletune.sdpa(q, k, k, False, None, True)
        self.assertEqual((out.shape, out.dtype, out.device.type), (q.shape, q.dtype, "meta"))
        o, lse = torch.ops.tiletune.sdpa_lse(q, k, k, True, 0.5, True)
        self.assertEqual(o.shape, q.shape)
        self.assertEqual((lse.shape, lse.dtype), ((2, 8, 16), torch.float32))
        # a [B, L, H, D] tensor's transpose: the output is laid out like it
        qt = meta(2, 16, 8, 64, dtype=torch.bfloat16).transpose(1, 2)
        kt = meta(2, 33, 8, 64, dtype=torch.bfloat16).transpose(1, 2)
        self.assertEqual(torch.ops.tiletune.sdpa(qt, kt, kt).stride(), qt.stride())
        o3 = torch.ops.tiletune.sdpa(meta(4, 10, 128), meta(4, 12, 128), meta(4, 12, 128))
        self.assertEqual(o3.shape, (4, 10, 128))

    def test_fake_refuses_what_the_kernel_refuses(self):
        q = meta(1, 2, 16, 80)
        with self.assertRaisesRegex(ValueError, "head_dim 80"):
            torch.ops.tiletune.sdpa(q, q, q)
        with self.assertRaisesRegex(ValueError, "enable_gqa"):
            torch.ops.tiletune.sdpa(meta(1, 4, 16, 64), meta(1, 2, 16, 64), meta(1, 2, 16, 64))
        with self.assertRaisesRegex(TypeError, "float16 or torch.bfloat16"):
            x = meta(1, 2, 16, 64, dtype=torch.float32)
            torch.ops.tiletune.sdpa(x, x, x)

    def test_compile_fullgraph_traces_the_op(self):
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        def f(q, k, v):
            return tiletune.sdpa(q, k, v, None, 0.0, True, -0.3, True) * 2

        torch._dynamo.reset()
        q, k = meta(1, 8, 16, 64), meta(1, 2, 40, 64)
        out = torch.compile(f, backend=backend, fullgraph=True)(q, k, k)
        self.assertEqual(out.shape, q.shape)
        self.assertEqual(len(graphs), 1)
        targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
        self.assertTrue(any("tiletune.sdpa" in t for t in targets), targets)

    def test_compile_fullgraph_with_lse_and_the_switch(self):
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        def f(q, k, v):
            with torch.no_grad():
                o, lse = tiletune.sdpa(q, k, v, return_lse=True)
                o2 = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return o + o2, lse

        torch._dynamo.reset()
        orig = F.scaled_dot_product_attention
        q = meta(2, 4, 8, 32)
        with tiletune.attention():
            o, lse = torch.compile(f, backend=backend, fullgraph=True)(q, q, q)
        self.assertEqual((o.shape, lse.shape), (q.shape, (2, 4, 8)))
        self.assertIs(F.scaled_dot_product_attention, orig)
        targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
        # both calls went to tiletune: the op with LSE, and the switched F.sdpa
        self.assertTrue(any("tiletune.sdpa_lse" in t for t in targets), targets)
        self.assertTrue(any(t.endswith("tiletune.sdpa.default") or t == "tiletune.sdpa"
                            or "tiletune.sdpa." in t for t in targets), targets)


class Arguments(unittest.TestCase):
    def setUp(self):
        self.q = torch.randn(1, 2, 8, 64, dtype=torch.float16)

    def test_mask_and_dropout_are_named(self):
        q = self.q
        with self.assertRaisesRegex(ValueError, "attn_mask"):
            tiletune.sdpa(q, q, q, torch.ones(8, 8, dtype=torch.bool))
        with self.assertRaisesRegex(ValueError, "dropout_p"):
            tiletune.sdpa(q, q, q, None, 0.1)

    def test_old_positional_order_is_caught(self):
        # sdpa(q, k, v, True) meant is_causal before; in torch's order the
        # fourth argument is attn_mask
        with self.assertRaisesRegex(ValueError, "argument order"):
            tiletune.sdpa(self.q, self.q, self.q, True)

    def test_grad_is_refused_while_enabled(self):
        q = self.q.clone().requires_grad_()
        with self.assertRaisesRegex(RuntimeError, "forward-only"):
            tiletune.sdpa(q, self.q, self.q)
        # no_grad / inference_mode pass the grad check (then CPU is refused)
        for ctx in (torch.no_grad, torch.inference_mode):
            with ctx(), self.assertRaisesRegex(TypeError, "CUDA"):
                tiletune.sdpa(q, self.q, self.q)

    def test_not_tensors(self):
        with self.assertRaisesRegex(TypeError, "key must be a torch.Tensor"):
            tiletune.sdpa(self.q, "k", self.q)


class Switch(unittest.TestCase):
    def test_cpu_calls_fall_back_to_torch_and_are_counted(self):
        orig = F.scaled_dot_product_attention
        q, k, v = (torch.randn(2, 4, 16, 64) for _ in range(3))
        want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        with tiletune.attention() as outer:
            self.assertIsNot(F.scaled_dot_product_attention, orig)
            with tiletune.attention() as inner:
                got = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            got2 = F.scaled_dot_product_attention(q, k, v, torch.ones(16, 16, dtype=torch.bool))
        self.assertIs(F.scaled_dot_product_attention, orig)
        torch.testing.assert_close(got, want)
        self.assertEqual((inner.tiletune, inner.torch), (0, 1))
        self.assertEqual((outer.tiletune, outer.torch), (0, 2))
        self.assertEqual(dict(outer.reasons), {"device": 1, "attn_mask": 1})
        self.assertGreaterEqual(tiletune.stats()["torch"]["switch_torch"], 2)
        self.assertEqual(got2.shape, q.shape)

    def test_restored_after_an_exception(self):
        orig = F.scaled_dot_product_attention
        with self.assertRaises(KeyError):
            with tiletune.attention():
                raise KeyError("x")
        self.assertIs(F.scaled_dot_product_attention, orig)


if __name__ == "__main__":
    unittest.main(verbosity=2)
