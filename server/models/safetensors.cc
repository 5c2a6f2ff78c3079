#include "server/models/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace layerserve {
namespace {

// A header larger than this is not a checkpoint header (real ones are < 1 MiB per
// thousand tensors); refusing it bounds what a hostile file can make us parse.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

// Element size of the dtypes the safetensors format defines; 0 for unknown ones.
int64_t DtypeSize(const std::string& name) {
  if (name == "F64" || name == "I64" || name == "U64") return 8;
  if (name == "F32" || name == "I32" || name == "U32") return 4;
  if (name == "F16" || name == "BF16" || name == "I16" || name == "U16") return 2;
  if (name == "I8" || name == "U8" || name == "BOOL" || name == "F8_E4M3" ||
      name == "F8_E5M2")
    return 1;
  return 0;
}

std::optional<ElementType> ServedType(const std::string& name) {
  if (name == "F32") return ElementType::kFloat32;
  if (name == "BF16") return ElementType::kBfloat16;
  if (name == "F16") return ElementType::kFloat16;
  return std::nullopt;
}

absl::Status ErrnoStatus(const std::string& what, const std::string& path) {
  const int error = errno;
  const std::string message = absl::StrCat(path, ": ", what, ": ", std::strerror(error));
  if (error == ENOENT) return absl::NotFoundError(message);
  if (error == EACCES) return absl::PermissionDeniedError(message);
  return absl::UnavailableError(message);
}

}  // namespace

int64_t SafetensorsTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("cannot open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status status = ErrnoStatus("cannot stat", path);
    ::close(fd);
    return status;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* mapping = nullptr;
  if (size > 0) {
    mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) {
      absl::Status status = ErrnoStatus("cannot map", path);
      ::close(fd);
      return status;
    }
  }
  ::close(fd);  // The mapping keeps the file.
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile(path, mapping, size));
  absl::Status status = file->ParseHeader();
  if (!status.ok()) return status;
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, size_);
}

const SafetensorsTensor* SafetensorsFile::Find(absl::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::Status SafetensorsFile::ParseHeader() {
  auto error = [this](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", what));
  };
  if (size_ < 8) return error(absl::StrCat("truncated: ", size_, " bytes, no header"));
  const char* bytes = static_cast<const char*>(mapping_);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) {
    header_bytes = (header_bytes << 8) | static_cast<unsigned char>(bytes[i]);
  }
  if (header_bytes > kMaxHeaderBytes || header_bytes > size_ - 8) {
    return error(absl::StrCat("header length ", header_bytes, " does not fit the ", size_,
                              "-byte file"));
  }
  const char* data = bytes + 8 + header_bytes;
  const uint64_t data_bytes = size_ - 8 - header_bytes;

  nlohmann::json header = nlohmann::json::parse(bytes + 8, data, nullptr,
                                                /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return error("header is not a JSON object");
  }
  struct Range {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (auto& item : header.items()) {
    // Named, not a structured binding: lambdas may not capture those in C++17
    // (clang refuses; the fuzz build uses clang).
    const std::string& name = item.key();
    auto& entry = item.value();
    if (name == "__metadata__") continue;
    auto tensor_error = [&](const std::string& what) {
      return error(absl::StrCat("tensor \"", name, "\": ", what));
    };
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
        !entry.contains("shape") || !entry["shape"].is_array() ||
        !entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2) {
      return tensor_error("needs \"dtype\", \"shape\" and two \"data_offsets\"");
    }
    SafetensorsTensor tensor;
    tensor.dtype_name = entry["dtype"].get<std::string>();
    const int64_t element_size = DtypeSize(tensor.dtype_name);
    if (element_size == 0) {
      return tensor_error(absl::StrCat("unknown dtype \"", tensor.dtype_name, "\""));
    }
    tensor.dtype = ServedType(tensor.dtype_name);
    uint64_t elements = 1;
    for (const nlohmann::json& dim : entry["shape"]) {
      if (!dim.is_number_unsigned()) return tensor_error("shape entries must be >= 0");
      const uint64_t d = dim.get<uint64_t>();
      if (d != 0 && elements > (uint64_t{1} << 62) / d) {
        return tensor_error("shape overflows");
      }
      elements *= d;
      tensor.shape.push_back(static_cast<int64_t>(d));
    }
    const nlohmann::json& offsets = entry["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      return tensor_error("data_offsets must be non-negative integers");
    }
    const uint64_t begin = offsets[0].get<uint64_t>();
    const uint64_t end = offsets[1].get<uint64_t>();
    if (begin > end || end > data_bytes) {
      return tensor_error(absl::StrCat("data_offsets [", begin, ", ", end,
                                       "] outside the ", data_bytes,
                                       "-byte data section (truncated file?)"));
    }
    const uint64_t want = elements * static_cast<uint64_t>(element_size);
    if (end - begin != want) {
      return tensor_error(absl::StrCat("shape [", absl::StrJoin(tensor.shape, ","), "] ",
                                       tensor.dtype_name, " needs ", want,
                                       " bytes, data_offsets span ", end - begin));
    }
    tensor.data = data + begin;
    tensor.bytes = static_cast<int64_t>(want);
    auto [it, inserted] = tensors_.emplace(name, std::move(tensor));
    ranges.push_back({begin, end, &it->first});
  }
  // Tensors must not share bytes: overlapping offsets mean a corrupt header.
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) {
      return error(absl::StrCat("tensors \"", *ranges[i - 1].name, "\" and \"",
                                *ranges[i].name, "\" overlap"));
    }
  }
  return absl::OkStatus();
}

}  // namespace layerserve
