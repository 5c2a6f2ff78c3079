#!/usr/bin/python3
"""The first calls after start against the same calls once warm (issue 24, item 2):
for the demo model, with and without --warm-up, float32 and bfloat16 weights.

Each configuration starts a fresh server, opens the connection (ListModels, so the
first call pays no connection set-up), then times, through the Python client, the
first and then 5 more BlockForward calls of 16, 128 and 1 token(s) through the 4
layers, and the first and 5 more decode steps of a session prefilled with 8 tokens.
Reported: first / median of the rest. Repeated --runs times (new servers), medians.

Usage: /usr/bin/python3 bench/first_call_bench.py [BUILD_DIR] [--runs 3]
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
from sessions_bench import start_server  # noqa: E402  (beside this file)

HIDDEN, LAYERS = 512, 4  # The demo model's.


def timed(call, repeats=6):
    """(first, median of the rest) in ms."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return times[0], statistics.median(times[1:])


def one_server(build, args):
    from layerserve_client import Client
    proc, target = start_server(build, *args)
    try:
        ratios = {}
        with Client(target, timeout=120) as client:
            client.list_models()
            for t in (16, 128, 1):
                x = np.random.default_rng(t).standard_normal((t, HIDDEN), dtype=np.float32)
                first, warm = timed(lambda: client.block_forward(x, num_layers=LAYERS))
                ratios[f"BlockForward T={t}"] = (first, warm)
            with client.open_session(num_layers=LAYERS) as session:
                session.forward(np.ones((8, HIDDEN), np.float32))
                step = np.ones((1, HIDDEN), np.float32)
                ratios["decode step"] = timed(lambda: session.forward(step))
        return ratios
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build", nargs="?", default=os.path.join(ROOT, "build"))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    print("| weights | warm-up | call | first ms | warm ms (median) | first / warm |")
    print("|---|---|---|---|---|---|")
    for dtype in ("float32", "bfloat16"):
        for warm_up in ("true", "false"):
            runs = [one_server(args.build, [f"--weight-dtype={dtype}",
                                            f"--warm-up={warm_up}"])
                    for _ in range(args.runs)]
            for call in runs[0]:
                first = statistics.median(r[call][0] for r in runs)
                warm = statistics.median(r[call][1] for r in runs)
                ratio = statistics.median(r[call][0] / r[call][1] for r in runs)
                print(f"| {dtype} | {warm_up} | {call} | {first:.1f} | {warm:.1f} | "
                      f"{ratio:.1f}x |")


if __name__ == "__main__":
    main()
