#!/usr/bin/env python3
"""Includes point one way: core <- memory, redis <- server, tools (docs/development.md);
inside server/, rules <- stats <- service <- http <- grpc; http <- ui; ui, grpc <- daemon.

Each folder may include only the folders listed for it below (and third-party headers).
A new include across the grain fails this test with the file, the line and the rule, so
that the layout stays the architecture it shows.

    python3 tests/layout/include_direction_test.py [--root DIR]
"""

import argparse
import os
import re
import sys

# Folder -> the project folders its files may include from. Longest prefix wins.
ALLOWED = {
    "include/sluice": ["include/sluice"],
    "src/core": ["include/sluice", "src/core"],
    "src/memory": ["include/sluice", "src/core", "src/memory"],
    "src/tls": ["src/tls"],
    "src/redis": ["include/sluice", "src/core", "src/redis", "src/tls"],
    # The Memcached store's items hold the memory store's state encoding (src/memory/snapshot.h).
    "src/memcached": ["include/sluice", "src/core", "src/memory", "src/memcached"],
    # sluiced's parts: the process wires the transports to the service, which plans with the
    # rules and counts in the stats; nothing below reaches up (server/CMakeLists.txt).
    "server/rules": ["include/sluice", "src/core", "server/rules"],
    "server/stats": ["include/sluice", "src/core", "server/rules", "server/stats"],
    "server/service": ["include/sluice", "src/core", "server/rules", "server/stats",
                       "server/service"],
    "server/http": ["include/sluice", "src/core", "server/rules", "server/stats", "server/service",
                    "server/http"],
    # The gRPC engine on our own loops runs on the HTTP server's loops (server/http/server.h).
    "server/grpc": ["include/sluice", "src/core", "src/tls", "server/service", "server/http",
                    "server/grpc"],
    # Rules from an xDS management server: a transport of rules files, blind to what they mean.
    "server/xds": ["include/sluice", "src/core", "src/tls", "server/xds"],
    # The operator's page wraps the HTTP API and draws with `sluice simulate`'s picture.
    "server/ui": ["include/sluice", "src/core", "server/rules", "server/stats", "server/service",
                  "server/http", "server/ui", "tools"],
    "server/daemon": ["include/sluice", "src/core", "src/tls", "server"],
    # Nothing but the folders above: a file at server/'s root fails.
    "server": [],
    "tools": ["include/sluice", "src/core", "tools"],
}
PROJECT_ROOTS = ("sluice/", "src/", "server/", "tools/", "tests/", "bench/")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of(include):
    """The project folder an include names, or None for a third-party header."""
    if include.startswith("sluice/"):
        return "include/sluice"
    if not include.startswith(PROJECT_ROOTS):
        return None
    parts = include.split("/")
    if parts[0] in ("src", "server") and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0]


def rule_for(path):
    matches = [f for f in ALLOWED if path == f or path.startswith(f + "/")]
    return max(matches, key=len) if matches else None


def violations(root):
    found = []
    for folder in ALLOWED:
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if not name.endswith((".h", ".cc", ".in")):
                    continue
                full = os.path.join(dirpath, name)
                path = os.path.relpath(full, root)
                rule = rule_for(path)
                if rule != folder:
                    continue  # a deeper rule covers it
                if not ALLOWED[rule]:
                    found.append(f"{path}: {rule}/ holds only the folders of its parts; "
                                 f"put this file in the one it belongs to")
                    continue
                with open(full, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = folder_of(m.group(1))
                        if target is None:
                            continue
                        if not any(target == a or target.startswith(a + "/")
                                   for a in ALLOWED[rule]):
                            found.append(f"{path}:{number}: includes \"{m.group(1)}\"; "
                                         f"{rule}/ may include only {', '.join(ALLOWED[rule])}")
    return found


def selftest():
    """The checker itself: a wrong include is found, a right one is not."""
    assert folder_of("sluice/store.h") == "include/sluice"
    assert folder_of("src/memory/leases.h") == "src/memory"
    assert folder_of("server/http/api.h") == "server/http"
    assert folder_of("absl/status/status.h") is None
    assert rule_for("server/http/api.cc") == "server/http"
    assert rule_for("server/main.cc") == "server"
    assert rule_for("src/redis/keys.h") == "src/redis"
    assert rule_for("tests/core/x.cc") is None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    args = parser.parse_args()
    selftest()
    found = violations(os.path.abspath(args.root))
    for v in found:
        print(v)
    print(f"{len(found)} includes across the grain in {len(ALLOWED)} folders")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
