"""PyTorch eager peer of bench/kernels/norm/norm_bench.cc: the same shapes and thread counts.

    /usr/bin/python3 bench/torch_norm_bench.py [--cpp-json norm_bench.json]

Times, in GB/s of bytes read + written (the activations, as norm_bench.cc counts):

- LayerNorm: F.layer_norm(x, [D], w, b, 1e-5) (read x, write y);
- RMSNorm: Llama's RMSNorm in torch ops, x * rsqrt(mean(x^2) + eps) * w (transformers
  LlamaRMSNorm.forward, float32) (read x, write y);
- add + RMSNorm: h = x + r, then the RMSNorm of h (read x, r; write h, y): the fused
  residual add of inference engines, done the eager way;
- copy: y.copy_(x), PyTorch's own same-byte copy.

Each sample times a batch of calls (so the timer's own cost is negligible) and
divides; the median of many samples is reported. Threads: torch.set_num_threads(n),
PyTorch's intra-op threads splitting each call.

With --cpp-json (the output of norm_bench.cc run with --benchmark_format=json, or
--benchmark_out=FILE, with --benchmark_repetitions so that it holds medians), also
prints the merged Markdown table of the C++ medians, the copy peers, PyTorch and
the ratios, as docs/perf/2026-11-30-norm-kernels.md shows it. A new measurement goes
into a new dated note in docs/perf/ (and its ratios into docs/BENCHMARKS.md).
"""

import argparse

import torch
import torch.nn.functional as F

import torch_timing

SHAPES = [(16, 4096), (4096, 4096)]
THREADS = [1, 2]
SAMPLES = 31
TARGET_SAMPLE_SECONDS = 0.02


def rms_norm(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def median_seconds(fn):
    return torch_timing.median_seconds(fn, SAMPLES, TARGET_SAMPLE_SECONDS)


def measure():
    """Returns {(op, rows, dim, threads): GB/s}."""
    results = {}
    torch.manual_seed(1)
    with torch.no_grad():
        for rows, dim in SHAPES:
            x = torch.randn(rows, dim)
            r = torch.randn(rows, dim)
            w = 1.0 + 0.1 * torch.randn(dim)
            b = 0.1 * torch.randn(dim)
            y = torch.empty_like(x)
            nbytes = x.numel() * x.element_size()
            ops = {
                "copy": (lambda: y.copy_(x), 2),
                "layer_norm": (lambda: F.layer_norm(x, [dim], w, b, 1e-5), 2),
                "rms_norm": (lambda: rms_norm(x, w), 2),
                "add_rms_norm": (lambda: rms_norm(x + r, w), 4),
            }
            for threads in THREADS:
                torch.set_num_threads(threads)
                for op, (fn, arrays) in ops.items():
                    seconds = median_seconds(fn)
                    results[(op, rows, dim, threads)] = arrays * nbytes / seconds / 1e9
    return results


# C++ benchmark name -> (op, copy peer).
CPP_OPS = {
    "BM_LayerNorm": ("layer_norm", "BM_Copy"),
    "BM_RmsNorm": ("rms_norm", "BM_Copy"),
    "BM_AddRmsNorm": ("add_rms_norm", "BM_Copy2"),
}
LABELS = {
    "layer_norm": "LayerNorm",
    "rms_norm": "RMSNorm",
    "add_rms_norm": "add + RMSNorm",
}


def load_cpp(path):
    """Returns {(benchmark, rows, dim, threads): median GB/s} from norm_bench JSON."""
    return torch_timing.load_cpp_medians(
        path, r"^(BM_\w+)/rows:(\d+)/dim:(\d+)/real_time/threads:(\d+)_median$")


def print_merged(cpp, torch_results):
    print("| op | rows x dim | threads | ours GB/s | memcpy GB/s | ours / memcpy "
          "| stream copy GB/s | torch GB/s | ours / torch |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (op, peer) in CPP_OPS.items():
        for rows, dim in SHAPES:
            for threads in THREADS:
                ours = cpp.get((name, rows, dim, threads))
                copy = cpp.get((peer, rows, dim, threads))
                stream = cpp.get(("BM_StreamCopy", rows, dim, threads))
                theirs = torch_results[(op, rows, dim, threads)]
                if ours is None or copy is None:
                    continue
                stream_text = f"{stream:.1f}" if stream is not None else "-"
                print(f"| {LABELS[op]} | {rows} x {dim} | {threads} | {ours:.1f} "
                      f"| {copy:.1f} | {ours / copy:.2f} | {stream_text} "
                      f"| {theirs:.1f} | {ours / theirs:.1f}x |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpp-json", help="norm_bench.cc JSON output to merge")
    args = parser.parse_args()
    results = measure()
    print(f"torch {torch.__version__}; GB/s, median of {SAMPLES} samples")
    print("| op | rows x dim | threads | torch GB/s | torch copy_ GB/s |")
    print("|---|---|---|---|---|")
    for op in LABELS:
        for rows, dim in SHAPES:
            for threads in THREADS:
                print(f"| {LABELS[op]} | {rows} x {dim} | {threads} "
                      f"| {results[(op, rows, dim, threads)]:.1f} "
                      f"| {results[('copy', rows, dim, threads)]:.1f} |")
    if args.cpp_json:
        print()
        print_merged(load_cpp(args.cpp_json), results)


if __name__ == "__main__":
    main()
