// The tensors of one Hugging Face checkpoint directory: model.safetensors, or the
// shards listed in model.safetensors.index.json, all memory-mapped. Immutable after
// Open(): safe to read from any thread.
#ifndef LAYERSERVE_SERVER_MODELS_CHECKPOINT_H_
#define LAYERSERVE_SERVER_MODELS_CHECKPOINT_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/models/safetensors.h"

namespace layerserve {

class Checkpoint {
 public:
  // Errors name the file at fault (INVALID_ARGUMENT for malformed content).
  static absl::StatusOr<Checkpoint> Open(const std::string& dir);

  // The tensor and the file holding it; null tensor if absent.
  struct Found {
    const SafetensorsTensor* tensor = nullptr;
    const SafetensorsFile* file = nullptr;
  };
  Found Find(absl::string_view name) const;
  bool Has(absl::string_view name) const { return Find(name).tensor != nullptr; }
  // The file that lists the tensors (model.safetensors or the index), for errors
  // about a tensor that is not there.
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_MODELS_CHECKPOINT_H_
