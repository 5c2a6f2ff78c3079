"""PyTorch eager peer of bench/kernels/rope/rope_bench.cc: the same shapes and thread counts.

    /usr/bin/python3 bench/torch_rope_bench.py [--cpp-json rope_bench.json]

Times, in GB/s of bytes read + written (the activations: read x, write y, as
rope_bench.cc counts; cos/sin are computed once outside the timing, as the C++
tables are):

- HALF: Hugging Face's apply_rotary_pos_emb (modeling_llama), q * cos +
  rotate_half(q) * sin, q [1, H, T, Dh] (BHTD), cos/sin [1, 1, T, Dh];
- INTERLEAVED: GPT-J's (modeling_gptj) x * cos + rotate_every_two(x) * sin with
  cos/sin already repeat_interleave'd, same shapes;
- HALF BTHD: the same as HALF on q [1, T, H, Dh] with cos/sin [1, T, 1, Dh]
  (HF's unsqueeze_dim=2);
- copy: y.copy_(x), PyTorch's own same-byte copy.

Each sample times a batch of calls and divides; the median of many samples is
reported. Threads: torch.set_num_threads(n), PyTorch's intra-op threads splitting
each call.

With --cpp-json (rope_bench.cc run with --benchmark_format=json, or
--benchmark_out=FILE), also prints the merged Markdown table of the C++ medians, the
copy peer, PyTorch and their ratios, as docs/perf/2026-11-30-rope-kernel.md shows it.
A new measurement goes into a new dated note in docs/perf/ (and its ratios into
docs/BENCHMARKS.md).
"""

import argparse

import torch

import torch_timing

SHAPES = [(8, 64, 128), (32, 4096, 128)]  # heads, tokens, head dim
THREADS = [1, 2]
SAMPLES = 31
TARGET_SAMPLE_SECONDS = 0.02


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def median_seconds(fn):
    return torch_timing.median_seconds(fn, SAMPLES, TARGET_SAMPLE_SECONDS)


def tables(tokens, dim):
    """LlamaRotaryEmbedding's cos/sin [T, dim] (HALF) and GPT-J's interleaved ones."""
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    freqs = torch.arange(tokens).float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos(), emb.sin(), torch.repeat_interleave(freqs.cos(), 2, -1),
            torch.repeat_interleave(freqs.sin(), 2, -1))


def measure():
    """Returns {(op, heads, tokens, dim, threads): GB/s}."""
    results = {}
    torch.manual_seed(1)
    with torch.no_grad():
        for heads, tokens, dim in SHAPES:
            x = torch.randn(1, heads, tokens, dim)
            x_bthd = x.transpose(1, 2).contiguous()
            y = torch.empty_like(x)
            cos, sin, cos_i, sin_i = tables(tokens, dim)
            cos, sin = cos[None, None], sin[None, None]
            cos_i, sin_i = cos_i[None, None], sin_i[None, None]
            cos_t, sin_t = cos.transpose(1, 2), sin.transpose(1, 2)  # [1, T, 1, Dh]
            nbytes = x.numel() * x.element_size()
            ops = {
                "copy": lambda: y.copy_(x),
                "half": lambda: (x * cos) + (rotate_half(x) * sin),
                "interleaved": lambda: (x * cos_i) + (rotate_every_two(x) * sin_i),
                "half_bthd": lambda: (x_bthd * cos_t) + (rotate_half(x_bthd) * sin_t),
            }
            for threads in THREADS:
                torch.set_num_threads(threads)
                for op, fn in ops.items():
                    seconds = median_seconds(fn)
                    results[(op, heads, tokens, dim, threads)] = 2 * nbytes / seconds / 1e9
    return results


# C++ benchmark name -> op.
CPP_OPS = {
    "BM_RopeHalf": "half",
    "BM_RopeInterleaved": "interleaved",
    "BM_RopeHalfBthd": "half_bthd",
}
LABELS = {"half": "HALF (BHTD)", "interleaved": "INTERLEAVED (BHTD)",
          "half_bthd": "HALF (BTHD)"}


def load_cpp(path):
    """Returns {(benchmark, heads, tokens, dim, threads): median GB/s}."""
    return torch_timing.load_cpp_medians(
        path, r"^(BM_\w+)/heads:(\d+)/tokens:(\d+)/dim:(\d+)/real_time/threads:(\d+)_median$")


def print_merged(cpp, torch_results):
    print("| op | H x T x Dh | threads | ours GB/s | memcpy GB/s | ours / memcpy "
          "| torch GB/s | ours / torch |")
    print("|---|---|---|---|---|---|---|---|")
    for name, op in CPP_OPS.items():
        for heads, tokens, dim in SHAPES:
            for threads in THREADS:
                ours = cpp.get((name, heads, tokens, dim, threads))
                copy = cpp.get(("BM_Copy", heads, tokens, dim, threads))
                theirs = torch_results[(op, heads, tokens, dim, threads)]
                if ours is None or copy is None:
                    continue
                print(f"| {LABELS[op]} | {heads} x {tokens} x {dim} | {threads} "
                      f"| {ours:.1f} | {copy:.1f} | {ours / copy:.2f} | {theirs:.2f} "
                      f"| {ours / theirs:.1f}x |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpp-json", help="rope_bench.cc JSON output to merge")
    args = parser.parse_args()
    results = measure()
    print(f"torch {torch.__version__}; GB/s, median of {SAMPLES} samples")
    print("| op | H x T x Dh | threads | torch GB/s | torch copy_ GB/s |")
    print("|---|---|---|---|---|")
    for op in LABELS:
        for heads, tokens, dim in SHAPES:
            for threads in THREADS:
                print(f"| {LABELS[op]} | {heads} x {tokens} x {dim} | {threads} "
                      f"| {results[(op, heads, tokens, dim, threads)]:.2f} "
                      f"| {results[('copy', heads, tokens, dim, threads)]:.1f} |")
    if args.cpp_json:
        print()
        print_merged(load_cpp(args.cpp_json), results)


if __name__ == "__main__":
    main()
