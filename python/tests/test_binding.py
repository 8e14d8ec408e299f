"""The binding without a GPU or torch: the package imports, finds its
library, configs, lookups (no daemon, and the real daemon when the build
gives one), the client's counters, and clear errors. Runs in CI twice: over
the source tree (ctest python_binding) and from the installed wheel in a
fresh virtual environment (ctest python_wheel, TILETUNE_TEST_INSTALLED=1).

Settings: TILETUNE_TEST_DAEMON (tiletuned) and TILETUNE_TEST_SEED
(tt_lookup_bench, which seeds a database) enable the daemon tests."""
import ctypes
import os
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
INSTALLED = os.environ.get("TILETUNE_TEST_INSTALLED") == "1"
if not INSTALLED:
    sys.path.insert(0, os.path.join(ROOT, "python"))
import tiletune  # noqa: E402

BENCH_GPU, BENCH_REV = "0bec0bec0bec0bec", "0dec0dec0dec0dec"  # bench/lookup's seed


def have_gpu():
    try:
        tiletune.variants(64, "fp16", seqlen_q=128)
        return True
    except tiletune.TileTuneError as e:
        return e.code != -8


def run_python(code, env=None):
    """A snippet in a fresh interpreter (the process client reads the socket
    path once), importing tiletune as this test does."""
    e = dict(os.environ)
    e.update(env or {})
    if not INSTALLED:
        e["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + e.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError(f"snippet failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


class Package(unittest.TestCase):
    def test_version_is_the_projects(self):
        self.assertRegex(tiletune.__version__, r"^\d+\.\d+\.\d+$")
        cmake = os.path.join(ROOT, "CMakeLists.txt")
        header = os.path.join(ROOT, "include", "tiletune.h")
        if not os.path.exists(cmake):
            self.skipTest("no source tree beside the tests")
        with open(cmake) as f:
            m = re.search(r"project\(tiletune VERSION (\S+)", f.read())
        self.assertEqual(tiletune.__version__, m.group(1))
        with open(header) as f:
            m = re.search(r'#define TT_VERSION_STRING "([^"]+)"', f.read())
        self.assertEqual(tiletune.__version__, m.group(1))

    def test_loads_the_library(self):
        path = tiletune.library_path()
        self.assertIn("libtiletune.so", path)
        if os.environ.get("TILETUNE_LIB"):
            self.assertEqual(path, os.environ["TILETUNE_LIB"])

    def test_installed_package_uses_its_own_library(self):
        if not INSTALLED:
            self.skipTest("runs from the installed wheel (ctest python_wheel)")
        pkg = os.path.dirname(os.path.abspath(tiletune.__file__))
        self.assertFalse(pkg.startswith(os.path.join(ROOT, "python")), pkg)
        self.assertIsNone(os.environ.get("TILETUNE_LIB"))
        self.assertEqual(os.path.dirname(tiletune.library_path()), pkg)

    def test_imports_without_torch(self):
        if tiletune.torch_available():
            self.skipTest("torch is installed")
        for name in ("sdpa", "attention"):
            with self.assertRaises(ImportError) as cm:
                getattr(tiletune, name)(None, None, None)
            self.assertIn("needs torch", str(cm.exception))
        self.assertNotIn("torch", tiletune.stats())

    def test_revision_is_hex(self):
        self.assertRegex(tiletune.revision(), r"^[0-9a-f]{16}$")

    def test_structs_match_the_header(self):
        # sizeof() of the C structs on x86-64 (tiletune.h); a field added to
        # one side only shows here.
        self.assertEqual(ctypes.sizeof(tiletune._Config), 64)
        self.assertEqual(ctypes.sizeof(tiletune._Key), 104)
        # tt_sdpa_args: 5 pointers, 6 + 12 + 2 int64, 4 x 4 bytes, 2 pointers, 8 int64
        self.assertEqual(ctypes.sizeof(tiletune._Args), 40 + 160 + 16 + 16 + 64)
        from tiletune import _lib
        self.assertEqual(ctypes.sizeof(_lib._Stats), 16 * 8)
        # tt_lookup_result: config, match + pad, tflops, 2 seqlens, group + 4 reserved, 3 reserved
        self.assertEqual(ctypes.sizeof(_lib._LookupResult), 64 + 8 + 8 + 16 + 8 + 24)
        # tt_key_v2: tt_key's 98 bytes, pad to 4, group, 7 reserved, pad to 8
        self.assertEqual(ctypes.sizeof(_lib._KeyV2), 136)
        self.assertEqual(_lib._KeyV2.group.offset, 100)


class Configs(unittest.TestCase):
    def test_default_config_round_trips(self):
        text = tiletune.default_config(128, "bf16", causal=True, seqlen_q=4096)
        d = tiletune.parse_config(text)
        self.assertEqual(d["family"], "mma")
        self.assertIn(d["layout"], ("pad", "swizzle"))
        self.assertGreaterEqual(d["block_m"], 16)
        self.assertEqual(list(d), ["family", "block_m", "block_n", "warps", "stages", "layout",
                                   "q_in_regs", "split_ctas"])
        self.assertEqual(d["split_ctas"], 0)
        self.assertEqual(tiletune.format_config(tiletune._lib._parse(text)), text)

    def test_a_parsed_config_round_trips_through_a_dict(self):
        # split_ctas=0 is left out of the text; the decode key's portable
        # default has 2, which a dict without the knob would take
        text = "family=splitkv,block_m=16,block_n=64,warps=4,stages=4,layout=pad,q_in_regs=1"
        self.assertIn("split_ctas=2", tiletune.default_config(128, "bf16", seqlen_q=1, seqlen_k=32768, group=4))
        d = tiletune.parse_config(text)
        self.assertEqual(d["split_ctas"], 0)
        self.assertEqual(tiletune.config_text(d, 128, "bf16", seqlen_q=1, seqlen_k=32768), text)

    def test_config_text_from_a_dict(self):
        text = tiletune.config_text({"block_n": 32, "stages": 1}, 64, "fp16")
        d = tiletune.parse_config(text)
        self.assertEqual((d["block_n"], d["stages"]), (32, 1))
        with self.assertRaises(ValueError):
            tiletune.config_text({"blockm": 64}, 64, "fp16")
        with self.assertRaises(TypeError):
            tiletune.config_text(3, 64, "fp16")

    def test_causal_takes_three_alignments(self):
        top = tiletune.default_config(128, "bf16", causal=True, seqlen_q=8, seqlen_k=4096)
        self.assertEqual(tiletune.default_config(128, "bf16", causal=1, seqlen_q=8, seqlen_k=4096), top)
        self.assertEqual(tiletune.default_config(128, "bf16", causal="top_left", seqlen_q=8, seqlen_k=4096), top)
        # both alignments take the causal default row
        self.assertEqual(tiletune.default_config(128, "bf16", causal="bottom_right", seqlen_q=8,
                                                 seqlen_k=4096), top)
        self.assertEqual(tiletune.default_config(128, "bf16", causal=tiletune.CAUSAL_BOTTOM_RIGHT, seqlen_q=8,
                                                 seqlen_k=4096), top)
        for bad in (3, -1, "bottom-right", 1.5):
            with self.assertRaises(ValueError):
                tiletune.default_config(128, "bf16", causal=bad, seqlen_q=8)

    def test_a_call_size_needs_a_device(self):
        # the size-dependent default is a device's (sm_90's chunk rule)
        with self.assertRaises(ValueError):
            tiletune.default_config(128, "bf16", seqlen_q=64, seqlen_k=4096, group=4, batch=8, heads=32)
        with self.assertRaises(ValueError):
            tiletune.default_config(128, "bf16", seqlen_q=64, seqlen_k=4096, device=0, batch=8)

    def test_bad_configs(self):
        with self.assertRaises(ValueError):
            tiletune.parse_config("block_m=64")
        with self.assertRaises(ValueError):
            tiletune.parse_config("nonsense")
        with self.assertRaises(TypeError):
            tiletune.default_config(64, "float32")
        with self.assertRaises(ValueError):
            tiletune.default_config(80, "fp16")

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

    def test_variants_of_a_group_no_kernel_packs(self):
        # the key's fault, said before any device is asked (GPU or none)
        with self.assertRaises(ValueError) as cm:
            tiletune.variants(128, "bf16", seqlen_q=1, seqlen_k=8192, group=257)
        self.assertIn("group 257", str(cm.exception))

    def test_device_that_is_not_cuda(self):
        for dev in ("cpu", "cuda:x", "cuda:-1"):
            with self.assertRaises(ValueError):
                tiletune.variants(64, "fp16", seqlen_q=128, device=dev)


class LookupWithoutDaemon(unittest.TestCase):
    def test_fallback_says_why_and_counts(self):
        r = run_python("""
            import tiletune
            a = tiletune.lookup(128, "bf16", causal=True, seqlen_q=1, seqlen_k=512)
            b = tiletune.lookup(128, "bf16", causal=True, seqlen_q=1, seqlen_k=512)
            assert a == b, (a, b)
            assert a.fallback and a.match == "default" and a.tflops == 0, a
            assert a.config == tiletune.default_config(128, "bf16", True, 1, 512), a
            assert (a.seqlen_q, a.seqlen_k) == (1, 512), a
            print("REASON", a.reason)
            try:
                tiletune.lookup(80, "bf16")
            except ValueError as e:
                print("REFUSED", e)
            s = tiletune.stats()["client"]
            print("STATS", s)
            assert s["fallbacks"] == 2 and s["lookups"] == 3 and s["key_errors"] == 1, s
            assert s["failures"] == 1 and s["connects"] == 0, s
            assert s["last_failure"] and s["last_failure_code"] == -6, s
        """, {"TILETUNE_SOCKET": "/nonexistent/dir/tiletune.sock"})
        self.assertIn("REASON no answer from the daemon at /nonexistent/dir/tiletune.sock", r.stdout)
        self.assertIn("REFUSED lookup:", r.stdout)


@unittest.skipUnless(os.environ.get("TILETUNE_TEST_DAEMON") and os.environ.get("TILETUNE_TEST_SEED"),
                     "TILETUNE_TEST_DAEMON and TILETUNE_TEST_SEED name tiletuned and tt_lookup_bench")
class LookupWithDaemon(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory(prefix="tt-py-")
        db, cls.sock = os.path.join(cls.dir.name, "tt.db"), os.path.join(cls.dir.name, "tt.sock")
        subprocess.run([os.environ["TILETUNE_TEST_SEED"], "seed", db], check=True, capture_output=True)
        cls.daemon = subprocess.Popen([os.environ["TILETUNE_TEST_DAEMON"], "--socket", cls.sock, "--db", db,
                                       "--log-level", "error"],
                                      stderr=subprocess.DEVNULL)
        # listening, not only bound: a connect before listen() is refused
        for _ in range(400):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
                try:
                    c.connect(cls.sock)
                    break
                except OSError:
                    time.sleep(0.025)
        else:
            cls.daemon.kill()
            raise AssertionError("tiletuned did not listen")

    @classmethod
    def tearDownClass(cls):
        cls.daemon.terminate()
        cls.daemon.wait(10)
        cls.dir.cleanup()

    def test_exact_and_nearest_from_the_daemon(self):
        r = run_python(f"""
            import tiletune
            g, rev = "{BENCH_GPU}", "{BENCH_REV}"
            e = tiletune.lookup(128, "fp16", seqlen_q=1024, gpu=g, rev=rev)
            assert e.match == "exact" and not e.fallback and e.tflops > 300, e
            assert (e.seqlen_q, e.seqlen_k) == (1024, 1024), e
            n = tiletune.lookup(128, "fp16", seqlen_q=1100, gpu=g, rev=rev)
            assert n.match == "nearest" and n.seqlen_q == 1024, n
            assert "seqlen_q=1024" in n.reason and "{self.sock}" in n.reason, n
            for _ in range(10):
                assert tiletune.lookup(128, "fp16", seqlen_q=1024, gpu=g, rev=rev) == e
            d = tiletune.lookup(64, "bf16", seqlen_q=100, gpu="00ff", rev=rev)
            assert d.match == "default" and not d.fallback and "nothing tuned" in d.reason, d
            s = tiletune.stats()["client"]
            assert s["daemon_answers"] == 3 and s["cache_hits"] == 10, s
            assert s["connects"] == 1 and s["fallbacks"] == 0 and s["last_failure"] is None, s
            assert s["lookups"] == 13, s
            # a decode key with its GQA group: its own regime, nothing tuned there
            d8 = tiletune.lookup(128, "fp16", causal="bottom_right", seqlen_q=8, seqlen_k=32768, gpu=g,
                                 rev=rev, group=8)
            assert d8.match == "default" and d8.group == 8 and not d8.fallback, d8
            print("OK")
        """, {"TILETUNE_SOCKET": self.sock})
        self.assertIn("OK", r.stdout)


class InferenceInputChecks(unittest.TestCase):
    """check_inputs's checks of a KV cache's and a packed batch's
    device-side lengths and pages, on the lists the call copies them to."""

    def kv(self, lens, table=None, capacity=256, page=64, pages=8):
        from tiletune import inference
        inference._check_kvcache_lists(lens, capacity, table, page, pages)

    def varlen(self, cu_q, cu_k, total_q=10, total_k=20, max_q=8, max_k=16):
        from tiletune import inference
        inference._check_varlen_lists(cu_q, cu_k, total_q, total_k, max_q, max_k)

    def test_a_cache_within_its_pages_passes(self):
        # out of order, a page shared, an empty sequence, a full one
        self.kv([130, 0, 256], [[7, 2, 5, -1], [-9, -9, -9, -9], [0, 1, 2, 3]])
        self.kv(None, [[3, 2, 1, 0]])
        self.kv([5, 256], None)

    def test_a_length_past_the_cache_is_named(self):
        with self.assertRaisesRegex(ValueError, r"cache_seqlens\[1\] = 257: not within 0..256"):
            self.kv([10, 257])
        with self.assertRaisesRegex(ValueError, r"cache_seqlens\[0\] = -1"):
            self.kv([-1, 3])

    def test_a_page_past_k_cache_is_named_where_it_is_read(self):
        with self.assertRaisesRegex(ValueError, r"block_table\[0\]\[2\] = 8: not a page of k_cache \(0..7\); "
                                    r"sequence 0's 129 tokens read its first 3 entries"):
            self.kv([129], [[1, 2, 8, 0]])
        with self.assertRaisesRegex(ValueError, r"block_table\[1\]\[0\] = -1"):
            self.kv(None, [[0, 1, 2, 3], [-1, 4, 5, 6]])
        # the entry after a sequence's last page is not read
        self.kv([128], [[1, 2, 8, 99]])

    def test_a_packed_batch_within_its_maxima_passes(self):
        self.varlen([0, 0, 8, 10], [0, 16, 16, 20])

    def test_cumulative_lengths_that_break_the_layout_are_named(self):
        with self.assertRaisesRegex(ValueError, r"cu_seqlens_q\[0\] = 1: the first sequence starts at row 0"):
            self.varlen([1, 8, 10], [0, 16, 20])
        with self.assertRaisesRegex(ValueError, r"cu_seqlens_k decreases at 2: 15 after 16"):
            self.varlen([0, 8, 10], [0, 16, 15])
        with self.assertRaisesRegex(ValueError, r"cu_seqlens_q\[2\] = 11: past q's 10 rows"):
            self.varlen([0, 3, 11], [0, 16, 20])

    def test_a_sequence_longer_than_its_max_seqlen_is_named(self):
        with self.assertRaisesRegex(ValueError, r"sequence 1 has 9 rows of q .*more than max_seqlen_q = 8"):
            self.varlen([0, 1, 10], [0, 16, 20])
        with self.assertRaisesRegex(ValueError, r"sequence 0 has 17 rows of k .*more than max_seqlen_k = 16"):
            self.varlen([0, 8, 10], [0, 17, 20])


if __name__ == "__main__":
    unittest.main(verbosity=2)
