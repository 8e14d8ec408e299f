#!/usr/bin/env python3
"""How one job's keys spread over the GPUs of a node, with stand-in workers.

Starts tiletuned with tests/daemon/fake_worker.sh as its worker on a node of
N stand-in GPUs (N = 1, 2, 4, 8), each key costing the stand-in
--delay seconds, queues one job of --keys keys and times it to done. What it
shows is the scheduler: keys handed to idle workers one at a time, so N
GPUs finish in about 1/N of one GPU's time; real GPUs add their own
compile and timing work (docs/tuning.md).

  bench/multigpu/standin.py --build build/debug [--keys 32] [--delay 0.25]
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def req(sock, line):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    s.sendall((line + "\n").encode())
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    return data.decode().strip()


def field(reply, key):
    for f in reply.split():
        if f.startswith(key + "="):
            return f[len(key) + 1:]
    return None


def run(build, ngpus, keys, delay):
    d = tempfile.mkdtemp(prefix="tt-multigpu-")
    sock, db = os.path.join(d, "s"), os.path.join(d, "db")
    env = dict(os.environ, TT_FAKE_WORKER_MODE="slow", TT_FAKE_GPUS=str(ngpus), TT_FAKE_DELAY=str(delay))
    daemon = subprocess.Popen([os.path.join(build, "src/tuner/tiletuned"), "--socket", sock, "--db", db,
                               "--worker", os.path.join(ROOT, "tests/daemon/fake_worker.sh")],
                              env=env, stderr=subprocess.DEVNULL)
    try:
        until = time.time() + 10
        while time.time() < until:
            try:
                if field(req(sock, "STATUS"), "gpus") == str(ngpus):
                    break
            except OSError:
                pass
            time.sleep(0.05)
        seqlens = ",".join(str(64 * (i + 1)) for i in range(keys))
        t0 = time.time()
        r = req(sock, f"TUNE dtype=fp16 hdim=64 seqlen={seqlens}")
        if not r.startswith("OK"):
            sys.exit(f"TUNE refused: {r}")
        while True:
            st = req(sock, "STATUS")
            if field(st, "jobs_queued") == "0" and field(st, "jobs_running") == "0":
                break
            time.sleep(0.02)
        return time.time() - t0
    finally:
        daemon.terminate()
        daemon.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build/debug"))
    ap.add_argument("--keys", type=int, default=32)
    ap.add_argument("--delay", type=float, default=0.25)
    a = ap.parse_args()
    print(f"| stand-in GPUs | keys | wall (s) | speed-up over 1 GPU |")
    print(f"|---|---|---|---|")
    base = None
    for n in (1, 2, 4, 8):
        t = run(a.build, n, a.keys, a.delay)
        base = base or t
        print(f"| {n} | {a.keys} | {t:.2f} | {base / t:.2f}x |")


if __name__ == "__main__":
    main()
