"""What the CPU tests of the bench scripts share (bench/inference/test_grid.py,
bench/tune/test_analyze.py): the build directory they run the real daemon
from, the skip (exit 77, ctest's SKIP_RETURN_CODE) when it, sqlite3 or
libtiletune is missing, and the checks' count."""
import importlib.util
import os
import shutil
import sys
import tempfile

SKIP = 77
failures = 0


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(SKIP)


def build_dir(var):
    """$var, a build directory with tiletuned, once sqlite3 imports and
    libtiletune loads; else the test is skipped."""
    build = os.environ.get(var)
    if not build or not os.path.exists(os.path.join(build, "src/tuner/tiletuned")):
        skip(f"{var} does not name a build directory with tiletuned")
    if importlib.util.find_spec("sqlite3") is None:
        skip("python3 has no sqlite3")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                    "python"))
    try:
        import tiletune
        tiletune.revision()
    except Exception as e:  # noqa: BLE001
        skip(f"libtiletune does not load: {e}")
    return build


def check(cond, what):
    global failures
    print(f"{'ok  ' if cond else 'FAIL'} {what}")
    failures += 0 if cond else 1


def result():
    """PASSED or FAILED, and the exit code."""
    print("FAILED" if failures else "PASSED")
    return 1 if failures else 0


def run_in_temp(run, prefix, keep_var):
    """run(a fresh temporary folder), removed after unless $keep_var is
    set; the exit code."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        run(tmp)
    finally:
        if os.environ.get(keep_var):
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return result()
