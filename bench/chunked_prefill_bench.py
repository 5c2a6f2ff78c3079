#!/usr/bin/python3
"""Decode-step latency while other sessions prefill, for values of
--prefill-chunk-tokens (docs/perf/2026-12-01-chunked-prefill.md).

S client threads, each in a closed loop over KV-cache sessions: open a session,
prefill PREFILL tokens in one call, send STEPS one-token steps, close, again. Each
thread's first session is cut short at a random step, so the prefills of the
threads spread out over time instead of all landing together; with --together
they start at once, as layerserve-bench --method decode does. After WARMUP seconds,
calls that start and end within the next DURATION seconds are timed apart: decode
steps and prefills. One server per chunk value (0: prefills run whole; "-": the
flag not passed, for a server from before it).

Reported per chunk value, medians over --runs runs: decode step latency p50, p90,
p99 and max (ms), prefill latency p50 and p99 (ms), decode tokens/s and prefill
tokens/s.

Models: the built-in demo model by default; --llama3-8b writes one
Llama-3-8B-shaped layer of random bfloat16 weights (hidden 4096, 32/8 heads, d_ff
14336; tests/testing/random_llama.py) to a temporary repository and serves it; or
--model-repository DIR --model NAME.

Usage: /usr/bin/python3 bench/chunked_prefill_bench.py BUILD_DIR
       [--llama3-8b | --model-repository DIR --model NAME] [--weight-dtype bfloat16]
       [--chunks 0,128,256] [--sessions 16] [--prefill 128] [--steps 64]
       [--duration 30] [--warmup 5] [--runs 3] [--together] [--compute-threads N]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import grpc
import numpy as np

# The generated stubs (BUILD_DIR/python) and the tests' numpy <-> Tensor helper.
sys.path.insert(0, os.path.join(sys.argv[1] if len(sys.argv) > 1 else "build", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "testing"))
from layerserve.v1 import layerserve_pb2 as pb  # noqa: E402
from layerserve.v1 import layerserve_pb2_grpc as pb_grpc  # noqa: E402
from random_llama import write_random_llama  # noqa: E402
from wire import array_tensor  # noqa: E402
from sessions_bench import start_server  # noqa: E402  (bench/, beside this file)


def percentile(values, p):
    """Nearest rank, as layerserve-bench reports (a latency actually measured)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, -(-len(ordered) * p // 100) - 1)]


def run(target, args, hidden):
    """One run: {"step": [seconds...], "prefill": [seconds...]}."""
    start = time.perf_counter()
    record_from, stop = start + args.warmup, start + args.warmup + args.duration
    timed = {"step": [], "prefill": []}
    lock = threading.Lock()

    def body(i):
        rng = np.random.default_rng(i)
        prompt = array_tensor(rng.standard_normal((args.prefill, hidden), np.float32),
                              "float32")
        token = array_tensor(rng.standard_normal((1, hidden), np.float32), "float32")
        channel = grpc.insecure_channel(target, options=[
            ("grpc.max_receive_message_length", 256 << 20)])
        stub = pb_grpc.LayerServiceStub(channel)
        mine = {"step": [], "prefill": []}

        def call(kind, session, hidden_states):
            begin = time.perf_counter()
            stub.BlockForward(pb.BlockForwardRequest(session_id=session,
                                                     hidden_states=hidden_states),
                              timeout=120)
            end = time.perf_counter()
            if begin >= record_from and end <= stop:
                mine[kind].append(end - begin)

        # The first session: cut short, unless the threads are to keep together.
        steps = args.steps if args.together else int(rng.integers(1, args.steps + 1))
        while time.perf_counter() < stop:
            session = stub.OpenSession(pb.OpenSessionRequest(
                model=args.model, max_length=args.prefill + args.steps)).session_id
            call("prefill", session, prompt)
            for _ in range(steps):
                if time.perf_counter() >= stop:
                    break
                call("step", session, token)
            stub.CloseSession(pb.CloseSessionRequest(session_id=session))
            steps = args.steps
        channel.close()
        with lock:
            for kind in timed:
                timed[kind] += mine[kind]

    threads = [threading.Thread(target=body, args=(i,)) for i in range(args.sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return timed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--llama3-8b", action="store_true")
    parser.add_argument("--model-repository", default="")
    parser.add_argument("--model", default="")
    parser.add_argument("--weight-dtype", default="bfloat16")
    parser.add_argument("--chunks", default="0,128,256")
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--prefill", type=int, default=128)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--duration", type=float, default=30)
    parser.add_argument("--warmup", type=float, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--together", action="store_true")
    parser.add_argument("--compute-threads", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as repository:
        if args.llama3_8b:
            write_random_llama(os.path.join(repository, "llama3-8b-1layer"), hidden=4096,
                               heads=32, kv_heads=8, ffn=14336)
            args.model_repository, args.model = repository, "llama3-8b-1layer"
        measure(args)


def measure(args):
    server_args = [f"--weight-dtype={args.weight_dtype}",
                   f"--compute-threads={args.compute_threads}"]
    if args.model_repository:
        server_args.append(f"--model-repository={args.model_repository}")
    print(f"{args.sessions} sessions, prefill {args.prefill} then {args.steps} steps, "
          f"{args.duration:.0f} s per run, median of {args.runs} runs"
          f"{', sessions started together' if args.together else ''}"
          f"{f', {args.compute_threads} compute threads' if args.compute_threads else ''}")
    print("| --prefill-chunk-tokens | step p50 ms | p90 | p99 | max | prefill p50 ms | "
          "p99 | decode tok/s | prefill tok/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for chunk in args.chunks.split(","):
        flag = [] if chunk == "-" else [f"--prefill-chunk-tokens={chunk}"]
        proc, target = start_server(args.build, *server_args, *flag)
        try:
            with grpc.insecure_channel(target) as channel:
                info = pb_grpc.LayerServiceStub(channel).GetModel(
                    pb.GetModelRequest(name=args.model))
            rows = []
            for _ in range(args.runs):
                timed = run(target, args, info.hidden_size)
                step, prefill = [t * 1e3 for t in timed["step"]], \
                    [t * 1e3 for t in timed["prefill"]]
                rows.append([percentile(step, 50), percentile(step, 90),
                             percentile(step, 99), max(step, default=float("nan")),
                             percentile(prefill, 50), percentile(prefill, 99),
                             len(step) / args.duration,
                             len(prefill) * args.prefill / args.duration])
            m = [statistics.median(column) for column in zip(*rows)]
            print(f"| {chunk} | {m[0]:.1f} | {m[1]:.1f} | {m[2]:.1f} | {m[3]:.0f} | "
                  f"{m[4]:.0f} | {m[5]:.0f} | {m[6]:.0f} | {m[7]:.0f} |", flush=True)
        finally:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
