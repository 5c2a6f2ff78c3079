// Linear layers for the few rows of decode steps.
//
// BM_LinearFewRows / BM_Linear, one thread: LinearFewRows (reading oneDNN's packed
// weights itself) against Linear (oneDNN's matmul, or the kernel of ours
// kernel_choice.h gives this CPU for many rows) on the same weights.
// Shape: the fused gate+up projection of the 768-hidden Llama configuration ([768 ->
// 6144]); eight copies of the weights used in turn (75 MB in bfloat16), so each call
// reads them from memory, as a decode step does. Rows 1 to 512. The byte rate counts
// the packed weights read once per call. Peer in the same run: one thread summing 256
// MiB of floats (BM_ReadBandwidth), what a single stream can read. With bfloat16
// weights LinearFewRows runs AMX tiles where the CPU has them and VDPBF16PS elsewhere
// (kernel_choice.h); BM_LinearFewRowsVdpbf16ps runs the VDPBF16PS kernel on any CPU
// with AVX512_BF16, to compare the two in one run; BM_LinearInt8FewRows the int8
// kernels' two ways to apply the scales.
//
// BM_FewRows8B: the four products of one Llama-3-8B-shaped block as a decode step of
// `rows` one-token sessions runs them, through LinearFewRows (the kernel
// ChooseLinearKernel gives this CPU): q|k|v [4096 -> 6144], o [4096 -> 4096], gate|up
// [4096 -> 2 x 14336], down [14336 -> 4096] (the server fuses q|k|v and gate|up), in
// that order, bfloat16 weights (436 MB) or int8 (group 64, 232 MB): each call reads
// its weights from memory. On one thread, or on two: this one and an idle worker of
// the server's own Batcher helping through kernels::ParallelFor
// (server/batching/batcher.h), as one request computes on both cores. Counters:
//   bytes_per_second  the weights' bytes (LinearWeights::bytes) over the time;
//   flop/s            2 x rows x in x out summed over the four, over the time;
//   x_ceiling         the time over the ceiling: per product max(its bytes / read
//                     bandwidth, its flops / oneDNN's rate), summed; 1 is the ceiling;
//   read_GB/s         the read bandwidth: as many std::threads summing their share
//                     of a 1 GiB buffer (bench/kernels/machine_ceilings.h);
//   onednn_GFLOP/s    the bare oneDNN bfloat16 matmul at M = 512, K = 4096, N = 28672
//                     (the faster of its two weight layouts) on as many OpenMP threads;
//   qkv_ms, o_ms, up_ms, down_ms: each product's time per step.
// BM_Linear8B: the same four products through Linear, as a prefill (or a chunk of
// one) runs them, up to 2048 rows.
// The two ceilings are measured in this process, once per thread count, before the
// first timed run that needs them (a few seconds).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "bench/kernels/llama_shapes.h"
#include "bench/kernels/machine_ceilings.h"
#include "kernels/linear/int8/int8_weights.h"
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_internal.h"
#include "server/batching/batcher.h"

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
    benchmark::DoNotOptimize(bench::SumFloats(data.data(), 0, data.size()));
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
BENCHMARK(BM_Linear<false>)->Name("BM_Linear")->Apply(Shapes);

// ---- BM_FewRows8B (see the top of the file) ----

struct Product8B {
  const char* name;
  int64_t in, out;
};
constexpr std::array<Product8B, 4> kProducts8B = {{{"qkv_ms", 4096, 6144},
                                                   {"o_ms", 4096, 4096},
                                                   {"up_ms", 4096, 2 * 14336},
                                                   {"down_ms", 14336, 4096}}};

// The block's four weights, bfloat16 or int8 (default group), made on first use and
// kept, so that random interleaving can alternate the formats fairly.
const std::vector<std::unique_ptr<LinearWeights>>& Weights8B(bool int8) {
  static std::map<bool, std::vector<std::unique_ptr<LinearWeights>>> sets;
  std::vector<std::unique_ptr<LinearWeights>>& set = sets[int8];
  if (set.empty()) {
    std::mt19937 rng(1);
    for (const Product8B& p : kProducts8B) {
      const std::vector<float> w = bench::RandomValues(p.out * p.in, rng);
      set.push_back(std::make_unique<LinearWeights>(
          w.data(), p.out, p.in, false, nullptr,
          int8 ? WeightType::kInt8 : WeightType::kBfloat16));
    }
  }
  return set;
}

struct Ceilings {
  double read_gbps, onednn_gflops;
};

// This machine's ceilings on `threads` threads, measured on first use.
const Ceilings& CeilingsOf(int threads) {
  static std::map<int, Ceilings> measured;
  auto it = measured.find(threads);
  if (it == measured.end()) {
    Ceilings c;
    c.read_gbps = bench::ReadBandwidth(threads, size_t{1} << 30, 9).gbps;
    c.onednn_gflops = 0;
    for (bool packed : {true, false}) {
      c.onednn_gflops = std::max(
          c.onednn_gflops,
          bench::OneDnnMatmulRate(threads, 512, 4096, 2 * 14336, packed, 5).gflops);
    }
    omp_set_num_threads(1);
    it = measured.emplace(threads, c).first;
  }
  return it->second;
}

struct NoContext {};

template <bool kFewRows>
void BM_Products8B(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const bool int8 = state.range(2) != 0;
  const Ceilings& ceilings = CeilingsOf(threads);
  omp_set_num_threads(1);
  const auto& weights = Weights8B(int8);
  // One worker, idle: it helps with every loop this thread shares.
  std::unique_ptr<Batcher<NoContext>> helper;
  if (threads == 2) {
    helper = std::make_unique<Batcher<NoContext>>(BatchOptions{}, 1,
                                                  [](NoContext&, Batch&) {});
  }
  std::mt19937 rng(2);
  const std::vector<float> x = bench::RandomValues(rows * 14336, rng);
  std::vector<float> y(rows * 2 * 14336);
  LinearContext context;
  double bytes = 0, flops = 0, ceiling_seconds = 0;
  for (size_t i = 0; i < kProducts8B.size(); ++i) {
    const double b = static_cast<double>(weights[i]->bytes());
    const double f = 2.0 * rows * kProducts8B[i].in * kProducts8B[i].out;
    bytes += b;
    flops += f;
    ceiling_seconds +=
        std::max(b / (ceilings.read_gbps * 1e9), f / (ceilings.onednn_gflops * 1e9));
  }
  using Clock = std::chrono::steady_clock;
  std::array<double, kProducts8B.size()> seconds = {};
  const auto start = Clock::now();
  for (auto _ : state) {
    auto last = Clock::now();
    for (size_t i = 0; i < kProducts8B.size(); ++i) {
      if constexpr (kFewRows) {
        LinearFewRows(context, *weights[i], x.data(), rows, y.data(), helper.get());
      } else {
        Linear(context, *weights[i], x.data(), rows, y.data(), helper.get());
      }
      const auto now = Clock::now();
      seconds[i] += std::chrono::duration<double>(now - last).count();
      last = now;
    }
    benchmark::DoNotOptimize(y.data());
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const double n = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(bytes * n));
  state.counters["flop/s"] = benchmark::Counter(flops * n, benchmark::Counter::kIsRate);
  state.counters["x_ceiling"] = elapsed / n / ceiling_seconds;
  state.counters["read_GB/s"] = ceilings.read_gbps;
  state.counters["onednn_GFLOP/s"] = ceilings.onednn_gflops;
  for (size_t i = 0; i < kProducts8B.size(); ++i) {
    state.counters[kProducts8B[i].name] = 1e3 * seconds[i] / n;
  }
}

BENCHMARK(BM_Products8B<true>)
    ->Name("BM_FewRows8B")
    ->ArgsProduct({{1, 4, 8, 16, 32, 64, 128, 512}, {1, 2}, {0, 1}})
    ->ArgNames({"rows", "threads", "int8"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Products8B<false>)
    ->Name("BM_Linear8B")
    ->ArgsProduct({{16, 64, 128, 512, 2048}, {1, 2}, {0, 1}})
    ->ArgNames({"rows", "threads", "int8"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace layerserve::kernels

BENCHMARK_MAIN();
