// The cost of numeric health (kernels/value_stats/value_stats.h) on the response path,
// one thread, in GB/s of bytes read + written:
//  - Copy: memcpy of float32 values, what encoding a FLOAT32 response did before.
//  - CopyWithStats: the same copy taking NaN/Inf counts, abs-max and sum of squares
//    in the same pass (what EncodeTensor now does for FLOAT32 outputs).
//  - Stats: a statistics-only pass (bytes read only), what 16-bit outputs and
//    decoded inputs pay on top of their conversion.
// Sizes: 1 KiB, 64 KiB, 1 MiB (caches) and 16 MiB (DRAM) of float32.
//  - BM_Positional: the positional kernels and RoPE alone, taking their output's
//    statistics in the pass that writes it (output_stats), and followed by a
//    statistics pass (ComputeValueStats, as the server did before 3104320), on
//    64K (256 KiB out: L2) and 16M (64 MiB out: DRAM) output elements.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/positional/positional.h"
#include "kernels/rope/rope.h"
#include "kernels/value_stats/value_stats.h"

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

enum class Kernel { kLearnedAdd, kSinusoidalTable, kAlibiAdd, kRopeHalf };
enum class Stats { kNone, kInPass, kAfter };

// Args: kernel, stats, output elements (64K or 16M). Shapes: rows of 1024
// (learned add, sinusoidal table: always computed), ALiBi on
// [H, T, T] scores with T = 128 or 1024, RoPE on [H, T, 128] with H*T = n / 128.
void BM_Positional(benchmark::State& state) {
  const auto kernel = static_cast<Kernel>(state.range(0));
  const auto mode = static_cast<Stats>(state.range(1));
  const int64_t n = state.range(2);
  const std::vector<float> x = Filled(n), table = Filled(n);
  std::vector<float> y(n, 0.0f);
  ValueStats stats;
  ValueStats* in_pass = mode == Stats::kInPass ? &stats : nullptr;
  PositionalContext context;
  const int64_t dim = 1024, rows = n / dim;
  std::vector<int64_t> positions(rows);
  for (int64_t r = 0; r < rows; ++r) positions[r] = r;
  const int64_t t = n == (int64_t{1} << 16) ? 128 : 1024;
  AlibiShape alibi;
  alibi.heads = n / (t * t);
  alibi.query_length = alibi.key_length = t;
  std::vector<float> slopes(alibi.heads);
  AlibiSlopes(alibi.heads, slopes.data());
  const int64_t head_dim = 128, heads = n == (int64_t{1} << 16) ? 8 : 32;
  const int64_t tokens = n / (heads * head_dim);
  const RopeGeometry rope =
      ContiguousRopeGeometry(true, 1, heads, tokens, head_dim, head_dim, true);
  std::vector<float> cos(tokens * head_dim), sin(tokens * head_dim);
  ComputeRopeTables(ComputeRopeFrequencies(10000.0f, head_dim, RopeScaling(), tokens),
                    RopeStyle::kHalf, positions.data(), tokens, cos.data(), sin.data());
  int64_t bytes = 0;
  const auto run = [&] {
    switch (kernel) {
      case Kernel::kLearnedAdd:
        bytes = 12 * n;
        return Learned(x.data(), positions.data(), rows, dim, table.data(), y.data(),
                       in_pass);
      case Kernel::kSinusoidalTable:
        bytes = 4 * n;
        return Sinusoidal(context, nullptr, positions.data(), rows, dim, 10000.0f,
                          SinusoidalLayout::kInterleaved, y.data(), in_pass);
      case Kernel::kAlibiAdd:
        bytes = 8 * n;
        return Alibi(slopes.data(), alibi, x.data(), 1, y.data(), in_pass);
      case Kernel::kRopeHalf:
        bytes = 8 * n;
        return ApplyRope(x.data(), y.data(), rope, RopeStyle::kHalf, cos.data(),
                         sin.data(), in_pass);
    }
  };
  run();  // Warm-up: pages, caches.
  for (auto _ : state) {
    run();
    if (mode == Stats::kAfter) stats = ComputeValueStats(y.data(), n);
    benchmark::DoNotOptimize(stats);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

void PositionalCases(benchmark::internal::Benchmark* b) {
  b->ArgNames({"kernel", "stats", "n"});
  for (int kernel = 0; kernel < 4; ++kernel) {
    for (int64_t n : {int64_t{1} << 16, int64_t{1} << 24}) {
      for (int stats = 0; stats < 3; ++stats) b->Args({kernel, stats, n});
    }
  }
}

BENCHMARK(BM_Copy)->Apply(Sizes);
BENCHMARK(BM_CopyWithStats)->Apply(Sizes);
BENCHMARK(BM_Stats)->Apply(Sizes);
BENCHMARK(BM_Positional)->Apply(PositionalCases);

}  // namespace
}  // namespace layerserve::kernels

BENCHMARK_MAIN();
