#!/usr/bin/python3
"""Issue 23's table, sluice beside its peers, measured in one sitting.

    bench/peers/table.py [--rounds 3] [--only inprocess,grpc,http] [--quick]
                         [--build-dir build] [--peer DIR] [--seconds 1]
                         [--hot-filter ^BM_(HotKey|Direct)] [--keys-filter ^BM_MillionKeys[^Z]]

Every round runs each side once, one after the other (in-process, for the hot key, then the
1 M keys, then bytes per key: our sluice_bench or sluice_memory_bench, then Guava, x/time/rate
and rate-limiter-flexible, the order reversed in every other round; then one round of
bench/grpc/ab.sh, then one of bench/http/run.sh), so that what the machine does meanwhile falls on both sides. It prints each
round's figures, then the table: medians over the rounds, and for ratios the median of each
round's ratio (sluice / the fastest peer in that row). --quick: one round, short runs, a smoke
test of the script, not figures to quote. A side whose toolchain, build or reference is missing
is skipped, saying why. Needs the release build (cmake --build build --target sluice_bench
sluice_memory_bench sluiced sluice_grpc_load) and, for the peers, scripts/install-deps --bench.
The rows and what not to read into them: bench/peers/README.md.
"""

import argparse
import os
import statistics
import sys
import tempfile

import sides
from rows import render

GROUPS = ("inprocess", "grpc", "http")


def options(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", default=",".join(GROUPS),
                   help="comma-separated groups of rows: inprocess, grpc, http")
    p.add_argument("--quick", action="store_true", help="one short round: a smoke test")
    p.add_argument("--build-dir", default=os.path.join(sides.ROOT, "build"))
    p.add_argument("--peer", help="envoyproxy/ratelimit's folder (bench/grpc/ab.sh's PEER)")
    p.add_argument("--seconds", type=float, default=1.0,
                   help="per in-process measure; gRPC and HTTP runs take 10 times this")
    p.add_argument("--hot-filter", default="^BM_(HotKey|Direct)",
                   help="sluice_bench's one-key benchmarks, run beside the peers' hot key")
    p.add_argument("--keys-filter", default="^BM_MillionKeys[^Z]",
                   help="sluice_bench's many-key benchmarks (uniform: not BM_MillionKeysZipf)")
    o = p.parse_args(argv)
    o.only = [g.strip() for g in o.only.split(",") if g.strip()]
    bad = [g for g in o.only if g not in GROUPS]
    if bad or not o.only:
        p.error(f"--only takes {', '.join(GROUPS)}; not {', '.join(bad) or 'nothing'}")
    if o.rounds < 1 or o.seconds <= 0:
        p.error("--rounds takes 1 or more, --seconds a positive number")
    if o.quick:
        o.rounds, o.seconds = 1, 0.2
    return o


def inprocess_tasks(o, out_dir, built):
    """(name, function returning {key: value}) for one in-process round, in three groups run
    one after the other (hot key, many keys, bytes per key) so that each row's sides run close
    together in time."""
    min_time = 0.05 if o.quick else o.seconds
    s = o.seconds
    groups = [
        [("sluice", lambda: sides.sluice_bench(o.build_dir, min_time, o.hot_filter)),
         ("java", lambda: sides.java(out_dir, s, ["hot_key_clock", "hot_key_2threads"])),
         ("go", lambda: sides.go(out_dir, s, ["hot_key_clock", "hot_key_passed_in",
                                               "hot_key_2threads"])),
         ("node", lambda: sides.node(s, ["hot_key_clock"]))],
        [("sluice", lambda: sides.sluice_bench(o.build_dir, min_time, o.keys_filter)),
         ("java", lambda: sides.java(out_dir, s, ["keys_clock"])),
         ("go", lambda: sides.go(out_dir, s, ["keys_clock", "keys_passed_in"])),
         ("node", lambda: sides.node(s, ["keys_clock"]))],
        [("sluice", lambda: sides.sluice_bytes_per_key(o.build_dir)),
         ("java", lambda: sides.java(out_dir, s, ["bytes_per_key"])),
         ("go", lambda: sides.go(out_dir, s, ["bytes_per_key"])),
         ("node", lambda: sides.node(s, ["bytes_per_key"]))],
    ]
    return [[(name, fn) for name, fn in group if name == "sluice" or built.get(name) is None]
            for group in groups]


def one_round(o, number, out_dir, built, skipped):
    figures = {}

    def take(source, fn):
        try:
            result = fn()
        except sides.Skip as why:
            skipped.setdefault(source, str(why))
            return
        except RuntimeError as why:  # a program failed: say so, and go on with the others
            print(f"round {number}: {source} FAILED: {why}", file=sys.stderr, flush=True)
            skipped[f"{source} in round {number}"] = f"FAILED: {why}"
            return
        for key, value in result.items():
            if isinstance(value, sides.Skip):
                skipped.setdefault(f"{source}:{key}", str(value))
            elif isinstance(value, dict):
                for what, v in value.items():
                    figures[f"{source}:{key}:{what}"] = v
            else:
                figures[f"{source}:{key}"] = value

    if "inprocess" in o.only:
        for tasks in inprocess_tasks(o, out_dir, built):
            for source, fn in tasks if number % 2 else reversed(tasks):
                print(f"round {number}: {source} ...", file=sys.stderr, flush=True)
                take(source, fn)
    if "grpc" in o.only:
        print(f"round {number}: grpc ...", file=sys.stderr, flush=True)
        seconds = max(1, round(10 * o.seconds))
        take("grpc", lambda: sides.grpc(o.build_dir, seconds, o.peer))
    if "http" in o.only:
        print(f"round {number}: http ...", file=sys.stderr, flush=True)
        duration = max(1, round(10 * o.seconds))
        take("http", lambda: sides.http(o.build_dir, duration, max(1, duration // 5)))
    for key, value in sorted(figures.items()):
        print(f"round {number}  {key}  {value:.6g}")
    return figures


def main(argv):
    o = options(argv)
    load = open("/proc/loadavg").read().split()[:3]
    print(f"# bench/peers/table.py {' '.join(argv)}: {o.rounds} round(s), {os.cpu_count()} cores, "
          f"load average {' '.join(load)} at start", flush=True)
    skipped = {}
    with tempfile.TemporaryDirectory(prefix="sluice-peers.") as out_dir:
        built = sides.build_peers(out_dir) if "inprocess" in o.only else {}
        for name, why in built.items():
            if why is not None:
                skipped[name] = str(why)
        rounds = [one_round(o, n, out_dir, built, skipped) for n in range(1, o.rounds + 1)]
    load = open("/proc/loadavg").read().split()[:3]
    print(f"# load average {' '.join(load)} at the end")
    for source, why in sorted(skipped.items()):
        print(f"# skipped {source}: {why}")
    keys = {k for r in rounds for k in r}
    medians = {k: statistics.median([r[k] for r in rounds if k in r]) for k in keys}
    print()
    print(render(o.only, rounds, medians))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
