#!/usr/bin/python3
"""What int8 weights can reach against bfloat16's error, without the server
(int8 weights are only worth their speed when their error is stated).

A product y = x W^T with W ~ N(0, 0.02^2) (4096 x 1024, Hugging Face's init scale)
and x ~ N(0, 1), in numpy, against float64: the relative RMS error
RMS(got - want) / RMS(want) of
  - bfloat16: x and W rounded to bfloat16 (what the server's bfloat16 path multiplies);
  - int8 at each group size (8 and 16 too, below the flag's default range, to show
    what the 2x target would take): W quantized as the server does (symmetric, one
    scale = max |w| / 127 per output and group), then
      - the dequantized weights and x rounded to bfloat16 (the server's prefill, and
        its decode without AMX),
      - x rounded to bfloat16, the dequantized weights not (its decode on AMX with
        groups of whole k blocks of 32, kernels/linear/amx/int8_few_rows.cc),
      - x and the weights left in float32 (int8's own error alone);
  - int8 with error-minimizing scales: per group, the best of 41 scales between 0.8
    and 1.0 of max |w| / 127 (clipping the largest weights), which is what a
    smarter quantizer could gain.
Prints a Markdown table and each error's ratio to bfloat16's.

Usage: /usr/bin/python3 bench/int8_error_bound.py [--seed N]
"""
import argparse

import numpy as np


def bf16(a):
    """Rounds float32 values to bfloat16 (nearest even), returned as float32."""
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def quantize(w, group, search):
    groups = w.reshape(w.shape[0], -1, group)
    max_abs = np.abs(groups).max(axis=-1, keepdims=True)
    best, best_err = None, None
    for fraction in np.linspace(0.8, 1.0, 41) if search else [1.0]:
        scale = max_abs * fraction / 127
        q = np.clip(np.round(groups / scale), -127, 127) * scale
        err = ((q - groups) ** 2).sum(axis=-1, keepdims=True)
        if best is None:
            best, best_err = q, err
        else:
            better = err < best_err
            best, best_err = np.where(better, q, best), np.minimum(err, best_err)
    return best.reshape(w.shape).astype(np.float32)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    w = (rng.standard_normal((4096, 1024)) * 0.02).astype(np.float32)
    x = rng.standard_normal((64, 1024)).astype(np.float32)
    want = x.astype(np.float64) @ w.astype(np.float64).T

    def error(xs, ws):
        got = xs.astype(np.float64) @ ws.astype(np.float64).T
        return np.sqrt(np.mean((got - want) ** 2)) / np.sqrt(np.mean(want ** 2))

    base = error(bf16(x), bf16(w))
    print("| weights | x, W in bf16 (prefill) | ratio to bf16 | x in bf16, W exact "
          "(AMX decode) | ratio | int8 alone (x, W float32) | ratio |")
    print("|---|---|---|---|---|---|---|")
    print(f"| bfloat16 | {base:.2e} | 1.00 | | | | |")
    for group in (8, 16, 32, 64, 128):
        for search in (False, True) if group >= 32 else (False,):
            q = quantize(w, group, search)
            name = f"int8 group {group}" + (", searched scales" if search else "")
            cells = [error(bf16(x), bf16(q)), error(bf16(x), q), error(x, q)]
            print(f"| {name} | " +
                  " | ".join(f"{e:.2e} | {e / base:.2f}" for e in cells) + " |")


if __name__ == "__main__":
    main()
