"""PyTorch eager peer of bench/kernels/positional/positional_bench.cc: the same shapes and thread counts.

    /usr/bin/python3 bench/torch_positional_bench.py [--threads 1 2]

Times, per shape and torch.set_num_threads(n):
  copy_        y.copy_(x): the bandwidth peer (read x, write y).
  sin add      the PyTorch tutorial's PositionalEncoding forward with its table
               precomputed: torch.add(x, pe[:T], out=y) (and `x + pe[:T]`, which
               allocates its output, as the module does); and the same computing pe
               on every call (sin/cos of position * div_term, interleaved).
  sin table    computing the table alone (the tutorial's __init__ ops).
  learned add  GPT-2's inputs_embeds + wpe(position_ids):
               torch.add(x, F.embedding(pos, table), out=y).
  alibi add    scores + alibi with alibi precomputed [H, Tq, Tk] (out=), and with
               the bias computed per call (slopes[:, None, None] * rel + scores).
  alibi bias   slopes[:, None, None] * rel (rel precomputed as float).
  t5 bias      HF T5Attention.compute_bias: buckets, embedding, permute, contiguous.
Each sample times a batch of calls and divides; prints the median of many samples,
in microseconds and in GB/s with the C++ benchmark's byte counts.
"""

import argparse
import math

import torch
import torch.nn.functional as F

import torch_timing

SAMPLES = 21
TARGET_SAMPLE_SECONDS = 0.02
ROW_SHAPES = [(4096, 4096), (64, 1024)]          # rows x dim: 16M and 64K elements
HEAD_SHAPES = [(16, 1024, 1024), (4, 128, 128)]  # heads x Tq x Tk


def median_us(fn):
    return torch_timing.median_seconds(fn, SAMPLES, TARGET_SAMPLE_SECONDS) * 1e6


def report(label, shape, threads, us, nbytes):
    print(f"| {label} | {shape} | {threads} | {us:.1f} | {nbytes / us / 1e3:.2f} |")


def sinusoidal_table(positions, dim, base=10000.0):
    """The PyTorch tutorial's PositionalEncoding table (interleaved)."""
    div_term = torch.exp(torch.arange(0, dim, 2) * (-math.log(base) / dim))
    pe = torch.zeros(len(positions), dim)
    angle = positions[:, None].float() * div_term
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


def t5_buckets(rel, num_buckets=32, max_distance=128):
    """HF T5Attention._relative_position_bucket, bidirectional."""
    num_buckets //= 2
    buckets = (rel > 0).to(torch.long) * num_buckets
    rel = torch.abs(rel)
    max_exact = num_buckets // 2
    large = max_exact + (torch.log(rel.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(rel < max_exact, rel, large)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    torch.manual_seed(1)
    print(f"torch {torch.__version__}")
    print("| op | shape | threads | median us | GB/s |")
    print("|---|---|---|---|---|")
    with torch.no_grad():
        for threads in args.threads:
            torch.set_num_threads(threads)
            for rows, dim in ROW_SHAPES:
                shape = f"{rows}x{dim}"
                n = rows * dim
                x = torch.randn(rows, dim)
                y = torch.empty_like(x)
                positions = torch.arange(rows)
                pe = sinusoidal_table(positions, dim)
                table = torch.randn(rows, dim)
                report("copy_", shape, threads, median_us(lambda: y.copy_(x)), 8 * n)
                report("sin add, table cached (out=)", shape, threads,
                       median_us(lambda: torch.add(x, pe[:rows], out=y)), 8 * n)
                report("sin add, table cached (x + pe)", shape, threads,
                       median_us(lambda: x + pe[:rows]), 8 * n)
                report("sin add, pe per call", shape, threads,
                       median_us(lambda: torch.add(x, sinusoidal_table(positions, dim),
                                                   out=y)), 8 * n)
                report("sin table", shape, threads,
                       median_us(lambda: sinusoidal_table(positions, dim)), 4 * n)
                report("learned add", shape, threads,
                       median_us(lambda: torch.add(x, F.embedding(positions, table), out=y)),
                       12 * n)
            for heads, tq, tk in HEAD_SHAPES:
                shape = f"{heads}x{tq}x{tk}"
                n = heads * tq * tk
                scores = torch.randn(1, heads, tq, tk)
                out = torch.empty_like(scores)
                slopes = 2.0 ** (-8.0 * torch.arange(1, heads + 1) / heads)
                rel = (torch.arange(tk)[None, :] - torch.arange(tq)[:, None]).float()
                alibi = slopes[:, None, None] * rel
                report("alibi add, bias cached (out=)", shape, threads,
                       median_us(lambda: torch.add(scores, alibi, out=out)), 8 * n)
                report("alibi add, bias per call", shape, threads,
                       median_us(lambda: torch.add(scores, slopes[:, None, None] * rel,
                                                   out=out)), 8 * n)
                report("alibi bias", shape, threads,
                       median_us(lambda: slopes[:, None, None] * rel), 4 * n)
                t5_table = torch.randn(32, heads)
                rel_long = torch.arange(tk)[None, :] - torch.arange(tq)[:, None]
                report("t5 bias", shape, threads,
                       median_us(lambda: F.embedding(t5_buckets(rel_long), t5_table)
                                 .permute(2, 0, 1).contiguous()), 4 * n)


if __name__ == "__main__":
    main()
