#include "server/models/checkpoint.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace layerserve {

absl::StatusOr<Checkpoint> Checkpoint::Open(const std::string& dir) {
  Checkpoint checkpoint;
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::ifstream index_file(index_path);
  if (!index_file) {
    checkpoint.source_ = dir + "/model.safetensors";
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                     SafetensorsFile::Open(dir + "/model.safetensors"));
    checkpoint.files_.push_back(std::move(file));
    return checkpoint;
  }
  checkpoint.source_ = index_path;
  std::stringstream text;
  text << index_file.rdbuf();
  const nlohmann::json index =
      nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
      !index["weight_map"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": needs a \"weight_map\" object"));
  }
  std::set<std::string> shards;
  for (auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string() || shard.get<std::string>().find('/') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map[\"", name,
                                                     "\"] must name a file in ", dir));
    }
    shards.insert(shard.get<std::string>());
  }
  for (const std::string& shard : shards) {
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                     SafetensorsFile::Open(dir + "/" + shard));
    checkpoint.files_.push_back(std::move(file));
  }
  return checkpoint;
}

Checkpoint::Found Checkpoint::Find(absl::string_view name) const {
  for (const auto& file : files_) {
    if (const SafetensorsTensor* tensor = file->Find(name)) return {tensor, file.get()};
  }
  return {};
}

}  // namespace layerserve
