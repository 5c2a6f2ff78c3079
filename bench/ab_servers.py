#!/usr/bin/env python3
"""A/B of two server builds under the same load: does a change move serving speed?

Starts BIN_A/layerserve and BIN_B/layerserve in turn (never both at once), runs
the same layerserve-bench cases against each, alternating which goes first every
round, and prints one Markdown row per case: medians over the rounds of
throughput, p50 and p99 for A and B, and B/A throughput. Errors must be 0.

Usage: /usr/bin/python3 bench/ab_servers.py BIN_A BIN_B [ROUNDS] [CASE_FILTER]
  BIN_A, BIN_B: folders holding layerserve (e.g. a copy of build/bin before the
  change, and build/bin); BIN_A's layerserve-bench drives both.
Everything runs on 127.0.0.1 with OS-picked ports; the machine's other load is
noise, so compare ratios over several rounds, not one run.
"""
import json
import re
import statistics
import subprocess
import sys

CASES = {
    "normalize 8x768 c1": ["--method", "normalize", "--shape", "8,768", "--concurrency", "1"],
    "normalize 8x768 c8": ["--method", "normalize", "--shape", "8,768", "--concurrency", "8"],
    "normalize 64x4096 c2": ["--method", "normalize", "--shape", "64,4096",
                             "--concurrency", "2"],
    "block-forward T16 c4": ["--method", "block-forward", "--tokens", "16",
                             "--concurrency", "4"],
    "decode 8 sessions": ["--method", "decode", "--tokens", "16", "--steps", "64",
                          "--concurrency", "8"],
}


def start(binary_dir):
    server = subprocess.Popen(
        [binary_dir + "/layerserve", "--host=127.0.0.1", "--port=0", "--metrics-port=-1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in server.stdout:
        found = re.search(r"gRPC listening on (\S+)", line)
        if found:
            return server, found.group(1)
    raise SystemExit(f"{binary_dir}/layerserve printed no gRPC port")


def run_cases(loadgen, target):
    levels = {}
    for name, args in CASES.items():
        out = subprocess.run([loadgen, "--target", target, "--duration", "4s", "--warmup",
                              "1s", "--json"] + args,
                             capture_output=True, text=True, check=True)
        levels[name] = json.loads(out.stdout)["levels"][0]
    return levels


def main():
    global CASES
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    bin_a, bin_b = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    if len(sys.argv) > 4:
        CASES = {k: v for k, v in CASES.items() if sys.argv[4] in k}
    results = {(name, side): [] for name in CASES for side in "AB"}
    for r in range(rounds):
        order = [("A", bin_a), ("B", bin_b)]
        for side, binary_dir in order if r % 2 == 0 else reversed(order):
            server, target = start(binary_dir)
            try:
                for name, level in run_cases(bin_a + "/layerserve-bench", target).items():
                    results[(name, side)].append(level)
            finally:
                server.terminate()
                server.wait()

    def median(levels, field):
        return statistics.median(field(level) for level in levels)

    print("| case | A req/s | B req/s | B/A | A p50 ms | B p50 ms | A p99 ms | B p99 ms "
          "| errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in CASES:
        a, b = results[(name, "A")], results[(name, "B")]
        rps = [median(x, lambda v: v["throughput_rps"]) for x in (a, b)]
        p50 = [median(x, lambda v: v["latency_ms"]["p50"]) for x in (a, b)]
        p99 = [median(x, lambda v: v["latency_ms"]["p99"]) for x in (a, b)]
        errors = sum(sum(v["errors"].values()) for v in a + b)
        print(f"| {name} | {rps[0]:.0f} | {rps[1]:.0f} | {rps[1] / rps[0]:.2f} "
              f"| {p50[0]:.3f} | {p50[1]:.3f} | {p99[0]:.3f} | {p99[1]:.3f} | {errors} |")


if __name__ == "__main__":
    main()
