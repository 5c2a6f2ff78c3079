// The wire's element types (layerserve.v1.DataType) as the element types of
// common/dtype.h, and the byte count a wire tensor's data must have: the rules the
// server's tensor codec (server/ops/tensor_codec.h) and the C++ client
// (client/cpp/tensor_util.h) both apply, written once.
//
// It lives beside the generated code rather than in common/ because it needs the
// proto types, which common/ may not include; the proto-free part, converting values
// between element types, stays in common/dtype.h. Each caller words its own errors
// for a dtype it cannot use: the server names the request field, the client does
// not. Pure functions; safe from any thread.
#ifndef LAYERSERVE_PROTO_WIRE_DTYPE_H_
#define LAYERSERVE_PROTO_WIRE_DTYPE_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "common/dtype.h"
#include "layerserve/v1/layerserve.pb.h"

namespace layerserve {

// The element type of `dtype`: FLOAT32, BFLOAT16 and FLOAT16 have one;
// DATA_TYPE_UNSPECIFIED, INT8 (which describes a server's weights, never a tensor)
// and values unknown to this build have none.
std::optional<ElementType> ElementTypeOf(v1::DataType dtype);

// The wire dtype of `type`.
v1::DataType DataTypeOf(ElementType type);

// OK when `tensor`'s data holds exactly `elements` values of `type`; else
// INVALID_ARGUMENT such as "shape [2,3] FLOAT32 needs 24 bytes, got 20".
// REQUIRES: `type` is ElementTypeOf(tensor.dtype()) and elements * ElementSize(type)
// fits in int64.
absl::Status CheckDataSize(const v1::Tensor& tensor, ElementType type, int64_t elements);

}  // namespace layerserve

#endif  // LAYERSERVE_PROTO_WIRE_DTYPE_H_
