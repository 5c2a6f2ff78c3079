#!/usr/bin/env python3
"""A/B of two builds' kernel benchmarks: does a change move a kernel's speed?

Runs each BENCH (a Google Benchmark binary name, with a --benchmark_filter regex)
from DIR_A and DIR_B in turn, never both at once, alternating which goes first
every round, and prints one Markdown row per benchmark: the median real time of
each build over the rounds, B/A, and the smallest and largest per-round B/A (the
spread a shared machine gives).

Usage: /usr/bin/python3 bench/ab_kernel_benches.py DIR_A DIR_B ROUNDS BENCH:FILTER...
  DIR_A, DIR_B: folders holding the bench binaries (e.g. a copy of build/bench
  before the change, and build/bench).
Example: bench/ab_kernel_benches.py /tmp/old-bench build/bench 9 \\
  'layerserve_linear_few_rows_bench:BM_LinearFewRows/rows:(1|16)/bf16:0/'
"""
import json
import statistics
import subprocess
import sys


def run(folder, binary, pattern):
    out = subprocess.run([f"{folder}/{binary}", f"--benchmark_filter={pattern}",
                          "--benchmark_format=json", "--benchmark_min_time=0.5"],
                         capture_output=True, text=True, check=True).stdout
    return {b["name"]: b["real_time"] for b in json.loads(out)["benchmarks"]}


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    dir_a, dir_b, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    benches = [arg.split(":", 1) for arg in sys.argv[4:]]
    times = {}  # name -> {"A": [...], "B": [...]}, one value per round
    for r in range(rounds):
        for binary, pattern in benches:
            order = [("A", dir_a), ("B", dir_b)]
            for tag, folder in order if r % 2 == 0 else reversed(order):
                for name, t in run(folder, binary, pattern).items():
                    times.setdefault(name, {"A": [], "B": []})[tag].append(t)
    print("| benchmark | A median | B median | B/A | B/A per round (min-max) |")
    print("|---|---|---|---|---|")
    for name, t in times.items():
        a, b = statistics.median(t["A"]), statistics.median(t["B"])
        ratios = [y / x for x, y in zip(t["A"], t["B"])]
        print(f"| {name} | {a:.1f} | {b:.1f} | {b / a:.3f} | "
              f"{min(ratios):.3f}-{max(ratios):.3f} |")


if __name__ == "__main__":
    main()
