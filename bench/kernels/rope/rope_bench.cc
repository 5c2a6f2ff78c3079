// RoPE apply kernel (kernels/rope/rope.h ApplyRope) in GB/s of bytes read + written, next
// to a memcpy of the same bytes timed by the same binary in the same run.
//
//  - Spec: HALF and INTERLEAVED on [B=1, H, T, Dh=128] BHTD, and HALF on BTHD, at
//    16M elements (H=32, T=4096: 64 MiB in, 64 MiB out, DRAM) and L2 size (H=8,
//    T=64: 256 KiB in), with 1 and 2 threads. With 2 threads every iteration is one
//    call split across two std::threads (Google Benchmark's threads) -- by heads in
//    BHTD, by tokens in BTHD: each thread's share is contiguous -- meeting at a
//    barrier after every call, what torch.set_num_threads(2) does inside one
//    PyTorch call. Copy does the same with memcpy of each thread's share.
//  - Tables: ComputeRopeTables (Highway sin/cos) vs ComputeRopeTablesReference
//    (libm in double) for 4096 positions x 64 frequencies, the once-per-request
//    cost in front of the rotation.
//
// Bytes counted: the activations read (x) and written (y). The cos/sin tables
// ([T, Dh] each) are read once per head from L1/L2 and are not counted.
// docs/perf/2026-11-30-rope-kernel.md has the commands and numbers;
// bench/torch_rope_bench.py is the PyTorch eager peer and merges the tables.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "bench/kernels/spin_barrier.h"
#include "kernels/rope/rope.h"

namespace layerserve::kernels {
namespace {

// Buffers filled (so touched: no first-touch page faults while timing) once.
struct Data {
  Data(int64_t heads, int64_t tokens, int64_t dim)
      : x(heads * tokens * dim),
        y(heads * tokens * dim),
        cos(tokens * dim),
        sin(tokens * dim) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (float& v : x) v = normal(rng);
    std::fill(y.begin(), y.end(), 0.0f);
    std::vector<int64_t> positions(tokens);
    for (int64_t t = 0; t < tokens; ++t) positions[t] = t;
    const RopeFrequencies f =
        ComputeRopeFrequencies(10000.0f, dim, RopeScaling(), tokens);
    ComputeRopeTables(f, RopeStyle::kHalf, positions.data(), tokens, cos.data(),
                      sin.data());
  }
  std::vector<float> x, y, cos, sin;
};

// Shared by the threads of the running benchmark; set up by thread 0 before the
// timed loop, whose start is a barrier of Google Benchmark's own.
std::unique_ptr<Data> g_data;
bench::SpinBarrier g_barrier;

enum class Op { kHalf, kInterleaved, kHalfBthd, kCopy };

// Args: heads, tokens, dim. Each thread takes an equal share of the heads.
void RunSpec(benchmark::State& state, Op op) {
  const int64_t heads = state.range(0), tokens = state.range(1), dim = state.range(2);
  const int threads = state.threads();
  if (state.thread_index() == 0) {
    if (!g_data || g_data->x.size() != static_cast<size_t>(heads * tokens * dim)) {
      g_data.reset();  // Free before allocating: these are up to 64 MiB each.
      g_data = std::make_unique<Data>(heads, tokens, dim);
    }
    g_barrier.Reset(threads);
  }
  // Each thread takes a contiguous share of memory: its heads in BHTD, its tokens
  // in BTHD (as a caller splitting [T, H * Dh] projection rows would).
  const bool bhtd = op != Op::kHalfBthd;
  const int64_t split = bhtd ? heads : tokens;
  const int64_t begin = split * state.thread_index() / threads;
  const int64_t end = split * (state.thread_index() + 1) / threads;
  RopeGeometry g = ContiguousRopeGeometry(bhtd, 1, heads, tokens, dim, dim, true);
  int64_t offset = 0, table_offset = 0;
  if (bhtd) {
    g.heads = end - begin;
    offset = begin * g.head_stride;
  } else {
    g.tokens = end - begin;
    offset = begin * g.token_stride;
    table_offset = begin * dim;
  }
  const RopeStyle style =
      op == Op::kInterleaved ? RopeStyle::kInterleaved : RopeStyle::kHalf;
  const size_t my_bytes = (end - begin) * (heads * tokens / split) * dim * sizeof(float);
  int64_t generation = 0;
  for (auto _ : state) {
    Data& d = *g_data;
    if (op == Op::kCopy) {
      std::memcpy(d.y.data() + offset, d.x.data() + offset, my_bytes);
    } else {
      ApplyRope(d.x.data() + offset, d.y.data() + offset, g, style,
                d.cos.data() + table_offset, d.sin.data() + table_offset);
    }
    benchmark::ClobberMemory();
    if (threads > 1) g_barrier.Wait(generation);
  }
  // Summed over threads and divided by wall time (UseRealTime): the throughput of
  // the whole call.
  state.SetBytesProcessed(state.iterations() * my_bytes * 2);
}

void BM_Copy(benchmark::State& state) { RunSpec(state, Op::kCopy); }
void BM_RopeHalf(benchmark::State& state) { RunSpec(state, Op::kHalf); }
void BM_RopeInterleaved(benchmark::State& state) { RunSpec(state, Op::kInterleaved); }
void BM_RopeHalfBthd(benchmark::State& state) { RunSpec(state, Op::kHalfBthd); }

void SpecShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"heads", "tokens", "dim"});
  b->Args({8, 64, 128});     // 64K elements, 256 KiB per array: L2.
  b->Args({32, 4096, 128});  // 16M elements, 64 MiB per array: DRAM.
  b->Threads(1)->Threads(2)->UseRealTime();
}

// The copy peer runs just before the kernels it is the peer of.
BENCHMARK(BM_Copy)->Apply(SpecShapes);
BENCHMARK(BM_RopeHalf)->Apply(SpecShapes);
BENCHMARK(BM_RopeInterleaved)->Apply(SpecShapes);
BENCHMARK(BM_RopeHalfBthd)->Apply(SpecShapes);

// ---- The cos/sin tables: once per request, one thread.

template <bool kFast>
void BM_Tables(benchmark::State& state) {
  const int64_t positions_count = state.range(0), rotary_dim = state.range(1);
  const RopeFrequencies f =
      ComputeRopeFrequencies(10000.0f, rotary_dim, RopeScaling(), positions_count);
  std::vector<int64_t> positions(positions_count);
  for (int64_t t = 0; t < positions_count; ++t) positions[t] = t;
  std::vector<float> cos(positions_count * rotary_dim), sin(positions_count * rotary_dim);
  for (auto _ : state) {
    (kFast ? ComputeRopeTables : ComputeRopeTablesReference)(
        f, RopeStyle::kHalf, positions.data(), positions_count, cos.data(), sin.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * positions_count * rotary_dim / 2);
}
BENCHMARK_TEMPLATE(BM_Tables, true)
    ->ArgNames({"positions", "rotary_dim"})
    ->Args({4096, 128});
BENCHMARK_TEMPLATE(BM_Tables, false)
    ->ArgNames({"positions", "rotary_dim"})
    ->Args({4096, 128});

}  // namespace
}  // namespace layerserve::kernels

BENCHMARK_MAIN();
