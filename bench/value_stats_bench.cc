// The cost of numeric health (kernels/value_stats.h) on the response path, one
// thread, in GB/s of bytes read + written:
//  - Copy: memcpy of float32 values, what encoding a FLOAT32 response did before.
//  - CopyWithStats: the same copy taking NaN/Inf counts, abs-max and sum of squares
//    in the same pass (what EncodeTensor now does for FLOAT32 outputs).
//  - Stats: a statistics-only pass (bytes read only), what 16-bit outputs and
//    decoded inputs pay on top of their conversion.
// Sizes: 1 KiB, 64 KiB, 1 MiB (caches) and 16 MiB (DRAM) of float32.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/value_stats.h"

namespace layerserve::kernels {
namespace {

std::vector<float> Filled(int64_t n) {
  std::vector<float> v(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (float& x : v) x = normal(rng);
  return v;
}

void BM_Copy(benchmark::State& state) {
  const int64_t n = state.range(0) / 4;
  const std::vector<float> x = Filled(n);
  std::vector<float> y(n, 0.0f);
  for (auto _ : state) {
    std::memcpy(y.data(), x.data(), n * sizeof(float));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 8);
}

void BM_CopyWithStats(benchmark::State& state) {
  const int64_t n = state.range(0) / 4;
  const std::vector<float> x = Filled(n);
  std::vector<float> y(n, 0.0f);
  for (auto _ : state) {
    ValueStats s = CopyWithValueStats(x.data(), n, y.data());
    benchmark::DoNotOptimize(s);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 8);
}

void BM_Stats(benchmark::State& state) {
  const int64_t n = state.range(0) / 4;
  const std::vector<float> x = Filled(n);
  for (auto _ : state) {
    ValueStats s = ComputeValueStats(x.data(), n);
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (int64_t bytes : {1 << 10, 64 << 10, 1 << 20, 16 << 20}) b->Arg(bytes);
}

BENCHMARK(BM_Copy)->Apply(Sizes);
BENCHMARK(BM_CopyWithStats)->Apply(Sizes);
BENCHMARK(BM_Stats)->Apply(Sizes);

}  // namespace
}  // namespace layerserve::kernels

BENCHMARK_MAIN();
