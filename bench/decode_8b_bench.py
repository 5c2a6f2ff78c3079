#!/usr/bin/env python3
"""Decode steps of a Llama-3-8B-shaped block end to end: S sessions, one token each.

Writes one Llama-3-8B-shaped block (hidden 4096, 32 query heads on 8 KV heads, d_ff
14336; random float32 weights, 872 MB on disk) into REPO unless it is there, then
for each server build in turn (never two at once; the order alternates every round)
starts BIN/layerserve on it with bfloat16 weights and bfloat16 KV caches and runs
layerserve-bench's decode: each of S client threads opens a session, prefills 256
tokens, then sends one-token steps (closed loop). Prints one Markdown row per build
and S: medians over the rounds of tokens/s, p50 and p99, and the server's mean
batch size. Errors must be 0.

Usage: /usr/bin/python3 bench/decode_8b_bench.py REPO BIN [BIN...] [--sessions 1,4,16]
         [--rounds 3] [--duration 20s] [--warmup 20s]
  BIN: folders holding layerserve (e.g. a copy of build/bin before a change, and
  build/bin); the last one's layerserve-bench drives them all.
The machine's other load is noise: compare builds over several rounds.
Notes: docs/perf/2026-12-01-decode-16-sessions-8b.md.
"""
import argparse
import json
import os
import re
import statistics
import subprocess

import numpy as np

HIDDEN, HEADS, KV_HEADS, FFN = 4096, 32, 8, 14336
PREFILL = 256


def write_block(directory):
    """config.json + model.safetensors of one block; the embedding is the client's."""
    os.makedirs(directory, exist_ok=True)
    config = {"model_type": "llama", "hidden_size": HIDDEN, "num_attention_heads": HEADS,
              "num_key_value_heads": KV_HEADS, "intermediate_size": FFN,
              "num_hidden_layers": 1, "max_position_embeddings": 8192,
              "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu",
              "vocab_size": 128256}
    dh = HIDDEN // HEADS
    shapes = {"input_layernorm.weight": [HIDDEN],
              "post_attention_layernorm.weight": [HIDDEN],
              "self_attn.q_proj.weight": [HEADS * dh, HIDDEN],
              "self_attn.k_proj.weight": [KV_HEADS * dh, HIDDEN],
              "self_attn.v_proj.weight": [KV_HEADS * dh, HIDDEN],
              "self_attn.o_proj.weight": [HIDDEN, HEADS * dh],
              "mlp.gate_proj.weight": [FFN, HIDDEN], "mlp.up_proj.weight": [FFN, HIDDEN],
              "mlp.down_proj.weight": [HIDDEN, FFN]}
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = int(np.prod(shape)) * 4
        header[f"model.layers.0.{name}"] = {"dtype": "F32", "shape": shape,
                                            "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    rng = np.random.default_rng(0)
    with open(os.path.join(directory, "model.safetensors"), "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for shape in shapes.values():
            scale = 1.0 if len(shape) == 1 else shape[1] ** -0.5
            f.write((rng.standard_normal(shape, dtype=np.float32) * scale).tobytes())
    # Last: a repository with a config.json is complete.
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)


def start(binary_dir, repo):
    server = subprocess.Popen(
        [binary_dir + "/layerserve", "--host=127.0.0.1", "--port=0", "--metrics-port=0",
         f"--model-repository={repo}", "--weight-dtype=bfloat16",
         "--kv-cache-dtype=bfloat16"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    target = metrics = None
    for line in server.stdout:
        if found := re.search(r"metrics on (\S+)", line):
            metrics = found.group(1)
        if found := re.search(r"gRPC listening on (\S+)", line):
            target = found.group(1)
        if target and metrics:
            return server, target, metrics
    raise SystemExit(f"{binary_dir}/layerserve did not start")


def main():
    parser = argparse.ArgumentParser(usage=__doc__)
    parser.add_argument("repo")
    parser.add_argument("bins", nargs="+")
    parser.add_argument("--sessions", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", default="20s")
    parser.add_argument("--warmup", default="20s")
    args = parser.parse_args()
    model = os.path.join(args.repo, "llama8b")
    if not os.path.exists(os.path.join(model, "config.json")):
        write_block(model)
    loadgen = args.bins[-1] + "/layerserve-bench"
    sessions = [int(s) for s in args.sessions.split(",")]
    results = {(b, s): [] for b in args.bins for s in sessions}
    for r in range(args.rounds):
        for binary_dir in args.bins if r % 2 == 0 else reversed(args.bins):
            server, target, metrics = start(binary_dir, args.repo)
            try:
                # Steps per session: all of the level (past 8192 positions the
                # session could not open).
                out = subprocess.run(
                    [loadgen, "--target", target, "--method", "decode", "--model",
                     "llama8b", "--tokens", str(PREFILL), "--steps", "7000",
                     "--concurrency", args.sessions, "--duration", args.duration,
                     "--warmup", args.warmup, "--metrics-url", metrics, "--json"],
                    capture_output=True, text=True, check=True)
                for level in json.loads(out.stdout)["levels"]:
                    results[(binary_dir, level["concurrency"])].append(level)
            finally:
                server.terminate()
                server.wait()

    def median(levels, field):
        return statistics.median(field(level) for level in levels)

    print("| build | sessions | tok/s | p50 ms | p99 ms | mean batch rows | errors |")
    print("|---|---|---|---|---|---|---|")
    for binary_dir in args.bins:
        for s in sessions:
            levels = results[(binary_dir, s)]
            batch = [v["server"]["mean_batch_size"] for v in levels if v.get("server")]
            errors = sum(sum(v["errors"].values()) for v in levels)
            print(f"| {binary_dir} | {s} | {median(levels, lambda v: v['throughput_rps']):.0f} "
                  f"| {median(levels, lambda v: v['latency_ms']['p50']):.1f} "
                  f"| {median(levels, lambda v: v['latency_ms']['p99']):.1f} "
                  f"| {statistics.median(batch) if batch else float('nan'):.1f} "
                  f"| {errors} |")


if __name__ == "__main__":
    main()
