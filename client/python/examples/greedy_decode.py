#!/usr/bin/env python3
"""Greedy decoding with the blocks on a layerserve server and the rest here: the
token embedding, final RMSNorm and LM head of a local Llama-family checkpoint run in
numpy on the client; the decoder blocks run on the server, one KV-cache session per
prompt, and every session advances in the same call (Client.step: the prompts in
one ragged prefill call, then one call per generated token for all of them). Prints
the generated ids, one line per prompt.

  PYTHONPATH=client/python:build/python /usr/bin/python3 \
      client/python/examples/greedy_decode.py --checkpoint CKPT_DIR \
      --prompt 1,2,3 [--prompt 4,5 ...] --steps 8 [--target HOST:PORT] [--model NAME]

The server must serve the same checkpoint (layerserve --model-repository=R with
CKPT_DIR = R/NAME; --model defaults to CKPT_DIR's name) and the checkpoint must
hold model.embed_tokens.weight, model.norm.weight and lm_head.weight (or tie the
head to the embedding: tie_word_embeddings). Llama, Mistral, Qwen2 and Qwen3
(plain RMSNorm, unscaled embedding). Needs numpy only: the safetensors files are
read by the small reader below.
"""
import argparse
import contextlib
import json
import os
import struct
import sys

import numpy as np

from layerserve_client import Client, LayerServeError

ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")


def read_safetensors(path, names):
    """The tensors `names` of one .safetensors file as float32 arrays: an 8-byte
    little-endian header length, a JSON header {name: {dtype, shape,
    data_offsets}}, then the data (little-endian)."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        data = f.read()
    out = {}
    for name in names:
        entry = header[name]
        begin, end = entry["data_offsets"]
        raw, dtype = data[begin:end], entry["dtype"]
        if dtype == "F32":
            array = np.frombuffer(raw, "<f4")
        elif dtype == "F16":
            array = np.frombuffer(raw, "<f2").astype(np.float32)
        elif dtype == "BF16":  # The upper 16 bits of a float32.
            array = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path}: {name} is {dtype}; this reader takes F32, F16, BF16")
        out[name] = array.astype(np.float32).reshape(entry["shape"])
    return out


def load_tensors(checkpoint, names):
    """`names` from model.safetensors, or from the shards its index lists."""
    index = os.path.join(checkpoint, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(checkpoint, "model.safetensors"), names)
    with open(index) as f:
        weight_map = json.load(f)["weight_map"]
    out = {}
    for shard in sorted({weight_map[n] for n in names}):
        wanted = [n for n in names if weight_map[n] == shard]
        out.update(read_safetensors(os.path.join(checkpoint, shard), wanted))
    return out


class Head:
    """What the client computes: embedding lookup, final norm and logits."""

    def __init__(self, checkpoint):
        with open(os.path.join(checkpoint, "config.json")) as f:
            self.config = json.load(f)
        if self.config.get("model_type") not in ARCHITECTURES:
            raise ValueError(f"model_type {self.config.get('model_type')!r}: this example "
                             f"handles {', '.join(ARCHITECTURES)}")
        tied = self.config.get("tie_word_embeddings", False)
        names = ["model.embed_tokens.weight", "model.norm.weight"]
        names += [] if tied else ["lm_head.weight"]
        w = load_tensors(checkpoint, names)
        self.embedding = w["model.embed_tokens.weight"]          # [V, D]
        self.norm = w["model.norm.weight"]                       # [D]
        self.lm_head = self.embedding if tied else w["lm_head.weight"]  # [V, D]
        self.eps = self.config["rms_norm_eps"]

    def embed(self, ids):
        return self.embedding[np.asarray(ids)]  # [T, D]

    def next_token(self, hidden):
        """Greedy choice after the last position of hidden [T, D]."""
        x = hidden[-1].astype(np.float32)
        x = x / np.sqrt(np.mean(x * x) + np.float32(self.eps)) * self.norm  # LlamaRMSNorm
        return int(np.argmax(self.lm_head @ x))


def decode(client, head, model, prompts, steps):
    """Each prompt + `steps` greedy tokens; returns the new ids of each prompt."""
    layers = head.config["num_hidden_layers"]
    lengths = [len(p) for p in prompts]
    generated = [[] for _ in prompts]
    with contextlib.ExitStack() as stack:
        sessions = [stack.enter_context(client.open_session(
            model=model, num_layers=layers, max_length=n + steps)) for n in lengths]
        # Prefill: every prompt in one call, right-padded to the longest
        # ([B, T, D]); sequence_lengths says where each one ends.
        x = np.zeros((len(prompts), max(lengths), head.embedding.shape[1]), np.float32)
        for b, prompt in enumerate(prompts):
            x[b, :len(prompt)] = head.embed(prompt)
        out = client.step(sessions, x, sequence_lengths=lengths).hidden_states
        for step in range(steps):
            # Row b's last real token: the end of its prompt, then its one new token.
            tokens = [head.next_token(out[b, :lengths[b] if step == 0 else 1])
                      for b in range(len(prompts))]
            for b, token in enumerate(tokens):
                generated[b].append(token)
            if step + 1 < steps:
                # One token per session, all in one call ([B, 1, D]): cached K, V.
                out = client.step(sessions, head.embed(tokens)[:, None]).hidden_states
    return generated


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:50051")
    parser.add_argument("--checkpoint", required=True, help="Hugging Face checkpoint dir")
    parser.add_argument("--model", help="the served model (default: the dir's name)")
    parser.add_argument("--prompt", required=True, action="append",
                        help="token ids, e.g. 1,2,3; once per prompt of the batch")
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()

    head = Head(args.checkpoint)
    prompts = [[int(t) for t in prompt.split(",")] for prompt in args.prompt]
    model = args.model or os.path.basename(os.path.normpath(args.checkpoint))
    with Client(args.target, timeout=60) as client:
        try:
            generated = decode(client, head, model, prompts, args.steps)
        except LayerServeError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    for ids in generated:
        print("generated:", " ".join(str(t) for t in ids))
    return 0


if __name__ == "__main__":
    sys.exit(main())
