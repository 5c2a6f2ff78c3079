#include "proto/wire_dtype.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace layerserve {

std::optional<ElementType> ElementTypeOf(v1::DataType dtype) {
  switch (dtype) {
    case v1::FLOAT32:
      return ElementType::kFloat32;
    case v1::BFLOAT16:
      return ElementType::kBfloat16;
    case v1::FLOAT16:
      return ElementType::kFloat16;
    default:
      return std::nullopt;
  }
}

v1::DataType DataTypeOf(ElementType type) {
  switch (type) {
    case ElementType::kFloat32:
      return v1::FLOAT32;
    case ElementType::kBfloat16:
      return v1::BFLOAT16;
    case ElementType::kFloat16:
      return v1::FLOAT16;
  }
  return v1::DATA_TYPE_UNSPECIFIED;
}

absl::Status CheckDataSize(const v1::Tensor& tensor, ElementType type, int64_t elements) {
  const int64_t want_bytes = elements * ElementSize(type);
  const int64_t got_bytes = static_cast<int64_t>(tensor.data().size());
  if (want_bytes == got_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("shape [", absl::StrJoin(tensor.shape(), ","), "] ",
                   v1::DataType_Name(tensor.dtype()), " needs ", want_bytes,
                   " bytes, got ", got_bytes));
}

}  // namespace layerserve
