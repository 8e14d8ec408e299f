# shellcheck shell=bash
# Sourced by scripts/setup-and-run, scripts/test and .ci/run: finds the
# CUDA toolkit (headers + NVRTC; no GPU or driver needed to build) and
# exports what CMake's find_package(CUDAToolkit) looks at.

# tt_find_cuda: 0 and the exports if a toolkit is found, else 1 and a
# message on stderr saying what to install.
tt_find_cuda() {
    local root=""
    if [[ -n ${CUDAToolkit_ROOT:-} && -e $CUDAToolkit_ROOT/include/nvrtc.h ]]; then
        root=$CUDAToolkit_ROOT
    elif [[ -e /usr/local/cuda/include/nvrtc.h ]]; then
        root=/usr/local/cuda
    elif command -v nvcc >/dev/null 2>&1; then
        root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
    elif [[ -e /usr/include/nvrtc.h ]]; then
        root=/usr # Debian's nvidia-cuda-toolkit
    fi
    if [[ -z $root ]]; then
        cat >&2 <<'MSG'
tiletune needs the CUDA toolkit's headers and NVRTC to build (not a GPU, not
the driver). None was found at /usr/local/cuda, on PATH (nvcc) or in
/usr/include. Install one of:
  - NVIDIA's CUDA toolkit (https://developer.nvidia.com/cuda-downloads), which
    installs to /usr/local/cuda; or
  - Debian/Ubuntu's package: enable the contrib/non-free (Debian) or
    multiverse (Ubuntu) component, then: sudo apt-get install nvidia-cuda-toolkit
or set CUDAToolkit_ROOT to a toolkit's directory, and run this again.
MSG
        return 1
    fi
    export CUDAToolkit_ROOT=$root
    if [[ -x $root/bin/nvcc ]]; then
        export CUDACXX=$root/bin/nvcc
        case ":$PATH:" in *":$root/bin:"*) ;; *) export PATH=$root/bin:$PATH ;; esac
    fi
    return 0
}

# tt_run_as_root CMD...: runs CMD as root (directly, or through sudo).
tt_run_as_root() {
    if [[ $(id -u) == 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        echo "need root to run: $*" >&2
        return 1
    fi
}

# The Debian/Ubuntu packages the build needs.
# shellcheck disable=SC2034 # used by the scripts that source this file
TT_BUILD_PACKAGES=(build-essential cmake ninja-build pkg-config libuv1-dev libsqlite3-dev
                   libjansson-dev libsystemd-dev)

# The Python package's build and its CI test (python/tests/wheel_test.sh):
# pip builds the wheel offline with these (pip install --no-build-isolation)
# and installs it into a fresh virtual environment.
# shellcheck disable=SC2034 # used by the scripts that source this file
TT_PYTHON_PACKAGES=(python3 python3-venv python3-pip python3-setuptools python3-wheel)
