#!/usr/bin/python3
"""Decode tokens/s and steps per batch of the Llama-3-8B-shaped block against
--max-gather-delay-us: how long a decode batch, after one the workers shared, waits
for the sessions it just answered to send their next steps (server/batching/
batch_queues.h). The sessions are llama8b_bench.py's: Python client threads, one per
session, each sending its next step as soon as it is answered.

Each setting gets its own server; the settings are measured in turns, `--repeats`
times, so a shared machine's load falls on all of them alike; medians are printed.

    /usr/bin/python3 bench/gather_delay_bench.py [--delays 2000,8000] [--sessions 4,16]
"""
import argparse
import os
import shlex
import signal
import statistics
import sys
import tempfile
import time

import llama8b_bench as b8  # beside this file


def measure(server, repository, delay_us, sessions, settings):
    """{sessions: (tok/s, steps per batch)} of one server with this delay."""
    process = b8.start_server(server, repository, [f"--max-gather-delay-us={delay_us}"])
    try:
        out = {}
        for s in sessions:
            rate, _, _, counters = b8.server_decode(process, s, settings)
            out[s] = (rate, counters["batch_requests"] / max(counters["batches"], 1))
        return out
    finally:
        process.stop(signal.SIGTERM)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-dir", default=os.path.join(b8.ROOT, "build"))
    parser.add_argument("--delays", default="2000,8000,16000",
                        help="--max-gather-delay-us values, comma-separated")
    parser.add_argument("--sessions", default="4,16")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    build = os.path.abspath(args.build_dir)
    server = os.path.join(build, "bin", "layerserve")
    sys.path[:0] = [os.path.join(b8.ROOT, "client", "python"), os.path.join(build, "python"),
                    os.path.join(b8.ROOT, "tests", "testing")]
    delays = [int(d) for d in args.delays.split(",")]
    sessions = [int(s) for s in args.sessions.split(",")]
    settings = b8.Settings(quick=False)
    runs = {d: {s: [] for s in sessions} for d in delays}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gather_delay_bench.") as repository:
        b8.write_checkpoint(os.path.join(repository, b8.MODEL), b8.make_weights())
        for repeat in range(args.repeats):
            for d in delays:
                b8.log(f"repeat {repeat + 1}/{args.repeats}: --max-gather-delay-us={d}")
                for s, result in measure(server, repository, d, sessions, settings).items():
                    runs[d][s].append(result)
    print(f"\n`{' '.join(shlex.quote(a) for a in [sys.executable, *sys.argv])}`: "
          f"{args.repeats} turns, {time.perf_counter() - started:.0f} s, load average "
          f"{os.getloadavg()[0]:.1f}; {b8.machine_line(2)}\n")
    print("| --max-gather-delay-us | " + " | ".join(
        f"{s} sessions tok/s | steps per batch" for s in sessions) + " |")
    print("|---:|" + "---:|---:|" * len(sessions))
    for d in delays:
        cells = []
        for s in sessions:
            rates = [r for r, _ in runs[d][s]]
            steps = [k for _, k in runs[d][s]]
            cells += [f"{statistics.median(rates):.0f} ({min(rates):.0f}-{max(rates):.0f})",
                      f"{statistics.median(steps):.1f}"]
        print(f"| {d} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
