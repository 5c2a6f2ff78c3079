// Linear layers for the few rows of decode steps, one thread: LinearFewRows (reading
// oneDNN's packed weights itself) against Linear (oneDNN's matmul) on the same
// weights. Shape: the fused gate+up projection of the 768-hidden Llama configuration
// ([768 -> 6144]); eight copies of the weights used in turn (75 MB in bfloat16), so
// each call reads them from memory, as a decode step does. Rows 1 to 512. The byte
// rate counts the packed weights read once per call. Peer in the same run: one
// thread summing 256 MiB of floats (BM_ReadBandwidth), what a single stream can read.
// With bfloat16 weights LinearFewRows runs AMX tiles where the CPU has them and
// VDPBF16PS elsewhere (linear_internal.h); BM_LinearFewRowsVdpbf16ps runs the
// VDPBF16PS kernel on any CPU with AVX512_BF16, to compare the two in one run;
// BM_LinearInt8FewRows the int8 kernels' two ways to apply the scales.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <map>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "kernels/linear/int8/int8_weights.h"
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_internal.h"

namespace layerserve::kernels {
namespace {

constexpr int64_t kIn = 768, kOut = 6144, kCopies = 8;

// kCopies of the same random weights in `format`, made once per format.
const std::vector<std::unique_ptr<LinearWeights>>& Weights(WeightFormat format) {
  static std::map<std::pair<WeightType, int64_t>,
                  std::vector<std::unique_ptr<LinearWeights>>>
      sets;
  std::vector<std::unique_ptr<LinearWeights>>& set =
      sets[{format.type, format.group_size}];
  if (set.empty()) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    std::vector<float> w(kIn * kOut);
    for (float& x : w) x = normal(rng);
    for (int64_t i = 0; i < kCopies; ++i) {
      set.push_back(
          std::make_unique<LinearWeights>(w.data(), kOut, kIn, false, nullptr, format));
    }
  }
  return set;
}

template <bool kFewRows>
void BM_Linear(benchmark::State& state) {
  omp_set_num_threads(1);
  const WeightType type = state.range(1) ? WeightType::kBfloat16 : WeightType::kFloat32;
  const auto& weights = Weights(type);
  const int64_t rows = state.range(0);
  std::mt19937 rng(2);
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * kIn), y(rows * kOut);
  for (float& v : x) v = normal(rng);
  LinearContext context;
  int64_t next = 0;
  for (auto _ : state) {
    const LinearWeights& w = *weights[next++ % kCopies];
    if constexpr (kFewRows) {
      LinearFewRows(context, w, x.data(), rows, y.data());
    } else {
      Linear(context, w, x.data(), rows, y.data());
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * weights[0]->bytes());
}

void BM_LinearFewRowsVdpbf16ps(benchmark::State& state) {
  if (!internal::FewRowsDpbf16Supported()) {
    return state.SkipWithError("this CPU has no AVX512_BF16");
  }
  const auto& weights = Weights(WeightType::kBfloat16);
  const int64_t rows = state.range(0);
  std::mt19937 rng(2);
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * kIn), y(rows * kOut);
  for (float& v : x) v = normal(rng);
  std::vector<uint32_t> pairs;
  const int64_t blocks =
      (kOut + internal::kFewRowsBlockOut - 1) / internal::kFewRowsBlockOut;
  int64_t next = 0;
  for (auto _ : state) {
    const internal::FewRowsWeights& w =
        internal::FewRowsLayoutOf(*weights[next++ % kCopies]);
    internal::PackBfloat16Pairs(x.data(), rows, kIn, pairs);
    internal::LinearFewRowsVdpbf16psBlocks(w, pairs.data(), rows, 0, blocks, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * weights[0]->bytes());
}
BENCHMARK(BM_LinearFewRowsVdpbf16ps)
    ->ArgName("rows")
    ->Arg(1)
    ->Arg(4)
    ->Arg(16)
    ->Arg(32)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The int8 kernels on bfloat16 operands (kernels/linear/int8/int8_weights.h), group 64
// (the group sums scaled: Int8ScalesGroupSums) or 48 (each weight scaled), on VDPBF16PS
// (any CPU with AVX512_BF16) or AMX tiles.
void BM_LinearInt8FewRows(benchmark::State& state) {
  const bool amx = state.range(2) != 0;
  if (!(amx ? internal::FewRowsAmxSupported() : internal::FewRowsDpbf16Supported())) {
    return state.SkipWithError(amx ? "this CPU has no AMX-BF16"
                                   : "this CPU has no AVX512_BF16");
  }
  const auto& weights = Weights(WeightFormat(WeightType::kInt8, state.range(1)));
  const int64_t rows = state.range(0);
  std::mt19937 rng(2);
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * kIn), y(rows * kOut);
  for (float& v : x) v = normal(rng);
  std::vector<uint32_t> pairs;
  const auto kernel = amx ? internal::LinearInt8FewRowsAmxBlocks
                          : internal::LinearInt8FewRowsVdpbf16psBlocks;
  int64_t next = 0;
  for (auto _ : state) {
    const internal::Int8Weights& w = internal::Int8LayoutOf(*weights[next++ % kCopies]);
    internal::PackBfloat16Pairs(x.data(), rows, kIn, pairs);
    kernel(w, pairs.data(), rows, 0, w.out_blocks, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * weights[0]->bytes());
}
BENCHMARK(BM_LinearInt8FewRows)
    ->ArgsProduct({{1, 4, 16}, {64, 48}, {0, 1}})
    ->ArgNames({"rows", "group", "amx"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_ReadBandwidth(benchmark::State& state) {
  std::vector<float> data((size_t{256} << 20) / sizeof(float), 1.0f);
  for (auto _ : state) {
    float sums[16] = {};
    for (size_t i = 0; i < data.size(); i += 16) {
      for (int l = 0; l < 16; ++l) sums[l] += data[i + l];
    }
    benchmark::DoNotOptimize(sums);
  }
  state.SetBytesProcessed(state.iterations() * data.size() * sizeof(float));
}
BENCHMARK(BM_ReadBandwidth)->Unit(benchmark::kMillisecond)->UseRealTime();

void Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t bf16 : {0, 1})
    for (int64_t rows : {1, 2, 4, 10, 16, 32, 128, 512}) b->Args({rows, bf16});
  b->ArgNames({"rows", "bf16"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_Linear<true>)->Name("BM_LinearFewRows")->Apply(Shapes);
BENCHMARK(BM_Linear<false>)->Name("BM_LinearOneDnn")->Apply(Shapes);

}  // namespace
}  // namespace layerserve::kernels

BENCHMARK_MAIN();
