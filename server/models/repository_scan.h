// What changed in a model repository directory since its models were loaded: the
// step a reload (SIGHUP, --repository-poll-interval) starts with. A model is a
// sub-directory holding a config.json; it changed when any of the files its load
// reads (config.json, *.safetensors, model.safetensors.index.json) was added,
// removed, rewritten or replaced (its stat(2) stamp moved). Other files (tokenizer,
// README) are not looked at: they are not the server's.
#ifndef LAYERSERVE_SERVER_MODELS_REPOSITORY_SCAN_H_
#define LAYERSERVE_SERVER_MODELS_REPOSITORY_SCAN_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/file_stamp.h"

namespace layerserve {

// The stamps of a model directory's checkpoint files, by file name.
using ModelFilesStamp = std::map<std::string, FileStamp>;

struct FoundModel {
  std::string name;  // The sub-directory's name.
  std::string dir;   // Its path.
  ModelFilesStamp stamp;
};

// The stamps of the checkpoint files in `dir` (none if it cannot be listed).
ModelFilesStamp StampModelFiles(const std::string& dir);

// Every sub-directory of `dir` holding a config.json, by name, stamped.
// NOT_FOUND if `dir` cannot be listed.
absl::StatusOr<std::vector<FoundModel>> ScanRepository(const std::string& dir);

struct RepositoryChanges {
  std::vector<FoundModel> added;     // Not loaded before.
  std::vector<FoundModel> changed;   // Loaded before, a stamp moved.
  std::vector<std::string> removed;  // Loaded before, gone (or lost its config).
  std::vector<std::string> unchanged;

  bool empty() const { return added.empty() && changed.empty() && removed.empty(); }
};

// `loaded`: the stamps the current models were loaded (or last tried) from, by
// name. `found`: what ScanRepository sees now. Each list comes out sorted by name.
RepositoryChanges CompareRepository(const std::map<std::string, ModelFilesStamp>& loaded,
                                    const std::vector<FoundModel>& found);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_MODELS_REPOSITORY_SCAN_H_
