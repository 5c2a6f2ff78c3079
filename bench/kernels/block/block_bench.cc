// One Transformer block (kernels/block/block.h) per call at T tokens, for three
// Llama-shaped configs (768; 4096 with d_ff 11008; Llama-3-8B's 4096 with d_ff
// 14336), with float32, bfloat16 and int8 weights, on one thread or two (the second an
// idle worker of the server's own Batcher helping through kernels::ParallelFor, as
// when one request is alone on a 2-worker server); next to a bare oneDNN matmul
// with the MLP's largest shape (M = T, K = D, N = 2F, weights prepacked) on as
// many OpenMP threads, timed by the same binary in the same run.
//
// Time is per layer (one call). Counter `GFLOPs` = the block's matmul and attention flops
// (2 per multiply-add; attention counted in full, causal masking not subtracted)
// per second. bench/torch_block_bench.py is the PyTorch eager peer. Commands and
// numbers: docs/perf/2026-11-30-block-forward.md.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <vector>

#include "bench/kernels/llama_shapes.h"
#include "kernels/attention/attention.h"
#include "kernels/block/block.h"
#include "kernels/rope/rope.h"
#include "server/batching/batcher.h"

namespace layerserve::kernels {
namespace {

using bench::LlamaConfig;
using bench::LlamaShape;
using bench::RandomValues;

const LlamaShape kShapes[] = {
    {768, 12, 12, 3072}, {4096, 32, 8, 11008}, {4096, 32, 8, 14336}};

// A helping worker computes on its own thread only, as the server's do.
struct SingleOpenMpThread {
  SingleOpenMpThread() { omp_set_num_threads(1); }
};

// Weights are built once per (shape, dtype): the 4096 config is ~0.7 GB in float32.
const BlockWeights& Weights(int shape, WeightType type) {
  static std::unique_ptr<BlockWeights> cache[3][3];
  std::unique_ptr<BlockWeights>& slot = cache[shape][static_cast<int>(type)];
  if (slot) return *slot;
  const BlockConfig c = LlamaConfig(kShapes[shape]);
  std::mt19937 rng(shape);
  slot = std::make_unique<BlockWeights>();
  const int64_t d = c.hidden_size, f = c.intermediate_size;
  const int64_t qkv = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim;
  slot->attn_norm_weight.assign(d, 1.0f);
  slot->mlp_norm_weight.assign(d, 1.0f);
  auto linear = [&](int64_t out, int64_t in) {
    const std::vector<float> w = RandomValues(out * in, rng);
    return std::make_unique<LinearWeights>(w.data(), out, in, false, nullptr, type);
  };
  slot->qkv = linear(qkv, d);
  slot->output = linear(d, c.num_heads * c.head_dim);
  slot->up = linear(2 * f, d);
  slot->down = linear(d, f);
  return *slot;
}

double BlockFlops(const BlockConfig& c, int64_t t) {
  const double d = c.hidden_size, dh = c.head_dim, f = c.intermediate_size;
  const double linear = d * (c.num_heads + 2 * c.num_kv_heads) * dh +
                        c.num_heads * dh * d + d * 2 * f + f * d;
  return 2 * t * linear + 4.0 * c.num_heads * dh * t * t;
}

void BM_Block(benchmark::State& state) {
  omp_set_num_threads(1);
  const int shape = static_cast<int>(state.range(0));
  const int64_t t = state.range(1);
  // 0 float32, 1 bfloat16, 2 int8 (the default group size).
  const WeightType type = static_cast<WeightType>(state.range(2));
  const BlockConfig c = LlamaConfig(kShapes[shape]);
  const BlockWeights& w = Weights(shape, type);
  std::mt19937 rng(7);
  const std::vector<float> input = RandomValues(t * c.hidden_size, rng);
  std::vector<int64_t> positions(t);
  for (int64_t i = 0; i < t; ++i) positions[i] = i;
  const RopeFrequencies freq = ComputeRopeFrequencies(c.rope_theta, c.rotary_dim, {}, t);
  std::vector<float> cos(t * c.rotary_dim), sin(t * c.rotary_dim);
  ComputeRopeTables(freq, RopeStyle::kHalf, positions.data(), t, cos.data(), sin.data());
  BlockBatch batch;
  batch.rows = t;
  batch.starts = {0};
  batch.tokens = {t};
  batch.lengths = {t};
  batch.cos = cos.data();
  batch.sin = sin.data();
  BlockKernels kernels;
  // Idle: its one worker helps with every loop this thread shares.
  std::unique_ptr<Batcher<SingleOpenMpThread>> helper;
  if (state.range(3) == 2) {
    helper = std::make_unique<Batcher<SingleOpenMpThread>>(
        BatchOptions{}, 1, [](SingleOpenMpThread&, Batch&) {});
    kernels.parallel = helper.get();
  }
  std::vector<float> x;
  for (auto _ : state) {
    state.PauseTiming();
    x = input;  // Blocks run in place.
    state.ResumeTiming();
    BlockForward(c, w, batch, kernels, x.data(), nullptr);
    benchmark::DoNotOptimize(x.data());
  }
  state.counters["GFLOPs"] = benchmark::Counter(
      BlockFlops(c, t) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// A bare oneDNN matmul, weights prepacked in the layout it picks: the peak the
// block's linear layers can reach at this M.
void BM_Matmul(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(3)));
  using dnnl::memory;
  const LlamaShape& s = kShapes[state.range(0)];
  const int64_t m = state.range(1), k = s.hidden, n = 2 * s.ffn;
  const auto dt = state.range(2) ? memory::data_type::bf16 : memory::data_type::f32;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(
          memory::desc({m, k}, dt, memory::format_tag::ab),
          memory::desc({k, n}, dt, memory::format_tag::any),
          memory::desc({m, n}, memory::data_type::f32, memory::format_tag::ab)),
      engine);
  memory src(pd.src_desc(), engine), weights(pd.weights_desc(), engine),
      dst(pd.dst_desc(), engine);
  std::memset(src.get_data_handle(), 0, pd.src_desc().get_size());
  std::memset(weights.get_data_handle(), 0, pd.weights_desc().get_size());
  dnnl::matmul matmul(pd);
  for (auto _ : state) {
    matmul.execute(
        stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    stream.wait();
  }
  state.counters["GFLOPs"] = benchmark::Counter(
      2.0 * m * k * n * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// The 8B-shaped layer's fused gate|up projection (M = T, 4096 -> 2 x 14336) and its
// down projection (14336 -> 4096), bfloat16 weights, through Linear on one thread:
// what the block runs for long sequences, the AMX tiles where the CPU has them
// (kernels/linear/linear_internal.h, AmxRunsLinear). BM_Matmul (shape 2, bf16, 1 thread)
// is the bare oneDNN peer. Counter GFLOPs as BM_Block's.
void RunProjection(benchmark::State& state, const LinearWeights& w) {
  omp_set_num_threads(1);
  const int64_t rows = state.range(0);
  std::mt19937 rng(3);
  const std::vector<float> x = RandomValues(rows * w.in(), rng);
  std::vector<float> y(rows * w.out());
  LinearContext context;
  for (auto _ : state) {
    Linear(context, w, x.data(), rows, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(2.0 * rows * w.in() * w.out() * state.iterations() / 1e9,
                         benchmark::Counter::kIsRate);
}
void BM_UpProjection(benchmark::State& state) {
  RunProjection(state, *Weights(2, WeightType::kBfloat16).up);
}
void BM_DownProjection(benchmark::State& state) {
  RunProjection(state, *Weights(2, WeightType::kBfloat16).down);
}
void ProjectionArgs(benchmark::internal::Benchmark* b) {
  b->ArgName("T")
      ->Arg(16)
      ->Arg(128)
      ->Arg(512)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}
BENCHMARK(BM_UpProjection)->Apply(ProjectionArgs);
BENCHMARK(BM_DownProjection)->Apply(ProjectionArgs);

// The 8B-shaped layer's causal self-attention over T tokens (32 query heads on 8 KV
// heads of 128) on one thread, as the block runs it: what Attention's query blocks
// and their key limits cost at long prompts. Counter GFLOPs: scores and mix counted
// in full (4 T^2 Dh per head), as BM_Block counts them.
void BM_Attention(benchmark::State& state) {
  omp_set_num_threads(1);
  const int64_t tokens = state.range(0), heads = 32, kv_heads = 8, dh = 128;
  const int64_t q_width = heads * dh, kv_width = kv_heads * dh;
  std::mt19937 rng(5);
  const std::vector<float> q = RandomValues(tokens * q_width, rng);
  const std::vector<float> kv = RandomValues(tokens * 2 * kv_width, rng);
  std::vector<float> out(tokens * q_width);
  std::vector<int64_t> limits(tokens);
  for (int64_t t = 0; t < tokens; ++t) limits[t] = t + 1;
  AttentionArgs a;
  a.q_heads = heads;
  a.kv_heads = kv_heads;
  a.head_dim = dh;
  a.tokens = a.keys = tokens;
  a.q = q.data();
  a.q_stride = q_width;
  a.k = kv.data();
  a.v = kv.data() + kv_width;
  a.kv_stride = 2 * kv_width;
  a.out = out.data();
  a.out_stride = q_width;
  a.scale = 1.0f / std::sqrt(static_cast<float>(dh));
  a.key_limits = limits.data();
  for (auto _ : state) {
    AttentionByKvHead(a, nullptr);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(4.0 * heads * tokens * tokens * dh * state.iterations() / 1e9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Attention)
    ->ArgName("T")
    ->Arg(128)
    ->Arg(512)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Args: shape index (0: 768, 1: 4096, 2: Llama-3-8B), T, bfloat16 weights, threads.
void Args(benchmark::internal::Benchmark* b) {
  for (int shape : {0, 1, 2})
    for (int64_t t : {1, 16, 128, 512})
      for (int bf16 : {0, 1})
        for (int threads : {1, 2}) b->Args({shape, t, bf16, threads});
  b->ArgNames({"shape", "T", "bf16", "threads"})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

// BM_Block's: the same, weights 0 float32, 1 bfloat16, 2 int8.
void BlockArgs(benchmark::internal::Benchmark* b) {
  for (int shape : {0, 1, 2})
    for (int64_t t : {1, 16, 128, 512})
      for (int weights : {0, 1, 2})
        for (int threads : {1, 2}) b->Args({shape, t, weights, threads});
  b->ArgNames({"shape", "T", "weights", "threads"})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

BENCHMARK(BM_Block)->Apply(BlockArgs);
BENCHMARK(BM_Matmul)->Apply(Args);

}  // namespace
}  // namespace layerserve::kernels

BENCHMARK_MAIN();
