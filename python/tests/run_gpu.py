"""ctest entry for the binding's GPU tests: exit 77 (skipped) with the reason
when pytest, torch or a CUDA device is missing, else run pytest here."""
import os
import sys


def main():
    try:
        import pytest
    except ImportError:
        print("SKIP: pytest is not installed")
        return 77
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not installed")
        return 77
    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        return 77
    here = os.path.dirname(os.path.abspath(__file__))
    return pytest.main(["-q", "--maxfail=10", "-p", "no:cacheprovider", here] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
