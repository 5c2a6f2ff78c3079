#!/usr/bin/python3
"""Incremental decoding throughput (docs/perf/2026-11-30-kv-cache-sessions.md; summary:
docs/BENCHMARKS.md, "KV-cache sessions").

For a model served by layerserve, S clients each prefill a PREFIX-token prompt and
then decode STEPS tokens one at a time, all S at once:
  session    through a KV-cache session (OpenSession, one token per call);
  recompute  without a session: every step resends the whole sequence so far (what
             a client without server-side state must do) and keeps the last row;
  torch      PyTorch eager on this machine, the same block shapes in bfloat16 with a
             hand-kept KV cache, the S sequences batched in one forward per step
             (torch.set_num_threads(2)); random weights of the same shapes (speed
             only: the numbers are not compared).
Reported: decode tokens per second over all S sequences (median of 3 runs).

Models: "demo" (the built-in model: hidden 512, 8 heads, 2 kv heads, d_ff 1408, 4
layers) and "llama768" (hidden 768, 12 heads, d_ff 3072, 4 layers, random weights
written to a temporary model repository).

Usage: /usr/bin/python3 bench/sessions_bench.py BUILD_DIR [--steps N] [--sessions 1,8,32]
       [--runs 3] [--weight-dtype bfloat16|float32]
"""
import argparse
import json
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
import torch

# The generated stubs (BUILD_DIR/python) and the tests' numpy <-> Tensor helper.
sys.path.insert(0, os.path.join(sys.argv[1] if len(sys.argv) > 1 else "build", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "testing"))
from layerserve.v1 import layerserve_pb2 as pb  # noqa: E402
from layerserve.v1 import layerserve_pb2_grpc as pb_grpc  # noqa: E402
from wire import array_tensor  # noqa: E402
import torch_llama  # noqa: E402  (bench/, beside this file)

PREFIX = 128
CONFIGS = {
    "demo": dict(hidden=512, heads=8, kv_heads=2, ff=1408, layers=4),
    "llama768": dict(hidden=768, heads=12, kv_heads=12, ff=3072, layers=4),
}


def write_llama768(directory):
    """A Llama checkpoint of the llama768 shapes (blocks only), float32, random."""
    c = CONFIGS["llama768"]
    os.makedirs(directory)
    config = {"model_type": "llama", "hidden_size": c["hidden"],
              "num_attention_heads": c["heads"], "num_key_value_heads": c["kv_heads"],
              "intermediate_size": c["ff"], "num_hidden_layers": c["layers"],
              "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
              "rope_theta": 10000.0, "hidden_act": "silu", "vocab_size": 32000}
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    rng = np.random.default_rng(0)
    d, dh = c["hidden"], c["hidden"] // c["heads"]
    shapes = {"input_layernorm.weight": [d], "post_attention_layernorm.weight": [d],
              "self_attn.q_proj.weight": [c["heads"] * dh, d],
              "self_attn.k_proj.weight": [c["kv_heads"] * dh, d],
              "self_attn.v_proj.weight": [c["kv_heads"] * dh, d],
              "self_attn.o_proj.weight": [d, c["heads"] * dh],
              "mlp.gate_proj.weight": [c["ff"], d], "mlp.up_proj.weight": [c["ff"], d],
              "mlp.down_proj.weight": [d, c["ff"]]}
    header, blobs, offset = {}, [], 0
    for layer in range(c["layers"]):
        for name, shape in shapes.items():
            scale = 1.0 if len(shape) == 1 else shape[1] ** -0.5
            raw = (rng.standard_normal(shape) * scale).astype("<f4").tobytes()
            header[f"model.layers.{layer}.{name}"] = {
                "dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(raw)]}
            blobs.append(raw)
            offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(directory, "model.safetensors"), "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def start_server(build, *args):
    proc = subprocess.Popen([os.path.join(build, "bin", "layerserve"), "--host=127.0.0.1",
                             "--port=0", "--metrics-port=-1", *args],
                            stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if m := re.search(r"gRPC listening on (\S+)", line):
            return proc, m.group(1)
    raise RuntimeError("layerserve did not start")


def run_clients(target, sessions, body):
    """Runs body(stub, i, barrier) in `sessions` threads, one channel each; returns
    the decode-phase wall time (from the barrier after prefill to the last thread's
    end)."""
    barrier = threading.Barrier(sessions + 1)
    threads, channels = [], []
    for i in range(sessions):
        channel = grpc.insecure_channel(target, options=[
            ("grpc.max_receive_message_length", 256 << 20)])
        channels.append(channel)
        stub = pb_grpc.LayerServiceStub(channel)
        threads.append(threading.Thread(target=body, args=(stub, i, barrier)))
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    for channel in channels:
        channel.close()
    return elapsed


def serve_decode(target, model, hidden, sessions, steps, use_session):
    rng = np.random.default_rng(1)
    prompts = rng.standard_normal((sessions, PREFIX + steps, hidden)).astype(np.float32)
    layers = CONFIGS[model]["layers"]
    name = "" if model == "demo" else model

    def body(stub, i, barrier):
        x = prompts[i]
        if use_session:
            sid = stub.OpenSession(pb.OpenSessionRequest(model=name, num_layers=layers)
                                   ).session_id
            stub.BlockForward(pb.BlockForwardRequest(
                session_id=sid, hidden_states=array_tensor(x[:PREFIX], "float32")))
            barrier.wait()
            for t in range(PREFIX, PREFIX + steps):
                stub.BlockForward(pb.BlockForwardRequest(
                    session_id=sid, hidden_states=array_tensor(x[t:t + 1], "float32")))
            stub.CloseSession(pb.CloseSessionRequest(session_id=sid))
        else:
            barrier.wait()
            for t in range(PREFIX, PREFIX + steps):
                stub.BlockForward(pb.BlockForwardRequest(
                    model=name, num_layers=layers,
                    hidden_states=array_tensor(x[:t + 1], "float32")))

    return sessions * steps / run_clients(target, sessions, body)


def torch_decode(model, sessions, steps):
    """Decode tokens/s of a bfloat16 PyTorch eager Llama stack with a KV cache."""
    c = CONFIGS[model]
    d, h, hk, ff = c["hidden"], c["heads"], c["kv_heads"], c["ff"]
    dh = d // h
    g = torch.Generator().manual_seed(0)
    bf = torch.bfloat16

    def w(*shape):
        return (torch.randn(*shape, generator=g) * shape[-1] ** -0.5).to(bf)

    layers = [dict(q=w(h * dh, d), k=w(hk * dh, d), v=w(hk * dh, d), o=w(d, h * dh),
                   gate=w(ff, d), up=w(ff, d), down=w(d, ff),
                   n1=torch.ones(d, dtype=bf), n2=torch.ones(d, dtype=bf))
              for _ in range(c["layers"])]
    shape = torch_llama.Shape(hidden=d, heads=h, kv_heads=hk)

    def forward(x, caches, start):
        return torch_llama.forward(x, layers, caches, start, shape)

    torch.set_num_threads(2)
    x = torch.randn(sessions, PREFIX + steps, d, generator=g).to(bf)
    with torch.no_grad():
        caches = [[] for _ in layers]
        forward(x[:, :PREFIX], caches, 0)
        start = time.perf_counter()
        for t in range(PREFIX, PREFIX + steps):
            forward(x[:, t:t + 1], caches, t)
        return sessions * steps / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--sessions", default="1,8,32")
    parser.add_argument("--runs", type=int, default=3)
    # The peer computes in bfloat16: by default the server holds bfloat16 weights too.
    parser.add_argument("--weight-dtype", default="bfloat16")
    # The peer keeps its KV cache in bfloat16; float32 is the server's default.
    parser.add_argument("--kv-cache-dtype", default="float32")
    args = parser.parse_args()
    counts = [int(s) for s in args.sessions.split(",")]
    with tempfile.TemporaryDirectory() as repo:
        write_llama768(os.path.join(repo, "llama768"))
        dtypes = [f"--weight-dtype={args.weight_dtype}",
                  f"--kv-cache-dtype={args.kv_cache_dtype}"]
        servers = {"demo": start_server(args.build, *dtypes),
                   "llama768": start_server(args.build, f"--model-repository={repo}",
                                            *dtypes)}
        for model in CONFIGS:  # Torch's first calls build its oneDNN kernels.
            torch_decode(model, 1, 4)
        print("| model | sessions | session tok/s | recompute tok/s | gain | torch bf16 "
              "tok/s | vs torch |")
        print("|---|---|---|---|---|---|---|")
        try:
            for model, (_, target) in servers.items():
                hidden = CONFIGS[model]["hidden"]
                for s in counts:
                    def median(fn):
                        return statistics.median(fn() for _ in range(args.runs))
                    ses = median(lambda: serve_decode(target, model, hidden, s, args.steps,
                                                      True))
                    rec = median(lambda: serve_decode(target, model, hidden, s,
                                                      max(4, args.steps // 4), False))
                    tor = median(lambda: torch_decode(model, s, args.steps))
                    print(f"| {model} | {s} | {ses:.0f} | {rec:.0f} | {ses / rec:.1f}x "
                          f"| {tor:.0f} | {ses / tor:.2f}x |", flush=True)
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait()


if __name__ == "__main__":
    main()
