"""PyTorch eager peer of bench/kernels/activation/activation_bench.cc: the same shapes and thread counts.

    /usr/bin/python3 bench/torch_activation_bench.py [--threads 1 2] [--quick]

Two ways of calling each activation:
  eager   as models write it: F.silu(x), F.gelu(x), x * torch.sigmoid(1.702 * x),
          F.silu(gate) * up, gate, up = x.chunk(2, -1) ... Every call allocates its
          output (and temporaries) afresh; for the 64 MiB tensors glibc maps fresh
          pages each time, and first-touching them is a large part of the time on
          these machines (~4 ms per MiB, docs/perf/2026-11-30-activation-kernels.md).
  out=    the output preallocated and passed with out= (torch.clamp_min for relu,
          torch._C._nn.gelu / silu for those, torch.sigmoid / tanh): the kernel alone,
          the fairest comparison with the C++ benchmark's preallocated buffers.
          Composite ops (QuickGELU, the gated ones) still allocate their temporaries:
          only the final product is written into out.
copy_ of the same bytes is the bandwidth peer, as memcpy is in the C++ benchmark.
Each sample times a batch of calls (at least 5 ms) and divides; the median of the
samples is printed, in microseconds and GB/s (bytes read + written / time, 1 GB =
2^30 bytes, as Google Benchmark counts), as a Markdown table.
"""

import argparse

import torch
import torch.nn.functional as F

import torch_timing

TARGET_SAMPLE_SECONDS = 0.005

# name -> (eager fn, out= fn or None); fns take the input(s) and, for out=, y.
ELEMENTWISE = {
    "Relu": (F.relu, lambda x, y: torch.clamp_min(x, 0, out=y)),
    "Gelu": (F.gelu, lambda x, y: torch._C._nn.gelu(x, out=y)),
    "GeluTanh": (lambda x: F.gelu(x, approximate="tanh"),
                 lambda x, y: torch._C._nn.gelu(x, approximate="tanh", out=y)),
    "Silu": (F.silu, lambda x, y: torch._C._nn.silu(x, out=y)),
    "Sigmoid": (torch.sigmoid, lambda x, y: torch.sigmoid(x, out=y)),
    "Tanh": (torch.tanh, lambda x, y: torch.tanh(x, out=y)),
    "QuickGelu": (lambda x: x * torch.sigmoid(1.702 * x),
                  lambda x, y: torch.mul(x, torch.sigmoid(1.702 * x), out=y)),
}

GATE_ACT = {
    "SwiGlu": F.silu,
    "GeGlu": F.gelu,
    "GeGluTanh": lambda g: F.gelu(g, approximate="tanh"),
    "ReGlu": F.relu,
}

UNARY_SHAPES = [(16, 4096), (4096, 4096)]   # L2 (256 KiB in), DRAM (16M elements)
GATED_SHAPES = [(8, 4096), (2048, 4096)]    # rows x F: gate + up 64K / 16M elements


def median_us(fn, samples):
    return torch_timing.median_seconds(fn, samples, TARGET_SAMPLE_SECONDS, warmups=3) * 1e6


def gbps(nbytes, us):
    return nbytes / (us * 1e-6) / 2**30


def row(name, shape, threads, nbytes, eager_us, out_us, copy_us):
    out = f"{out_us:.1f} | {gbps(nbytes, out_us):.1f}" if out_us else "- | -"
    print(f"| {name} | {shape} | {threads} | {eager_us:.1f} | {gbps(nbytes, eager_us):.1f}"
          f" | {out} | {gbps(nbytes, copy_us):.1f} |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    args = parser.parse_args()
    torch.manual_seed(1)
    print(f"torch {torch.__version__}")
    print("| kernel | shape | threads | eager us | eager GB/s | out= us | out= GB/s |"
          " copy_ GB/s |")
    print("|---|---|---|---|---|---|---|---|")
    with torch.no_grad():
        for threads in args.threads:
            torch.set_num_threads(threads)
            for rows, dim in UNARY_SHAPES:
                samples = 7 if args.quick else (21 if rows * dim > 1 << 20 else 51)
                x = torch.randn(rows, dim) * 2
                y = torch.empty_like(x)
                nbytes = 2 * x.numel() * 4
                copy_us = median_us(lambda: y.copy_(x), samples)
                for name, (eager, out) in ELEMENTWISE.items():
                    e = median_us(lambda: eager(x), samples)
                    o = median_us(lambda: out(x, y), samples)
                    row(name, f"{rows}x{dim}", threads, nbytes, e, o, copy_us)
            for rows, f in GATED_SHAPES:
                samples = 7 if args.quick else (21 if rows * f > 1 << 20 else 51)
                gate = torch.randn(rows, f) * 2
                up = torch.randn(rows, f)
                packed = torch.randn(rows, 2 * f) * 2
                y = torch.empty(rows, f)
                nbytes = 3 * rows * f * 4
                src = torch.randn(rows * f * 3 // 2)
                dst = torch.empty_like(src)
                copy_us = median_us(lambda: dst.copy_(src), samples)
                for name, act in GATE_ACT.items():
                    e = median_us(lambda: act(gate) * up, samples)
                    o = median_us(lambda: torch.mul(act(gate), up, out=y), samples)
                    row(name, f"{rows}x{f}", threads, nbytes, e, o, copy_us)

                    def packed_eager():
                        g, u = packed.chunk(2, dim=-1)
                        return act(g) * u

                    def packed_out():
                        g, u = packed.chunk(2, dim=-1)
                        return torch.mul(act(g), u, out=y)

                    e = median_us(packed_eager, samples)
                    o = median_us(packed_out, samples)
                    row(name + "Packed", f"{rows}x{2 * f}", threads, nbytes, e, o, copy_us)


if __name__ == "__main__":
    main()
