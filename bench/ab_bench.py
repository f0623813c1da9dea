#!/usr/bin/env python3
"""A/B of sluice_bench binaries in one sitting: runs them alternately, --rounds times, and
prints each benchmark's median items/s per binary and the median of the per-round ratios
against the first binary (what the team quotes: on a shared machine absolute figures are
noise, ratios taken side by side are not). --cpu counts items per CPU second instead, which
a loaded machine disturbs less (single-threaded benchmarks only: it is meaningless for more).
--baseline NAME takes every ratio against the first binary's NAME of the same round instead,
so that benchmarks the old binary does not have (a batch, compact keys) are compared too.

  bench/ab_bench.py --rounds 5 --filter HotKey /tmp/sluice_bench.7f1af08 build/bin/sluice_bench
  bench/ab_bench.py --cpu --filter 'MillionKeys.*threads:1$' \
      --baseline BM_MillionKeysTimePassedIn/real_time/threads:1 OLD NEW
"""
import argparse
import json
import statistics
import subprocess


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--filter', default='HotKey', help='--benchmark_filter')
    ap.add_argument('--min_time', default='1', help='--benchmark_min_time, in seconds')
    ap.add_argument('--cpu', action='store_true', help='items per CPU second')
    ap.add_argument('--baseline', help="ratios against this benchmark of the first binary")
    ap.add_argument('binaries', nargs='+')
    args = ap.parse_args()
    runs = {b: {} for b in args.binaries}
    for _ in range(args.rounds):
        for b in args.binaries:
            out = subprocess.run([b, f'--benchmark_filter={args.filter}',
                                  f'--benchmark_min_time={args.min_time}',
                                  '--benchmark_format=json'],
                                 capture_output=True, text=True, check=True).stdout
            for bm in json.loads(out)['benchmarks']:
                rate = bm['items_per_second']
                if args.cpu:
                    rate *= bm['real_time'] / bm['cpu_time']
                runs[b].setdefault(bm['name'], []).append(rate)
    base = args.binaries[0]
    names = list(dict.fromkeys(n for b in args.binaries for n in runs[b]))
    for name in names:
        base_rates = runs[base][args.baseline or name] if (args.baseline or name) in runs[base] else None
        line = f'{name:48s}'
        for b in args.binaries:
            line += f'  {statistics.median(runs[b][name]) / 1e6:6.2f}M' if name in runs[b] else '       -'
        for b in args.binaries[1:]:
            if base_rates is None or name not in runs[b]:
                continue
            ratios = [x / y for x, y in zip(runs[b][name], base_rates)]
            line += f'  x{statistics.median(ratios):.2f} ({" ".join(f"{r:.2f}" for r in ratios)})'
        print(line)

if __name__ == '__main__':
    main()
