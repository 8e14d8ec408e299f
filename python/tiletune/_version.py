# The project's version: CMakeLists.txt's project(VERSION) and tiletune.h's
# TT_VERSION_STRING say the same (python/tests/test_binding.py checks).
__version__ = "0.1.0"
