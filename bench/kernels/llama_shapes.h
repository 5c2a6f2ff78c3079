// Llama-shaped block configurations and random values for the block benchmarks
// (block_bench, decode_step_bench).
#ifndef LAYERSERVE_BENCH_LLAMA_SHAPES_H_
#define LAYERSERVE_BENCH_LLAMA_SHAPES_H_

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/block/block.h"

namespace layerserve::bench {

struct LlamaShape {
  int64_t hidden, heads, kv_heads, ffn;
};

// RMSNorm, SwiGLU, full rotary: what the server builds for a Llama config.json.
inline kernels::BlockConfig LlamaConfig(const LlamaShape& s) {
  kernels::BlockConfig c;
  c.hidden_size = s.hidden;
  c.num_heads = s.heads;
  c.num_kv_heads = s.kv_heads;
  c.head_dim = s.hidden / s.heads;
  c.intermediate_size = s.ffn;
  c.rotary_dim = c.head_dim;
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  return c;
}

// n values uniform in [-0.03, 0.03]: weights and activations of a sane scale.
inline std::vector<float> RandomValues(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-0.03f, 0.03f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace layerserve::bench

#endif  // LAYERSERVE_BENCH_LLAMA_SHAPES_H_
