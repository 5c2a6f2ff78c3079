#!/usr/bin/env python3
"""Runs every block of the server's default model (the built-in demo model of
./scripts/serve) on random hidden states, with attention statistics, then checks
that the same layers sent as two requests give the same result.

  PYTHONPATH=client/python:build/python /usr/bin/python3 client/python/examples/block_forward.py
"""
import argparse
import sys

import numpy as np

from layerserve_client import Client, LayerServeError


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:50051")
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()

    with Client(args.target, timeout=60) as client:
        try:
            model = client.get_model()  # the default model
            print(f"model {model.name}: {model.architecture}, {model.num_layers} layers, "
                  f"hidden {model.hidden_size}, {model.num_attention_heads} heads "
                  f"({model.num_key_value_heads} kv), d_ff {model.intermediate_size}")
            # Stand-in for token embeddings: [B=1, T, D].
            x = np.random.default_rng(0).standard_normal(
                (1, args.tokens, model.hidden_size)).astype(np.float32)
            result = client.block_forward(x, model=model.name, num_layers=model.num_layers,
                                          attention_stats=True)
            half = model.num_layers // 2
            first = client.block_forward(x, model=model.name, num_layers=half)
            second = client.block_forward(first, model=model.name, layer_start=half,
                                          num_layers=model.num_layers - half)
        except LayerServeError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2

    out = result.hidden_states
    print(f"hidden states {list(out.shape)}: rms in {np.sqrt(np.mean(x * x)):.3f}, "
          f"out {np.sqrt(np.mean(out * out)):.3f}")
    for layer, entropy in sorted(result.attention_entropy.items()):
        print(f"layer {layer}: mean attention entropy per head (nats) "
              + " ".join(f"{e:.2f}" for e in entropy))
    split_error = float(np.max(np.abs(second - out)))
    print(f"layers 0-{half - 1} then {half}-{model.num_layers - 1} vs all at once: "
          f"max |diff| = {split_error:.2e}")
    return 0 if np.all(np.isfinite(out)) and split_error < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
