#include "server/models/model_repository.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

ModelRepository::ModelRepository(std::string dir, kernels::WeightFormat format,
                                 LayerSpan span, std::vector<Entry> entries)
    : dir_(std::move(dir)), format_(format), span_(span) {
  std::map<std::string, Entry> by_name;
  for (Entry& entry : entries) {
    const std::string name = entry.model->name;
    by_name[name] = std::move(entry);
  }
  state_ = MakeState(std::move(by_name));
}

std::shared_ptr<const ModelRepository::State> ModelRepository::MakeState(
    std::map<std::string, Entry> entries) {
  auto state = std::make_shared<State>();
  state->entries = std::move(entries);
  for (const auto& [name, entry] : state->entries) {
    if (entry.model->ready()) {
      state->default_model = entry.model;
      break;
    }
  }
  return state;
}

std::shared_ptr<const ModelRepository::State> ModelRepository::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
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
  ASSIGN_OR_RETURN(std::vector<FoundModel> found, ScanRepository(dir));
  std::vector<Entry> entries;
  for (FoundModel& model : found) {
    Entry entry;
    entry.model = LoadModel(model.name, model.dir, format, span);
    entry.stamp = std::move(model.stamp);
    entries.push_back(std::move(entry));
  }
  return std::unique_ptr<ModelRepository>(
      new ModelRepository(dir, format, span, std::move(entries)));
}

std::unique_ptr<ModelRepository> ModelRepository::Of(std::vector<ModelPtr> models) {
  std::vector<Entry> entries;
  for (ModelPtr& model : models) entries.push_back(Entry{std::move(model), {}, {}});
  return std::unique_ptr<ModelRepository>(new ModelRepository(
      "", kernels::WeightFormat(kernels::WeightType::kFloat32), {}, std::move(entries)));
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
  std::vector<Entry> entries;
  entries.push_back(Entry{std::move(model), {}, {}});
  return std::unique_ptr<ModelRepository>(
      new ModelRepository("", format, span, std::move(entries)));
}

absl::StatusOr<ModelRepository::ModelPtr> ModelRepository::Find(
    absl::string_view name) const {
  const std::shared_ptr<const State> now = state();
  if (name.empty()) {
    if (now->default_model == nullptr) {
      return absl::NotFoundError("model: no model is ready to serve (see ListModels)");
    }
    return now->default_model;
  }
  auto it = now->entries.find(std::string(name));
  if (it == now->entries.end()) {
    return absl::NotFoundError(
        absl::StrCat("model: no model \"", name, "\" (see ListModels)"));
  }
  const ModelPtr& model = it->second.model;
  if (!model->ready()) {
    return absl::FailedPreconditionError(
        absl::StrCat("model: \"", name, "\" failed to load: ", model->error));
  }
  return model;
}

std::vector<ModelRepository::ModelPtr> ModelRepository::models() const {
  const std::shared_ptr<const State> now = state();
  std::vector<ModelPtr> models;
  for (const auto& [name, entry] : now->entries) models.push_back(entry.model);
  return models;
}

ModelRepository::ModelPtr ModelRepository::default_model() const {
  return state()->default_model;
}

void ModelRepository::DescribeAll(v1::ListModelsResponse* response) const {
  const std::shared_ptr<const State> now = state();
  for (const auto& [name, entry] : now->entries) {
    Describe(*now, entry, response->add_models());
  }
}

bool ModelRepository::Describe(absl::string_view name, v1::ModelInfo* info) const {
  const std::shared_ptr<const State> now = state();
  const Entry* found = nullptr;
  if (name.empty()) {
    if (now->default_model != nullptr) found = &now->entries.at(now->default_model->name);
  } else if (auto it = now->entries.find(std::string(name)); it != now->entries.end()) {
    found = &it->second;
  }
  if (found == nullptr) return false;
  Describe(*now, *found, info);
  return true;
}

absl::StatusOr<RepositoryChanges> ModelRepository::Scan() const {
  if (dir_.empty()) {
    return absl::FailedPreconditionError(
        "no --model-repository: the built-in demo model has nothing to reload");
  }
  ASSIGN_OR_RETURN(const std::vector<FoundModel> found, ScanRepository(dir_));
  std::map<std::string, ModelFilesStamp> loaded;
  for (const auto& [name, entry] : state()->entries) loaded[name] = entry.stamp;
  return CompareRepository(loaded, found);
}

std::shared_ptr<Model> ModelRepository::LoadFound(const FoundModel& found) const {
  std::shared_ptr<Model> model = LoadModel(found.name, found.dir, format_, span_);
  absl::MutexLock lock(&mu_);
  auto it = state_->entries.find(found.name);
  if (it != state_->entries.end()) {
    model->version = it->second.model->version + 1;
  } else if (auto removed = removed_versions_.find(found.name);
             removed != removed_versions_.end()) {
    model->version = removed->second + 1;
  }
  return model;
}

ReloadReport ModelRepository::Publish(const RepositoryChanges& changes,
                                      std::vector<std::shared_ptr<Model>> loaded) {
  std::map<std::string, ModelFilesStamp> stamps;
  for (const FoundModel& found : changes.added) stamps[found.name] = found.stamp;
  for (const FoundModel& found : changes.changed) stamps[found.name] = found.stamp;
  ReloadReport report;
  report.unchanged = static_cast<int64_t>(changes.unchanged.size());
  std::vector<ModelPtr> retired;
  absl::MutexLock lock(&mu_);
  std::map<std::string, Entry> entries = state_->entries;
  for (const std::string& name : changes.removed) {
    auto it = entries.find(name);
    if (it == entries.end()) continue;
    retired.push_back(it->second.model);
    removed_versions_[name] = it->second.model->version;
    entries.erase(it);
    report.removed.push_back(name);
  }
  for (std::shared_ptr<Model>& model : loaded) {
    const std::string name = model->name;
    Entry& entry = entries[name];
    entry.stamp = stamps[name];
    if (!model->ready()) report.failed.emplace_back(name, model->error);
    if (entry.model == nullptr) {
      if (model->ready()) report.added.push_back(name);
    } else if (!model->ready() && entry.model->ready()) {
      // The old version keeps serving; the next change of its files tries again.
      entry.reload_error = model->error;
      report.kept.push_back(name);
      continue;
    } else {
      retired.push_back(entry.model);
      if (model->ready()) report.replaced.push_back(name);
    }
    entry.model = std::move(model);
    entry.reload_error.clear();
  }
  state_ = MakeState(std::move(entries));
  // After the swap: a session that looks finds the flag set, and any Find from now
  // on gives the new version.
  for (const ModelPtr& model : retired) model->retired.store(true);
  std::sort(report.added.begin(), report.added.end());
  std::sort(report.replaced.begin(), report.replaced.end());
  std::sort(report.failed.begin(), report.failed.end());
  std::sort(report.kept.begin(), report.kept.end());
  return report;
}

std::string ReloadReport::ToString() const {
  auto names = [](const std::vector<std::string>& list) {
    return absl::StrCat("[", absl::StrJoin(list, ", "), "]");
  };
  std::vector<std::string> failures;
  for (const auto& [name, error] : failed) {
    const bool kept_old = std::find(kept.begin(), kept.end(), name) != kept.end();
    failures.push_back(
        absl::StrCat(name, ": ", error, kept_old ? " (the old version serves)" : ""));
  }
  return absl::StrCat("added ", names(added), ", replaced ", names(replaced),
                      ", removed ", names(removed), ", failed ", names(failures),
                      ", unchanged ", unchanged);
}

void ModelRepository::Describe(const State& state, const Entry& entry,
                               v1::ModelInfo* info) {
  const Model& m = *entry.model;
  const ModelConfig& c = m.config;
  info->set_name(m.name);
  info->set_architecture(c.model_type);
  info->set_state(m.ready() ? v1::ModelInfo::READY : v1::ModelInfo::FAILED);
  info->set_error(m.error);
  info->set_is_default(entry.model == state.default_model);
  info->set_version(m.version);
  info->set_reload_error(entry.reload_error);
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
