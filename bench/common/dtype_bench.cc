// The wire's element conversions (common/dtype.h) on one thread, in GB/s of float32
// bytes: what decoding a request's 16-bit tensor (ToFloat32) and encoding a
// response's (FromFloat32) cost. Sizes: 64 x 4096 values (a 64-session decode step
// of a Llama-3-8B-shaped layer, 1 MiB of float32: caches) and 512 x 4096 (a prefill
// of 512 tokens, 8 MiB: beyond them). Peer in the same run: memcpy of the float32
// bytes (BM_Copy), the least any conversion could cost.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/dtype.h"

namespace layerserve {
namespace {

std::vector<float> Filled(int64_t n) {
  std::vector<float> v(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (float& x : v) x = normal(rng);
  return v;
}

void BM_Copy(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<float> x = Filled(n);
  std::vector<float> y(n);
  for (auto _ : state) {
    std::memcpy(y.data(), x.data(), n * sizeof(float));
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * n * sizeof(float));
}

void BM_FromFloat32(benchmark::State& state) {
  const auto type = static_cast<ElementType>(state.range(1));
  const int64_t n = state.range(0);
  const std::vector<float> x = Filled(n);
  // One byte past an aligned start: the wire's bytes carry no alignment.
  std::vector<unsigned char> wire(n * ElementSize(type) + 1);
  for (auto _ : state) {
    benchmark::DoNotOptimize(ConvertFromFloat32(type, x.data(), n, wire.data() + 1));
  }
  state.SetBytesProcessed(state.iterations() * n * sizeof(float));
}

void BM_ToFloat32(benchmark::State& state) {
  const auto type = static_cast<ElementType>(state.range(1));
  const int64_t n = state.range(0);
  const std::vector<float> x = Filled(n);
  std::vector<unsigned char> wire(n * ElementSize(type) + 1);
  ConvertFromFloat32(type, x.data(), n, wire.data() + 1);
  std::vector<float> y(n);
  for (auto _ : state) {
    ConvertToFloat32(type, wire.data() + 1, n, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * n * sizeof(float));
}

constexpr int64_t kStep = 64 * 4096, kPrefill = 512 * 4096;
constexpr auto kBf16 = static_cast<int64_t>(ElementType::kBfloat16);
constexpr auto kF16 = static_cast<int64_t>(ElementType::kFloat16);

BENCHMARK(BM_Copy)->Arg(kStep)->Arg(kPrefill);
BENCHMARK(BM_FromFloat32)->ArgsProduct({{kStep, kPrefill}, {kBf16, kF16}});
BENCHMARK(BM_ToFloat32)->ArgsProduct({{kStep, kPrefill}, {kBf16, kF16}});

}  // namespace
}  // namespace layerserve

BENCHMARK_MAIN();
