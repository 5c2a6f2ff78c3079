#include "server/models/demo_model.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/models/model_config.h"
#include "server/models/model_loader.h"

namespace layerserve {
namespace {

// Weights of the demo model: uniform with standard deviation 0.02 (Hugging Face's
// initializer_range), from a fixed seed. mt19937's output is the same on every
// platform; the float conversion here is written out so the weights are too.
std::vector<float> DemoValues(std::mt19937& rng, int64_t n) {
  const float half_width = 0.02f * std::sqrt(3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = (static_cast<float>(rng() >> 8) * 0x1p-24f * 2 - 1) * half_width;
  return v;
}

ModelConfig DemoConfig() {
  ModelConfig c;
  c.model_type = "llama";
  c.family = BlockFamily::kLlama;
  c.hidden_size = 512;
  c.num_layers = 4;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.intermediate_size = 1408;
  c.activation = HiddenActivation::kSilu;
  c.norm_epsilon = 1e-6f;
  c.rope_theta = 10000;
  c.rotary_dim = 64;
  c.max_position_embeddings = 4096;
  c.attention_scale = 1.0f / 8;
  return c;
}

}  // namespace

std::unique_ptr<Model> MakeDemoModel(kernels::WeightFormat format, LayerSpan span) {
  auto model = std::make_unique<Model>();
  model->name = "demo";
  model->config = DemoConfig();
  model->block = ToBlockConfig(model->config);
  SetModelWeightFormat(format, *model);
  const ModelConfig& c = model->config;
  if (absl::Status status = SetModelSpan(span, *model); !status.ok()) {
    model->error = std::string(status.message());
  }
  const int64_t d = c.hidden_size, f = c.intermediate_size;
  const int64_t qkv_out = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim;
  std::mt19937 rng(20261129);
  for (int64_t i = 0; i < c.num_layers && model->ready(); ++i) {
    const bool served = i >= model->span_start && i < model->span_end;
    kernels::BlockWeights w;
    w.attn_norm_weight.assign(d, 1.0f);
    w.mlp_norm_weight.assign(d, 1.0f);
    // Layers outside the span still draw their values, so each layer's weights
    // are the same whichever span a replica serves.
    auto linear = [&](int64_t out,
                      int64_t in) -> std::unique_ptr<kernels::LinearWeights> {
      const std::vector<float> weight = DemoValues(rng, out * in);
      if (!served) return nullptr;
      return std::make_unique<kernels::LinearWeights>(weight.data(), out, in, false,
                                                      nullptr, format);
    };
    w.qkv = linear(qkv_out, d);
    w.output = linear(d, c.num_heads * c.head_dim);
    w.up = linear(2 * f, d);
    w.down = linear(d, f);
    if (served) model->blocks.push_back(std::move(w));
  }
  return model;
}

}  // namespace layerserve
