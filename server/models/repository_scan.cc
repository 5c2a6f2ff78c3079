#include "server/models/repository_scan.h"

#include <algorithm>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace layerserve {
namespace {

namespace fs = std::filesystem;

// The files a model's load reads (server/models/checkpoint.cc opens the index or
// every *.safetensors; model_repository.cc the config).
bool IsCheckpointFile(const std::string& name) {
  return name == "config.json" || absl::EndsWith(name, ".safetensors") ||
         absl::EndsWith(name, ".safetensors.index.json");
}

}  // namespace

ModelFilesStamp StampModelFiles(const std::string& dir) {
  ModelFilesStamp stamps;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end;
       it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (IsCheckpointFile(name)) stamps[name] = StampOf(it->path().string());
  }
  return stamps;
}

absl::StatusOr<std::vector<FoundModel>> ScanRepository(const std::string& dir) {
  std::error_code error;
  fs::directory_iterator it(dir, error);
  if (error) {
    return absl::NotFoundError(
        absl::StrCat("--model-repository ", dir, ": ", error.message()));
  }
  std::vector<FoundModel> found;
  for (fs::directory_iterator end; !error && it != end; it.increment(error)) {
    std::error_code entry_error;
    if (!it->is_directory(entry_error) ||
        !fs::exists(it->path() / "config.json", entry_error)) {
      continue;
    }
    FoundModel model;
    model.name = it->path().filename().string();
    model.dir = it->path().string();
    model.stamp = StampModelFiles(model.dir);
    found.push_back(std::move(model));
  }
  std::sort(found.begin(), found.end(),
            [](const FoundModel& a, const FoundModel& b) { return a.name < b.name; });
  return found;
}

RepositoryChanges CompareRepository(const std::map<std::string, ModelFilesStamp>& loaded,
                                    const std::vector<FoundModel>& found) {
  RepositoryChanges changes;
  std::map<std::string, const FoundModel*> now;
  for (const FoundModel& model : found) now[model.name] = &model;
  for (const auto& [name, model] : now) {
    auto before = loaded.find(name);
    if (before == loaded.end()) {
      changes.added.push_back(*model);
    } else if (before->second != model->stamp) {
      changes.changed.push_back(*model);
    } else {
      changes.unchanged.push_back(name);
    }
  }
  for (const auto& [name, stamp] : loaded) {
    if (now.count(name) == 0) changes.removed.push_back(name);
  }
  return changes;
}

}  // namespace layerserve
