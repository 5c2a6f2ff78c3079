// Reading and writing NumPy .npy files: the tensor format of the command-line client.
//
// Supported: dtypes '<f4' (float32) and '<f2' (float16), also spelled with '|' or '='
// byte order; C (row-major) order; any rank including 0-d. Reads format versions 1.0,
// 2.0 and 3.0 (they differ only in the header-length field and header encoding);
// writes 1.0 exactly as numpy.save does (2.0 only if the header needs it, as numpy).
// Pure functions; safe to call from any thread.
#ifndef LAYERSERVE_CLIENT_CPP_NPY_H_
#define LAYERSERVE_CLIENT_CPP_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dtype.h"

namespace layerserve::client {

// A dense row-major array as stored in a .npy file.
struct NpyArray {
  std::vector<int64_t> shape;  // Empty for a 0-d array (one element).
  ElementType dtype = ElementType::kFloat32;
  // product(shape) elements, little-endian: exactly NumElements() * ElementSize(dtype)
  // bytes.
  std::string data;

  int64_t NumElements() const;
};

// Parses the bytes of a .npy file. `name` (usually the path) starts every error
// message, which says what is wrong (bad magic, truncation, header syntax, an
// unsupported dtype or order, a data size that does not match the shape). Every
// error is INVALID_ARGUMENT.
absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes, absl::string_view name);

// Reads and parses the file at `path`. NOT_FOUND etc. if it cannot be read.
absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path);

// The .npy bytes of `array`. INVALID_ARGUMENT for dtypes .npy cannot hold (bfloat16)
// or a data size that does not match the shape.
absl::StatusOr<std::string> SerializeNpy(const NpyArray& array);

// Serializes `array` and writes it to `path`, replacing the file.
absl::Status WriteNpyFile(const std::string& path, const NpyArray& array);

}  // namespace layerserve::client

#endif  // LAYERSERVE_CLIENT_CPP_NPY_H_
