// Decoding of wire tensors (layerserve.v1.Tensor) into validated float32 buffers and
// encoding of float32 results back. Every rule that makes a tensor unusable is
// checked here, with an INVALID_ARGUMENT message that names the field and the
// numbers. Stateless; safe from any thread.
#ifndef LAYERSERVE_SERVER_TENSOR_CODEC_H_
#define LAYERSERVE_SERVER_TENSOR_CODEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/dtype.h"
#include "kernels/value_stats.h"
#include "layerserve/v1/layerserve.pb.h"

namespace layerserve {

// Shape and element type of a wire tensor that passed validation.
struct TensorInfo {
  std::vector<int64_t> shape;
  kernels::ElementType dtype = kernels::ElementType::kFloat32;
  int64_t elements = 0;

  int64_t last_dim() const { return shape.back(); }
  int64_t rows() const { return elements / shape.back(); }
};

// A validated tensor converted to float32, the type every kernel computes in.
struct DecodedTensor {
  TensorInfo info;
  std::vector<float> values;
  kernels::ValueStats stats;  // Of `values`, taken while decoding.
};

// What the server exports about a response's numbers (numeric health).
struct OutputHealth {
  int64_t saturated = 0;      // Finite values that became +-Inf in a 16-bit dtype.
  kernels::ValueStats stats;  // Of the main output tensor, before conversion.
  int64_t zero_variance_rows = 0;  // Normalize: rows with nothing to normalize.
  // BlockForward: mean attention entropy per head, real token and layer; < 0 when
  // not applicable.
  double attention_entropy_nats = -1;
};

// Accepted ranks of a tensor field, inclusive.
struct RankRange {
  int min = 1;
  int max = 8;
};

// Maps a wire dtype to a kernel element type. `field` names the field in errors.
absl::StatusOr<kernels::ElementType> ElementTypeFromProto(v1::DataType dtype,
                                                          absl::string_view field);
v1::DataType ElementTypeToProto(kernels::ElementType type);

// The response dtype: `requested` unless it is DATA_TYPE_UNSPECIFIED, then
// `input_type`. An unknown enum value is INVALID_ARGUMENT naming `field`.
absl::StatusOr<kernels::ElementType> ResolveOutputType(v1::DataType requested,
                                                       kernels::ElementType input_type,
                                                       absl::string_view field);

// Checks dtype, rank, every dimension >= 1, element count without overflow and the
// byte count of `data`. `field` is the tensor's field name ("input", "weight"...).
absl::StatusOr<TensorInfo> ValidateTensor(const v1::Tensor& tensor,
                                          absl::string_view field, RankRange ranks);

// ValidateTensor, then converts the data to float32.
absl::StatusOr<DecodedTensor> DecodeTensor(const v1::Tensor& tensor,
                                           absl::string_view field, RankRange ranks);

// Fills `out` with `shape` and `values` converted to `type`. Returns how many finite
// values overflowed the 16-bit range and became +-Inf. With `stats`, also takes the
// statistics of `values` (float32: in the pass that writes them).
int64_t EncodeTensor(const std::vector<int64_t>& shape, const float* values,
                     int64_t count, kernels::ElementType type, v1::Tensor* out,
                     kernels::ValueStats* stats = nullptr);

// Runs `fill(float* out)` to produce `count` values into `out`: straight into the
// tensor's bytes for FLOAT32 (no second buffer, no copy), through a float buffer and
// a conversion for 16-bit dtypes. Returns the numeric health of the values.
template <typename Fill>
OutputHealth FillTensor(const std::vector<int64_t>& shape, int64_t count,
                        kernels::ElementType type, v1::Tensor* out, Fill fill) {
  OutputHealth health;
  if (type != kernels::ElementType::kFloat32) {
    std::vector<float> values(count);
    fill(values.data());
    health.saturated = EncodeTensor(shape, values.data(), count, type, out, &health.stats);
    return health;
  }
  out->mutable_shape()->Assign(shape.begin(), shape.end());
  out->set_dtype(v1::FLOAT32);
  std::string* data = out->mutable_data();
  data->resize(static_cast<size_t>(count) * sizeof(float));
  // std::string storage comes from operator new: aligned for float.
  float* values = reinterpret_cast<float*>(data->data());
  fill(values);
  // A second pass, over values just written (in cache unless the table is large).
  health.stats = kernels::ComputeValueStats(values, count);
  return health;
}

// "[3,5]": shapes as they appear in error messages.
std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_TENSOR_CODEC_H_
