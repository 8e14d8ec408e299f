"""Builds libtiletune.so with the project's CMake and puts it in the
package, so the wheel works with no environment variable set.

Settings (environment):
  CUDAToolkit_ROOT           the CUDA toolkit (headers and NVRTC; found as
                             scripts/env.sh does when unset)
  CMAKE_ARGS                 more arguments for the CMake configure step
  CMAKE_BUILD_PARALLEL_LEVEL parallel build jobs (default: the CPU count)
  TILETUNE_CMAKE_BUILD_DIR   the CMake build directory (default:
                             build/wheel under the source tree)
"""
import os
import shlex
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:  # setuptools >= 70.1 has its own; before, the wheel package's
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel

ROOT = os.path.dirname(os.path.abspath(__file__))


def find_cuda():
    """The CUDA toolkit's root, looked for as scripts/env.sh's tt_find_cuda
    does; None lets CMake search on its own."""
    env = os.environ.get("CUDAToolkit_ROOT")
    if env and os.path.exists(os.path.join(env, "include", "nvrtc.h")):
        return env
    if os.path.exists("/usr/local/cuda/include/nvrtc.h"):
        return "/usr/local/cuda"
    nvcc = shutil.which("nvcc")
    if nvcc:
        return os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    if os.path.exists("/usr/include/nvrtc.h"):
        return "/usr"
    return None


class BuildWithLibrary(build_py):
    """build_py, then CMake's libtiletune target into the package."""

    def run(self):
        super().run()
        build_dir = os.environ.get("TILETUNE_CMAKE_BUILD_DIR") or os.path.join(ROOT, "build", "wheel")
        cmake = shutil.which("cmake")
        if not cmake:
            raise SystemExit("tiletune: building the wheel needs cmake (Debian: apt-get install cmake)")
        args = [cmake, "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_TESTING=OFF"]
        if shutil.which("ninja") and not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            args += ["-G", "Ninja"]
        cuda = find_cuda()
        env = dict(os.environ)
        if cuda:
            env["CUDAToolkit_ROOT"] = cuda
        args += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        try:
            subprocess.check_call(args, env=env)
            subprocess.check_call([cmake, "--build", build_dir, "--target", "libtiletune", "-j", jobs],
                                  env=env)
        except subprocess.CalledProcessError as e:
            raise SystemExit(f"tiletune: the CMake build of libtiletune failed ({e}); the build needs "
                             "the packages of scripts/env.sh (TT_BUILD_PACKAGES) and a CUDA toolkit "
                             "(headers and NVRTC; set CUDAToolkit_ROOT)") from e
        lib = os.path.realpath(os.path.join(build_dir, "src", "client", "libtiletune.so"))
        dest = os.path.join(self.build_lib, "tiletune", "libtiletune.so")
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(lib, dest)  # the file, not the build tree's symlink chain
        os.chmod(dest, 0o755)


class PlatformWheel(bdist_wheel):
    """A wheel for the platform but any Python 3: the library is plain C,
    loaded through ctypes, with no Python ABI of its own."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibrary, "bdist_wheel": PlatformWheel},
      distclass=BinaryDistribution)
