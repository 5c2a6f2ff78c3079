// Normalization kernels (kernels/norm/norm.h) in GB/s of bytes read + written, next to
// a memcpy of the same bytes timed by the same binary in the same run.
//
// Two families:
//  - Spec: LayerNorm (weight + bias), RmsNorm (weight) and fused add + RmsNorm on
//    a 16M-element tensor (4096 x 4096, DRAM) and an L2-sized one (16 x 4096,
//    256 KiB in), with 1 and 2 threads. With 2 threads every iteration is one
//    call split by rows across two std::threads (Google Benchmark's threads)
//    meeting at a barrier after every call -- what
//    torch.set_num_threads(2) does inside one PyTorch call. Copy does the same
//    with memcpy of each thread's rows: one array for the norms (read x, write y),
//    two for the fused kernel (read x and residual, write sum and y); StreamCopy
//    copies one array with non-temporal stores.
//  - Path: LayerNorm's two strategies (internal::LayerNormLoop, the Highway hand
//    loop; baseline::LayerNormOneDnn, bench/baseline/) and the dispatching
//    LayerNorm() per shape on one thread: the measurement behind LayerNorm() taking
//    the loop everywhere.
//
// Bytes counted: the activations read and written (weight and bias, [dim], are
// negligible). docs/perf/2026-11-30-norm-kernels.md has the commands and the numbers;
// bench/torch_norm_bench.py is the PyTorch eager peer and merges the tables.
#include <benchmark/benchmark.h>
#include <emmintrin.h>  // _mm_stream_ps.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "bench/baseline/layer_norm_onednn.h"
#include "bench/kernels/spin_barrier.h"
#include "kernels/norm/norm.h"
#include "kernels/norm/norm_internal.h"

namespace layerserve::kernels {
namespace {

// Buffers filled (so touched: no first-touch page faults while timing) once.
struct Data {
  Data(int64_t rows, int64_t dim, bool residual)
      : x(rows * dim), y(rows * dim), w(dim), b(dim) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (float& v : x) v = normal(rng);
    for (float& v : w) v = 1.0f + 0.1f * normal(rng);
    for (float& v : b) v = 0.1f * normal(rng);
    if (residual) {
      r.resize(rows * dim);
      s.resize(rows * dim);
      for (float& v : r) v = normal(rng);
      std::fill(s.begin(), s.end(), 0.0f);
    }
  }
  std::vector<float> x, y, w, b, r, s;
};

// A copy with non-temporal stores (SSE2, baseline x86-64): the bound for kernels
// that stream their output, as the norms do for large outputs (memcpy here does
// not: it reads each destination line first, as plain stores do).
// REQUIRES: x, y 16-byte aligned; n a multiple of 4.
void StreamCopy(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 4) _mm_stream_ps(y + i, _mm_load_ps(x + i));
  _mm_sfence();
}

// Shared by the threads of the running benchmark; set up by thread 0 before the
// timed loop, whose start is a barrier of Google Benchmark's own.
std::unique_ptr<Data> g_data;
bench::SpinBarrier g_barrier;

// kRmsNormStats takes the output's statistics in the kernel's output pass
// (NormParams::output_stats, as Normalize does); kRmsNormThenStats reads the output
// again for them (ComputeValueStats, what Normalize did before).
enum class Op {
  kLayerNorm,
  kRmsNorm,
  kRmsNormStats,
  kRmsNormThenStats,
  kAddRmsNorm,
  kCopy1,
  kCopy2,
  kStreamCopy
};

// The arrays an op reads plus writes, in units of rows * dim floats.
int Arrays(Op op) { return op == Op::kAddRmsNorm || op == Op::kCopy2 ? 4 : 2; }

// Args: rows, dim. Each thread takes an equal share of the rows.
void RunSpec(benchmark::State& state, Op op) {
  const int64_t rows = state.range(0), dim = state.range(1);
  const int threads = state.threads();
  // One OpenMP thread per calling thread, as each server worker runs: oneDNN
  // then starts no OpenMP team. The setting is per thread; benchmark threads
  // start with the process default.
  omp_set_num_threads(1);
  if (state.thread_index() == 0) {
    const bool residual = Arrays(op) == 4;
    if (!g_data || g_data->x.size() != static_cast<size_t>(rows * dim) ||
        g_data->r.empty() == residual) {
      g_data.reset();  // Free before allocating: these are up to 256 MiB.
      g_data = std::make_unique<Data>(rows, dim, residual);
    }
    g_barrier.Reset(threads);
  }
  const int64_t begin = rows * state.thread_index() / threads;
  const int64_t end = rows * (state.thread_index() + 1) / threads;
  const int64_t my_rows = end - begin, offset = begin * dim;
  const size_t my_bytes = my_rows * dim * sizeof(float);
  int64_t generation = 0;
  for (auto _ : state) {
    Data& d = *g_data;
    NormParams p;
    p.weight = d.w.data();
    switch (op) {
      case Op::kLayerNorm:
        p.bias = d.b.data();
        LayerNorm(d.x.data() + offset, my_rows, dim, p, d.y.data() + offset);
        break;
      case Op::kRmsNorm:
        p.epsilon = 1e-6f;
        RmsNorm(d.x.data() + offset, my_rows, dim, p, d.y.data() + offset);
        break;
      case Op::kRmsNormStats: {
        ValueStats stats;
        p.epsilon = 1e-6f;
        p.output_stats = &stats;
        RmsNorm(d.x.data() + offset, my_rows, dim, p, d.y.data() + offset);
        benchmark::DoNotOptimize(stats);
        break;
      }
      case Op::kRmsNormThenStats: {
        p.epsilon = 1e-6f;
        RmsNorm(d.x.data() + offset, my_rows, dim, p, d.y.data() + offset);
        ValueStats stats = ComputeValueStats(d.y.data() + offset, my_rows * dim);
        benchmark::DoNotOptimize(stats);
        break;
      }
      case Op::kAddRmsNorm:
        p.epsilon = 1e-6f;
        p.residual = d.r.data() + offset;
        p.residual_out = d.s.data() + offset;
        RmsNorm(d.x.data() + offset, my_rows, dim, p, d.y.data() + offset);
        break;
      case Op::kCopy1:
        std::memcpy(d.y.data() + offset, d.x.data() + offset, my_bytes);
        break;
      case Op::kStreamCopy:
        StreamCopy(d.x.data() + offset, d.y.data() + offset, my_rows * dim);
        break;
      case Op::kCopy2:
        std::memcpy(d.s.data() + offset, d.x.data() + offset, my_bytes);
        std::memcpy(d.y.data() + offset, d.r.data() + offset, my_bytes);
        break;
    }
    benchmark::ClobberMemory();
    if (threads > 1) g_barrier.Wait(generation);
  }
  // Summed over threads and divided by wall time (UseRealTime): the throughput of
  // the whole call.
  state.SetBytesProcessed(state.iterations() * my_rows * dim * sizeof(float) *
                          Arrays(op));
}

void BM_LayerNorm(benchmark::State& state) { RunSpec(state, Op::kLayerNorm); }
void BM_RmsNorm(benchmark::State& state) { RunSpec(state, Op::kRmsNorm); }
void BM_RmsNormStats(benchmark::State& state) { RunSpec(state, Op::kRmsNormStats); }
void BM_RmsNormThenStats(benchmark::State& state) {
  RunSpec(state, Op::kRmsNormThenStats);
}
void BM_AddRmsNorm(benchmark::State& state) { RunSpec(state, Op::kAddRmsNorm); }
void BM_Copy(benchmark::State& state) { RunSpec(state, Op::kCopy1); }
void BM_Copy2(benchmark::State& state) { RunSpec(state, Op::kCopy2); }
void BM_StreamCopy(benchmark::State& state) { RunSpec(state, Op::kStreamCopy); }

void SpecShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "dim"});
  b->Args({16, 4096});    // 256 KiB per array: L2.
  b->Args({4096, 4096});  // 16M elements, 64 MiB per array: DRAM.
  b->Threads(1)->Threads(2)->UseRealTime();
}

// Each copy peer runs just before the kernels it is the peer of.
BENCHMARK(BM_Copy)->Apply(SpecShapes);
BENCHMARK(BM_StreamCopy)->Apply(SpecShapes);
BENCHMARK(BM_LayerNorm)->Apply(SpecShapes);
BENCHMARK(BM_RmsNorm)->Apply(SpecShapes);
BENCHMARK(BM_RmsNormStats)->Apply(SpecShapes);
BENCHMARK(BM_RmsNormThenStats)->Apply(SpecShapes);
BENCHMARK(BM_Copy2)->Apply(SpecShapes);
BENCHMARK(BM_AddRmsNorm)->Apply(SpecShapes);

// ---- LayerNorm path choice: one thread, weight + bias, per shape.

template <typename Fn>
void RunPath(benchmark::State& state, Fn fn) {
  const int64_t rows = state.range(0), dim = state.range(1);
  omp_set_num_threads(1);
  Data d(rows, dim, /*residual=*/false);
  NormParams p;
  p.weight = d.w.data();
  p.bias = d.b.data();
  fn(d.x.data(), rows, dim, p, d.y.data());  // Creates oneDNN's cached primitives.
  for (auto _ : state) {
    fn(d.x.data(), rows, dim, p, d.y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * rows * dim * 2 * sizeof(float));
}

void BM_PathLoop(benchmark::State& state) { RunPath(state, internal::LayerNormLoop); }
void BM_PathOneDnn(benchmark::State& state) {
  baseline::NormContext ctx;
  RunPath(state,
          [&ctx](const float* x, int64_t rows, int64_t dim, const NormParams& p,
                 float* y) { baseline::LayerNormOneDnn(ctx, x, rows, dim, p, y); });
}
void BM_PathLayerNorm(benchmark::State& state) { RunPath(state, LayerNorm); }

void PathShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "dim"});
  for (int64_t dim : {768, 4096, 8192}) {
    for (int64_t rows : {1, 4, 16, 128, 512}) b->Args({rows, dim});
  }
  b->Args({4096, 4096});  // Past kNormStreamMinBytes: the loop streams its output.
}

BENCHMARK(BM_PathLoop)->Apply(PathShapes);
BENCHMARK(BM_PathOneDnn)->Apply(PathShapes);
BENCHMARK(BM_PathLayerNorm)->Apply(PathShapes);

}  // namespace
}  // namespace layerserve::kernels

int main(int argc, char** argv) {
  omp_set_num_threads(1);
  benchmark::AddCustomContext("hand_loop_target",
                              layerserve::kernels::internal::HandLoopTarget());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
