// A memory-mapped .safetensors file (Hugging Face's checkpoint format): an 8-byte
// little-endian header length, a JSON header mapping each tensor name to its
// `dtype`, `shape` and `data_offsets` (relative to the end of the header), then the
// raw little-endian data. Open() validates the whole header against the file, so a
// view it hands out always lies inside the mapping. Immutable after Open(): safe to
// read from any thread.
#ifndef LAYERSERVE_SERVER_MODELS_SAFETENSORS_H_
#define LAYERSERVE_SERVER_MODELS_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dtype.h"

namespace layerserve {

struct SafetensorsTensor {
  std::string dtype_name;            // As in the header: "F32", "BF16", "I64"...
  std::optional<ElementType> dtype;  // Set for F32, BF16 and F16 only.
  std::vector<int64_t> shape;
  const char* data = nullptr;  // Inside the mapping; unaligned in general.
  int64_t bytes = 0;

  int64_t elements() const;
};

class SafetensorsFile {
 public:
  // Maps `path` and validates its header. Errors name the file and, where it is at
  // fault, the tensor: INVALID_ARGUMENT for a malformed file, NOT_FOUND or
  // PERMISSION_DENIED from the file system.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Null if the file has no tensor `name`.
  const SafetensorsTensor* Find(absl::string_view name) const;
  const std::map<std::string, SafetensorsTensor, std::less<>>& tensors() const {
    return tensors_;
  }

 private:
  SafetensorsFile(std::string path, void* mapping, size_t size)
      : path_(std::move(path)), mapping_(mapping), size_(size) {}
  absl::Status ParseHeader();

  const std::string path_;
  void* const mapping_;
  const size_t size_;
  std::map<std::string, SafetensorsTensor, std::less<>> tensors_;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_MODELS_SAFETENSORS_H_
