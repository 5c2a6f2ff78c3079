// The safetensors header parser: the bytes become a file (an anonymous memfd, so
// no disk traffic) that SafetensorsFile::Open maps and validates. Every tensor it
// accepts is checked against an independent reading of the header: its bytes lie
// inside the file, at the offsets the header gives, and match its dtype and shape.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_targets.h"
#include "server/models/safetensors.h"

namespace layerserve::fuzz {
namespace {

// An anonymous in-memory file holding `data`, closed on destruction.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size)
      : fd_(memfd_create("safetensors", MFD_CLOEXEC)) {
    FUZZ_CHECK(fd_ >= 0, "memfd_create");
    size_t written = 0;
    while (written < size) {
      const ssize_t n = ::write(fd_, data + written, size - written);
      FUZZ_CHECK(n > 0, "write to memfd");
      written += static_cast<size_t>(n);
    }
  }
  ~MemFile() { ::close(fd_); }
  std::string path() const { return absl::StrCat("/proc/self/fd/", fd_); }

 private:
  const int fd_;
};

int64_t ServedElementSize(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  return 0;
}

}  // namespace

Outcome FuzzSafetensors(const uint8_t* data, size_t size) {
  MemFile file(data, size);
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> opened =
      SafetensorsFile::Open(file.path());
  if (!opened.ok()) {
    FUZZ_CHECK(opened.status().code() == absl::StatusCode::kInvalidArgument,
               opened.status().ToString());
    return Outcome::kRejected;
  }
  // Accepted: the file has a length prefix and a JSON object header that fit.
  FUZZ_CHECK(size >= 8, "accepted a file shorter than its length prefix");
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | data[i];
  FUZZ_CHECK(header_bytes <= size - 8, "accepted a header longer than the file");
  const auto header = nlohmann::json::parse(data + 8, data + 8 + header_bytes, nullptr,
                                            /*allow_exceptions=*/false);
  FUZZ_CHECK(header.is_object(), "accepted a header that is not a JSON object");
  const uint8_t* const payload = data + 8 + header_bytes;
  const uint64_t payload_bytes = size - 8 - header_bytes;

  for (const auto& [name, tensor] : (*opened)->tensors()) {
    FUZZ_CHECK(header.contains(name) && header.at(name).is_object(),
               name + ": not in the header");
    const auto& entry = header.at(name);
    const auto& offsets = entry.at("data_offsets");
    FUZZ_CHECK(offsets.is_array() && offsets.size() == 2 &&
                   offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
               name + ": accepted data_offsets " + offsets.dump());
    const uint64_t begin = offsets[0].get<uint64_t>();
    const uint64_t end = offsets[1].get<uint64_t>();
    FUZZ_CHECK(begin <= end && end <= payload_bytes, name + ": data outside the file");
    FUZZ_CHECK(tensor.bytes == static_cast<int64_t>(end - begin), name + ": byte count");
    FUZZ_CHECK(tensor.dtype_name == entry.at("dtype").get<std::string>(),
               name + ": dtype");
    FUZZ_CHECK(tensor.shape.size() == entry.at("shape").size(), name + ": rank");
    for (int64_t d : tensor.shape) FUZZ_CHECK(d >= 0, name + ": negative dimension");
    const int64_t element_size = ServedElementSize(tensor.dtype_name);
    FUZZ_CHECK(tensor.dtype.has_value() == (element_size > 0), name + ": served dtype");
    if (element_size > 0) {
      FUZZ_CHECK(tensor.elements() * element_size == tensor.bytes,
                 name + ": bytes do not match shape and dtype");
    }
    // Reading the view must stay inside the mapping (a view past it would fault
    // here) and see the file's bytes.
    FUZZ_CHECK(tensor.bytes == 0 || std::memcmp(tensor.data, payload + begin,
                                                static_cast<size_t>(tensor.bytes)) == 0,
               name + ": view does not hold the file's bytes");
  }
  return Outcome::kAccepted;
}

}  // namespace layerserve::fuzz
