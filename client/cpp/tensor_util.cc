#include "client/cpp/tensor_util.h"

#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/wire_dtype.h"

namespace layerserve::client {
namespace {

// `count` values of `from` in `src` as `to`, copied unchanged when the types match.
std::string ConvertValues(ElementType from, const std::string& src, int64_t count,
                          ElementType to, int64_t* saturated) {
  if (saturated != nullptr) *saturated = 0;
  if (from == to) return src;
  std::vector<float> values(count);
  ConvertToFloat32(from, src.data(), count, values.data());
  std::string out(count * ElementSize(to), '\0');
  const int64_t overflowed = ConvertFromFloat32(to, values.data(), count, out.data());
  if (saturated != nullptr) *saturated = overflowed;
  return out;
}

}  // namespace

absl::StatusOr<ElementType> ElementTypeFromProto(v1::DataType dtype) {
  if (std::optional<ElementType> type = ElementTypeOf(dtype)) return *type;
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported dtype ", v1::DataType_Name(dtype).empty()
                                             ? absl::StrCat(static_cast<int>(dtype))
                                             : v1::DataType_Name(dtype)));
}

v1::DataType ProtoFromElementType(ElementType type) { return DataTypeOf(type); }

absl::StatusOr<v1::Tensor> TensorFromNpy(const NpyArray& array, v1::DataType wire_dtype,
                                         int64_t* saturated) {
  absl::StatusOr<ElementType> type = ElementTypeFromProto(wire_dtype);
  if (!type.ok()) return type.status();
  v1::Tensor tensor;
  tensor.mutable_shape()->Add(array.shape.begin(), array.shape.end());
  tensor.set_dtype(wire_dtype);
  tensor.set_data(
      ConvertValues(array.dtype, array.data, array.NumElements(), *type, saturated));
  return tensor;
}

absl::StatusOr<NpyArray> NpyFromTensor(const v1::Tensor& tensor, ElementType npy_dtype,
                                       int64_t* saturated) {
  if (npy_dtype == ElementType::kBfloat16) {
    return absl::InvalidArgumentError("bfloat16 has no .npy dtype");
  }
  absl::StatusOr<ElementType> type = ElementTypeFromProto(tensor.dtype());
  if (!type.ok()) return type.status();
  const std::string shape = absl::StrCat("[", absl::StrJoin(tensor.shape(), ","), "]");
  // Multiply with an overflow guard: a malformed shape must give an error, not UB.
  int64_t elements = 1;
  for (int64_t dim : tensor.shape()) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in shape ", shape));
    }
    if (dim != 0 && elements > std::numeric_limits<int64_t>::max() / 4 / dim) {
      return absl::InvalidArgumentError(absl::StrCat("shape ", shape, " is too large"));
    }
    elements *= dim;
  }
  if (absl::Status size = CheckDataSize(tensor, *type, elements); !size.ok()) {
    return size;
  }
  NpyArray array;
  array.shape.assign(tensor.shape().begin(), tensor.shape().end());
  array.dtype = npy_dtype;
  array.data = ConvertValues(*type, tensor.data(), elements, npy_dtype, saturated);
  return array;
}

absl::StatusOr<v1::Tensor> TensorFromFloats(absl::Span<const float> values,
                                            absl::Span<const int64_t> shape,
                                            v1::DataType wire_dtype, int64_t* saturated) {
  NpyArray array;
  array.shape.assign(shape.begin(), shape.end());
  int64_t elements = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || (dim != 0 && elements > std::numeric_limits<int64_t>::max() / dim)) {
      elements = -1;
      break;
    }
    elements *= dim;
  }
  if (elements != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError(absl::StrCat("shape [", absl::StrJoin(shape, ","),
                                                   "] does not hold ", values.size(),
                                                   " values"));
  }
  array.data.assign(reinterpret_cast<const char*>(values.data()),
                    values.size() * sizeof(float));
  return TensorFromNpy(array, wire_dtype, saturated);
}

absl::StatusOr<std::vector<float>> FloatsFromTensor(const v1::Tensor& tensor) {
  absl::StatusOr<NpyArray> array = NpyFromTensor(tensor, ElementType::kFloat32);
  if (!array.ok()) return array.status();
  std::vector<float> values(array->data.size() / sizeof(float));
  std::memcpy(values.data(), array->data.data(), array->data.size());
  return values;
}

}  // namespace layerserve::client
