// Positional kernels (kernels/positional/positional.h) in GB/s -- bytes read plus bytes
// written
// -- next to a memcpy of the same tensor measured in the same run: sinusoidal add
// (x -> x + pe, pe read from a cached table or computed on the fly), learned add (x +
// table[p]: three streams), ALiBi add to scores, and the generated tensors (sinusoidal
// table, ALiBi and T5 biases: written only). Each on a 16M-element tensor (64 MiB, DRAM)
// and a 64K-element one (256 KiB, L2; sinusoidal also 512K, 2 MiB), with 1 and 2 threads:
// rows (or heads) are split across a persistent team of std::threads.
// docs/perf/2026-11-30-positional-kernels.md has the commands and the numbers.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "kernels/positional/positional.h"

namespace layerserve::kernels {
namespace {

// Runs fn(thread_index) on `threads` threads (the caller is index 0) and waits for
// all. Helpers poll between runs (yielding the core to anyone else runnable), so a
// run costs no futex wake-up (~27 us here, which would swamp the L2-sized cases).
class Team {
 public:
  explicit Team(int threads) : threads_(threads) {
    for (int t = 1; t < threads; ++t) helpers_.emplace_back([this, t] { Loop(t); });
  }
  ~Team() {
    stop_.store(true);
    generation_.fetch_add(1);
    for (std::thread& h : helpers_) h.join();
  }

  void Run(const std::function<void(int)>& fn) {
    fn_ = &fn;
    pending_.store(threads_ - 1);
    generation_.fetch_add(1, std::memory_order_release);
    fn(0);
    while (pending_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  }

 private:
  void Loop(int index) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t g;
      while ((g = generation_.load(std::memory_order_acquire)) == seen) {
        std::this_thread::yield();
      }
      seen = g;
      if (stop_.load()) return;
      (*fn_)(index);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  const int threads_;
  std::vector<std::thread> helpers_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int)>* fn_ = nullptr;
};

// [begin, end) of `count` items for thread t of n.
std::pair<int64_t, int64_t> Split(int64_t count, int t, int n) {
  return {count * t / n, count * (t + 1) / n};
}

std::vector<float> Filled(int64_t n, uint32_t seed) {
  std::vector<float> v(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  for (float& f : v) f = normal(rng);  // Also touches every page before timing.
  return v;
}

// Times `work(thread_index, threads)` over the team; `bytes` per call.
template <typename Work>
void Time(benchmark::State& state, int threads, int64_t bytes, Work work) {
  Team team(threads);
  const std::function<void(int)> fn = [&](int t) { work(t, threads); };
  team.Run(fn);  // Warm-up: caches, frequency tables.
  for (auto _ : state) {
    team.Run(fn);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

// Args: rows, dim, threads.
void BM_Memcpy(benchmark::State& state) {
  const int64_t n = state.range(0) * state.range(1);
  const std::vector<float> x = Filled(n, 1);
  std::vector<float> y = Filled(n, 2);
  Time(state, state.range(2), n * 8, [&](int t, int threads) {
    const auto [begin, end] = Split(n, t, threads);
    std::memcpy(y.data() + begin, x.data() + begin, (end - begin) * sizeof(float));
  });
}

// Positions from 0 let an add whose rows fit 2 MiB read the context's cached table
// (kernels/positional/positional.h); with `past_table` they start past those 2 MiB of
// rows, and the same add computes every sine and cosine, as larger requests do.
void SinusoidalBench(benchmark::State& state, bool with_input, bool past_table = false) {
  const int64_t rows = state.range(0), dim = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  const std::vector<float> x = Filled(rows * dim, 1);
  std::vector<float> y = Filled(rows * dim, 2);
  const int64_t first_position = past_table ? (int64_t{2} << 20) / (dim * 4) : 0;
  std::vector<int64_t> positions(rows);
  for (int64_t r = 0; r < rows; ++r) positions[r] = first_position + r;
  std::vector<std::unique_ptr<PositionalContext>> contexts;
  for (int t = 0; t < threads; ++t)
    contexts.push_back(std::make_unique<PositionalContext>());
  Time(state, threads, rows * dim * (with_input ? 8 : 4), [&](int t, int n) {
    const auto [begin, end] = Split(rows, t, n);
    Sinusoidal(*contexts[t], with_input ? x.data() + begin * dim : nullptr,
               positions.data() + begin, end - begin, dim, 10000.0f,
               SinusoidalLayout::kInterleaved, y.data() + begin * dim);
  });
}
void BM_SinusoidalAdd(benchmark::State& state) { SinusoidalBench(state, true); }
void BM_SinusoidalAddComputed(benchmark::State& state) {
  SinusoidalBench(state, true, /*past_table=*/true);
}
void BM_SinusoidalTable(benchmark::State& state) { SinusoidalBench(state, false); }

void BM_LearnedAdd(benchmark::State& state) {
  const int64_t rows = state.range(0), dim = state.range(1);
  const std::vector<float> x = Filled(rows * dim, 1), table = Filled(rows * dim, 3);
  std::vector<float> y = Filled(rows * dim, 2);
  std::vector<int64_t> positions(rows);
  for (int64_t r = 0; r < rows; ++r) positions[r] = r;
  // Bytes: x and the table rows read, y written.
  Time(state, state.range(2), rows * dim * 12, [&](int t, int n) {
    const auto [begin, end] = Split(rows, t, n);
    Learned(x.data() + begin * dim, positions.data() + begin, end - begin, dim,
            table.data(), y.data() + begin * dim);
  });
}

// Args: heads, Tq, Tk, threads. Heads are split across threads (batch 1).
void AlibiBench(benchmark::State& state, bool with_scores) {
  const int64_t heads = state.range(0), tq = state.range(1), tk = state.range(2);
  const int64_t per_head = tq * tk;
  const std::vector<float> scores = Filled(heads * per_head, 1);
  std::vector<float> y = Filled(heads * per_head, 2);
  std::vector<float> slopes(heads);
  AlibiSlopes(heads, slopes.data());
  Time(state, state.range(3), heads * per_head * (with_scores ? 8 : 4),
       [&](int t, int n) {
         const auto [begin, end] = Split(heads, t, n);
         AlibiShape shape;
         shape.heads = end - begin;
         shape.query_length = tq;
         shape.key_length = tk;
         Alibi(slopes.data() + begin, shape,
               with_scores ? scores.data() + begin * per_head : nullptr, 1,
               y.data() + begin * per_head);
       });
}
void BM_AlibiAdd(benchmark::State& state) { AlibiBench(state, true); }
void BM_AlibiBias(benchmark::State& state) { AlibiBench(state, false); }

// Args: heads, Tq, Tk (one thread: the kernel's output is head-major, so a split
// would need a strided table; measured as a single-threaded generator).
void BM_T5Bias(benchmark::State& state) {
  T5BiasShape shape;
  shape.heads = state.range(0);
  shape.query_length = state.range(1);
  shape.key_length = state.range(2);
  const std::vector<float> table = Filled(shape.num_buckets * shape.heads, 1);
  std::vector<float> y = Filled(shape.heads * shape.query_length * shape.key_length, 2);
  PositionalContext ctx;
  Time(state, 1, static_cast<int64_t>(y.size()) * 4,
       [&](int, int) { T5Bias(ctx, table.data(), shape, y.data()); });
}

// 16M elements (64 MiB), 512K (2 MiB: the largest sinusoidal table cached) and
// 64K (256 KiB), 1 and 2 threads.
void RowShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "dim", "threads"});
  for (int threads : {1, 2}) {
    b->Args({4096, 4096, threads});
    b->Args({512, 1024, threads});
    b->Args({64, 1024, threads});
  }
  b->UseRealTime();
}

void HeadShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"heads", "tq", "tk", "threads"});
  for (int threads : {1, 2}) {
    b->Args({16, 1024, 1024, threads});
    b->Args({4, 128, 128, threads});
  }
  b->UseRealTime();
}

BENCHMARK(BM_Memcpy)->Apply(RowShapes);
BENCHMARK(BM_SinusoidalAdd)->Apply(RowShapes);
BENCHMARK(BM_SinusoidalAddComputed)->Apply(RowShapes);
BENCHMARK(BM_SinusoidalTable)->Apply(RowShapes);
BENCHMARK(BM_LearnedAdd)->Apply(RowShapes);
BENCHMARK(BM_AlibiAdd)->Apply(HeadShapes);
BENCHMARK(BM_AlibiBias)->Apply(HeadShapes);
BENCHMARK(BM_T5Bias)
    ->ArgNames({"heads", "tq", "tk"})
    ->Args({16, 1024, 1024})
    ->Args({4, 128, 128})
    ->UseRealTime();

}  // namespace
}  // namespace layerserve::kernels

BENCHMARK_MAIN();
