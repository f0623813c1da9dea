#!/usr/bin/env python3
"""A/B of the memory store with many keys, in one sitting: an old sluice_bench against a new one,
run alternately for several rounds, each benchmark's throughput as a ratio to the old binary's
BM_MillionKeysTimePassedIn of the same round, per CPU second of the benchmark's thread (the
machine is shared); prints every round and the medians.

  bench/many_keys_ab.py OLD_SLUICE_BENCH NEW_SLUICE_BENCH [--rounds 3] [--threads 1]

The benchmarks of the new binary: BM_MillionKeysTimePassedIn (the single-key path),
BM_MillionKeysCompactKeys, BM_MillionKeysBatch/64 and /256, BM_MillionKeysBatchCompactKeys/256.
"""
import argparse
import csv
import io
import statistics
import subprocess

NEW = ["BM_MillionKeysTimePassedIn", "BM_MillionKeysCompactKeys", "BM_MillionKeysBatch/64",
       "BM_MillionKeysBatch/256", "BM_MillionKeysBatchCompactKeys/256"]


def run(binary, names, threads, min_time):
    pattern = "^(" + "|".join(n.replace("/", "/") for n in names) + f")/real_time/threads:{threads}$"
    out = subprocess.run([binary, f"--benchmark_filter={pattern}", f"--benchmark_min_time={min_time}",
                          "--benchmark_format=csv"], check=True, capture_output=True, text=True).stdout
    rows = csv.DictReader(io.StringIO(out[out.index("name,"):]))
    # Per CPU second (items/s x real/cpu): the machine is shared, and time spent descheduled
    # says nothing of either binary.
    return {r["name"].split("/real_time")[0]:
            float(r["items_per_second"]) * float(r["real_time"]) / float(r["cpu_time"]) for r in rows}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--min-time", default="1")
    a = p.parse_args()
    ratios = {n: [] for n in NEW}
    for r in range(a.rounds):
        old = run(a.old, ["BM_MillionKeysTimePassedIn"], a.threads, a.min_time)["BM_MillionKeysTimePassedIn"]
        new = run(a.new, NEW, a.threads, a.min_time)
        line = [f"round {r + 1}: old {old / 1e6:.2f} M/s"]
        for n in NEW:
            ratios[n].append(new[n] / old)
            line.append(f"{n} {new[n] / 1e6:.2f} M/s x{new[n] / old:.2f}")
        print("; ".join(line), flush=True)
    print(f"medians over {a.rounds} rounds, new / old BM_MillionKeysTimePassedIn, {a.threads} thread(s):")
    for n in NEW:
        print(f"  {n:40s} x{statistics.median(ratios[n]):.2f}")


if __name__ == "__main__":
    main()
