#include "server/models/model_repository.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/models/checkpoint.h"
#include "server/models/model_loader.h"

namespace layerserve {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

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

// Sets model's span from `span` and its config: FAILED_PRECONDITION when the
// model has fewer layers than the span's end.
absl::Status SetSpan(const LayerSpan& span, Model& model) {
  const int64_t layers = model.config.num_layers;
  model.span_start = span.start;
  model.span_end = span.end < 0 ? layers : span.end;
  if (model.span_end > layers) {
    return absl::FailedPreconditionError(
        absl::StrCat("--layers=", span.ToString(), " ends at layer ", model.span_end,
                     " but the model has ", layers, " layers"));
  }
  return absl::OkStatus();
}

}  // namespace

ModelRepository::ModelRepository(std::vector<std::unique_ptr<Model>> models)
    : models_(std::move(models)) {
  std::sort(models_.begin(), models_.end(),
            [](const auto& a, const auto& b) { return a->name < b->name; });
  for (const auto& model : models_) {
    if (model->ready()) {
      default_ = model.get();
      break;
    }
  }
}

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

namespace {

void SetWeightFormat(const kernels::WeightFormat& format, Model& model) {
  model.weight_type = format.type;
  model.weight_group_size =
      format.type == kernels::WeightType::kInt8 ? format.group_size : 0;
}

}  // namespace

std::unique_ptr<Model> ModelRepository::LoadModel(const std::string& name,
                                                  const std::string& dir,
                                                  kernels::WeightFormat format,
                                                  LayerSpan span) {
  auto model = std::make_unique<Model>();
  model->name = name;
  SetWeightFormat(format, *model);
  absl::Status status = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::string text, ReadFile(dir + "/config.json"));
    ASSIGN_OR_RETURN(model->config, ParseModelConfig(text, dir + "/config.json"));
    model->block = ToBlockConfig(model->config);
    RETURN_IF_ERROR(SetSpan(span, *model));
    ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::Open(dir));
    ASSIGN_OR_RETURN(model->blocks, LoadBlocks(model->config, checkpoint, format,
                                               model->span_start, model->span_end));
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    model->error = std::string(status.message());
    model->blocks.clear();
  }
  return model;
}

absl::StatusOr<std::unique_ptr<ModelRepository>> ModelRepository::Load(
    const std::string& dir, kernels::WeightFormat format, LayerSpan span) {
  std::error_code error;
  fs::directory_iterator it(dir, error);
  if (error) {
    return absl::NotFoundError(
        absl::StrCat("--model-repository ", dir, ": ", error.message()));
  }
  std::vector<std::unique_ptr<Model>> models;
  for (const fs::directory_entry& entry : it) {
    if (!entry.is_directory() || !fs::exists(entry.path() / "config.json")) continue;
    models.push_back(
        LoadModel(entry.path().filename().string(), entry.path().string(), format, span));
  }
  return std::unique_ptr<ModelRepository>(new ModelRepository(std::move(models)));
}

std::unique_ptr<ModelRepository> ModelRepository::Demo(kernels::WeightFormat format,
                                                       LayerSpan span) {
  auto model = std::make_unique<Model>();
  model->name = "demo";
  model->config = DemoConfig();
  model->block = ToBlockConfig(model->config);
  SetWeightFormat(format, *model);
  const ModelConfig& c = model->config;
  if (absl::Status status = SetSpan(span, *model); !status.ok()) {
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
  std::vector<std::unique_ptr<Model>> models;
  models.push_back(std::move(model));
  return std::unique_ptr<ModelRepository>(new ModelRepository(std::move(models)));
}

absl::StatusOr<const Model*> ModelRepository::Find(absl::string_view name) const {
  if (name.empty()) {
    if (default_ == nullptr) {
      return absl::NotFoundError("model: no model is ready to serve (see ListModels)");
    }
    return default_;
  }
  for (const auto& model : models_) {
    if (model->name != name) continue;
    if (!model->ready()) {
      return absl::FailedPreconditionError(
          absl::StrCat("model: \"", name, "\" failed to load: ", model->error));
    }
    return model.get();
  }
  return absl::NotFoundError(
      absl::StrCat("model: no model \"", name, "\" (see ListModels)"));
}

void ModelRepository::Describe(const Model& m, v1::ModelInfo* info) const {
  const ModelConfig& c = m.config;
  info->set_name(m.name);
  info->set_architecture(c.model_type);
  info->set_state(m.ready() ? v1::ModelInfo::READY : v1::ModelInfo::FAILED);
  info->set_error(m.error);
  info->set_is_default(&m == default_);
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
