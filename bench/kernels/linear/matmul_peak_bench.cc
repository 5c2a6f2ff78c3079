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
// Each figure is the median of several timed runs after a warm-up.
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Small random bfloat16 values (about +-0.03): zeros could flatter the hardware.
void FillBfloat16(void* data, size_t bytes, uint32_t seed) {
  uint16_t* p = static_cast<uint16_t*>(data);
  uint32_t x = seed;
  for (size_t i = 0; i < bytes / 2; ++i) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;  // xorshift32: fast, good enough here.
    const float f = (static_cast<float>(x >> 8) / 16777216.0f - 0.5f) * 0.06f;
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    p[i] = static_cast<uint16_t>(bits >> 16);
  }
}

// M x K bfloat16 times K x N bfloat16 into float32 (the block computes in float32).
void Matmul(int threads, int64_t m, int64_t k, int64_t n, bool packed, int runs) {
  using dnnl::memory;
  omp_set_num_threads(threads);
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const auto bf16 = memory::data_type::bf16;
  dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(
          memory::desc({m, k}, bf16, memory::format_tag::ab),
          memory::desc({k, n}, bf16,
                       packed ? memory::format_tag::any : memory::format_tag::ba),
          memory::desc({m, n}, memory::data_type::f32, memory::format_tag::ab)),
      engine);
  memory src(pd.src_desc(), engine), weights(pd.weights_desc(), engine),
      dst(pd.dst_desc(), engine);
  // The packed layout does not matter to the timing, only that values are real.
  FillBfloat16(src.get_data_handle(), pd.src_desc().get_size(), 1);
  FillBfloat16(weights.get_data_handle(), pd.weights_desc().get_size(), 2);
  dnnl::matmul matmul(pd);
  auto run = [&] {
    matmul.execute(
        stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    stream.wait();
  };
  run();  // Warm-up: first touch of dst, oneDNN's scratchpad, AMX tile set-up.
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    const auto start = Clock::now();
    run();
    times.push_back(Seconds(start));
  }
  const double s = Median(times);
  std::printf("matmul_bf16 threads=%d M=%ld K=%ld N=%ld weights=%s ms=%.3f gflops=%.1f\n",
              threads, static_cast<long>(m), static_cast<long>(k), static_cast<long>(n),
              packed ? "packed" : "plain", s * 1e3, 2.0 * m * k * n / s / 1e9);
  std::fflush(stdout);
}

// Sums floats[begin, end): 16 independent lanes so the adds vectorize (without
// -ffast-math) and no single dependency chain limits the rate.
float Sum(const float* data, size_t begin, size_t end) {
  float sums[16] = {};
  for (size_t i = begin; i < end; i += 16) {
    for (int l = 0; l < 16; ++l) sums[l] += data[i + l];
  }
  float total = 0;
  for (float s : sums) total += s;
  return total;
}

// `threads` std::threads each stream their share of one buffer of `bytes`.
void ReadBandwidth(int threads, size_t bytes, int runs) {
  // Huge pages: first touch of 4 KiB pages costs ~4 ms per MiB here (DESIGN.md),
  // seconds for a buffer this size; 2 MiB pages make it cheap.
  const size_t kHuge = size_t{2} << 20;
  bytes = (bytes + kHuge - 1) / kHuge * kHuge;
  float* data = static_cast<float*>(std::aligned_alloc(kHuge, bytes));
  if (data == nullptr) {
    std::fprintf(stderr, "cannot allocate %zu bytes\n", bytes);
    std::exit(1);
  }
  madvise(data, bytes, MADV_HUGEPAGE);
  const size_t n = bytes / sizeof(float), share = n / threads / 16 * 16;
  volatile float sink = 0;
  auto pass = [&](bool touch) {
    std::vector<std::thread> pool;
    std::vector<float> totals(threads);
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const size_t begin = t * share, end = begin + share;
        if (touch) std::fill(data + begin, data + end, 1.0f);  // Each its own pages.
        totals[t] = Sum(data, begin, end);
      });
    }
    for (std::thread& th : pool) th.join();
    for (float x : totals) sink = sink + x;
  };
  pass(true);  // First touch and warm-up.
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    const auto start = Clock::now();
    pass(false);
    times.push_back(Seconds(start));
  }
  const double read = static_cast<double>(share) * threads * sizeof(float);
  std::printf("read_bandwidth threads=%d bytes=%.0f gbps=%.2f\n", threads, read,
              read / Median(times) / 1e9);
  std::fflush(stdout);
  std::free(data);
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
