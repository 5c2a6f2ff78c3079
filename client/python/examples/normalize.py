#!/usr/bin/env python3
"""RMSNorm and a fused residual add + LayerNorm through layerserve_client, checked
against numpy.

Start a server (./scripts/serve), then from the repository root:
  PYTHONPATH=client/python:build/python /usr/bin/python3 client/python/examples/normalize.py
"""
import argparse
import sys

import numpy as np

from layerserve_client import Client, LayerServeError


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:50051")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 64)).astype(np.float32)         # [B, T, D]
    residual = rng.standard_normal((2, 3, 64)).astype(np.float32)
    weight = rng.standard_normal(64).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)

    with Client(args.target, timeout=10) as client:
        try:
            y = client.normalize(x, "rms", weight=weight, epsilon=1e-6)
            fused = client.normalize(x, "layer", weight=weight, bias=bias, residual=residual)
        except LayerServeError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2

    want_rms = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * weight
    s = x + residual
    want_ln = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-5)
    want_ln = want_ln * weight + bias
    errors = {"RMSNorm": np.max(np.abs(y - want_rms)),
              "residual + LayerNorm": np.max(np.abs(fused.output - want_ln)),
              "residual sum": np.max(np.abs(fused.residual - s))}
    for name, diff in errors.items():
        print(f"{name} of {list(x.shape)}: max |server - numpy| = {diff:.2e}")
    return 0 if max(errors.values()) < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
