#!/usr/bin/python3
"""One Llama-3-8B-shaped block, end to end through the Python client, against PyTorch
eager bfloat16 with the same weights and as many threads as the server computes with,
and against the machine's ceilings; checks the targets listed under "Targets" in its report (T=16 and
T=512 >= 1.5x torch, T=128 >= 1.1x, T=1 within 1.2x of the weight-read limit, 16
decode sessions >= 1000 tok/s and >= 2x torch, ...). Earlier
hand measurements: docs/perf/2026-12-01-llama3-8b-block-end-to-end.md.

  1. writes a one-layer Llama-3-8B checkpoint (hidden 4096, 32 heads on 8 KV heads,
     d_ff 14336, random bf16 weights N(0, 0.02^2), 436 MB) into a model repository,
     and starts build/bin/layerserve on it (127.0.0.1, port 0; bf16 weights and KV
     cache; --server-arg flags added);
  2. runs build/bench/layerserve_matmul_peak_bench: bare oneDNN bf16 matmul GFLOP/s
     at the MLP's largest shape and the memory read bandwidth, N threads;
  3. BlockForward at T = 1, 16, 128, 512 through layerserve_client, each right after
     the same block in PyTorch (torch.set_num_threads(N), bench/torch_llama.py);
  4. decode tokens/s of 1, 4, 16 KV-cache sessions, each on its own client thread,
     each right after PyTorch decoding as many sequences batched with a hand-kept
     KV cache; then decode step latency of 16 sessions beside a stream of
     512-token prefills;
  5. prints a Markdown report (and writes it to --out).

Usage (from anywhere; Debian's interpreter has torch and numpy):
  /usr/bin/python3 bench/llama8b_bench.py [--quick] [--out FILE]
      [--build-dir build] [--server PATH] [--checkpoint-dir DIR]
      [--server-arg=--compute-threads=2 ...]
N = the server's --compute-threads when given, else the CPUs online (the server's
default). Times are medians after warm-up. Decode takes up to 3 timed rounds per
configuration but starts no new round after 10 s of them, so a busy machine gives
fewer samples rather than a longer run: the full run took 2.5-3 minutes on 2 shared
cores (load average ~7), --quick about 1.5.
"""
import argparse
import datetime
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))  # write_safetensors
import torch_llama  # noqa: E402  (beside this file)
from torch_timing import median_seconds  # noqa: E402

MODEL = "llama3-8b-1layer"
HIDDEN, HEADS, KV_HEADS, FFN = 4096, 32, 8, 14336
SHAPE = torch_llama.Shape(hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS,
                          theta=500000.0, eps=1e-5)
TOKENS = [1, 16, 128, 512]
SESSIONS = [1, 4, 16]
PREFILL = 128          # Tokens each decode session is prefilled with.
STREAM_PREFILL = 512   # Tokens of each prefill in the competing stream.
# Hidden states travel as float32, the client's default for float32 arrays: the
# server computes in float32 inside either way, and numpy has no bfloat16, so the
# client's bfloat16 encode + decode of a T = 512 call costs ~48 ms of Python here
# against ~12 ms for float32; end to end, float32 measured a little faster.
WIRE = "float32"


class Settings:
    """How long each measurement runs: the full run or --quick."""

    def __init__(self, quick):
        self.block_samples = 3 if quick else 5   # medians of this many samples
        self.sample_seconds = 0.1 if quick else 0.2
        self.warmup_steps = 2 if quick else 4    # untimed decode steps after prefill
        self.steps = 8 if quick else 32          # decode steps per timed round
        self.rounds = 1 if quick else 3          # timed rounds, at most
        self.round_budget = 10.0                 # seconds: no new round after this


class Rounds:
    """Timed rounds of decode steps: at most settings.rounds, and none started once
    settings.round_budget seconds went into them (one at least), so a loaded
    machine takes fewer rounds instead of minutes more."""

    def __init__(self, settings):
        self.settings = settings
        self.rates = []
        self.spent = 0.0

    def more(self):
        return not self.rates or (len(self.rates) < self.settings.rounds and
                                  self.spent < self.settings.round_budget)

    def add(self, tokens, seconds):
        self.rates.append(tokens / seconds)
        self.spent += seconds

    def median(self):
        return statistics.median(self.rates)


# ---------------------------------------------------------------------------------
# The checkpoint
# ---------------------------------------------------------------------------------


def make_weights():
    """One layer's weights, bf16 torch tensors keyed by their Hugging Face names."""
    g = torch.Generator().manual_seed(21)
    dh = HIDDEN // HEADS

    def w(out, inp):
        return (torch.randn(out, inp, generator=g) * 0.02).to(torch.bfloat16)

    p = "model.layers.0."
    return {
        p + "input_layernorm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
        p + "self_attn.q_proj.weight": w(HEADS * dh, HIDDEN),
        p + "self_attn.k_proj.weight": w(KV_HEADS * dh, HIDDEN),
        p + "self_attn.v_proj.weight": w(KV_HEADS * dh, HIDDEN),
        p + "self_attn.o_proj.weight": w(HIDDEN, HEADS * dh),
        p + "post_attention_layernorm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
        p + "mlp.gate_proj.weight": w(FFN, HIDDEN),
        p + "mlp.up_proj.weight": w(FFN, HIDDEN),
        p + "mlp.down_proj.weight": w(HIDDEN, FFN),
    }


def write_checkpoint(directory, weights, layers=1):
    """config.json + model.safetensors (BF16) in `directory`, as the loader reads
    them (server/models/): `weights` of make_weights(), as the model's first layer
    and (layers > 1) again as each of the others."""
    from safetensors_file import write_safetensors
    os.makedirs(directory, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "hidden_size": HIDDEN, "num_attention_heads": HEADS,
              "num_key_value_heads": KV_HEADS, "intermediate_size": FFN,
              "num_hidden_layers": layers, "rms_norm_eps": SHAPE.eps,
              "rope_theta": SHAPE.theta, "max_position_embeddings": 8192,
              "hidden_act": "silu", "vocab_size": 128256, "torch_dtype": "bfloat16"}
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    tensors = []
    for name, t in weights.items():
        data = t.view(torch.int16).numpy().astype("<i2").tobytes()
        for layer in range(layers):
            tensors.append((name.replace("model.layers.0.", f"model.layers.{layer}."),
                            "BF16", list(t.shape), data))
    write_safetensors(os.path.join(directory, "model.safetensors"), tensors)


def write_repository(repository, layers=1):
    """A model repository in `repository` holding one model of `layers` copies of one
    random layer, for benches that need the 8B shape but no PyTorch peer. Returns
    the model's name and the server flags that serve it as this bench does."""
    name = f"llama3-8b-{layers}layer"
    write_checkpoint(os.path.join(repository, name), make_weights(), layers)
    return name, [f"--model-repository={repository}", "--weight-dtype=bfloat16",
                  "--kv-cache-dtype=bfloat16"]


def torch_layer(weights):
    """The weights as bench/torch_llama.py takes a layer."""
    p = "model.layers.0."
    names = dict(q="self_attn.q_proj", k="self_attn.k_proj", v="self_attn.v_proj",
                 o="self_attn.o_proj", gate="mlp.gate_proj", up="mlp.up_proj",
                 down="mlp.down_proj", n1="input_layernorm",
                 n2="post_attention_layernorm")
    return {key: weights[p + name + ".weight"] for key, name in names.items()}


def block_flops(t):
    """Multiply-adds x 2 of one block call of T tokens: the linear layers, and
    attention counted in full (causal masking not subtracted), as
    bench/kernels/block/block_bench.cc counts them."""
    dh = HIDDEN // HEADS
    linear = HIDDEN * (HEADS + 2 * KV_HEADS) * dh + HEADS * dh * HIDDEN + \
        HIDDEN * 2 * FFN + FFN * HIDDEN
    return 2 * t * linear + 4 * HEADS * dh * t * t


# ---------------------------------------------------------------------------------
# Ceilings: bare matmul and bandwidth (C++), and torch's matmul
# ---------------------------------------------------------------------------------


def run_peak_bench(path, threads, quick, rows=None):
    """layerserve_matmul_peak_bench's lines: {"matmul": {(M, N, weights layout):
    fields}, "bandwidth": fields}, fields {name: number} (see
    bench/kernels/linear/matmul_peak_bench.cc); `rows`: the decode steps' M to
    measure (its default: 16)."""
    cmd = [path, f"--threads={threads}"] + (["--quick"] if quick else [])
    if rows:
        cmd.append("--rows=" + ",".join(str(n) for n in rows))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"llama8b_bench: {' '.join(cmd)} failed ({out.returncode}):\n"
                 f"{out.stdout}{out.stderr}")
    results = {"matmul": {}}
    for line in out.stdout.splitlines():
        kind, *fields = line.split()
        values = dict(f.split("=") for f in fields)
        layout = values.pop("weights", None)
        values = {k: float(v) for k, v in values.items()}
        if kind == "matmul_bf16":
            results["matmul"][int(values["M"]), int(values["N"]), layout] = values
        elif kind == "read_bandwidth":
            results["bandwidth"] = values
    if "bandwidth" not in results or not any(
            m == 512 and n == 2 * FFN for m, n, _ in results["matmul"]):
        sys.exit(f"llama8b_bench: unexpected output of {' '.join(cmd)}:\n{out.stdout}")
    return results


def torch_matmul_gflops(weight, settings):
    x = torch.randn(512, HIDDEN).to(torch.bfloat16)
    with torch.no_grad():
        s = median_seconds(lambda: torch.nn.functional.linear(x, weight),
                           settings.block_samples, settings.sample_seconds, warmups=2)
    return 2 * 512 * HIDDEN * weight.shape[0] / s / 1e9


# ---------------------------------------------------------------------------------
# PyTorch peer
# ---------------------------------------------------------------------------------


def torch_block_ms(layer, t, settings):
    x = torch.randn(1, t, HIDDEN).to(torch.bfloat16)
    with torch.no_grad():
        s = median_seconds(lambda: torch_llama.forward(x, [layer], [[]], 0, SHAPE),
                           settings.block_samples, settings.sample_seconds, warmups=2)
    return s * 1e3


def torch_decode(layer, sequences, settings):
    """Tokens/s of decode steps of `sequences` sequences batched in one forward per
    step, after a PREFILL-token prefill and warm-up steps: the median over the
    timed rounds."""
    steps, warmup = settings.steps, settings.warmup_steps
    x = torch.randn(sequences, PREFILL + warmup + steps * settings.rounds,
                    HIDDEN).to(torch.bfloat16)
    rounds = Rounds(settings)
    with torch.no_grad():
        cache = [[]]
        torch_llama.forward(x[:, :PREFILL], [layer], cache, 0, SHAPE)
        for t in range(PREFILL, PREFILL + warmup):
            torch_llama.forward(x[:, t:t + 1], [layer], cache, t, SHAPE)
        t = PREFILL + warmup
        while rounds.more():
            start = time.perf_counter()
            for _ in range(steps):
                torch_llama.forward(x[:, t:t + 1], [layer], cache, t, SHAPE)
                t += 1
            rounds.add(sequences * steps, time.perf_counter() - start)
    return rounds.median()


# ---------------------------------------------------------------------------------
# layerserve
# ---------------------------------------------------------------------------------


def start_server(server, repository, extra):
    """The server on 127.0.0.1, ports picked by the OS (tests/testing's
    ServerProcess), with MODEL loaded and ready."""
    import server_process
    from layerserve_client import Client
    server_process.SERVER = server
    try:
        process = server_process.ServerProcess(
            f"--model-repository={repository}", "--weight-dtype=bfloat16",
            "--kv-cache-dtype=bfloat16", *extra)
    except RuntimeError as error:  # It names the cause and holds the server's output.
        sys.exit(f"llama8b_bench: {error}")
    try:
        with Client(process.target, timeout=60, keep_freed_buffers=True) as client:
            info = {m.name: m for m in client.list_models()}
        if MODEL not in info or "FAILED" in process.output():
            raise RuntimeError(f"model {MODEL} did not load")
    except Exception as error:
        process.proc.kill()
        sys.exit(f"llama8b_bench: {error}; server output:\n{process.output()}")
    return process


class ServerCounters:
    """Deltas of the server's BlockForward histograms between two scrapes of its
    /metrics: requests, the compute time the server recorded for them (each request
    the time of the batch that carried it) and the batches they ran in."""
    NAMES = {"compute_s": "layerserve_compute_duration_seconds_sum",
             "requests": "layerserve_compute_duration_seconds_count",
             "batch_requests": "layerserve_batch_size_sum",
             "batches": "layerserve_batch_size_count"}

    def __init__(self, process):
        self.process = process
        self.before = self.read()

    def read(self):
        return {key: self.process.metric_sum(name, method="BlockForward")
                for key, name in self.NAMES.items()}

    def delta(self):
        after = self.read()
        return {key: after[key] - self.before[key] for key in self.NAMES}


def server_block_ms(process, t, settings):
    """(median ms end to end, mean ms of the server's own compute) of BlockForward at
    T = t; the compute is what the server's /metrics recorded for further calls
    made after the timed ones."""
    from layerserve_client import Client
    x = np.random.default_rng(t).standard_normal((t, HIDDEN), dtype=np.float32)
    with Client(process.target, timeout=300, keep_freed_buffers=True) as client:
        s = median_seconds(lambda: client.block_forward(x, model=MODEL, dtype=WIRE),
                           settings.block_samples, settings.sample_seconds, warmups=2)
        counters = ServerCounters(process)
        for _ in range(settings.block_samples):
            client.block_forward(x, model=MODEL, dtype=WIRE)
        d = counters.delta()
    return s * 1e3, d["compute_s"] / d["requests"] * 1e3


def server_agreement(target, layer):
    """max |layerserve - torch| / RMS(torch) of one T = 16 call on the same input:
    small (bf16 rounding) when both compute the same block."""
    from layerserve_client import Client, round_to_bfloat16
    x = round_to_bfloat16(np.random.default_rng(16).standard_normal((16, HIDDEN),
                                                                    dtype=np.float32))
    with Client(target, timeout=300, keep_freed_buffers=True) as client:
        ours = client.block_forward(x, model=MODEL, dtype=WIRE)
    with torch.no_grad():
        theirs = torch_llama.forward(torch.from_numpy(x)[None].to(torch.bfloat16),
                                     [layer], [[]], 0, SHAPE)[0].float().numpy()
    return float(np.abs(ours - theirs).max() / np.sqrt(np.mean(theirs ** 2)))


def server_decode(process, sessions, settings, prefill_stream=False):
    """KV-cache sessions each on its own client thread: open, prefill PREFILL tokens,
    take warm-up steps, then timed rounds of `steps` one-token steps, all sessions
    starting each round together. With prefill_stream, one more thread opens a
    session, prefills STREAM_PREFILL tokens and closes it, over and over during the
    timed rounds. Returns (median tokens/s over the timed rounds, the timed steps'
    latencies in seconds, prefills the stream completed, the server's BlockForward
    counters over the timed rounds: ServerCounters.delta())."""
    from layerserve_client import Client
    target = process.target
    steps = settings.steps
    barrier = threading.Barrier(sessions + 1)
    latencies = [[] for _ in range(sessions)]
    errors = []
    stop = threading.Event()
    prefills = [0]

    def fail(error):
        errors.append(error)
        stop.set()
        barrier.abort()

    def session_thread(i):
        rng = np.random.default_rng(i)
        try:
            with Client(target, timeout=300, keep_freed_buffers=True) as client, \
                    client.open_session(model=MODEL) as session:
                session.forward(rng.standard_normal((PREFILL, HIDDEN), dtype=np.float32),
                                dtype=WIRE)
                for _ in range(settings.warmup_steps):
                    session.forward(rng.standard_normal((1, HIDDEN), dtype=np.float32),
                                    dtype=WIRE)
                while True:
                    barrier.wait()  # The main thread has decided: another round?
                    if stop.is_set():
                        break
                    for _ in range(steps):
                        x = rng.standard_normal((1, HIDDEN), dtype=np.float32)
                        start = time.perf_counter()
                        session.forward(x, dtype=WIRE)
                        latencies[i].append(time.perf_counter() - start)
                    barrier.wait()
        except threading.BrokenBarrierError:
            pass  # Another thread failed; its error is reported.
        except Exception as error:
            fail(error)

    def stream_thread():
        x = np.random.default_rng(99).standard_normal((STREAM_PREFILL, HIDDEN),
                                                      dtype=np.float32)
        try:
            with Client(target, timeout=300, keep_freed_buffers=True) as client:
                while not stop.is_set():
                    with client.open_session(model=MODEL) as session:
                        session.forward(x, dtype=WIRE)
                    prefills[0] += 1
        except Exception as error:
            fail(error)

    # Daemons: an interrupted run (Ctrl-C, SIGTERM) must not wait on them.
    threads = [threading.Thread(target=session_thread, args=(i,), daemon=True)
               for i in range(sessions)]
    for th in threads:
        th.start()
    stream = threading.Thread(target=stream_thread, daemon=True) if prefill_stream \
        else None
    rounds = Rounds(settings)
    counters = None
    try:
        while True:
            more = rounds.more()
            if not more:
                stop.set()
            barrier.wait()  # Every session warmed up, or done with the last round.
            if not more:
                break
            if stream and not stream.ident:
                stream.start()
            if counters is None:  # Scraped while every session waits to start.
                counters = ServerCounters(process)
            start = time.perf_counter()
            barrier.wait()
            rounds.add(sessions * steps, time.perf_counter() - start)
    except threading.BrokenBarrierError:
        pass
    stop.set()
    for th in threads + ([stream] if stream and stream.ident else []):
        th.join()
    if errors:
        raise RuntimeError(f"decode with {sessions} sessions failed: {errors[0]!r}")
    return (rounds.median(), [x for xs in latencies for x in xs], prefills[0],
            counters.delta())


# ---------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------


def machine_line(threads):
    model = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break

    def git(*args):
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True,
                              text=True).stdout.strip()
    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += " (with uncommitted changes)"
    date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return (f"{model}, {os.cpu_count()} CPUs online, {date}, commit {commit}; "
            f"torch {torch.__version__} and layerserve with {threads} compute threads")


def load_line(loads):
    return (f"Load average (1 min) {loads[0]:.1f} at the start and {loads[-1]:.1f} at "
            f"the end on {os.cpu_count()} CPUs: above the CPU count, other work shared "
            "the cores and the figures are noisy.")


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def report(r, threads, command, server_cmd, elapsed):
    weight_mb = r["weight_bytes"] / 1e6
    # The ceiling: the faster weight layout at the gate|up shape.
    big = max((v for (m, n, _), v in r["peak"]["matmul"].items()
               if m == 512 and n == 2 * FFN), key=lambda v: v["gflops"])
    # A 16-session decode step's product, if the peak bench measured it.
    decode_mm = r["peak"]["matmul"].get((16, 2 * FFN, "packed"))
    bandwidth = r["peak"]["bandwidth"]["gbps"]
    limit_ms = r["weight_bytes"] / (bandwidth * 1e9) * 1e3

    def ms_at(flops, gflops):
        return flops / (gflops * 1e6)
    # The 16-session step's product at the 16-row rate (0 when not measured).
    product16_ms = ms_at(block_flops(16), decode_mm["gflops"]) if decode_mm else 0.0
    out = ["# Llama-3-8B-shaped block: layerserve against PyTorch and the machine", "",
           f"Machine: {machine_line(threads)}.", "", load_line(r["load"]), "",
           f"Command: `{command}` ({elapsed:.0f} s)", "",
           f"Server: `{server_cmd}`. One Llama-3-8B layer (hidden {HIDDEN}, "
           f"{HEADS} query heads on {KV_HEADS} KV heads, d_ff {FFN}, bf16 weights, "
           f"{weight_mb:.0f} MB), random weights N(0, 0.02^2); hidden states sent as "
           f"{WIRE}. Peer: the same block and weights in PyTorch eager bf16, "
           f"torch.set_num_threads({threads}) (bench/torch_llama.py). The client runs "
           "on the same cores as the server.", "",
           f"Same block: layerserve vs torch at T=16, max |diff| / RMS = "
           f"{r['agreement']:.3f}" + ("" if r["agreement"] < 0.2 else
                                        " -- MISMATCH: not the same block?"), "",
           f"## Ceilings, {threads} threads", ""]
    rows = [[f"bare oneDNN bf16 matmul {m}x{int(v['K'])}x{n}, {layout} weights",
             f"{v['gflops']:.0f} GFLOP/s ({v['ms']:.1f} ms)"
             + (" (the ceiling)" if v is big else "")]
            for (m, n, layout), v in r["peak"]["matmul"].items()]
    rows += [[f"torch bf16 matmul 512x{HIDDEN}x{n} (F.linear)", f"{g:.0f} GFLOP/s"]
             for n, g in r["torch_matmul"].items()]
    rows.append(["memory read bandwidth", f"{bandwidth:.1f} GB/s"])
    rows.append([f"weight-read limit at T=1 ({weight_mb:.0f} MB / bandwidth)",
                 f"{limit_ms:.2f} ms"])
    if decode_mm:
        rows.append([f"16-session decode step at that 16-row rate "
                     f"({block_flops(16) / 1e9:.1f} GFLOP)",
                     f"{product16_ms:.1f} ms = {16 / product16_ms * 1e3:.0f} tok/s"])
    out += table(["what", "measured"], rows)
    out += ["", "Packed weights: in the layout oneDNN picks (as the server holds them); "
            "plain: [N, K] as the checkpoint stores them. The ceiling is the faster at "
            "M = 512, N = 2 x d_ff (gate|up fused, as the server computes them). The "
            "weight-read limit is the time to read the layer's weights once at that "
            "bandwidth. The 16-row matmul reads its 235 MB of weights from memory each "
            "run, as a decode step does."]
    out += ["", "## BlockForward, one sequence, stateless (median ms)", ""]
    rows = []
    for t in TOKENS:
        ours, theirs, compute = r["block"][t], r["torch_block"][t], r["compute"][t]
        gflops = block_flops(t) / (compute / 1e3) / 1e9
        rows.append([t, f"{ours:.2f}", f"{theirs:.2f}", f"{theirs / ours:.2f}x",
                     f"{compute:.2f}", f"{gflops:.0f}", f"{gflops / big['gflops']:.2f}"])
    out += table(["T", "layerserve ms", "torch ms", "torch / layerserve",
                  "server compute ms", "compute GFLOP/s", "of the ceiling"], rows)
    out += ["", "Server compute: the mean of the server's own "
            "`layerserve_compute_duration_seconds{method=\"BlockForward\"}` over "
            "calls made after the timed ones (scraped from /metrics); the rest of the "
            "end-to-end time is the client, gRPC and the wire. GFLOP/s: the block's "
            "matmul and attention FLOPs (attention counted in full) over the compute "
            f"time, {block_flops(1) / 1e9:.2f} GFLOP per token."]
    out += ["", f"## Decode, KV-cache sessions (prefill {PREFILL}, then one-token steps; "
            "tokens/s)", ""]
    rows = []
    for s in SESSIONS:
        d = r["decode_server"][s]
        per_batch = d["batch_requests"] / d["batches"]
        compute_ms = d["compute_s"] / d["requests"] * 1e3  # Each step: its batch's.
        rows.append([s, f"{r['decode'][s]:.0f}", f"{r['torch_decode'][s]:.0f}",
                     f"{r['decode'][s] / r['torch_decode'][s]:.2f}x",
                     f"{per_batch:.1f}", f"{compute_ms:.1f}",
                     f"{per_batch / compute_ms * 1e3:.0f}"])
    out += table(["sessions", "layerserve tok/s", "torch tok/s (batched, hand-kept cache)",
                  "layerserve / torch", "steps per batch", "server compute ms per batch",
                  "tok/s of the compute alone"], rows)
    out += ["", "Steps per batch, compute per batch: the server's "
            "`layerserve_batch_size` and `layerserve_compute_duration_seconds` "
            "(BlockForward) over the timed rounds. Compute alone: the steps over the "
            "batches' compute time (steps per batch / compute per batch), what the server "
            "would give if the clients, gRPC and the wire took no time and no core."]
    alone, loaded = r["latency_alone"], r["latency_loaded"]
    out += ["", f"## Decode step latency, {SESSIONS[-1]} sessions stepping (ms)", ""]
    out += table(["", "p50", "p99", "steps"], [
        ["alone", f"{alone[0]:.1f}", f"{alone[1]:.1f}", alone[2]],
        [f"with a stream of {STREAM_PREFILL}-token prefills ({r['prefills']} done)",
         f"{loaded[0]:.1f}", f"{loaded[1]:.1f}", loaded[2]]])

    def ratio(t):
        return r["torch_block"][t] / r["block"][t]

    def of_peak(t):
        return block_flops(t) / (r["compute"][t] / 1e3) / 1e9 / big["gflops"]

    def ratio_at_ceiling(t):
        """torch's time over the block's FLOPs at the ceiling's rate."""
        return f"{r['torch_block'][t] / ms_at(block_flops(t), big['gflops']):.2f}x"
    top = SESSIONS[-1]  # 16, the sessions of the decode targets.
    # A 16-session step at the ceiling: its weights read once at the measured
    # bandwidth or its product at the 16-row rate, whichever takes longer.
    decode_at_ceiling = top / max(limit_ms, product16_ms) * 1e3
    na = "-"
    targets = [
        ("BlockForward T=16 >= 1.5x torch", f"{ratio(16):.2f}x", ratio_at_ceiling(16),
         ratio(16) >= 1.5),
        ("BlockForward T=128 >= 1.1x torch", f"{ratio(128):.2f}x", ratio_at_ceiling(128),
         ratio(128) >= 1.1),
        ("BlockForward T=512 >= 1.5x torch", f"{ratio(512):.2f}x", ratio_at_ceiling(512),
         ratio(512) >= 1.5),
        ("BlockForward T=1 within 1.2x of the weight-read limit",
         f"{r['block'][1]:.2f} ms = {r['block'][1] / limit_ms:.2f}x of {limit_ms:.2f} ms",
         na, r["block"][1] <= 1.2 * limit_ms),
        *[(f"server compute at T={t} >= 0.8 of the bare matmul GFLOP/s",
           f"{of_peak(t):.3f}", na, of_peak(t) >= 0.8) for t in TOKENS if t >= 128],
        (f"decode {top} sessions >= 1000 tok/s", f"{r['decode'][top]:.0f} tok/s",
         f"{decode_at_ceiling:.0f} tok/s", r["decode"][top] >= 1000),
        (f"decode {top} sessions >= 2x torch",
         f"{r['decode'][top] / r['torch_decode'][top]:.2f}x",
         f"{decode_at_ceiling / r['torch_decode'][top]:.2f}x",
         r["decode"][top] >= 2 * r["torch_decode"][top]),
        ("decode step p99 with the prefill stream <= 4x p50 without",
         f"{loaded[1]:.1f} ms = {loaded[1] / alone[0]:.1f}x of {alone[0]:.1f} ms",
         na, loaded[1] <= 4 * alone[0]),
    ]
    out += ["", "## Targets", ""]
    out += table(["target", "measured", "at the ceiling", "met"],
                 [[name, value, best, "yes" if ok else "**no**"]
                  for name, value, best, ok in targets])
    out += ["", "At the ceiling: what the measure would be if layerserve's compute ran "
            "at the ceiling above and the client, gRPC and the wire took no time; for "
            f"decode, a {top}-session step taking the longer of the weight-read limit "
            "and its product at the 16-row rate. A target beyond that value asks for "
            "more than oneDNN's best rate on this machine, with nothing else taking "
            "time."]
    met = sum(ok for *_, ok in targets)
    out += ["", f"{met} of {len(targets)} targets met."]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------


def percentiles(latencies):
    ms = np.asarray(latencies) * 1e3
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99)), len(ms)


def compute_threads(server_args):
    """The server's --compute-threads, or its default: one per online CPU."""
    for arg in server_args:
        if arg.startswith("--compute-threads="):
            return int(arg.split("=", 1)[1])
    return os.cpu_count()


def load_average():
    """The 1-minute load average: how busy the shared machine was."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def emit(text, out):
    """The report on stdout, and in the file `out` if given."""
    print(text, end="")
    if out:
        with open(out, "w") as f:
            f.write(text)


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--server", help="default: BUILD_DIR/bin/layerserve")
    parser.add_argument("--checkpoint-dir",
                        help=f"model repository to write {MODEL}/ into (kept); default "
                        "a temporary one")
    parser.add_argument("--server-arg", action="append", default=[],
                        help="extra server flag, e.g. --server-arg=--compute-threads=2")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--out", help="also write the report to this file")
    args = parser.parse_args()
    started = time.perf_counter()
    build = os.path.abspath(args.build_dir)
    server = args.server or os.path.join(build, "bin", "layerserve")
    # The client package, the stubs CMake generates, and tests/testing's ServerProcess.
    sys.path[:0] = [os.path.join(ROOT, "client", "python"), os.path.join(build, "python"),
                    os.path.join(ROOT, "tests", "testing")]
    peak_bench = os.path.join(build, "bench", "layerserve_matmul_peak_bench")
    for path in (server, peak_bench):
        if not os.access(path, os.X_OK):
            sys.exit(f"llama8b_bench: no executable {path}: build it (scripts/build), or "
                     "pass --build-dir / --server")
    threads = compute_threads(args.server_arg)
    settings = Settings(args.quick)
    torch.set_num_threads(threads)
    # SIGTERM as Ctrl-C: unwind, so the server is stopped and temp files removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("llama8b_bench: terminated"))

    r = {}
    with tempfile.TemporaryDirectory(prefix="llama8b_bench.") as tmp:
        repository = args.checkpoint_dir or tmp
        log(f"writing the checkpoint into {repository}/{MODEL}")
        weights = make_weights()
        r["weight_bytes"] = sum(t.numel() * t.element_size() for t in weights.values())
        write_checkpoint(os.path.join(repository, MODEL), weights)
        layer = torch_layer(weights)

        log("starting layerserve")
        process = start_server(server, repository, args.server_arg)
        server_cmd = " ".join(shlex.quote(a) for a in process.proc.args)
        # The idle server takes no CPU, so it runs throughout; each layerserve figure
        # is measured right after its torch peer, so both see the same load on a
        # shared machine.
        try:
            r["load"] = [load_average()]
            log("bare matmul and read bandwidth (layerserve_matmul_peak_bench)")
            r["peak"] = run_peak_bench(peak_bench, threads, args.quick)
            log("torch matmul")
            fused = torch.cat((layer["gate"], layer["up"]))
            r["torch_matmul"] = {2 * FFN: torch_matmul_gflops(fused, settings),
                                 FFN: torch_matmul_gflops(layer["gate"], settings)}
            del fused
            r["agreement"] = server_agreement(process.target, layer)
            r["block"], r["compute"], r["torch_block"] = {}, {}, {}
            for t in TOKENS:
                log(f"BlockForward T={t}: torch, layerserve")
                r["torch_block"][t] = torch_block_ms(layer, t, settings)
                r["block"][t], r["compute"][t] = server_block_ms(process, t, settings)
            r["decode"], r["torch_decode"], r["decode_server"] = {}, {}, {}
            for s in SESSIONS:
                log(f"decode, {s} session(s): torch, layerserve")
                r["torch_decode"][s] = torch_decode(layer, s, settings)
                r["decode"][s], latencies, _, r["decode_server"][s] = server_decode(
                    process, s, settings)
            r["latency_alone"] = percentiles(latencies)
            log(f"layerserve: decode, {SESSIONS[-1]} sessions beside a prefill stream")
            _, latencies, r["prefills"], _ = server_decode(process, SESSIONS[-1], settings,
                                                           prefill_stream=True)
            r["latency_loaded"] = percentiles(latencies)
            r["load"].append(load_average())
        except Exception as error:
            sys.exit(f"llama8b_bench: {error!r}\nserver output:\n{process.output()}")
        finally:
            if process.proc.poll() is None:
                process.stop(signal.SIGKILL if sys.exc_info()[0] else signal.SIGTERM)

    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    emit(report(r, threads, command, server_cmd, time.perf_counter() - started), args.out)


if __name__ == "__main__":
    main()
