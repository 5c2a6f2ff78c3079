#include "server/models/model_repository.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/models/checkpoint.h"
#include "server/models/demo_model.h"
#include "server/models/model_info_proto.h"
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

}  // namespace

absl::Status SetModelSpan(const LayerSpan& span, Model& model) {
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

void SetModelWeightFormat(const kernels::WeightFormat& format, Model& model) {
  model.weight_type = format.type;
  model.weight_group_size =
      format.type == kernels::WeightType::kInt8 ? format.group_size : 0;
}

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

std::unique_ptr<Model> ModelRepository::LoadModel(const std::string& name,
                                                  const std::string& dir,
                                                  kernels::WeightFormat format,
                                                  LayerSpan span) {
  auto model = std::make_unique<Model>();
  model->name = name;
  SetModelWeightFormat(format, *model);
  absl::Status status = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::string text, ReadFile(dir + "/config.json"));
    ASSIGN_OR_RETURN(model->config, ParseModelConfig(text, dir + "/config.json"));
    model->block = ToBlockConfig(model->config);
    RETURN_IF_ERROR(SetModelSpan(span, *model));
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

std::unique_ptr<ModelRepository> ModelRepository::Demo(kernels::WeightFormat format,
                                                       LayerSpan span) {
  std::vector<Entry> entries;
  entries.push_back(Entry{MakeDemoModel(format, span), {}, {}});
  return std::unique_ptr<ModelRepository>(
      new ModelRepository("", format, span, std::move(entries)));
}

std::unique_ptr<ModelRepository> ModelRepository::Of(std::vector<ModelPtr> models) {
  std::vector<Entry> entries;
  for (ModelPtr& model : models) entries.push_back(Entry{std::move(model), {}, {}});
  return std::unique_ptr<ModelRepository>(new ModelRepository(
      "", kernels::WeightFormat(kernels::WeightType::kFloat32), {}, std::move(entries)));
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
  DescribeModel(*entry.model, entry.model == state.default_model, entry.reload_error,
                info);
}

}  // namespace layerserve
