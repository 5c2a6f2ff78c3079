// One decode step of S KV-cache sessions as the server runs it: one batch of S
// one-token sequences through 4 Llama blocks, each session attending over its own
// cache of 256 earlier tokens (bfloat16). Two models: the 768-hidden configuration
// (bfloat16 weights, 75 MB: read from memory each step, as in serving) and the
// built-in demo model's shapes (hidden 512, 8 query heads sharing 2 KV heads,
// 23 MB: they stay in L3). On one
// thread, and on two: the calling thread plus an idle worker of the server's own
// Batcher helping through kernels::ParallelFor (server/batching/batcher.h), the path a
// decode batch takes when the other worker has nothing queued.
//
// Counter `tok/s` = decode tokens per second. Commands and numbers:
// docs/perf/2026-11-30-decode-batch-sharing.md.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "bench/llama_shapes.h"
#include "kernels/block.h"
#include "kernels/rope.h"
#include "server/batching/batcher.h"

namespace layerserve {
namespace {

using kernels::BlockConfig;
using kernels::BlockWeights;

constexpr int64_t kLayers = 4, kCached = 256;

enum Model { kLlama768, kDemo };

BlockConfig Config(Model model) {
  return bench::LlamaConfig(model == kDemo ? bench::LlamaShape{512, 8, 2, 1408}
                                           : bench::LlamaShape{768, 12, 12, 3072});
}

std::vector<BlockWeights> MakeLayers(Model model) {
  const BlockConfig c = Config(model);
  std::mt19937 rng(1);
  std::vector<BlockWeights> out(kLayers);
  const int64_t d = c.hidden_size, f = c.intermediate_size;
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  auto linear = [&](int64_t o, int64_t i) {
    const std::vector<float> w = bench::RandomValues(o * i, rng);
    return std::make_unique<kernels::LinearWeights>(w.data(), o, i, false, nullptr,
                                                    kernels::WeightType::kBfloat16);
  };
  for (BlockWeights& w : out) {
    w.attn_norm_weight.assign(d, 1.0f);
    w.mlp_norm_weight.assign(d, 1.0f);
    w.qkv = linear(q + 2 * kv, d);
    w.output = linear(d, q);
    w.up = linear(2 * f, d);
    w.down = linear(d, f);
  }
  return out;
}

const std::vector<BlockWeights>& Layers(Model model) {
  static const std::vector<BlockWeights> llama768 = MakeLayers(kLlama768);
  static const std::vector<BlockWeights> demo = MakeLayers(kDemo);
  return model == kDemo ? demo : llama768;
}

struct NoContext {};

void BM_DecodeStep(benchmark::State& state) {
  omp_set_num_threads(1);
  const Model model = state.range(0) != 0 ? kDemo : kLlama768;
  const int64_t sessions = state.range(1);
  const bool two_threads = state.range(2) != 0;
  const BlockConfig c = Config(model);
  const std::vector<BlockWeights>& layers = Layers(model);
  std::mt19937 rng(2);
  const int64_t width = c.num_kv_heads * c.head_dim;
  std::vector<std::unique_ptr<kernels::KvCache>> caches;
  kernels::BlockBatch batch;
  batch.rows = sessions;
  for (int64_t s = 0; s < sessions; ++s) {
    caches.push_back(std::make_unique<kernels::KvCache>(
        kLayers, c.num_kv_heads, c.head_dim, kernels::KvCacheType::kBfloat16));
    const std::vector<float> kv = bench::RandomValues(kCached * width, rng);
    for (int64_t l = 0; l < kLayers; ++l) {
      caches.back()->Append(l, kv.data(), kv.data(), width, kCached);
    }
    caches.back()->Commit(kCached);
    batch.starts.push_back(s);
    batch.tokens.push_back(1);
    batch.lengths.push_back(1);
    batch.caches.push_back(caches.back().get());
  }
  // Every session at position kCached; the step's rows are appended after the
  // committed ones and never committed, so each iteration sees the same lengths.
  const std::vector<int64_t> positions(sessions, kCached);
  const kernels::RopeFrequencies freq =
      kernels::ComputeRopeFrequencies(c.rope_theta, c.rotary_dim, {}, kCached + 1);
  std::vector<float> cos(sessions * c.rotary_dim), sin(sessions * c.rotary_dim);
  kernels::ComputeRopeTables(freq, kernels::RopeStyle::kHalf, positions.data(), sessions,
                             cos.data(), sin.data());
  batch.cos = cos.data();
  batch.sin = sin.data();
  // One worker, idle: it helps with every loop this thread shares.
  Batcher<NoContext> helper(BatchOptions{}, 1, [](NoContext&, Batch&) {});
  kernels::BlockKernels k;
  k.parallel = two_threads ? &helper : nullptr;
  const std::vector<float> input = bench::RandomValues(sessions * c.hidden_size, rng);
  std::vector<float> x;
  for (auto _ : state) {
    x = input;
    for (int64_t l = 0; l < kLayers; ++l) {
      batch.cache_layer = l;
      kernels::BlockForward(c, layers[l], batch, k, x.data(), nullptr);
    }
    benchmark::DoNotOptimize(x.data());
  }
  state.counters["tok/s"] = benchmark::Counter(
      static_cast<double>(sessions * state.iterations()), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_DecodeStep)
    ->ArgsProduct({{kLlama768, kDemo}, {1, 8, 32}, {0, 1}})
    ->ArgNames({"demo", "sessions", "two_threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace layerserve

BENCHMARK_MAIN();
