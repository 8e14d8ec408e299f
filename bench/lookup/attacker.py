#!/usr/bin/env python3
"""What a hostile local user does to tiletuned (bench/lookup/attack.sh runs
this as uid 65534 while it measures lookups). Prints one line of counts
when it stops (SIGTERM) or finishes.

  attacker.py SOCKET hold-export N    N connections ask EXPORT all=1, never read
  attacker.py SOCKET loop-export      one connection asks EXPORT all=1 and reads it, again and again
  attacker.py SOCKET slots N          N idle connections (PING once each)
  attacker.py SOCKET refuse-flood N   N admin verbs it may not use, pipelined 100 at a time
  attacker.py SOCKET garbage N        N malformed request lines, pipelined 100 at a time
"""
import os, random, resource, signal, socket, sys, time

path, mode = sys.argv[1], sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 0
counts = {"sent": 0, "ok": 0, "err": 0, "busy": 0, "refused_connect": 0, "exports": 0, "bytes": 0}
stop = False


def report():
    print(" ".join(f"{k}={v}" for k, v in counts.items()), flush=True)
    sys.exit(0)


def on_term(*_):
    report()  # even from inside a blocked send (a daemon that stopped reading)


signal.signal(signal.SIGTERM, on_term)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def conn():
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    return s


def lines(f, k):
    for _ in range(k):
        line = f.readline()
        if not line:
            raise EOFError
        yield line


def replies(f, k):
    """k replies, each with the body its lines=N announces."""
    for line in lines(f, k):
        if line.startswith(b"OK") and b" lines=" in line:
            for _ in lines(f, int(line.split(b" lines=")[1].split()[0])):
                pass
        yield line


held = []
try:
    if mode == "hold-export":
        for _ in range(n):
            s = conn()
            s.sendall(b"EXPORT all=1\n")
            held.append(s)
            counts["sent"] += 1
    elif mode == "loop-export":
        s = conn()
        f = s.makefile("rb")
        while not stop:
            s.sendall(b"EXPORT all=1\n")
            head = f.readline()
            counts["sent"] += 1
            if not head.startswith(b"OK"):
                counts["err"] += 1
                continue
            k = int(head.split(b"lines=")[1].split()[0])
            for line in lines(f, k):
                counts["bytes"] += len(line)
            counts["exports"] += 1
    elif mode == "slots":
        for _ in range(n):
            try:
                s = conn()
            except OSError:
                counts["refused_connect"] += 1
                continue
            s.sendall(b"PING\n")
            s.settimeout(5)
            reply = s.makefile("rb").readline()
            if reply.startswith(b"OK"):
                counts["ok"] += 1
                held.append(s)
            else:
                counts["busy"] += reply.startswith(b"ERR busy")
                s.close()
    elif mode in ("refuse-flood", "garbage"):
        s = conn()
        f = s.makefile("rb")
        rnd = random.Random(7)
        verbs = [b"FORGET dtype=fp16 hdim=128 seqlen_q=1024", b"TUNE dtype=fp16 hdim=64 seqlen=128",
                 b"CANCEL job=1", b"IMPORT lines=0", b"EXPORT format=sqlite"]
        junk = [b"PING\r", b" PING", b"LOOKUP hdim=007 dtype=fp16 seqlen_q=1", b"LOOKUP seqlen_q=-0",
                b"lookup", b"NOPE a=1 a=1", b"\xff\xfe", b"LOOKUP dtype=fp16 hdim=128 seqlen_q=99999999999"]
        while counts["sent"] < n and not stop:
            batch = [rnd.choice(verbs if mode == "refuse-flood" else junk) for _ in range(100)]
            s.sendall(b"".join(b + b"\n" for b in batch))
            counts["sent"] += len(batch)
            for line in replies(f, len(batch)):
                counts["ok" if line.startswith(b"OK") else "err"] += 1
    while not stop and mode in ("hold-export", "slots"):
        time.sleep(0.2)
except (OSError, EOFError) as e:
    counts["error"] = type(e).__name__
report()
