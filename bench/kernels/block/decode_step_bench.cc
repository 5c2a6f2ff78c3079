// One decode step of S KV-cache sessions as the server runs it: one batch of S
// one-token sequences through Llama blocks, each session attending over its own
// cache of 256 earlier tokens (bfloat16). Three models, bfloat16 weights:
//   llama768 (4 blocks, 75 MB: read from memory each step, as in serving);
//   demo, the built-in demo model's shapes (4 blocks, hidden 512, 8 query heads
//     sharing 2 KV heads, 23 MB);
//   8b, one Llama-3-8B-shaped block (hidden 4096, 32 query heads on 8 KV heads,
//     d_ff 14336, 436 MB): BM_DecodeStep8B, BM_DecodeStep8BParts, the same step
//     with a timer around each part (counters in ms per step), and its floor
//     BM_ReadWeights8B, one read of the block's weights.
// On one thread, and on two: the calling thread plus an idle worker of the server's
// own Batcher helping through kernels::ParallelFor (server/batching/batcher.h), the
// path a decode batch takes when the other worker has nothing queued.
//
// Counter `tok/s` = decode tokens per second. Commands and numbers:
// docs/perf/2026-11-30-decode-batch-sharing.md,
// docs/perf/2026-12-01-decode-16-sessions-8b.md.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/kernels/llama_shapes.h"
#include "kernels/activation/activation.h"
#include "kernels/attention/kv_cache_attention.h"
#include "kernels/block/block.h"
#include "kernels/linear/linear_internal.h"
#include "kernels/norm/norm.h"
#include "kernels/rope/rope.h"
#include "server/batching/batcher.h"

namespace layerserve {
namespace {

using kernels::BlockConfig;
using kernels::BlockWeights;

constexpr int64_t kCached = 256;

enum Model { kLlama768, kDemo, kLlama8B };

BlockConfig Config(Model model) {
  switch (model) {
    case kDemo:
      return bench::LlamaConfig({512, 8, 2, 1408});
    case kLlama8B:
      return bench::LlamaConfig({4096, 32, 8, 14336});
    default:
      return bench::LlamaConfig({768, 12, 12, 3072});
  }
}

// One block of the 8B shape is 436 MB: enough to come from memory every step.
int64_t NumLayers(Model model) { return model == kLlama8B ? 1 : 4; }

// Weights of the benchmarks: bfloat16, or int8 with a group size (the 8B block only).
struct Weights {
  kernels::WeightType type = kernels::WeightType::kBfloat16;
  int64_t group = 0;
  bool operator<(const Weights& o) const {
    return std::tie(type, group) < std::tie(o.type, o.group);
  }
};

std::vector<BlockWeights> MakeLayers(Model model, Weights weights) {
  const BlockConfig c = Config(model);
  std::mt19937 rng(1);
  std::vector<BlockWeights> out(NumLayers(model));
  const int64_t d = c.hidden_size, f = c.intermediate_size;
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  auto linear = [&](int64_t o, int64_t i) {
    const std::vector<float> w = bench::RandomValues(o * i, rng);
    return std::make_unique<kernels::LinearWeights>(
        w.data(), o, i, false, nullptr,
        kernels::WeightFormat(weights.type, weights.group));
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

const std::vector<BlockWeights>& Layers(Model model, Weights weights = {}) {
  // Built on first use: a filter that skips a model never pays for its weights. Kept
  // (the 8B block's are 436 MB in bfloat16, ~250 MB in int8), so that
  // --benchmark_enable_random_interleaving can alternate weight formats fairly.
  static std::map<std::pair<Model, Weights>, std::vector<BlockWeights>> layers;
  const auto key = std::make_pair(model, weights);
  if (layers.count(key) == 0) layers.emplace(key, MakeLayers(model, weights));
  return layers.at(key);
}

struct NoContext {};

// One decode step's inputs: S sessions with kCached tokens each, one new token each.
struct Step {
  Step(Model model, int64_t sessions) : c(Config(model)), layers(NumLayers(model)) {
    std::mt19937 rng(2);
    const int64_t width = c.num_kv_heads * c.head_dim;
    batch.rows = sessions;
    for (int64_t s = 0; s < sessions; ++s) {
      caches.push_back(std::make_unique<kernels::KvCache>(
          layers, c.num_kv_heads, c.head_dim, kernels::KvCacheType::kBfloat16));
      const std::vector<float> kv = bench::RandomValues(kCached * width, rng);
      for (int64_t l = 0; l < layers; ++l) {
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
    cos.resize(sessions * c.rotary_dim);
    sin.resize(sessions * c.rotary_dim);
    kernels::ComputeRopeTables(freq, kernels::RopeStyle::kHalf, positions.data(),
                               sessions, cos.data(), sin.data());
    batch.cos = cos.data();
    batch.sin = sin.data();
    input = bench::RandomValues(sessions * c.hidden_size, rng);
  }

  const BlockConfig c;
  const int64_t layers;
  std::vector<std::unique_ptr<kernels::KvCache>> caches;
  kernels::BlockBatch batch;
  std::vector<float> cos, sin, input;
};

void DecodeStep(benchmark::State& state, Model model, int64_t sessions, bool two_threads,
                Weights weights = {}) {
  omp_set_num_threads(1);
  const std::vector<BlockWeights>& layers = Layers(model, weights);
  Step step(model, sessions);
  // One worker, idle: it helps with every loop this thread shares.
  Batcher<NoContext> helper(BatchOptions{}, 1, [](NoContext&, Batch&) {});
  kernels::BlockKernels k;
  k.parallel = two_threads ? &helper : nullptr;
  std::vector<float> x;
  for (auto _ : state) {
    x = step.input;
    for (int64_t l = 0; l < step.layers; ++l) {
      step.batch.cache_layer = l;
      kernels::BlockForward(step.c, layers[l], step.batch, k, x.data(), nullptr);
    }
    benchmark::DoNotOptimize(x.data());
  }
  state.counters["tok/s"] = benchmark::Counter(
      static_cast<double>(sessions * state.iterations()), benchmark::Counter::kIsRate);
}

void BM_DecodeStep(benchmark::State& state) {
  DecodeStep(state, state.range(0) != 0 ? kDemo : kLlama768, state.range(1),
             state.range(2) != 0);
}

BENCHMARK(BM_DecodeStep)
    ->ArgsProduct({{0, 1}, {1, 8, 32}, {0, 1}})
    ->ArgNames({"demo", "sessions", "two_threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_DecodeStep8B(benchmark::State& state) {
  DecodeStep(state, kLlama8B, state.range(0), state.range(1) != 0);
}

BENCHMARK(BM_DecodeStep8B)
    ->ArgsProduct({{1, 4, 16}, {0, 1}})
    ->ArgNames({"sessions", "two_threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The same step with int8 weights (docs/perf/2026-12-02-int8-weights.md): group 0 is
// one scale per output.
void BM_DecodeStep8BInt8(benchmark::State& state) {
  DecodeStep(state, kLlama8B, state.range(0), state.range(1) != 0,
             {kernels::WeightType::kInt8, state.range(2)});
}

BENCHMARK(BM_DecodeStep8BInt8)
    ->ArgsProduct({{1, 4, 16}, {0, 1}, {32, 64, 128, 0}})
    ->ArgNames({"sessions", "two_threads", "group"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The floor of a decode step of the 8B block: its 436 MB of packed weights read once
// (summed as integers), by one thread or by two sharing chunks as LinearFewRows'
// threads do.
void BM_ReadWeights8B(benchmark::State& state) {
  const BlockWeights& w = Layers(kLlama8B)[0];
  Batcher<NoContext> helper(BatchOptions{}, 1, [](NoContext&, Batch&) {});
  kernels::ParallelFor* parallel = state.range(0) != 0 ? &helper : nullptr;
  struct Span {
    const uint64_t* data;
    int64_t words;
  };
  std::vector<Span> chunks;  // 1 MiB each.
  int64_t bytes = 0;
  for (const kernels::LinearWeights* l :
       {w.qkv.get(), w.output.get(), w.up.get(), w.down.get()}) {
    const kernels::internal::FewRowsWeights& few = kernels::internal::FewRowsLayoutOf(*l);
    const int64_t blocks = (few.out + kernels::internal::kFewRowsBlockOut - 1) /
                           kernels::internal::kFewRowsBlockOut;
    const int64_t words = blocks * few.n_block_stride * 2 / 8;
    const auto* data = static_cast<const uint64_t*>(few.data);
    for (int64_t i = 0; i < words; i += 1 << 17) {
      chunks.push_back({data + i, std::min<int64_t>(1 << 17, words - i)});
    }
    bytes += words * 8;
  }
  std::vector<uint64_t> sums(chunks.size());
  for (auto _ : state) {
    kernels::RunParallel(parallel, static_cast<int64_t>(chunks.size()), [&](int64_t c) {
      uint64_t lanes[8] = {};
      for (int64_t i = 0; i < chunks[c].words; i += 8) {
        for (int l = 0; l < 8; ++l) lanes[l] += chunks[c].data[i + l];
      }
      sums[c] = lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] +
                lanes[6] + lanes[7];
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

BENCHMARK(BM_ReadWeights8B)
    ->ArgName("two_threads")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The 8B step as BlockForward runs a batch of one-token sequences with caches
// (kernels/block/block.cc: Llama, so RMSNorm, RoPE, SwiGLU, sequential residuals),
// written out here with a timer around each part. Checked against BlockForward bit for
// bit before timing, so the parts are the real step's.
class TimedStep {
 public:
  enum Part { kQkv, kAttention, kOutput, kUp, kDown, kRest, kParts };

  TimedStep(const BlockConfig& c, const BlockWeights& w, kernels::ParallelFor* parallel)
      : c_(c), w_(w), parallel_(parallel) {}

  void Run(const kernels::BlockBatch& batch, float* x) {
    using Clock = std::chrono::steady_clock;
    auto last = Clock::now();
    auto lap = [&](Part part) {
      const auto now = Clock::now();
      seconds_[part] += std::chrono::duration<double>(now - last).count();
      last = now;
    };
    const int64_t rows = batch.rows, d = c_.hidden_size, dh = c_.head_dim;
    const int64_t q_width = c_.num_heads * dh, kv_width = c_.num_kv_heads * dh;
    const int64_t qkv_width = q_width + 2 * kv_width;
    const int64_t f = c_.intermediate_size;
    normed_.resize(rows * d);
    Norm(w_.attn_norm_weight, x, rows);
    qkv_.resize(rows * qkv_width);
    lap(kRest);
    Linear(*w_.qkv, normed_.data(), rows, qkv_.data());
    lap(kQkv);
    float* q = qkv_.data();
    float* key = q + q_width;
    kernels::RopeGeometry g;
    g.tokens = rows;
    g.head_dim = dh;
    g.rotary_dim = c_.rotary_dim;
    g.head_stride = dh;
    g.token_stride = qkv_width;
    g.heads = c_.num_heads;
    kernels::ApplyRope(q, q, g, kernels::RopeStyle::kHalf, batch.cos, batch.sin);
    g.heads = c_.num_kv_heads;
    kernels::ApplyRope(key, key, g, kernels::RopeStyle::kHalf, batch.cos, batch.sin);
    lap(kRest);
    attn_.resize(rows * q_width);
    limits_.resize(rows);
    for (int64_t b = 0; b < rows; ++b) {
      batch.caches[b]->Append(batch.cache_layer, key + b * qkv_width,
                              key + kv_width + b * qkv_width, qkv_width, 1);
      limits_[b] = batch.caches[b]->length() + 1;
    }
    kernels::RunParallel(parallel_, rows, [&](int64_t b) {
      kernels::AttentionArgs a;
      a.q_heads = c_.num_heads;
      a.kv_heads = c_.num_kv_heads;
      a.head_dim = dh;
      a.tokens = 1;
      a.keys = limits_[b];
      a.q = q + b * qkv_width;
      a.q_stride = qkv_width;
      a.out = attn_.data() + b * q_width;
      a.out_stride = q_width;
      a.scale = c_.attention_scale;
      a.key_limits = limits_.data() + b;
      thread_local kernels::CacheAttentionScratch scratch;
      kernels::AttentionOverCache(a, *batch.caches[b], batch.cache_layer, scratch);
    });
    projected_.resize(rows * d);
    lap(kAttention);
    Linear(*w_.output, attn_.data(), rows, projected_.data());
    lap(kOutput);
    for (int64_t i = 0; i < rows * d; ++i) x[i] += projected_[i];
    Norm(w_.mlp_norm_weight, x, rows);
    mlp_in_.resize(rows * 2 * f);
    lap(kRest);
    Linear(*w_.up, normed_.data(), rows, mlp_in_.data());
    lap(kUp);
    mlp_hidden_.resize(rows * f);
    kernels::GatedActivate(c_.activation, mlp_in_.data(), mlp_in_.data() + f, rows, f,
                           2 * f, mlp_hidden_.data());
    lap(kRest);
    Linear(*w_.down, mlp_hidden_.data(), rows, projected_.data());
    lap(kDown);
    for (int64_t i = 0; i < rows * d; ++i) x[i] += projected_[i];
    lap(kRest);
  }

  double seconds(Part part) const { return seconds_[part]; }
  void ResetTimes() {
    for (double& s : seconds_) s = 0;
  }

 private:
  void Norm(const std::vector<float>& weight, const float* x, int64_t rows) {
    kernels::NormParams p;
    p.epsilon = c_.norm_epsilon;
    p.weight = weight.data();
    kernels::RmsNorm(x, rows, c_.hidden_size, p, normed_.data());
  }
  void Linear(const kernels::LinearWeights& w, const float* x, int64_t rows, float* y) {
    kernels::LinearFewRows(linear_, w, x, rows, y, parallel_);
  }

  const BlockConfig& c_;
  const BlockWeights& w_;
  kernels::ParallelFor* const parallel_;
  kernels::LinearContext linear_;
  std::vector<float> normed_, qkv_, attn_, projected_, mlp_in_, mlp_hidden_;
  std::vector<int64_t> limits_;
  double seconds_[kParts] = {};
};

void BM_DecodeStep8BParts(benchmark::State& state) {
  omp_set_num_threads(1);
  const int64_t sessions = state.range(0);
  const std::vector<BlockWeights>& layers = Layers(kLlama8B);
  Step step(kLlama8B, sessions);
  Batcher<NoContext> helper(BatchOptions{}, 1, [](NoContext&, Batch&) {});
  kernels::ParallelFor* parallel = state.range(1) != 0 ? &helper : nullptr;
  TimedStep timed(step.c, layers[0], parallel);
  {
    kernels::BlockKernels k;
    k.parallel = parallel;
    std::vector<float> want = step.input, got = step.input;
    kernels::BlockForward(step.c, layers[0], step.batch, k, want.data(), nullptr);
    timed.Run(step.batch, got.data());
    if (want != got) return state.SkipWithError("the timed step differs from the block");
    timed.ResetTimes();
  }
  std::vector<float> x;
  for (auto _ : state) {
    x = step.input;
    timed.Run(step.batch, x.data());
    benchmark::DoNotOptimize(x.data());
  }
  const char* names[] = {"qkv_ms", "attention_ms", "output_ms",
                         "up_ms",  "down_ms",      "rest_ms"};
  for (int part = 0; part < TimedStep::kParts; ++part) {
    state.counters[names[part]] =
        benchmark::Counter(1e3 * timed.seconds(static_cast<TimedStep::Part>(part)),
                           benchmark::Counter::kAvgIterations);
  }
  state.counters["tok/s"] = benchmark::Counter(
      static_cast<double>(sessions * state.iterations()), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_DecodeStep8BParts)
    ->ArgsProduct({{16}, {0, 1}})
    ->ArgNames({"sessions", "two_threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace layerserve

BENCHMARK_MAIN();
