// Wire tensors for tests: built from float values and read back, through the
// server's own codec (server/ops/tensor_codec.h), in any element type.
#ifndef LAYERSERVE_TESTS_TESTING_WIRE_TENSORS_H_
#define LAYERSERVE_TESTS_TESTING_WIRE_TENSORS_H_

#include <vector>

#include "common/dtype.h"
#include "layerserve/v1/layerserve.pb.h"
#include "server/ops/tensor_codec.h"

namespace layerserve::testing {

// `values` as a tensor of `shape` in `type` (rounded to nearest even for 16-bit).
inline v1::Tensor MakeTensor(const std::vector<int64_t>& shape,
                             const std::vector<float>& values,
                             ElementType type = ElementType::kFloat32) {
  v1::Tensor t;
  EncodeTensor(shape, values.data(), static_cast<int64_t>(values.size()), type, &t);
  return t;
}
inline v1::Tensor MakeTensor(const std::vector<int64_t>& shape,
                             const std::vector<float>& values, v1::DataType dtype) {
  return MakeTensor(shape, values, *ElementTypeFromProto(dtype, "dtype"));
}

// Every value of a FLOAT32, BFLOAT16 or FLOAT16 tensor as float32, flat.
inline std::vector<float> TensorValues(const v1::Tensor& t) {
  const ElementType type = *ElementTypeFromProto(t.dtype(), "dtype");
  std::vector<float> values(t.data().size() / ElementSize(type));
  ConvertToFloat32(type, t.data().data(), static_cast<int64_t>(values.size()),
                   values.data());
  return values;
}

}  // namespace layerserve::testing

#endif  // LAYERSERVE_TESTS_TESTING_WIRE_TENSORS_H_
