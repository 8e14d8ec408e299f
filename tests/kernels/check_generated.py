#!/usr/bin/env python3
"""Fails when a generated kernel file differs from its generator's output:
    check_generated.py GENERATOR FILE"""
import subprocess
import sys

gen, path = sys.argv[1], sys.argv[2]
want = subprocess.run([sys.executable, gen], check=True, capture_output=True, text=True).stdout
have = open(path).read()
if have != want:
    sys.exit(f"{path} is not what {gen} prints: regenerate with\n    python3 {gen} > {path}")
print(f"{path}: as generated")
