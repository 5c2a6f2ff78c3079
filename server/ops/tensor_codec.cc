#include "server/ops/tensor_codec.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "proto/wire_dtype.h"

namespace layerserve {

absl::StatusOr<ElementType> ElementTypeFromProto(v1::DataType dtype,
                                                 absl::string_view field) {
  if (std::optional<ElementType> type = ElementTypeOf(dtype)) return *type;
  switch (dtype) {
    case v1::DATA_TYPE_UNSPECIFIED:
      return absl::InvalidArgumentError(
          absl::StrCat(field,
                       ": dtype is DATA_TYPE_UNSPECIFIED; set FLOAT32, "
                       "BFLOAT16 or FLOAT16"));
    case v1::INT8:
      return absl::InvalidArgumentError(
          absl::StrCat(field,
                       ": dtype INT8 describes a server's weights only; tensors are "
                       "FLOAT32, BFLOAT16 or FLOAT16"));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": unknown dtype ", static_cast<int>(dtype),
                       "; expected FLOAT32, BFLOAT16 or FLOAT16"));
  }
}

absl::StatusOr<ElementType> ResolveOutputType(v1::DataType requested,
                                              ElementType input_type,
                                              absl::string_view field) {
  if (requested == v1::DATA_TYPE_UNSPECIFIED) return input_type;
  return ElementTypeFromProto(requested, field);
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

absl::StatusOr<TensorInfo> ValidateTensor(const v1::Tensor& tensor,
                                          absl::string_view field, RankRange ranks) {
  TensorInfo info;
  ASSIGN_OR_RETURN(info.dtype,
                   ElementTypeFromProto(tensor.dtype(), absl::StrCat(field, ".dtype")));
  const int rank = tensor.shape_size();
  if (rank < ranks.min || rank > ranks.max) {
    const std::string expected = ranks.min == ranks.max
                                     ? absl::StrCat(ranks.min)
                                     : absl::StrCat(ranks.min, " to ", ranks.max);
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape: rank ", rank, " (shape ",
                     ShapeToString({tensor.shape().begin(), tensor.shape().end()}),
                     "), expected rank ", expected));
  }
  info.shape.assign(tensor.shape().begin(), tensor.shape().end());
  const int64_t element_size = ElementSize(info.dtype);
  // The byte count must fit in int64 too, hence the bound on elements.
  const int64_t max_elements = std::numeric_limits<int64_t>::max() / element_size;
  int64_t elements = 1;
  for (int i = 0; i < rank; ++i) {
    const int64_t dim = info.shape[i];
    if (dim < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".shape[", i, "]: dimension ", dim, " in shape ",
                       ShapeToString(info.shape), " must be >= 1"));
    }
    if (elements > max_elements / dim) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".shape: element count of ",
                                                     ShapeToString(info.shape),
                                                     " overflows 64 bits"));
    }
    elements *= dim;
  }
  info.elements = elements;
  if (absl::Status size = CheckDataSize(tensor, info.dtype, elements); !size.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".data: ", size.message()));
  }
  return info;
}

DecodedTensor DecodeTensorData(TensorInfo info, absl::string_view data) {
  DecodedTensor decoded;
  decoded.info = std::move(info);
  const int64_t n = decoded.info.elements;
  if (decoded.info.dtype == ElementType::kFloat32) {
    // Wire bytes are little-endian float32, as on every host this builds for.
    if (reinterpret_cast<std::uintptr_t>(data.data()) % alignof(float) == 0) {
      const float* values = reinterpret_cast<const float*>(data.data());
      decoded.values = Float32Values::View(values, n);
      return decoded;
    }
    // Not reachable through a protobuf std::string (heap storage from operator new,
    // or the buffer inside the string object); memcpy reads any address.
    std::vector<float> copy(n);
    if (n > 0) std::memcpy(copy.data(), data.data(), data.size());
    decoded.values = Float32Values::Own(std::move(copy));
    return decoded;
  }
  std::vector<float> converted(n);
  ConvertToFloat32(decoded.info.dtype, data.data(), n, converted.data());
  decoded.values = Float32Values::Own(std::move(converted));
  return decoded;
}

kernels::ValueStats ValueStatsOf(const DecodedTensor& tensor) {
  return kernels::ComputeValueStats(tensor.values.data(), tensor.values.size());
}

absl::StatusOr<DecodedTensor> DecodeTensor(const v1::Tensor& tensor,
                                           absl::string_view field, RankRange ranks) {
  ASSIGN_OR_RETURN(TensorInfo info, ValidateTensor(tensor, field, ranks));
  return DecodeTensorData(std::move(info), tensor.data());
}

int64_t EncodeTensor(const std::vector<int64_t>& shape, const float* values,
                     int64_t count, ElementType type, v1::Tensor* out,
                     kernels::ValueStats* stats) {
  out->mutable_shape()->Assign(shape.begin(), shape.end());
  out->set_dtype(DataTypeOf(type));
  std::string* data = out->mutable_data();
  ResizeUninitialized(data, count * ElementSize(type));  // All written below.
  if (stats != nullptr && type == ElementType::kFloat32) {
    *stats = kernels::CopyWithValueStats(values, count,
                                         reinterpret_cast<float*>(data->data()));
    return 0;
  }
  if (stats != nullptr) *stats = kernels::ComputeValueStats(values, count);
  return ConvertFromFloat32(type, values, count, data->data());
}

}  // namespace layerserve
