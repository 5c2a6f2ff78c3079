// config.json of every served model_type into ModelConfig, and the errors.
#include "server/models/model_config.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace layerserve {
namespace {

using ::layerserve::testing::StatusIs;
using ::testing::HasSubstr;

ModelConfig Parse(const std::string& text) {
  absl::StatusOr<ModelConfig> config = ParseModelConfig(text, "m/config.json");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : ModelConfig{};
}

TEST(ModelConfigTest, Llama) {
  const ModelConfig c = Parse(R"({"model_type":"llama","hidden_size":64,
      "num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":2,
      "intermediate_size":176,"rms_norm_eps":1e-5,"rope_theta":500000.0,
      "max_position_embeddings":4096,"hidden_act":"silu",
      "rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,
                      "high_freq_factor":4.0,"original_max_position_embeddings":8192}})");
  EXPECT_EQ(c.family, BlockFamily::kLlama);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.rotary_dim, 8);
  EXPECT_TRUE(c.rms_norm);
  EXPECT_TRUE(c.gated_mlp);
  EXPECT_EQ(c.activation, HiddenActivation::kSilu);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FLOAT_EQ(c.norm_epsilon, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, kernels::RopeScalingType::kLlama3);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_FLOAT_EQ(c.attention_scale, 1 / std::sqrt(8.0f));
}

TEST(ModelConfigTest, Qwen2HasQkvBiasOnly) {
  const ModelConfig c = Parse(R"({"model_type":"qwen2","hidden_size":32,
      "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,
      "intermediate_size":64})");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.output_bias);
}

TEST(ModelConfigTest, Qwen3HasQkNormAndFreeHeadDim) {
  const ModelConfig c = Parse(R"({"model_type":"qwen3","hidden_size":32,
      "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,
      "head_dim":16,"intermediate_size":64})");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_FLOAT_EQ(c.attention_scale, 0.25f);
}

TEST(ModelConfigTest, GemmaOffsetsNormsAndUsesGeluTanh) {
  const ModelConfig c = Parse(R"({"model_type":"gemma","hidden_size":48,
      "num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,
      "head_dim":32,"intermediate_size":96,"hidden_act":"gelu"})");
  EXPECT_TRUE(c.norm_weight_offset);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.activation, HiddenActivation::kGeluTanh);
}

TEST(ModelConfigTest, GemmaTakesHiddenActivationOverHiddenAct) {
  const ModelConfig c = Parse(R"({"model_type":"gemma","hidden_size":48,
      "num_hidden_layers":1,"num_attention_heads":2,"head_dim":32,
      "intermediate_size":96,"hidden_act":"gelu_pytorch_tanh","hidden_activation":"gelu"})");
  EXPECT_EQ(c.activation, HiddenActivation::kGelu);
}

TEST(ModelConfigTest, Qwen3AttentionBiasCoversOutputProjection) {
  const ModelConfig c = Parse(R"({"model_type":"qwen3","hidden_size":32,
      "num_hidden_layers":1,"num_attention_heads":4,"head_dim":8,
      "intermediate_size":64,"attention_bias":true})");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.output_bias);
}

TEST(ModelConfigTest, SlidingWindow) {
  EXPECT_EQ(Parse(R"({"model_type":"mistral","hidden_size":32,"num_hidden_layers":1,
      "num_attention_heads":4,"intermediate_size":64,"sliding_window":4096})")
                .sliding_window,
            4096);
  EXPECT_EQ(Parse(R"({"model_type":"mistral","hidden_size":32,"num_hidden_layers":1,
      "num_attention_heads":4,"intermediate_size":64,"sliding_window":null})")
                .sliding_window,
            0);
  // Qwen2 configs carry a sliding_window they do not use unless asked to.
  EXPECT_EQ(Parse(R"({"model_type":"qwen2","hidden_size":32,"num_hidden_layers":1,
      "num_attention_heads":4,"intermediate_size":64,"sliding_window":4096,
      "use_sliding_window":false})")
                .sliding_window,
            0);
}

TEST(ModelConfigTest, Gpt2NamesAndDefaults) {
  const ModelConfig c = Parse(R"({"model_type":"gpt2","n_embd":48,"n_layer":2,
      "n_head":4,"n_positions":128,"layer_norm_epsilon":1e-5})");
  EXPECT_EQ(c.family, BlockFamily::kGpt2);
  EXPECT_EQ(c.intermediate_size, 192);
  EXPECT_EQ(c.activation, HiddenActivation::kGeluTanh);
  EXPECT_FALSE(c.has_rope);
  EXPECT_FALSE(c.rms_norm);
  EXPECT_FALSE(c.gated_mlp);
  EXPECT_TRUE(c.qkv_bias && c.output_bias && c.mlp_bias);
  EXPECT_EQ(c.max_position_embeddings, 128);
}

TEST(ModelConfigTest, GptNeoxPartialRotaryAndParallelResidual) {
  const ModelConfig c = Parse(R"({"model_type":"gpt_neox","hidden_size":64,
      "num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":256,
      "rotary_pct":0.25,"rotary_emb_base":10000,"layer_norm_eps":1e-5,
      "use_parallel_residual":true,"hidden_act":"gelu"})");
  EXPECT_EQ(c.family, BlockFamily::kGptNeox);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rotary_dim, 4);
  EXPECT_TRUE(c.parallel_residual);
  EXPECT_EQ(c.activation, HiddenActivation::kGelu);
  // Without hidden_act, GPTNeoXConfig's default is the erf GELU; rotary_pct is a
  // Python double: int(20 * 0.7) = 14, where float32 would give 13.
  const ModelConfig d = Parse(R"({"model_type":"gpt_neox","hidden_size":80,
      "num_hidden_layers":1,"num_attention_heads":4,"intermediate_size":64,
      "rotary_pct":0.7})");
  EXPECT_EQ(d.activation, HiddenActivation::kGelu);
  EXPECT_EQ(d.rotary_dim, 14);
}

TEST(ModelConfigTest, Gpt2WithoutAttentionScaling) {
  EXPECT_FLOAT_EQ(Parse(R"({"model_type":"gpt2","n_embd":48,"n_layer":1,"n_head":4,
      "scale_attn_weights":false})")
                      .attention_scale,
                  1.0f);
  EXPECT_THAT(ParseModelConfig(R"({"model_type":"gpt2","n_embd":48,"n_layer":1,
      "n_head":4,"scale_attn_by_inverse_layer_idx":true})",
                               "c"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("scale_attn_by_inverse_layer_idx: true is not served")));
}

TEST(ModelConfigTest, RopeScalingTypes) {
  const ModelConfig yarn = Parse(R"({"model_type":"qwen2","hidden_size":32,
      "num_hidden_layers":1,"num_attention_heads":4,"intermediate_size":64,
      "max_position_embeddings":4096,
      "rope_scaling":{"type":"yarn","factor":4.0,"original_max_position_embeddings":1024}})");
  EXPECT_EQ(yarn.rope_scaling.type, kernels::RopeScalingType::kYarn);
  EXPECT_FLOAT_EQ(yarn.rope_scaling.beta_fast, 32);
  EXPECT_FALSE(yarn.rope_scaling.has_attention_factor);
  const ModelConfig linear = Parse(R"({"model_type":"llama","hidden_size":32,
      "num_hidden_layers":1,"num_attention_heads":4,"intermediate_size":64,
      "max_position_embeddings":2048,"rope_scaling":{"type":"linear","factor":2.0}})");
  EXPECT_EQ(linear.rope_scaling.type, kernels::RopeScalingType::kLinear);
  EXPECT_EQ(linear.rope_scaling.original_max_position_embeddings, 2048);
}

TEST(ModelConfigTest, Errors) {
  EXPECT_THAT(
      ParseModelConfig("[1]", "m/config.json"),
      StatusIs(absl::StatusCode::kInvalidArgument, "m/config.json: not a JSON object"));
  EXPECT_THAT(ParseModelConfig(R"({"model_type":"bert"})", "m/config.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("m/config.json: model_type: \"bert\" is not served")));
  EXPECT_THAT(ParseModelConfig(R"({"model_type":"llama"})", "m/config.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "m/config.json: hidden_size: required"));
  EXPECT_THAT(ParseModelConfig(R"({"model_type":"llama","hidden_size":-4})", "c"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "c: hidden_size: must be a positive integer below 2^31, got -4"));
  // Found by fuzz/model_config_fuzz.cc (reproducers in fuzz/regressions/).
  EXPECT_THAT(
      ParseModelConfig(R"({"model_type":"gpt2","n_embd":4611686018427387904})", "c"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("c: n_embd: must be a positive integer below 2^31")));
  EXPECT_THAT(ParseModelConfig(R"({"model_type":"llama","hidden_size":32,
      "num_hidden_layers":1,"num_attention_heads":4,"intermediate_size":64,
      "rope_theta":1e103})",
                               "c"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "c: rope_theta: 1e+103 is beyond the float32 range"));
  EXPECT_THAT(
      ParseModelConfig(R"({"model_type":"llama","hidden_size":30,
      "num_hidden_layers":1,"num_attention_heads":4,"intermediate_size":64})",
                       "c"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("num_attention_heads: 4 does not divide hidden_size 30")));
  EXPECT_THAT(ParseModelConfig(R"({"model_type":"llama","hidden_size":32,
      "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":3,
      "intermediate_size":64})",
                               "c"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("num_key_value_heads: 3 does not divide")));
  EXPECT_THAT(ParseModelConfig(R"({"model_type":"llama","hidden_size":32,
      "num_hidden_layers":1,"num_attention_heads":4,"intermediate_size":64,
      "rope_scaling":{"type":"longrope","factor":2}})",
                               "c"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rope_scaling.rope_type: \"longrope\" is not served")));
  EXPECT_THAT(ParseModelConfig(R"({"model_type":"llama","hidden_size":32,
      "num_hidden_layers":1,"num_attention_heads":4,"intermediate_size":64,
      "rope_scaling":{"type":"linear","factor":0.5}})",
                               "c"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rope_scaling.factor: 0.5 must be >= 1")));
  EXPECT_THAT(ParseModelConfig(R"({"model_type":"llama","hidden_size":32,
      "num_hidden_layers":1,"num_attention_heads":4,"intermediate_size":64,
      "hidden_act":"mish"})",
                               "c"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hidden_act: activation \"mish\" is not served")));
}

}  // namespace
}  // namespace layerserve
