#!/usr/bin/python3
"""Decode of a Llama-3-8B-shaped layer against the machine's ceiling, in one run:
the ceiling and the server's compute per step size, then end to end as users
drive it (Python: a call per session or one call for all; the C++ load generator:
steady, and with a prefill every 64 steps). A sibling of bench/llama8b_bench.py,
whose checkpoint, server start and counters it uses.

  1. writes the one-layer 8B checkpoint (436 MB of bf16 weights) and starts
     build/bin/layerserve on it (127.0.0.1, port 0; bf16 weights and KV cache;
     every other flag at its default, --server-arg flags added);
  2. ceilings (layerserve_matmul_peak_bench, N threads = the server's compute
     threads): the read bandwidth, the bare oneDNN bf16 matmul at M = 512 and at
     each step's rows. A step of R one-token rows is bounded by the longer of
     reading the layer's weights at that bandwidth and its FLOPs at the M = 512
     rate (the issue's definition of the ceiling);
  3. for R in ROWS: R sessions prefilled PREFILL tokens, stepped together by one
     multi-session call per step (Client.step) from one Python thread: the
     server's compute per step (its /metrics) and the end-to-end rate;
  4. 16 and 64 sessions each on its own Python thread (a call per session per
     step, llama8b_bench.server_decode);
  5. the same multi-session steps at 1, 4 and 16 rows with int8 weights
     (--weight-dtype=int8, a second server), against bfloat16's compute;
  6. the C++ load generator (layerserve-bench --method decode), 16 and 64
     sessions: steady (--tokens 16 --steps 4096) and with a 128-token prefill every
     64 steps (--tokens 128 --steps 64), and 64 sessions as 4 calls of 16;
  7. prints a Markdown report with the targets' ratios (and writes it to --out).

Usage: /usr/bin/python3 bench/decode_ceiling_bench.py [--quick] [--out FILE]
           [--build-dir build] [--server-arg=--compute-threads=2 ...]
The machine is shared: figures are medians; run it on a quiet machine and read
the load average the report prints.
"""
import argparse
import contextlib
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama8b_bench as l8  # noqa: E402  (beside this file)

ROWS = [1, 4, 16, 64]
SEPARATE = [16, 64]
INT8_ROWS = {1: 0.6, 4: 0.6, 16: 0.9}  # Rows: the target, int8 / bfloat16 time.
PREFILL = l8.PREFILL
WIRE = "bfloat16"  # The C++ generator's; the Python client's too here (see step()).


def linear_params():
    dh = l8.HIDDEN // l8.HEADS
    return (l8.HIDDEN * (l8.HEADS + 2 * l8.KV_HEADS) * dh + l8.HEADS * dh * l8.HIDDEN
            + l8.HIDDEN * 2 * l8.FFN + l8.FFN * l8.HIDDEN)


def step_flops(rows, context):
    """FLOPs of one-token steps of `rows` sessions each attending over `context`
    cached tokens: the linear layers and attention's two products."""
    return 2 * rows * linear_params() + 4 * rows * context * l8.HIDDEN


def ceiling_ms(rows, context, weight_bytes, gbps, gflops512):
    read = weight_bytes / (gbps * 1e9)
    compute = step_flops(rows, context) / (gflops512 * 1e9)
    return max(read, compute) * 1e3


def multi_session_steps(process, rows, steps, warmup):
    """R sessions, one Python thread, one multi-session call per step. Returns
    (end-to-end tokens/s, median call ms, server compute ms per call)."""
    from layerserve_client import Client
    rng = np.random.default_rng(rows)
    with Client(process.target, timeout=300, keep_freed_buffers=True) as client:
        sessions = [client.open_session(model=l8.MODEL) for _ in range(rows)]
        try:
            for s in sessions:
                s.forward(rng.standard_normal((PREFILL, l8.HIDDEN), dtype=np.float32))
            xs = [rng.standard_normal((rows, 1, l8.HIDDEN), dtype=np.float32)
                  for _ in range(8)]
            for i in range(warmup):
                client.step(sessions, xs[i % 8], dtype=WIRE)
            counters = l8.ServerCounters(process)
            times = []
            start = time.perf_counter()
            for i in range(steps):
                t = time.perf_counter()
                client.step(sessions, xs[i % 8], dtype=WIRE)
                times.append(time.perf_counter() - t)
            elapsed = time.perf_counter() - start
            d = counters.delta()
        finally:
            for s in sessions:
                s.close()
    return (rows * steps / elapsed, statistics.median(times) * 1e3,
            d["compute_s"] / d["requests"] * 1e3)


def loadgen(bench, process, sessions, tokens, steps, timing, per_call=1):
    """layerserve-bench --method decode: one JSON level; timing (warm-up,
    duration)."""
    warmup, duration = timing
    cmd = [bench, f"--target={process.target}", "--method=decode",
           f"--model={l8.MODEL}", f"--tokens={tokens}", f"--steps={steps}",
           f"--wire-dtype={WIRE}", f"--concurrency={sessions // per_call}",
           f"--duration={duration}", f"--warmup={warmup}", f"--metrics-url={process.metrics_url}",
           "--json"]
    if per_call > 1:
        cmd.append(f"--sessions-per-call={per_call}")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr}")
    level = json.loads(out.stdout)["levels"][0]
    if level["errors"]:
        raise RuntimeError(f"{' '.join(cmd)}: {level['errors']} errors: "
                           f"{level.get('error_messages')}")
    level["sessions_per_call"] = per_call
    return " ".join(shlex.quote(a) for a in cmd), level


def window_rps(level):
    """The level's calls/s within its duration (layerserve-bench's
    window_throughput_rps); the plain rate from a layerserve-bench without it."""
    return level.get("window_throughput_rps", level["throughput_rps"])


@contextlib.contextmanager
def serving(server, repository, extra):
    """The server on the checkpoint, stopped after; a failure inside exits with its
    output."""
    process = l8.start_server(server, repository, extra)
    try:
        yield process
    except Exception as error:
        process.stop(signal.SIGKILL)
        sys.exit(f"decode_ceiling_bench: {error!r}\nserver output:\n"
                 f"{process.output()[-4000:]}")
    if process.proc.poll() is None:
        process.stop(signal.SIGTERM)


def report(r, threads, command, server_cmd, elapsed):
    peak = r["peak"]
    gbps = peak["bandwidth"]["gbps"]
    big = max((v for (m, n, _), v in peak["matmul"].items()
               if m == 512 and n == 2 * l8.FFN), key=lambda v: v["gflops"])["gflops"]
    wb = r["weight_bytes"]
    out = ["# Decode of a Llama-3-8B-shaped layer against the machine's ceiling", "",
           f"Machine: {l8.machine_line(threads)}.", "", l8.load_line(r["load"]), "",
           f"Command: `{command}` ({elapsed:.0f} s)", "",
           f"Server: `{server_cmd}`. One Llama-3-8B layer, bf16 weights "
           f"({wb / 1e6:.0f} MB) and KV cache, every other flag at its default; "
           f"sessions prefilled {PREFILL} tokens; hidden states sent as {WIRE}. The "
           "clients run on the same cores as the server.", "",
           f"## Ceilings, {threads} threads", "",
           f"Read bandwidth {gbps:.1f} GB/s (the layer's weights in "
           f"{wb / gbps / 1e6:.1f} ms); bare oneDNN bf16 matmul at M = 512: "
           f"{big:.0f} GFLOP/s.", ""]
    rows = []
    for n in ROWS:
        mm = peak["matmul"].get((n, 2 * l8.FFN, "packed"))
        ceil = ceiling_ms(n, PREFILL, wb, gbps, big)
        tok, call_ms, compute_ms = r["multi"][n]
        rows.append([n, f"{mm['gflops']:.0f}" if mm else "-", f"{ceil:.1f}",
                     f"{n / ceil * 1e3:.0f}", f"{compute_ms:.1f}",
                     f"{compute_ms / ceil:.2f}x", f"{call_ms:.1f}", f"{tok:.0f}",
                     f"{tok / (n / ceil * 1e3):.2f}"])
    out += l8.table(["rows (sessions)", "bare matmul GFLOP/s at these rows",
                     "ceiling ms", "ceiling tok/s", "server compute ms",
                     "compute / ceiling", "one call per step, ms (median)",
                     "end-to-end tok/s", "of the ceiling"], rows)
    out += ["", "Ceiling: the longer of the weights' read at the bandwidth and the "
            "step's FLOPs (linear layers, and attention over the cache) at the M = 512 "
            "rate. Server compute: `layerserve_compute_duration_seconds` per call; "
            "one Python thread sends one multi-session call (`Client.step`) per step.",
            "", "## End to end, a Python thread per session (a call each per step)", ""]
    rows = []
    for s in SEPARATE:
        tok, d = r["separate"][s]
        per_batch = d["batch_requests"] / d["batches"]
        compute_ms = d["compute_s"] / d["requests"] * 1e3
        server_rate = per_batch / compute_ms * 1e3
        _, _, multi_compute = r["multi"][s]
        multi_tok = r["multi"][s][0]
        rows.append([s, f"{tok:.0f}", f"{per_batch:.1f}", f"{server_rate:.0f}",
                     f"{multi_tok:.0f}", f"{multi_tok / (s / multi_compute * 1e3):.2f}"])
    out += l8.table(["sessions", "separate calls tok/s", "steps per batch",
                     "server compute alone tok/s", "one call per step tok/s",
                     "one call / its server-only rate"], rows)
    out += ["", "## int8 weights (`--weight-dtype=int8`), one call per step", ""]
    out += l8.table(["rows", "bfloat16 compute ms", "int8 compute ms", "int8 / bfloat16"],
                    [[n, f"{r['multi'][n][2]:.1f}", f"{r['int8'][n][2]:.1f}",
                      f"{r['int8'][n][2] / r['multi'][n][2]:.2f}"] for n in INT8_ROWS])
    out += ["", "## The C++ load generator (layerserve-bench --method decode)", ""]
    rows = []
    for name, (cmd, level) in r["loadgen"].items():
        lat = level["latency_ms"]
        step = level.get("step_latency_ms") or {}
        batch = (level.get("server") or {}).get("mean_batch_size")
        step_tok = (step.get("count", 0) * level["sessions_per_call"] /
                    level["elapsed_s"])
        rows.append([name, f"{window_rps(level):.0f}", f"{level['throughput_rps']:.0f}",
                     f"{step_tok:.0f}",
                     f"{lat['p50']:.1f}",
                     f"{lat['p99']:.1f}", f"{lat['max']:.0f}",
                     f"{step['p50']:.1f}" if step else "-",
                     f"{step['p99']:.1f}" if step else "-",
                     f"{step['max']:.0f}" if step else "-",
                     f"{batch:.1f}" if batch else "-"])
    out += l8.table(["load", "calls/s", "calls/s with the drain", "step tok/s", "p50 ms",
                     "p99 ms", "max ms", "step p50", "step p99", "step max", "mean batch"],
                    rows)
    out += ["", "calls/s: the calls that finished within the duration, per second of it. "
            "With the drain: all calls started in it, over the time until the last "
            "finished. Prefills still queued at the end finish seconds later, and that "
            "drain adds nothing to the load's rate."]
    out += ["", "The work-conserving rate the mixed level is held to: "
            f"{work_conserving_rps(r):.0f} calls/s, from the server's compute of one "
            f"128-token prefill ({r['prefill128_ms']:.1f} ms) and of one 64-row step "
            f"({r['multi'][64][2]:.1f} ms), both as calls alone."]
    out += ["", "Commands (the server's target filled in):", ""]
    out += [f"- {name}: `{cmd}`" for name, (cmd, _) in r["loadgen"].items()]
    out += ["", "## Targets (ratios in this run)", ""]
    out += targets(r, wb, gbps, big)
    return "\n".join(out) + "\n"


def work_conserving_rps(r):
    """The mixed level's reference calls/s: each session's cycle is a 128-token
    prefill and 64 steps; 64 sessions' steps batched (the 64-row step's compute) and
    their prefills (the T = 128 call's compute) back to back with no idle core."""
    cycle_s = (64 * r["multi"][64][2] + 64 * r["prefill128_ms"]) / 1e3
    return 64 * 65 / cycle_s


def targets(r, wb, gbps, big):
    """Lines: each target, its measured ratio, met or not."""
    lines = []

    def check(what, value, limit, higher_is_better=False):
        ok = value >= limit if higher_is_better else value <= limit
        lines.append(f"- {what}: {value:.2f} ({'met' if ok else 'NOT met'}; "
                     f"{'at least' if higher_is_better else 'at most'} {limit})")
    for n, limit in ((16, 1.3), (64, 1.2)):
        check(f"server compute of the {n}-row step / its ceiling",
              r["multi"][n][2] / ceiling_ms(n, PREFILL, wb, gbps, big), limit)
    tok16, _, compute16 = r["multi"][16]
    check("one Python process, 16 sessions, one call per step / the server-only rate",
          tok16 / (16 / compute16 * 1e3), 0.8, True)
    tok64 = r["multi"][64][0]
    check("64 sessions in one call per step / the 64-row ceiling's tok/s",
          tok64 / (64 / ceiling_ms(64, PREFILL, wb, gbps, big) * 1e3), 0.75, True)
    for n, limit in INT8_ROWS.items():
        check(f"int8 / bfloat16 compute of the {n}-row step",
              r["int8"][n][2] / r["multi"][n][2], limit)
    mixed = r["loadgen"].get("64 sessions, prefill 128 every 64 steps")
    steady = r["loadgen"].get("64 sessions, steady")
    if mixed and steady:
        level = mixed[1]
        check("mixed calls/s / the work-conserving rate",
              window_rps(level) / work_conserving_rps(r), 0.8, True)
        # Not the target: the same cycle with the steps at the load generator's own
        # steady rate (64 separate calls per step on the server's cores), which
        # tells the cost of separate calls from the cost of mixing in prefills.
        steps_per_s = window_rps(steady[1])
        separate = 64 * 65 / (64 * 64 / steps_per_s + 64 * r["prefill128_ms"] / 1e3)
        lines.append(f"- (for reference, not a target) mixed calls/s / the same cycle "
                     f"at the load generator's steady step rate: "
                     f"{window_rps(level) / separate:.2f}")
        step, base = level.get("step_latency_ms"), steady[1].get("step_latency_ms")
        if step and base:
            check("mixed step p99 / steady step p50", step["p99"] / base["p50"], 3.0)
            check("mixed step max, s", step["max"] / 1e3, 1.0)
        else:
            lines.append("- step latency apart from prefills: not reported by this "
                         "layerserve-bench")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.path.join(l8.ROOT, "build"))
    parser.add_argument("--server-arg", action="append", default=[])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    parser.add_argument("--out", help="also write the report to this file")
    args = parser.parse_args()
    started = time.perf_counter()
    build = os.path.abspath(args.build_dir)
    sys.path[:0] = [os.path.join(l8.ROOT, "client", "python"),
                    os.path.join(build, "python"), os.path.join(l8.ROOT, "tests", "testing")]
    server = os.path.join(build, "bin", "layerserve")
    bench = os.path.join(build, "bin", "layerserve-bench")
    peak_bench = os.path.join(build, "bench", "layerserve_matmul_peak_bench")
    for path in (server, bench, peak_bench):
        if not os.access(path, os.X_OK):
            sys.exit(f"decode_ceiling_bench: no executable {path}: run scripts/build")
    threads = l8.compute_threads(args.server_arg)
    settings = l8.Settings(args.quick)
    steps, warmup = (8, 2) if args.quick else (24, 4)
    # Steady levels: a few seconds of warm-up. With prefills, every session starts
    # with one at once: the warm-up lets that first wave pass (64 x 128 tokens
    # took 18 s on 2 Zen 4 cores), and the level covers several 64-step cycles.
    steady = ("3s", "8s") if args.quick else ("5s", "20s")
    mixed = ("10s", "20s") if args.quick else ("40s", "60s")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("decode_ceiling_bench: terminated"))

    r = {"load": [l8.load_average()]}
    with tempfile.TemporaryDirectory(prefix="decode_ceiling_bench.") as tmp:
        weights = l8.make_weights()
        r["weight_bytes"] = sum(t.numel() * t.element_size() for t in weights.values())
        l8.write_checkpoint(os.path.join(tmp, l8.MODEL), weights)
        del weights
        l8.log("ceilings (layerserve_matmul_peak_bench)")
        r["peak"] = l8.run_peak_bench(peak_bench, threads, args.quick, rows=ROWS)
        l8.log("starting layerserve")
        with serving(server, tmp, args.server_arg) as process:
            server_cmd = " ".join(shlex.quote(a) for a in process.proc.args)
            _, r["prefill128_ms"] = l8.server_block_ms(process, 128, settings)
            r["multi"] = {}
            for n in ROWS:
                l8.log(f"{n} session(s), one call per step")
                r["multi"][n] = multi_session_steps(process, n, steps, warmup)
            r["separate"] = {}
            for s in SEPARATE:
                l8.log(f"{s} sessions, a Python thread and a call each")
                tok, _, _, d = l8.server_decode(process, s, settings)
                r["separate"][s] = (tok, d)
            r["loadgen"] = {}
            for s in SEPARATE:
                for name, tokens, n_steps, timing in (
                        ("steady", 16, 4096, steady),
                        ("prefill 128 every 64 steps", 128, 64, mixed)):
                    l8.log(f"layerserve-bench: {s} sessions, {name}")
                    r["loadgen"][f"{s} sessions, {name}"] = loadgen(
                        bench, process, s, tokens, n_steps, timing)
            l8.log("layerserve-bench: 64 sessions as 4 calls of 16, steady")
            r["loadgen"]["64 sessions as 4 calls of 16, steady"] = loadgen(
                bench, process, 64, 16, 4096, steady, per_call=16)
        l8.log("starting layerserve with int8 weights")
        with serving(server, tmp, [*args.server_arg, "--weight-dtype=int8"]) as process:
            r["int8"] = {n: multi_session_steps(process, n, steps, warmup)
                         for n in INT8_ROWS}
        r["load"].append(l8.load_average())
    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    l8.emit(report(r, threads, command, server_cmd, time.perf_counter() - started),
            args.out)

if __name__ == "__main__":
    main()
