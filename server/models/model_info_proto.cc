#include "server/models/model_info_proto.h"

#include <cstdint>

#include "server/models/model_config.h"

namespace layerserve {
namespace {

v1::Activation ToProto(const ModelConfig& c) {
  switch (c.activation) {
    case HiddenActivation::kSilu:
      return c.gated_mlp ? v1::SWIGLU : v1::SILU;
    case HiddenActivation::kGeluTanh:
      return c.gated_mlp ? v1::GEGLU_TANH : v1::GELU_TANH;
    case HiddenActivation::kGelu:
      return c.gated_mlp ? v1::GEGLU : v1::GELU;
    case HiddenActivation::kRelu:
      return c.gated_mlp ? v1::REGLU : v1::RELU;
  }
  return v1::ACTIVATION_UNSPECIFIED;
}

v1::RopeScaling::Type ToProto(kernels::RopeScalingType type) {
  switch (type) {
    case kernels::RopeScalingType::kNone:
      return v1::RopeScaling::NONE;
    case kernels::RopeScalingType::kLinear:
      return v1::RopeScaling::LINEAR;
    case kernels::RopeScalingType::kDynamicNtk:
      return v1::RopeScaling::DYNAMIC_NTK;
    case kernels::RopeScalingType::kYarn:
      return v1::RopeScaling::YARN;
    case kernels::RopeScalingType::kLlama3:
      return v1::RopeScaling::LLAMA3;
  }
  return v1::RopeScaling::NONE;
}

}  // namespace

v1::DataType WeightDtype(kernels::WeightType type) {
  switch (type) {
    case kernels::WeightType::kFloat32:
      return v1::FLOAT32;
    case kernels::WeightType::kBfloat16:
      return v1::BFLOAT16;
    case kernels::WeightType::kInt8:
      return v1::INT8;
  }
  return v1::DATA_TYPE_UNSPECIFIED;
}

void DescribeModel(const Model& m, bool is_default, const std::string& reload_error,
                   v1::ModelInfo* info) {
  const ModelConfig& c = m.config;
  info->set_name(m.name);
  info->set_architecture(c.model_type);
  info->set_state(m.ready() ? v1::ModelInfo::READY : v1::ModelInfo::FAILED);
  info->set_error(m.error);
  info->set_is_default(is_default);
  info->set_version(m.version);
  info->set_reload_error(reload_error);
  if (!m.ready() && c.hidden_size == 0) return;  // Its config did not parse.
  info->set_num_layers(static_cast<int32_t>(c.num_layers));
  if (m.ready()) {
    info->set_span_layer_start(static_cast<int32_t>(m.span_start));
    info->set_span_num_layers(static_cast<int32_t>(m.span_end - m.span_start));
  }
  info->set_hidden_size(c.hidden_size);
  info->set_num_attention_heads(static_cast<int32_t>(c.num_heads));
  info->set_num_key_value_heads(static_cast<int32_t>(c.num_kv_heads));
  info->set_head_dim(c.head_dim);
  info->set_intermediate_size(c.intermediate_size);
  info->set_activation(ToProto(c));
  info->set_norm(c.rms_norm ? v1::RMS_NORM : v1::LAYER_NORM);
  info->set_norm_epsilon(c.norm_epsilon);
  info->set_max_position_embeddings(c.max_position_embeddings);
  info->set_weight_dtype(WeightDtype(m.weight_type));
  info->set_weight_group_size(static_cast<int32_t>(m.weight_group_size));
  if (c.has_rope) {
    v1::RopeConfig* rope = info->mutable_rope();
    rope->set_theta(c.rope_theta);
    rope->set_rotary_dim(c.rotary_dim);
    rope->set_style(v1::Rope::HALF);
    const kernels::RopeScaling& s = c.rope_scaling;
    v1::RopeScaling* scaling = rope->mutable_scaling();
    scaling->set_type(ToProto(s.type));
    if (s.type != kernels::RopeScalingType::kNone) {
      scaling->set_factor(s.factor);
      scaling->set_original_max_position_embeddings(s.original_max_position_embeddings);
      if (s.type == kernels::RopeScalingType::kYarn) {
        scaling->set_beta_fast(s.beta_fast);
        scaling->set_beta_slow(s.beta_slow);
        if (s.has_attention_factor) scaling->set_attention_factor(s.attention_factor);
      }
      if (s.type == kernels::RopeScalingType::kLlama3) {
        scaling->set_low_freq_factor(s.low_freq_factor);
        scaling->set_high_freq_factor(s.high_freq_factor);
      }
    }
  }
}

}  // namespace layerserve
