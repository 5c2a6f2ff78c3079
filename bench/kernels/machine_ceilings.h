// The machine's two ceilings that kernel benchmarks hold their figures to, measured
// the same way wherever they are used (bench/kernels/linear/matmul_peak_bench.cc,
// bench/kernels/linear/few_rows_bench.cc):
//   - the memory read bandwidth of N threads, each summing its share of a buffer far
//     larger than the last-level cache (what a product that reads every weight once
//     is bounded by);
//   - the bare oneDNN bfloat16 matmul's GFLOP/s on N OpenMP threads (what a product
//     whose weights stay in cache is bounded by, on CPUs where oneDNN is the best
//     matmul we know of).
// Each figure is the median of several timed runs after a warm-up.
#ifndef LAYERSERVE_BENCH_MACHINE_CEILINGS_H_
#define LAYERSERVE_BENCH_MACHINE_CEILINGS_H_

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <thread>
#include <vector>

namespace layerserve::bench {

inline double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds of each of `runs` calls of `run`, after one untimed call (warm-up).
template <typename Run>
std::vector<double> TimeRuns(int runs, Run&& run) {
  using Clock = std::chrono::steady_clock;
  run();
  std::vector<double> seconds;
  for (int i = 0; i < runs; ++i) {
    const auto start = Clock::now();
    run();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return seconds;
}

// Sums floats[begin, end): 16 independent lanes so the adds vectorize (without
// -ffast-math) and no single dependency chain limits the rate.
inline float SumFloats(const float* data, size_t begin, size_t end) {
  float sums[16] = {};
  for (size_t i = begin; i < end; i += 16) {
    for (int l = 0; l < 16; ++l) sums[l] += data[i + l];
  }
  float total = 0;
  for (float s : sums) total += s;
  return total;
}

struct ReadBandwidthResult {
  double bytes;  // Read per pass.
  double gbps;   // Median of the passes.
};

// `threads` std::threads each stream their share of one buffer of `bytes` (rounded
// up to 2 MiB), `runs` timed passes after one that first-touches each share from
// its own thread. Exits the process if the buffer cannot be allocated.
inline ReadBandwidthResult ReadBandwidth(int threads, size_t bytes, int runs) {
  // Huge pages: first touch of 4 KiB pages costs ~4 ms per MiB on the VMs this ran
  // on, seconds for a buffer this size; 2 MiB pages make it cheap.
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
  bool touch = true;  // The warm-up pass.
  auto pass = [&] {
    std::vector<std::thread> pool;
    std::vector<float> totals(threads);
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const size_t begin = t * share, end = begin + share;
        if (touch) std::fill(data + begin, data + end, 1.0f);  // Each its own pages.
        totals[t] = SumFloats(data, begin, end);
      });
    }
    for (std::thread& th : pool) th.join();
    for (float x : totals) sink = sink + x;
    touch = false;
  };
  const double seconds = MedianOf(TimeRuns(runs, pass));
  std::free(data);
  const double read = static_cast<double>(share) * threads * sizeof(float);
  return {read, read / seconds / 1e9};
}

// Small random bfloat16 values (about +-0.03): zeros could flatter the hardware.
inline void FillBfloat16(void* data, size_t bytes, uint32_t seed) {
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

struct MatmulRate {
  double seconds;  // Median of the runs.
  double gflops;
};

// M x K bfloat16 times K x N bfloat16 into float32 (as the block computes) on
// `threads` OpenMP threads, the weights either `packed` in the layout oneDNN picks
// (format_tag::any, reordered once, as kernels/linear/linear.cc holds them) or
// plain [N, K] row-major, as a checkpoint stores them (and PyTorch passes them).
// Leaves omp_set_num_threads(threads). Throws dnnl::error.
inline MatmulRate OneDnnMatmulRate(int threads, int64_t m, int64_t k, int64_t n,
                                   bool packed, int runs) {
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
  // The warm-up run: first touch of dst, oneDNN's scratchpad, AMX tile set-up.
  const double seconds = MedianOf(TimeRuns(runs, [&] {
    matmul.execute(
        stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    stream.wait();
  }));
  return {seconds, 2.0 * m * k * n / seconds / 1e9};
}

}  // namespace layerserve::bench

#endif  // LAYERSERVE_BENCH_MACHINE_CEILINGS_H_
