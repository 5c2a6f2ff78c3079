#!/usr/bin/python3
"""End-to-end serving benchmarks (summary: docs/BENCHMARKS.md), driven by
layerserve-bench. Last measured in docs/perf/: overhead in 2026-11-30-serving-overhead.md,
batching in 2026-11-30-batching-gain.md, methods in 2026-11-30-numeric-health-cost.md.

  overhead  layerserve's Normalize against layerserve-echo (a bare gRPC server on
            the same proto that returns the input bytes, no kernel) at payloads of
            1 KiB to 16 MiB: p50 latency at concurrency 1, throughput at
            concurrency 16, and the server's own view from its /metrics (mean time
            per request in the handler-to-finish span, in the queue, in the kernel).
  batching  BlockForward through the demo model's 4 layers, T tokens per request,
            at concurrency 1, 8 and 64, with the default batcher and with
            --max-batch-rows=1 (every request alone).
  methods   PositionalEncode (RoPE query and key, sinusoidal and ALiBi adds) and
            Activate (GELU) at 1 MiB and 8-16 MiB per tensor, concurrency 1: the
            server's mean time in the kernel and outside it, per request.
  python    The Python client's round trip to layerserve-echo (Normalize, float32)
            at 2, 4 and 8 MiB each way, with Client(keep_freed_buffers=True)
            and False (the default), each in its own interpreter (the malloc settings
            are per process), alternating three times: medians of 30 calls.

Usage: /usr/bin/python3 bench/serving_bench.py BUILD_DIR
           [overhead|batching|methods|python]...
Prints Markdown tables. Everything runs on 127.0.0.1 with OS-picked ports.
"""
import json
import os
import re
import subprocess
import sys
import urllib.request

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
SERVER = os.path.join(BUILD, "bin", "layerserve")
ECHO = os.path.join(BUILD, "bench", "layerserve-echo")
LOADGEN = os.path.join(BUILD, "bin", "layerserve-bench")


class Process:
    """A server started on port 0; its port is read from its first lines."""

    def __init__(self, args):
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        self.target = self.metrics_url = None
        while self.target is None or (self.metrics_url is None and "echo" not in args[0]):
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{args[0]} did not start")
            if m := re.search(r"gRPC listening on (\S+)", line):
                self.target = m.group(1)
            if m := re.search(r"metrics on (\S+)", line):
                self.metrics_url = m.group(1)
        # So that errors reported by target say which server answered them.
        print(f"{os.path.basename(args[0])} {' '.join(args[1:])} on {self.target}",
              file=sys.stderr)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def samples(url):
    """{(name, method label): value} of the sum/count samples on /metrics."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out = {}
    for m in re.finditer(r'^(layerserve_\w+_(?:sum|count))\{method="(\w+)"\} (\S+)$', text,
                         re.M):
        out[(m.group(1), m.group(2))] = float(m.group(3))
    return out


def load(target, *args):
    """The levels of one layerserve-bench run. Failed requests (exit status 2) are
    reported on stderr, not hidden: the tables count successes only."""
    command = [LOADGEN, f"--target={target}", "--json", *args]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode not in (0, 2):
        raise RuntimeError(run.stderr)
    levels = json.loads(run.stdout)["levels"]
    for level in levels:
        if level["errors"]:
            print(f"errors from {target} {args}: {level['errors']}, "
                  f"e.g. {level['error_messages']}", file=sys.stderr)
    return levels


def server_means(before, after, method):
    """Mean seconds per request of the server's request, queue and compute spans."""
    def mean(name):
        count = after[(f"{name}_count", method)] - before.get((f"{name}_count", method), 0)
        total = after[(f"{name}_sum", method)] - before.get((f"{name}_sum", method), 0)
        return total / count
    return {span: mean(f"layerserve_{span}_duration_seconds")
            for span in ("request", "queue", "compute")}


def overhead():
    sizes = [("1 KiB", "1,256"), ("64 KiB", "16,1024"), ("1 MiB", "256,1024"),
             ("16 MiB", "4096,1024")]
    echo = Process([ECHO, "--port=0"])
    server = Process([SERVER, "--host=127.0.0.1", "--port=0", "--metrics-port=0"])
    print("| payload | echo p50 (c=1) | Normalize p50 (c=1) | ratio | echo req/s (c=16) "
          "| Normalize req/s (c=16) | ratio | server: request / queue / kernel µs "
          "| server outside kernel µs |")
    print("|---|---|---|---|---|---|---|---|---|")
    try:
        for name, shape in sizes:
            big = shape.startswith("4096")
            duration = ["--duration=6s"] if big else ["--duration=4s"]
            common = ["--method=normalize", f"--shape={shape}", *duration]
            e1 = load(echo.target, *common, "--concurrency=1")[0]
            before = samples(server.metrics_url)
            n1 = load(server.target, *common, "--concurrency=1")[0]
            spans = server_means(before, samples(server.metrics_url), "Normalize")
            e16 = load(echo.target, *common, "--concurrency=16")[0]
            n16 = load(server.target, *common, "--concurrency=16")[0]
            us = {k: v * 1e6 for k, v in spans.items()}
            print(f"| {name} | {e1['latency_ms']['p50']:.3f} ms "
                  f"| {n1['latency_ms']['p50']:.3f} ms "
                  f"| {n1['latency_ms']['p50'] / e1['latency_ms']['p50']:.2f} "
                  f"| {e16['throughput_rps']:.0f} | {n16['throughput_rps']:.0f} "
                  f"| {e16['throughput_rps'] / n16['throughput_rps']:.2f} "
                  f"| {us['request']:.0f} / {us['queue']:.0f} / {us['compute']:.0f} "
                  f"| {us['request'] - us['compute']:.0f} |", flush=True)
    finally:
        echo.stop()
        server.stop()


def batching():
    servers = {"batched": Process([SERVER, "--host=127.0.0.1", "--port=0",
                                   "--metrics-port=0"]),
               "alone": Process([SERVER, "--host=127.0.0.1", "--port=0",
                                 "--metrics-port=0", "--max-batch-rows=1"])}
    print("| T | concurrency | batched req/s | mean batch | p50 / p99 ms "
          "| alone req/s | p50 / p99 ms | gain |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        order = list(servers.items())
        for tokens in (1, 8):
            for concurrency in (1, 8, 64):
                row = {}
                # Alternate which server goes first: the first of a pair came out
                # up to 30% slower at concurrency 1, on identical code paths.
                order.reverse()
                for name, process in order:
                    row[name] = load(process.target, "--method=block-forward",
                                     "--layers=4", f"--tokens={tokens}",
                                     f"--concurrency={concurrency}", "--duration=5s",
                                     f"--metrics-url={process.metrics_url}")[0]
                b, a = row["batched"], row["alone"]
                batch = b["server"]["mean_batch_size"] if b.get("server") else float("nan")
                print(f"| {tokens} | {concurrency} | {b['throughput_rps']:.0f} "
                      f"| {batch:.1f} "
                      f"| {b['latency_ms']['p50']:.2f} / {b['latency_ms']['p99']:.2f} "
                      f"| {a['throughput_rps']:.0f} "
                      f"| {a['latency_ms']['p50']:.2f} / {a['latency_ms']['p99']:.2f} "
                      f"| {b['throughput_rps'] / a['throughput_rps']:.2f}x |", flush=True)
    finally:
        for process in servers.values():
            process.stop()


def methods():
    cases = [("rope", "1,32,64,128"), ("rope", "1,32,512,128"),
             ("sinusoidal", "1,256,1024"), ("sinusoidal", "1,4096,1024"),
             ("alibi", "1,16,128,128"), ("alibi", "1,16,512,512"),
             ("activate", "256,1024"), ("activate", "4096,1024")]
    server = Process([SERVER, "--host=127.0.0.1", "--port=0", "--metrics-port=0"])
    print("| method | shape | p50 µs (c=1) | server: request / queue / kernel µs "
          "| outside the kernel µs |")
    print("|---|---|---|---|---|")
    try:
        for method, shape in cases:
            before = samples(server.metrics_url)
            level = load(server.target, f"--method={method}", f"--shape={shape}",
                         "--duration=4s", "--concurrency=1")[0]
            metric = "Activate" if method == "activate" else "PositionalEncode"
            spans = server_means(before, samples(server.metrics_url), metric)
            request, queue, kernel = (spans[k] * 1e6 for k in ("request", "queue", "compute"))
            print(f"| {method} | [{shape}] | {level['latency_ms']['p50'] * 1e3:.0f} "
                  f"| {request:.0f} / {queue:.0f} / {kernel:.0f} | {request - kernel:.0f} |",
                  flush=True)
    finally:
        server.stop()


# One interpreter's medians, in ms, of the round trips of python(): argv = target,
# keep_freed_buffers ("True"/"False"), rows...
PYTHON_ROUND_TRIPS = """
import statistics, sys, time
import numpy as np
from layerserve_client import Client
with Client(sys.argv[1], keep_freed_buffers=sys.argv[2] == "True") as client:
    for rows in map(int, sys.argv[3:]):
        x = np.random.default_rng(rows).standard_normal((rows, 4096), dtype=np.float32)
        for _ in range(3):
            client.normalize(x)
        times = []
        for _ in range(30):
            start = time.perf_counter()
            client.normalize(x)
            times.append(time.perf_counter() - start)
        print(statistics.median(times) * 1e3)
"""


def python():
    rows = [128, 256, 512]  # 2, 4 and 8 MiB of float32 at hidden 4096.
    echo = Process([ECHO, "--port=0"])
    here = os.path.dirname(os.path.abspath(__file__))
    path = [os.path.join(here, "..", "client", "python"), os.path.join(BUILD, "python")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path + sys.path))
    medians = {True: [], False: []}
    try:
        for _ in range(3):
            for keep in (False, True):
                out = subprocess.run([sys.executable, "-c", PYTHON_ROUND_TRIPS, echo.target,
                                      str(keep), *map(str, rows)], env=env, check=True,
                                     capture_output=True, text=True).stdout
                medians[keep].append([float(v) for v in out.split()])
    finally:
        echo.stop()
    print("| MiB each way | keep_freed_buffers=False, ms (3 runs) | True, ms (3 runs) |")
    print("|---|---|---|")
    for i, r in enumerate(rows):
        runs = {keep: ", ".join(f"{m[i]:.1f}" for m in medians[keep]) for keep in medians}
        print(f"| {r * 4096 * 4 >> 20} | {runs[False]} | {runs[True]} |", flush=True)


if __name__ == "__main__":
    parts = {"overhead": overhead, "batching": batching, "methods": methods,
             "python": python}
    for part in sys.argv[2:] or ["overhead", "batching"]:
        parts[part]()
