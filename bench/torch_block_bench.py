#!/usr/bin/env python3
"""PyTorch eager peer of bench/kernels/block/block_bench.cc: the same Llama-shaped block in plain
torch ops (RMSNorm, q/k/v/o projections, rotate_half RoPE, causal softmax attention
with GQA, SwiGLU MLP), float32 and bfloat16 weights and activations, one thread by
default, medians of repeated calls.

Run with Debian's interpreter: /usr/bin/python3 bench/torch_block_bench.py [--threads N]
Debian's torch runs float32 matmul on a reference BLAS (a few GFLOP/s), so float32 at
hidden 4096 is measured only up to T=16 (larger T would take minutes per call).
"""
import argparse
import statistics
import time

import torch

SHAPES = [(768, 12, 12, 3072), (4096, 32, 8, 11008)]
TOKENS = [1, 16, 128, 512]


def make_layer(hidden, heads, kv_heads, ffn, dtype):
    g = torch.Generator().manual_seed(0)
    dh = hidden // heads

    def w(out, inp):
        return ((torch.rand(out, inp, generator=g) - 0.5) * 0.06).to(dtype)

    return dict(wq=w(heads * dh, hidden), wk=w(kv_heads * dh, hidden),
                wv=w(kv_heads * dh, hidden), wo=w(hidden, heads * dh),
                wg=w(ffn, hidden), wu=w(ffn, hidden), wd=w(hidden, ffn),
                n1=torch.ones(hidden, dtype=dtype), n2=torch.ones(hidden, dtype=dtype),
                heads=heads, kv_heads=kv_heads, dh=dh)


def rms_norm(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def layer(x, p, cos, sin, mask):
    t = x.shape[0]
    h, kvh, dh = p["heads"], p["kv_heads"], p["dh"]
    n = rms_norm(x, p["n1"])
    q = torch.nn.functional.linear(n, p["wq"]).view(t, h, dh).transpose(0, 1)
    k = torch.nn.functional.linear(n, p["wk"]).view(t, kvh, dh).transpose(0, 1)
    v = torch.nn.functional.linear(n, p["wv"]).view(t, kvh, dh).transpose(0, 1)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k = k.repeat_interleave(h // kvh, dim=0)
    v = v.repeat_interleave(h // kvh, dim=0)
    scores = torch.matmul(q, k.transpose(1, 2)) / dh ** 0.5 + mask
    attn = torch.matmul(torch.softmax(scores.float(), dim=-1).to(x.dtype), v)
    x = x + torch.nn.functional.linear(attn.transpose(0, 1).reshape(t, h * dh), p["wo"])
    n = rms_norm(x, p["n2"])
    mlp = torch.nn.functional.silu(torch.nn.functional.linear(n, p["wg"])) * \
        torch.nn.functional.linear(n, p["wu"])
    return x + torch.nn.functional.linear(mlp, p["wd"])


def time_layer(shape, t, dtype, budget_s=3.0):
    hidden, heads, kv_heads, ffn = shape
    p = make_layer(hidden, heads, kv_heads, ffn, dtype)
    dh = hidden // heads
    inv = 1.0 / (10000 ** (torch.arange(0, dh, 2).float() / dh))
    freqs = torch.outer(torch.arange(t).float(), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    mask = torch.full((t, t), float("-inf")).triu(1).to(dtype)
    x = (torch.rand(t, hidden) - 0.5).to(dtype)
    times = []
    with torch.no_grad():
        layer(x, p, cos, sin, mask)  # warm-up
        start = time.perf_counter()
        while len(times) < 3 or (time.perf_counter() - start < budget_s and len(times) < 51):
            t0 = time.perf_counter()
            layer(x, p, cos, sin, mask)
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, len(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s); median ms per layer")
    print("| hidden | T | torch float32 | torch bfloat16 |")
    print("|---|---|---|---|")
    for shape in SHAPES:
        for t in TOKENS:
            cells = []
            for dtype in (torch.float32, torch.bfloat16):
                if dtype == torch.float32 and shape[0] == 4096 and t > 16:
                    cells.append("not run (reference BLAS)")
                    continue
                ms, n = time_layer(shape, t, dtype)
                cells.append(f"{ms:.2f} (n={n})")
            print(f"| {shape[0]} | {t} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
