#!/usr/bin/env python3
"""The module picture of docs/architecture.md, checked.

Every quoted #include under src/ names its module by path from src/ (or a
header in the same folder); every edge between modules is one the picture
allows; the graph of folders has no cycle. Exits 1 naming each offence."""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SRC = os.path.join(ROOT, "src")

# module -> modules it may include (besides itself and include/tiletune.h).
ALLOWED = {
    "common": set(),
    "kernels": {"common"},
    "client": {"common", "kernels", "tuner/fleet", "tuner/store"},
    "tuner/store": {"common"},
    "tuner/fleet": {"common", "tuner/store"},
    "tuner/daemon": {"common", "kernels", "tuner/store", "tuner/fleet"},
    "tuner/worker": {"common", "kernels"},
}
# Files of a module that may reach further than the module as a whole.
# The CLI's fleet commands and its report read tables, and tune checks
# --shard (the library libtiletune never does any of these).
CLI_TABLES = {"cli_fleet.c", "cli_fleet.h", "cli_report.c", "report.c", "report.h"}
NARROW = {
    "client": {"tuner/fleet": CLI_TABLES | {"cli_cmds.c"},
               "tuner/store": CLI_TABLES},
}
# Headers of tuner/store that need no SQLite: the only ones a module outside
# the daemon's side may include.
STORE_PLAIN = {"tuner/store/record.h"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def module_of(rel):
    parts = rel.split("/")
    return "/".join(parts[:2]) if parts[0] == "tuner" else parts[0]


def main():
    bad = []
    edges = {}
    for dirpath, _, files in os.walk(SRC):
        for f in files:
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, SRC).replace(os.sep, "/")
            mod = module_of(rel)
            if mod not in ALLOWED:
                bad.append(f"{rel}: folder {mod} is not in the module picture")
                continue
            for inc in INCLUDE.findall(open(path, encoding="utf-8").read()):
                if inc == "tiletune.h":
                    continue
                if "/" not in inc:
                    if not os.path.exists(os.path.join(dirpath, inc)):
                        bad.append(f"{rel}: \"{inc}\" names no module (include it by its path from src/)")
                    continue
                if not os.path.exists(os.path.join(SRC, inc)):
                    bad.append(f"{rel}: \"{inc}\" does not exist under src/")
                    continue
                dep = module_of(inc)
                if dep == mod:
                    continue
                edges.setdefault(mod, set()).add(dep)
                ok = dep in ALLOWED[mod]
                narrow = NARROW.get(mod, {}).get(dep)
                if ok and narrow is not None and f not in narrow:
                    ok = False
                if ok and dep == "tuner/store" and mod not in ("tuner/daemon",) and inc not in STORE_PLAIN:
                    if not (mod == "tuner/fleet" and f.startswith("merge.")):
                        ok = False
                if not ok:
                    bad.append(f"{rel}: {mod} may not include {inc}")
    # no cycle between folders
    state = {}

    def visit(m, stack):
        state[m] = 1
        for d in sorted(edges.get(m, ())):
            if state.get(d) == 1:
                bad.append("cycle: " + " -> ".join(stack + [m, d]))
            elif not state.get(d):
                visit(d, stack + [m])
        state[m] = 2

    for m in sorted(edges):
        if not state.get(m):
            visit(m, [])
    for b in bad:
        print(b)
    print(f"{len(bad)} layout problems" if bad else "layout: every include names its module; no cycle")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
