// The machine's two ceilings for a Llama-3-8B-shaped block with N threads (default
// 2): the bare oneDNN bfloat16 matmul of the MLP's largest shapes (M = 512, K =
// 4096, N = 2 * 14336 gate|up fused, and N = 14336; and at the fused shape the
// rows of decode steps, M = 16 or each of --rows), in GFLOP/s; and the memory
// read bandwidth of N threads streaming a buffer far larger than the last-level
// cache, in GB/s (what a T = 1 call, which reads every weight once, is bounded by).
// bench/llama8b_bench.py runs this binary and parses its lines:
//
//   read_bandwidth threads=2 bytes=... gbps=...
//   matmul_bf16 threads=2 M=512 K=4096 N=28672 weights=packed ms=... gflops=...
//
// The matmul runs with the weights in two layouts: `packed`, the one oneDNN picks
// (format_tag::any, reordered once, as kernels/linear/linear.cc holds them), and `plain`,
// [N, K] row-major as a checkpoint stores them (and PyTorch passes them). The
// ceiling is the faster: on the AMX Xeon VM this was written on (2 threads, M =
// 512), `plain` measured 1.5-2x the GFLOP/s of `packed`.
//
// Usage: layerserve_matmul_peak_bench [--threads=N] [--rows=R,R,...] [--quick]
// Each figure is the median of several timed runs after a warm-up (measured by
// bench/kernels/machine_ceilings.h, which few_rows_bench shares).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/kernels/machine_ceilings.h"

namespace {

// M x K bfloat16 times K x N bfloat16 into float32 (the block computes in float32).
void Matmul(int threads, int64_t m, int64_t k, int64_t n, bool packed, int runs) {
  const layerserve::bench::MatmulRate rate =
      layerserve::bench::OneDnnMatmulRate(threads, m, k, n, packed, runs);
  std::printf("matmul_bf16 threads=%d M=%ld K=%ld N=%ld weights=%s ms=%.3f gflops=%.1f\n",
              threads, static_cast<long>(m), static_cast<long>(k), static_cast<long>(n),
              packed ? "packed" : "plain", rate.seconds * 1e3, rate.gflops);
  std::fflush(stdout);
}

// `threads` std::threads each stream their share of one buffer of `bytes`.
void ReadBandwidth(int threads, size_t bytes, int runs) {
  const layerserve::bench::ReadBandwidthResult read =
      layerserve::bench::ReadBandwidth(threads, bytes, runs);
  std::printf("read_bandwidth threads=%d bytes=%.0f gbps=%.2f\n", threads, read.bytes,
              read.gbps);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  bool quick = false;
  std::vector<int64_t> step_rows = {16};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--threads=", 0) == 0) {
      threads = std::atoi(arg.c_str() + 10);
    } else if (arg.rfind("--rows=", 0) == 0) {
      step_rows.clear();
      for (const char* p = arg.c_str() + 7; *p != '\0';) {
        char* end = nullptr;
        step_rows.push_back(std::strtol(p, &end, 10));
        if (end == p || step_rows.back() < 1) {
          std::fprintf(stderr, "--rows takes a comma list of counts >= 1\n");
          return 2;
        }
        p = *end == ',' ? end + 1 : end;
      }
    } else if (arg == "--quick") {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: %s [--threads=N] [--rows=R,R,...] [--quick]\n",
                   argv[0]);
      return 2;
    }
  }
  if (threads < 1) {
    std::fprintf(stderr, "--threads must be >= 1\n");
    return 2;
  }
  const int runs = quick ? 3 : 5;
  // 2 GiB: several times any last-level cache this runs on (some VMs report the
  // host's, hundreds of MB), so the passes read DRAM.
  ReadBandwidth(threads, (quick ? size_t{1} : size_t{2}) << 30, runs * 2);
  for (int64_t n : {2 * 14336, 14336}) {
    for (bool packed : {true, false}) Matmul(threads, 512, 4096, n, packed, runs);
  }
  // A decode step's largest product: a row per session against weights that come
  // from memory each run (235 MB), what one-token steps of that many sessions
  // batched into one call are bound by where the matmul is slower than the read.
  for (int64_t rows : step_rows) {
    Matmul(threads, rows, 4096, 2 * 14336, /*packed=*/true, runs * 2);
  }
  return 0;
}
