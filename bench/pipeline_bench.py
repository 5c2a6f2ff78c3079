#!/usr/bin/python3
"""Decode through a pipeline of span servers against one server with every layer
(docs/perf/2026-12-02-pipeline-hops.md).

One random Llama checkpoint (tests/testing/random_llama.py; default 12 layers of
hidden 1024, 16/4 heads, d_ff 2816, bfloat16) is served two ways, one after the
other on the same machine, alternating A, B, A, B... over --runs runs:

  full      one layerserve with all layers;
  pipeline  --stages layerserves, each with --layers=START:END of an even split,
            chained by the C++ client Pipeline (layerserve-bench --pipeline).

Each is driven by layerserve-bench --method decode: S closed-loop threads, each
in KV-cache sessions of a PREFILL-token prefill then STEPS one-token steps, for
S in --sessions. Reported per S: decode requests/s (a prefill call counts as one
request, 1 in STEPS + 1) and step latency p50, medians over the runs, the ratio
pipeline/full, and the cost of each added hop: (pipeline p50 - full p50) /
(stages - 1) at S = 1. A GetModel round trip on the full server (--method
get-model, p50) is the bare cost of one RPC for comparison.

    bench/pipeline_bench.py build [--runs 3] [--duration 8s] [--sessions 1,8]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "testing"))
from random_llama import write_random_llama  # noqa: E402
from sessions_bench import start_server  # noqa: E402  (bench/, beside this file)


def bench(build, targets, args, sessions, method="decode", pipeline=False):
    """layerserve-bench's JSON level for `sessions` threads."""
    where = ["--pipeline", ",".join(targets)] if pipeline else ["--target", targets[0]]
    command = [os.path.join(build, "bin", "layerserve-bench"), *where, "--method", method,
               "--concurrency", str(sessions), "--duration", args.duration,
               "--warmup", args.warmup, "--json"]
    if method == "decode":
        command += ["--tokens", str(args.prefill), "--steps", str(args.steps),
                    "--layers", str(args.layers), "--wire-dtype", "float32"]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    [level] = json.loads(result.stdout)["levels"]
    assert not level["errors"], level["errors"]
    return level


def spans(layers, stages):
    bounds = [round(i * layers / stages) for i in range(stages + 1)]
    return [f"{bounds[i]}:{bounds[i + 1]}" for i in range(stages)]


def serve(build, repo, extra_args):
    """Started servers [(process, target)] for each argument list in extra_args."""
    return [start_server(build, f"--model-repository={repo}", *a) for a in extra_args]


def stop(servers):
    for process, _ in servers:
        process.terminate()
        process.wait(timeout=60)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("build", nargs="?", default="build")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=2816)
    parser.add_argument("--weight-dtype", default="bfloat16")
    parser.add_argument("--stages", type=int, default=3)
    parser.add_argument("--sessions", default="1,8")
    parser.add_argument("--prefill", type=int, default=16)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--duration", default="8s")
    parser.add_argument("--warmup", default="2s")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sessions = [int(s) for s in args.sessions.split(",")]
    dtype = ["--weight-dtype", args.weight_dtype]

    results = {(kind, s): [] for kind in ("full", "pipeline") for s in sessions}
    rpc_p50 = []
    with tempfile.TemporaryDirectory() as repo:
        write_random_llama(os.path.join(repo, "llama"), hidden=args.hidden, heads=args.heads,
                           kv_heads=args.kv_heads, ffn=args.ffn, layers=args.layers,
                           dtype="bfloat16")
        for run in range(args.runs):
            servers = serve(args.build, repo, [dtype])
            try:
                target = servers[0][1]
                rpc_p50.append(bench(args.build, [target], args, 1,
                                     method="get-model")["latency_ms"]["p50"])
                for s in sessions:
                    results[("full", s)].append(bench(args.build, [target], args, s))
            finally:
                stop(servers)
            servers = serve(args.build, repo, [[*dtype, f"--layers={span}"]
                                               for span in spans(args.layers, args.stages)])
            try:
                targets = [t for _, t in servers]
                for s in sessions:
                    results[("pipeline", s)].append(
                        bench(args.build, targets, args, s, pipeline=True))
            finally:
                stop(servers)
            print(f"run {run + 1}/{args.runs} done", file=sys.stderr)

    def median(kind, s, key):
        return statistics.median(
            r["throughput_rps"] if key == "rps" else r["latency_ms"][key]
            for r in results[(kind, s)])

    print(f"model: {args.layers} layers, hidden {args.hidden}, {args.heads}/{args.kv_heads} "
          f"heads, d_ff {args.ffn}, {args.weight_dtype} weights; pipeline: "
          f"{args.stages} stages {', '.join(spans(args.layers, args.stages))}; "
          f"prefill {args.prefill} then {args.steps} steps per session; "
          f"medians of {args.runs} runs of {args.duration}")
    print("sessions  full tok/s  pipe tok/s  ratio  full p50 ms  pipe p50 ms  "
          "full p99 ms  pipe p99 ms")
    for s in sessions:
        f, p = median("full", s, "rps"), median("pipeline", s, "rps")
        print(f"{s:8d}  {f:10.1f}  {p:10.1f}  {p / f:5.2f}  {median('full', s, 'p50'):11.3f}"
              f"  {median('pipeline', s, 'p50'):11.3f}  {median('full', s, 'p99'):11.3f}"
              f"  {median('pipeline', s, 'p99'):11.3f}")
    s = sessions[0]
    hop_us = (median("pipeline", s, "p50") - median("full", s, "p50")) * 1000 / (
        args.stages - 1)
    print(f"cost per added hop at {s} session(s), p50: {hop_us:.0f} us; "
          f"a GetModel round trip p50: {statistics.median(rpc_p50) * 1000:.0f} us")
    print("all runs (tok/s):", {f"{k[0]}/{k[1]}": [round(r['throughput_rps'], 1) for r in v]
                                for k, v in results.items()})


if __name__ == "__main__":
    main()
