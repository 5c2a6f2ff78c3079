// Normalization kernels on one thread: LayerNorm through oneDNN, through the
// shape dispatch LayerNorm() (hand loop for small shapes), and the scalar
// reference; RmsNorm; and a memcpy of the same bytes (read x, write y) as the
// bandwidth peer. docs/BENCHMARKS.md has the commands and the numbers.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/norm.h"
#include "kernels/norm_internal.h"

namespace layerserve::kernels {
namespace {

// Buffers filled (and so touched: no first-touch page faults while timing) once.
struct Data {
  Data(int64_t rows, int64_t dim) : x(rows * dim), y(rows * dim), w(dim), b(dim) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (float& v : x) v = normal(rng);
    for (float& v : w) v = 1.0f + 0.1f * normal(rng);
    for (float& v : b) v = 0.1f * normal(rng);
  }
  std::vector<float> x, y, w, b;
};

template <typename Fn>
void RunNorm(benchmark::State& state, Fn fn) {
  const int64_t rows = state.range(0), dim = state.range(1);
  Data d(rows, dim);
  NormContext ctx;
  NormParams p;
  p.weight = d.w.data();
  p.bias = d.b.data();                            // RmsNorm ignores it.
  fn(ctx, d.x.data(), rows, dim, p, d.y.data());  // Creates cached primitives.
  for (auto _ : state) {
    fn(ctx, d.x.data(), rows, dim, p, d.y.data());
    benchmark::DoNotOptimize(d.y.data());
    benchmark::ClobberMemory();
  }
  // Bytes moved: read x, write y (weights are negligible).
  state.SetBytesProcessed(state.iterations() * rows * dim * 2 * sizeof(float));
}

void BM_LayerNormOneDnn(benchmark::State& state) {
  RunNorm(state, internal::LayerNormOneDnn);
}
void BM_LayerNormDispatch(benchmark::State& state) { RunNorm(state, LayerNorm); }
void BM_LayerNormReference(benchmark::State& state) {
  RunNorm(state,
          [](NormContext&, const float* x, int64_t rows, int64_t dim, const NormParams& p,
             float* y) { LayerNormReference(x, rows, dim, p, y); });
}
void BM_RmsNorm(benchmark::State& state) { RunNorm(state, RmsNorm); }

void BM_Memcpy(benchmark::State& state) {
  const int64_t n = state.range(0) * state.range(1);
  Data d(state.range(0), state.range(1));
  for (auto _ : state) {
    std::memcpy(d.y.data(), d.x.data(), n * sizeof(float));
    benchmark::DoNotOptimize(d.y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 2 * sizeof(float));
}

void Shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "dim"});
  for (auto [rows, dim] : {std::pair{1, 768}, {1, 4096}, {128, 768}, {512, 4096}}) {
    b->Args({rows, dim});
  }
}

BENCHMARK(BM_LayerNormOneDnn)->Apply(Shapes);
BENCHMARK(BM_LayerNormDispatch)->Apply(Shapes);
BENCHMARK(BM_LayerNormReference)->Apply(Shapes);
BENCHMARK(BM_RmsNorm)->Apply(Shapes);
BENCHMARK(BM_Memcpy)->Apply(Shapes);

}  // namespace
}  // namespace layerserve::kernels

int main(int argc, char** argv) {
  // One thread, as each server worker runs: oneDNN then starts no OpenMP team.
  omp_set_num_threads(1);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
