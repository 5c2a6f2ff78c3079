// Activation kernels (kernels/activation/activation.h) in GB/s of bytes read + written,
// next to a memcpy of the same bytes timed by the same binary in the same run.
//
// Two families:
//  - Spec: every activation through Activate() on a 16M-element tensor (4096 x
//    4096, 64 MiB in: DRAM) and an L2-sized one (16 x 4096, 256 KiB in); the gated
//    ones through GatedActivate() from two tensors [rows, F] and from one packed
//    [rows, 2F], 16M and 64K input elements in all (2048 x 4096 and 8 x 4096 out);
//    with 1 and 2 threads. With 2 threads every iteration is one call split by rows
//    across two std::threads (Google Benchmark's threads) meeting at a barrier
//    after every call -- what
//    torch.set_num_threads(2) does inside one PyTorch call. Copy does the same with
//    memcpy of each thread's share: n floats for the element-wise kernels (read n,
//    write n), 1.5 F per row for the gated ones (read 2F, write F).
//  - Path: the two element-wise strategies (internal::ActivateHighway with and
//    without streaming stores, baseline::ActivateOneDnn) per activation and size on
//    one thread: the measurements behind Activate()'s choice of Highway
//    (activation.cc) and internal::UsesStreamingStores.
//
// docs/perf/2026-11-30-activation-kernels.md has the commands and the numbers;
// bench/torch_activation_bench.py is the PyTorch eager peer.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "bench/baseline/activate_onednn.h"
#include "bench/kernels/spin_barrier.h"
#include "kernels/activation/activation.h"
#include "kernels/activation/activation_internal.h"
#include "kernels/value_stats/value_stats.h"

namespace layerserve::kernels {
namespace {

enum class Layout { kUnary, kGatedTwo, kGatedPacked, kCopyUnary, kCopyGated };

// Input values: normal, std 2 (the body and both tails of every activation).
// Filled once, so every page is touched before timing.
struct Data {
  Data(Layout layout, int64_t rows, int64_t dim) : layout(layout), rows(rows), dim(dim) {
    int64_t in = rows * dim, out = rows * dim;
    if (layout == Layout::kGatedTwo || layout == Layout::kGatedPacked)
      in = 2 * rows * dim;
    if (layout == Layout::kCopyGated) in = out = rows * dim * 3 / 2;
    x.resize(in);
    y.resize(out);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (float& v : x) v = normal(rng);
    std::fill(y.begin(), y.end(), 0.0f);
  }
  Layout layout;
  int64_t rows, dim;
  // kUnary: x [rows, dim]. kGatedTwo: gate = x[0, n), up = x[n, 2n). kGatedPacked:
  // x [rows, 2 dim]. Copies: the same bytes as the kernels they are peers of.
  std::vector<float> x, y;
};

// Shared by the threads of the running benchmark; set up by thread 0 before the
// timed loop, whose start is a barrier of Google Benchmark's own.
std::unique_ptr<Data> g_data;
bench::SpinBarrier g_barrier;

// Bytes one call reads plus writes, per row.
int64_t BytesPerRow(Layout layout, int64_t dim) {
  const bool gated = layout != Layout::kUnary && layout != Layout::kCopyUnary;
  return (gated ? 3 : 2) * dim * static_cast<int64_t>(sizeof(float));
}

// Args: rows, dim (dim = F, the output's last dimension, for gated layouts).
void RunSpec(benchmark::State& state, Layout layout, Activation act) {
  const int64_t rows = state.range(0), dim = state.range(1);
  const int threads = state.threads();
  // One OpenMP thread per calling thread, as each server worker runs (the setting
  // is per thread; benchmark threads start with the process default).
  omp_set_num_threads(1);
  if (state.thread_index() == 0) {
    if (!g_data || g_data->layout != layout || g_data->rows != rows ||
        g_data->dim != dim) {
      g_data.reset();  // Free before allocating: these are up to 256 MiB.
      g_data = std::make_unique<Data>(layout, rows, dim);
    }
    g_barrier.Reset(threads);
  }
  const int64_t begin = rows * state.thread_index() / threads;
  const int64_t end = rows * (state.thread_index() + 1) / threads;
  const int64_t my_rows = end - begin;
  int64_t generation = 0;
  for (auto _ : state) {
    Data& d = *g_data;
    const int64_t n = rows * dim;
    switch (layout) {
      case Layout::kUnary:
        Activate(act, d.x.data() + begin * dim, my_rows * dim, d.y.data() + begin * dim);
        break;
      case Layout::kGatedTwo:
        GatedActivate(act, d.x.data() + begin * dim, d.x.data() + n + begin * dim,
                      my_rows, dim, dim, d.y.data() + begin * dim);
        break;
      case Layout::kGatedPacked: {
        const float* row = d.x.data() + begin * 2 * dim;
        GatedActivate(act, row, row + dim, my_rows, dim, 2 * dim,
                      d.y.data() + begin * dim);
        break;
      }
      case Layout::kCopyUnary:
        std::memcpy(d.y.data() + begin * dim, d.x.data() + begin * dim,
                    my_rows * dim * sizeof(float));
        break;
      case Layout::kCopyGated:
        std::memcpy(d.y.data() + begin * dim * 3 / 2, d.x.data() + begin * dim * 3 / 2,
                    my_rows * dim * 3 / 2 * sizeof(float));
        break;
    }
    benchmark::ClobberMemory();
    if (threads > 1) g_barrier.Wait(generation);
  }
  // Summed over threads and divided by wall time (UseRealTime): the throughput of
  // the whole call.
  state.SetBytesProcessed(state.iterations() * my_rows * BytesPerRow(layout, dim));
}

void UnaryShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "dim"});
  b->Args({16, 4096});    // 256 KiB in, 256 KiB out: L2.
  b->Args({4096, 4096});  // 16M elements, 64 MiB in: DRAM.
  b->Threads(1)->Threads(2)->UseRealTime();
}

void GatedShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "F"});
  b->Args({8, 4096});     // gate + up 256 KiB, out 128 KiB: L2.
  b->Args({2048, 4096});  // gate + up 16M elements (64 MiB), out 32 MiB: DRAM.
  b->Threads(1)->Threads(2)->UseRealTime();
}

#define LS_UNARY(name, act)                          \
  void BM_##name(benchmark::State& state) {          \
    RunSpec(state, Layout::kUnary, Activation::act); \
  }                                                  \
  BENCHMARK(BM_##name)->Apply(UnaryShapes)
#define LS_GATED(name, act)                                \
  void BM_##name(benchmark::State& state) {                \
    RunSpec(state, Layout::kGatedTwo, Activation::act);    \
  }                                                        \
  void BM_##name##Packed(benchmark::State& state) {        \
    RunSpec(state, Layout::kGatedPacked, Activation::act); \
  }                                                        \
  BENCHMARK(BM_##name)->Apply(GatedShapes);                \
  BENCHMARK(BM_##name##Packed)->Apply(GatedShapes)

// Each copy peer runs just before the kernels it is the peer of.
void BM_Copy(benchmark::State& state) {
  RunSpec(state, Layout::kCopyUnary, Activation::kRelu);
}
BENCHMARK(BM_Copy)->Apply(UnaryShapes);
LS_UNARY(Relu, kRelu);
LS_UNARY(Gelu, kGelu);
LS_UNARY(GeluTanh, kGeluTanh);
LS_UNARY(Silu, kSilu);
LS_UNARY(Sigmoid, kSigmoid);
LS_UNARY(Tanh, kTanh);
LS_UNARY(QuickGelu, kQuickGelu);

void BM_CopyGated(benchmark::State& state) {
  RunSpec(state, Layout::kCopyGated, Activation::kRelu);
}
BENCHMARK(BM_CopyGated)->Apply(GatedShapes);
LS_GATED(SwiGlu, kSilu);
LS_GATED(GeGlu, kGelu);
LS_GATED(GeGluTanh, kGeluTanh);
LS_GATED(ReGlu, kRelu);

// ---- Element-wise strategy per activation and size, one thread.

// The last three time Activate() itself, with no output statistics, with them
// (output_stats), and followed by ComputeValueStats as the server did before.
enum class Path {
  kHighway,
  kHighwayStream,
  kOneDnn,
  kStatsNone,
  kStatsFused,
  kStatsAfter
};

void RunPath(benchmark::State& state, Path path) {
  const Activation act = static_cast<Activation>(state.range(0));
  const int64_t n = state.range(1);
  omp_set_num_threads(1);
  Data d(Layout::kUnary, 1, n);
  baseline::ActivationContext ctx;  // Path::kOneDnn's primitives.
  state.SetLabel(ActivationName(act));
  ValueStats stats;
  auto run = [&] {
    switch (path) {
      case Path::kHighway:
        return internal::ActivateHighway(act, d.x.data(), n, d.y.data(), false);
      case Path::kHighwayStream:
        return internal::ActivateHighway(act, d.x.data(), n, d.y.data(), true);
      case Path::kOneDnn:
        return baseline::ActivateOneDnn(ctx, act, d.x.data(), n, d.y.data());
      case Path::kStatsNone:
        return Activate(act, d.x.data(), n, d.y.data());
      case Path::kStatsFused:
        return Activate(act, d.x.data(), n, d.y.data(), &stats);
      case Path::kStatsAfter:
        Activate(act, d.x.data(), n, d.y.data());
        stats = ComputeValueStats(d.y.data(), n);
        return;
    }
  };
  run();  // Creates oneDNN's cached primitive.
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(stats);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 2 * sizeof(float));
}

void BM_PathHighway(benchmark::State& state) { RunPath(state, Path::kHighway); }
void BM_PathHighwayStream(benchmark::State& state) {
  RunPath(state, Path::kHighwayStream);
}
void BM_PathOneDnn(benchmark::State& state) { RunPath(state, Path::kOneDnn); }

void PathShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"act", "n"});
  for (int act = 0; act < kNumActivations; ++act) {
    for (int64_t n :
         {int64_t{1} << 13, int64_t{1} << 14, int64_t{1} << 15, int64_t{1} << 16,
          int64_t{1} << 18, int64_t{1} << 20, int64_t{1} << 22, int64_t{1} << 24}) {
      b->Args({act, n});
    }
  }
}

BENCHMARK(BM_PathHighway)->Apply(PathShapes);
BENCHMARK(BM_PathHighwayStream)->Apply(PathShapes);
BENCHMARK(BM_PathOneDnn)->Apply(PathShapes);

// ---- Output statistics (what the server exports for every reply), one thread:
// Activate() alone, taking them as it writes, or reading them afterwards.

void BM_StatsNone(benchmark::State& state) { RunPath(state, Path::kStatsNone); }
void BM_StatsFused(benchmark::State& state) { RunPath(state, Path::kStatsFused); }
void BM_StatsAfter(benchmark::State& state) { RunPath(state, Path::kStatsAfter); }

void StatsShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"act", "n"});
  for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kSilu}) {
    for (int64_t n : {int64_t{1} << 18, int64_t{1} << 24}) {  // 1 MiB; 64 MiB.
      b->Args({static_cast<int64_t>(act), n});
    }
  }
}

BENCHMARK(BM_StatsNone)->Apply(StatsShapes);
BENCHMARK(BM_StatsFused)->Apply(StatsShapes);
BENCHMARK(BM_StatsAfter)->Apply(StatsShapes);

}  // namespace
}  // namespace layerserve::kernels

int main(int argc, char** argv) {
  omp_set_num_threads(1);
  benchmark::AddCustomContext("highway_target",
                              layerserve::kernels::internal::ActivationHighwayTarget());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
