// Conversions between .npy arrays and the wire Tensor of layerserve.proto, for
// clients. Values change type through float32 with round-to-nearest-even
// (common/dtype.h); a tensor whose type does not change is copied bit for bit.
// Pure functions; safe to call from any thread.
#ifndef LAYERSERVE_CLIENT_CPP_TENSOR_UTIL_H_
#define LAYERSERVE_CLIENT_CPP_TENSOR_UTIL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/dtype.h"
#include "layerserve/v1/layerserve.pb.h"
// A sibling by a path relative to this file: right both in the source tree and
// installed (include/layerserve/client/, docs/clients/cpp.md).
#include "npy.h"

namespace layerserve::client {

// The element type of a wire dtype. INVALID_ARGUMENT for DATA_TYPE_UNSPECIFIED and
// values this client does not know.
absl::StatusOr<ElementType> ElementTypeFromProto(v1::DataType dtype);
v1::DataType ProtoFromElementType(ElementType type);

// `array` as a Tensor of `wire_dtype` (FLOAT32, BFLOAT16 or FLOAT16). If `saturated`
// is not null it receives how many finite values exceeded the range of
// `wire_dtype` and became +-Inf.
// REQUIRES: array.data holds NumElements() values of array.dtype (ReadNpyFile ensures
// it).
absl::StatusOr<v1::Tensor> TensorFromNpy(const NpyArray& array, v1::DataType wire_dtype,
                                         int64_t* saturated = nullptr);

// The values of `tensor` (for example from a response) as an array of `npy_dtype`,
// kFloat32 or kFloat16 (.npy has no bfloat16). INVALID_ARGUMENT if the tensor is
// malformed: unknown dtype, a negative dimension, or a byte count that does not
// match its shape, e.g. "shape [2,3] FLOAT32 needs 24 bytes, got 20". `saturated` as
// above.
absl::StatusOr<NpyArray> NpyFromTensor(const v1::Tensor& tensor,
                                       ElementType npy_dtype = ElementType::kFloat32,
                                       int64_t* saturated = nullptr);

// float32 `values` of `shape` (row-major) as a Tensor of `wire_dtype`, rounded to
// nearest even for the 16-bit types. INVALID_ARGUMENT if the shape has a negative
// dimension or product(shape) != values.size(). `saturated` as above.
absl::StatusOr<v1::Tensor> TensorFromFloats(absl::Span<const float> values,
                                            absl::Span<const int64_t> shape,
                                            v1::DataType wire_dtype,
                                            int64_t* saturated = nullptr);

// Every value of `tensor` as float32, flat and row-major. INVALID_ARGUMENT if the
// tensor is malformed (as NpyFromTensor).
absl::StatusOr<std::vector<float>> FloatsFromTensor(const v1::Tensor& tensor);

}  // namespace layerserve::client

#endif  // LAYERSERVE_CLIENT_CPP_TENSOR_UTIL_H_
