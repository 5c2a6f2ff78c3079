"""PyTorch eager peer of bench/norm_bench.cc: the same shapes, one thread.

    /usr/bin/python3 bench/torch_norm_bench.py

Times F.layer_norm (weight + bias), the torch-op RMSNorm of Llama
(x * rsqrt(mean(x^2) + eps) * w) and a same-byte copy (y.copy_(x)). Each sample
times a batch of calls (so the timer's own cost is negligible) and divides;
prints the median of many samples, in microseconds, as a Markdown table.
"""

import statistics
import time

import torch
import torch.nn.functional as F

SHAPES = [(1, 768), (1, 4096), (128, 768), (512, 4096)]
SAMPLES = 51
TARGET_SAMPLE_SECONDS = 0.005


def rms_norm(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def median_us(fn):
    for _ in range(20):  # warm-up: allocator caches, lazy init
        fn()
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    calls = max(1, int(TARGET_SAMPLE_SECONDS / max(once, 1e-7)))
    samples = []
    for _ in range(SAMPLES):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples) * 1e6


def main():
    torch.set_num_threads(1)
    torch.manual_seed(1)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    print("| rows x dim | F.layer_norm us | torch-op RMSNorm us | copy_ us |")
    print("|---|---|---|---|")
    with torch.no_grad():
        for rows, dim in SHAPES:
            x = torch.randn(rows, dim)
            w = 1.0 + 0.1 * torch.randn(dim)
            b = 0.1 * torch.randn(dim)
            y = torch.empty_like(x)
            ln = median_us(lambda: F.layer_norm(x, [dim], w, b, 1e-5))
            rms = median_us(lambda: rms_norm(x, w))
            cp = median_us(lambda: y.copy_(x))
            print(f"| {rows} x {dim} | {ln:.2f} | {rms:.2f} | {cp:.2f} |")


if __name__ == "__main__":
    main()
