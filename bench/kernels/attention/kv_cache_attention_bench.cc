// A decode step's attention over one layer's KV cache
// (kernels/attention/kv_cache_attention.h), one thread: AttentionOverCache reading the
// cache's blocks in place, against what the server did before it: gather the cache's rows
// (stored row-major then, so a memcpy or a bfloat16 conversion per row) into contiguous
// float32 and run Attention (oneDNN matmuls). 1 or 16 query tokens; heads of the demo
// model (8 query, 2 KV heads of 64), of the 768-hidden Llama configuration (12 and
// 12) and of Llama-3-8B (32 and 8 of 128); cached lengths 128 to 2048; float32 and
// bfloat16 caches. The byte rate counts the cache's keys and values read once.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "kernels/attention/kv_cache_attention.h"

namespace layerserve::kernels {
namespace {

struct Heads {
  int64_t q, kv, dim;
};
constexpr Heads kHeads[] = {{8, 2, 64}, {12, 12, 64}, {32, 8, 128}};

struct Step {
  Step(Heads heads, int64_t past, int64_t tokens, KvCacheType type)
      : heads(heads), tokens(tokens), cache(1, heads.kv, heads.dim, type) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    const int64_t width = heads.kv * heads.dim, rows = past + tokens;
    std::vector<float> fused(rows * 2 * width);
    for (float& x : fused) x = normal(rng);
    cache.Append(0, fused.data(), fused.data() + width, 2 * width, rows);
    // The same rows row-major, keys then values, as the old cache held them.
    const int64_t element = type == KvCacheType::kFloat32 ? 4 : 2;
    row_major.resize(2 * rows * width * element);
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t kv = 0; kv < 2; ++kv) {
        ConvertFromFloat32(type == KvCacheType::kFloat32 ? ElementType::kFloat32
                                                         : ElementType::kBfloat16,
                           fused.data() + t * 2 * width + kv * width, width,
                           row_major.data() + ((kv * rows + t) * width) * element);
      }
    }
    q.resize(tokens * heads.q * heads.dim);
    for (float& x : q) x = normal(rng);
    out.resize(q.size());
    for (int64_t t = 0; t < tokens; ++t) limits.push_back(past + t + 1);
  }
  AttentionArgs Args() {
    AttentionArgs a;
    a.q_heads = heads.q;
    a.kv_heads = heads.kv;
    a.head_dim = heads.dim;
    a.tokens = tokens;
    a.keys = limits.back();
    a.q = q.data();
    a.q_stride = heads.q * heads.dim;
    a.out = out.data();
    a.out_stride = heads.q * heads.dim;
    a.scale = 1.0f / std::sqrt(float(heads.dim));
    a.key_limits = limits.data();
    return a;
  }
  int64_t CacheBytes() const {
    return limits.back() * 2 * heads.kv * heads.dim *
           (cache.type() == KvCacheType::kFloat32 ? 4 : 2);
  }
  Heads heads;
  int64_t tokens;
  KvCache cache;
  std::vector<char> row_major;
  std::vector<float> q, out;
  std::vector<int64_t> limits;
};

KvCacheType Type(const benchmark::State& state) {
  return state.range(2) ? KvCacheType::kBfloat16 : KvCacheType::kFloat32;
}

void BM_OverCache(benchmark::State& state) {
  // Several sessions, used in turn, so that their caches do not all fit in the
  // caches of the CPU (32 llama768 sessions at 512 tokens hold 100 MB): as in a
  // server, where decode steps of many sessions and the weights stream through.
  std::vector<std::unique_ptr<Step>> steps;
  for (int64_t i = 0; i < state.range(4); ++i) {
    steps.push_back(std::make_unique<Step>(kHeads[state.range(0)], state.range(1),
                                           state.range(3), Type(state)));
  }
  CacheAttentionScratch scratch;
  size_t next = 0;
  for (auto _ : state) {
    Step& step = *steps[next++ % steps.size()];
    AttentionOverCache(step.Args(), step.cache, 0, scratch);
    benchmark::DoNotOptimize(step.out.data());
  }
  state.SetBytesProcessed(state.iterations() * steps[0]->CacheBytes());
}

void BM_GatherThenOneDnn(benchmark::State& state) {
  omp_set_num_threads(1);  // A server worker's oneDNN runs on one thread.
  // One session: the gathered copy is what made this path slow, not the caches.
  Step step(kHeads[state.range(0)], state.range(1), state.range(3), Type(state));
  AttentionContext context;
  const int64_t width = step.cache.width(), rows = step.limits.back();
  const bool bf16 = step.cache.type() == KvCacheType::kBfloat16;
  std::vector<float> k, v;
  AttentionArgs a = step.Args();
  for (auto _ : state) {
    // As the server did: buffers kept between calls, resized to the length, and
    // filled row by row.
    k.resize(rows * width);
    v.resize(rows * width);
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t kv = 0; kv < 2; ++kv) {
        float* dst = (kv == 0 ? k.data() : v.data()) + t * width;
        const char* src =
            step.row_major.data() + (kv * rows + t) * width * (bf16 ? 2 : 4);
        if (bf16) {
          ConvertToFloat32(ElementType::kBfloat16, src, width, dst);
        } else {
          std::memcpy(dst, src, width * sizeof(float));
        }
      }
    }
    a.k = k.data();
    a.v = v.data();
    a.kv_stride = width;
    Attention(context, a);
    benchmark::DoNotOptimize(step.out.data());
  }
  state.SetBytesProcessed(state.iterations() * step.CacheBytes());
}

// Args: heads (0: demo 8/2, 1: llama768 12/12, 2: 8b 32/8), cached tokens, bfloat16
// cache, query tokens, sessions used in turn (BM_OverCache only).
void Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t tokens : {1, 16})
    for (int64_t heads : {0, 1, 2})
      for (int64_t past : {128, 512, 2048})
        for (int64_t bf16 : {0, 1}) b->Args({heads, past, bf16, tokens, 1});
  b->ArgNames({"heads", "past", "bf16", "T", "sessions"})
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
}
void ManySessions(benchmark::internal::Benchmark* b) {
  for (int64_t heads : {0, 1, 2})
    for (int64_t bf16 : {0, 1}) b->Args({heads, 512, bf16, 1, 32});
  b->ArgNames({"heads", "past", "bf16", "T", "sessions"})
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
}
BENCHMARK(BM_OverCache)->Apply(Shapes)->Apply(ManySessions);
BENCHMARK(BM_GatherThenOneDnn)->Apply(Shapes);

}  // namespace
}  // namespace layerserve::kernels

BENCHMARK_MAIN();
