#!/bin/sh
# What each binary links, as docs/architecture.md promises: the CLI no
# SQLite (it reads tables through tuner/fleet's plain parts); the worker no
# client (the kernels are a leaf: it launches with explicit configs).
# usage: check_links.sh CLI [WORKER]
set -u
cli=$1
worker=${2:-}
command -v nm >/dev/null 2>&1 || { echo "SKIP: nm not installed (binutils)"; exit 77; }
fail=0
if nm "$cli" | grep -q ' [TtUu] sqlite3_'; then
    echo "FAIL: $cli links SQLite:"; nm "$cli" | grep ' [TtUu] sqlite3_' | head -5; fail=1
fi
if ldd "$cli" 2>/dev/null | grep -q libsqlite3; then
    echo "FAIL: $cli depends on libsqlite3"; fail=1
fi
if nm "$cli" | grep -q ' [Tt] tt_store_'; then
    echo "FAIL: $cli holds the store:"; nm "$cli" | grep ' [Tt] tt_store_' | head -5; fail=1
fi
if [ -n "$worker" ] && nm "$worker" | grep -qE ' [Tt] (tt_lookup|tt_client_open|tt__conn_)'; then
    echo "FAIL: $worker holds the client:"; nm "$worker" | grep -E ' [Tt] (tt_lookup|tt_client_open|tt__conn_)' | head -5; fail=1
fi
[ $fail = 0 ] && echo "links: $cli has no SQLite and no store${worker:+; $worker has no client}"
exit $fail
