"""The binding without a GPU or torch: library loading, configs, revision,
and a clear error from the GPU calls. Runs in CI (ctest label `unit`)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tiletune  # noqa: E402


def have_gpu():
    try:
        tiletune.variants(64, "fp16", seqlen_q=128)
        return True
    except tiletune.TileTuneError as e:
        return e.code != -8


class Binding(unittest.TestCase):
    def test_loads_the_library(self):
        path = tiletune.library_path()
        self.assertIn("libtiletune.so", path)
        if os.environ.get("TILETUNE_LIB"):
            self.assertEqual(path, os.environ["TILETUNE_LIB"])

    def test_revision_is_hex(self):
        rev = tiletune.revision()
        self.assertRegex(rev, r"^[0-9a-f]{16}$")

    def test_default_config_round_trips(self):
        text = tiletune.default_config(128, "bf16", causal=True, seqlen_q=4096)
        d = tiletune.parse_config(text)
        self.assertEqual(d["family"], "mma")
        self.assertIn(d["layout"], ("pad", "swizzle"))
        self.assertGreaterEqual(d["block_m"], 16)
        self.assertEqual(list(d), ["family", "block_m", "block_n", "warps", "stages", "layout",
                                   "q_in_regs"])

    def test_bad_configs(self):
        with self.assertRaises(ValueError):
            tiletune.parse_config("block_m=64")
        with self.assertRaises(ValueError):
            tiletune.parse_config("nonsense")
        with self.assertRaises(TypeError):
            tiletune.default_config(64, "float32")
        with self.assertRaises(ValueError):
            tiletune.default_config(80, "fp16")

    def test_structs_match_the_header(self):
        import ctypes
        # sizeof() of the C structs on x86-64 (tiletune.h); a field added to
        # one side only shows here. tt_key: 3 int32 + pad + 2 int64 + 2 x 33
        # chars + pad to 8.
        self.assertEqual(ctypes.sizeof(tiletune._Config), 64)
        self.assertEqual(ctypes.sizeof(tiletune._Key), 104)
        # tt_sdpa_args: 5 pointers, 6 + 12 + 2 int64, 4 x 4 bytes, 2 pointers, 8 int64
        self.assertEqual(ctypes.sizeof(tiletune._Args), 40 + 160 + 16 + 16 + 64)

    def test_gpu_calls_without_a_gpu(self):
        if have_gpu():
            self.skipTest("a GPU is present")
        with self.assertRaises(tiletune.TileTuneError) as cm:
            tiletune.variants(64, "fp16", seqlen_q=128)
        self.assertEqual(cm.exception.code, -8)
        self.assertIn("libcuda", str(cm.exception))
        # device as text reaches the library (str.index is no ordinal)
        for dev in ("cuda", "cuda:0", 0):
            with self.assertRaises(tiletune.TileTuneError) as cm:
                tiletune.variants(64, "fp16", seqlen_q=128, device=dev)
            self.assertEqual(cm.exception.code, -8)

    def test_device_that_is_not_cuda(self):
        for dev in ("cpu", "cuda:x", "cuda:-1"):
            with self.assertRaises(ValueError):
                tiletune.variants(64, "fp16", seqlen_q=128, device=dev)


if __name__ == "__main__":
    unittest.main()
