// Decoding of wire tensors (layerserve.v1.Tensor) into validated float32 values (for
// FLOAT32, views of the wire bytes) and encoding of float32 results back. Every rule
// that makes a tensor unusable is checked here, with an INVALID_ARGUMENT message that
// names the field and the numbers. Stateless; safe from any thread.
#ifndef LAYERSERVE_SERVER_OPS_TENSOR_CODEC_H_
#define LAYERSERVE_SERVER_OPS_TENSOR_CODEC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dtype.h"
#include "common/uninitialized_string.h"
#include "kernels/value_stats/value_stats.h"
#include "layerserve/v1/layerserve.pb.h"

namespace layerserve {

// Shape and element type of a wire tensor that passed validation.
struct TensorInfo {
  std::vector<int64_t> shape;
  ElementType dtype = ElementType::kFloat32;
  int64_t elements = 0;

  int64_t last_dim() const { return shape.back(); }
  int64_t rows() const { return elements / shape.back(); }
};

// The float32 values of a decoded tensor, read-only: either a view of the wire bytes
// (FLOAT32: no allocation, no copy) or a buffer of their own (values converted from a
// 16-bit dtype, or float32 bytes that were not 4-byte aligned). Copies and moves read
// the same values: a view keeps pointing at the wire bytes, which do not move with
// it, and an owned buffer is reached through its vector, never a saved pointer.
//
// Lifetime: a view is valid while the bytes it views live, unmoved and unmodified;
// for DecodeTensor, while the v1::Tensor, so the request message holding it, lives
// where it is (a short string's bytes sit inside the string object, so moving the
// message moves them). The server keeps each request in place until its call is
// finished, which is after the worker ran the job; any other caller must keep the
// request as long as the job.
class Float32Values {
 public:
  using value_type = float;
  using const_iterator = const float*;

  Float32Values() = default;  // No values.
  // REQUIRES: `data` is aligned for float and holds `size` values that outlive the
  // result and every copy of it.
  static Float32Values View(const float* data, int64_t size) {
    Float32Values values;
    values.view_ = data;
    values.view_size_ = size;
    return values;
  }
  static Float32Values Own(std::vector<float> owned) {
    Float32Values values;
    values.owned_ = std::move(owned);
    return values;
  }

  const float* data() const { return view_ != nullptr ? view_ : owned_.data(); }
  int64_t size() const {
    return view_ != nullptr ? view_size_ : static_cast<int64_t>(owned_.size());
  }
  bool empty() const { return size() == 0; }
  const float* begin() const { return data(); }
  const float* end() const { return data() + size(); }
  // True when the values are the wire bytes themselves: nothing was copied.
  bool is_view() const { return view_ != nullptr; }

 private:
  const float* view_ = nullptr;  // Into bytes this object does not own; else null.
  int64_t view_size_ = 0;
  std::vector<float> owned_;  // Used only when view_ is null.
};

// A validated tensor as float32, the type every kernel computes in.
struct DecodedTensor {
  TensorInfo info;
  Float32Values values;  // Views the wire bytes for FLOAT32; see Float32Values.
};

// Statistics of a tensor's values: one read pass, taken only where a metric needs
// them (decoding does not, so parameters and requests whose health follows from
// their output skip it).
kernels::ValueStats ValueStatsOf(const DecodedTensor& tensor);

// What the server exports about a response's numbers (numeric health).
struct OutputHealth {
  int64_t saturated = 0;      // Finite values that became +-Inf in a 16-bit dtype.
  kernels::ValueStats stats;  // Of the main output tensor, before conversion.
  // NaN and Inf in the other output tensors (RoPE's rotated key), whose statistics
  // are not exported: the server needs only to know whether they hold any.
  int64_t other_outputs_nonfinite = 0;
  // The kernel found every input value finite as it read them (Activate), so the
  // inputs need no read for their NaN and Inf counts.
  bool inputs_seen_finite = false;
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

// Maps a wire dtype to a kernel element type (proto/wire_dtype.h); the error for a
// dtype a tensor cannot have names `field`.
absl::StatusOr<ElementType> ElementTypeFromProto(v1::DataType dtype,
                                                 absl::string_view field);

// The response dtype: `requested` unless it is DATA_TYPE_UNSPECIFIED, then
// `input_type`. An unknown enum value is INVALID_ARGUMENT naming `field`.
absl::StatusOr<ElementType> ResolveOutputType(v1::DataType requested,
                                              ElementType input_type,
                                              absl::string_view field);

// Checks dtype, rank, every dimension >= 1, element count without overflow and the
// byte count of `data`. `field` is the tensor's field name ("input", "weight"...).
absl::StatusOr<TensorInfo> ValidateTensor(const v1::Tensor& tensor,
                                          absl::string_view field, RankRange ranks);

// ValidateTensor, then DecodeTensorData. The result may view `tensor`'s bytes: keep
// `tensor` alive, unmoved and unmodified while it is used (see Float32Values).
absl::StatusOr<DecodedTensor> DecodeTensor(const v1::Tensor& tensor,
                                           absl::string_view field, RankRange ranks);
// A temporary tensor would be destroyed while the result still views its bytes.
absl::StatusOr<DecodedTensor> DecodeTensor(const v1::Tensor&& tensor,
                                           absl::string_view field,
                                           RankRange ranks) = delete;

// The values of `data`, wire bytes of a tensor `info` describes, as float32.
// FLOAT32 bytes aligned for float are viewed, not
// copied; misaligned FLOAT32 bytes are copied and 16-bit values converted into an
// owned buffer. The wire bytes are never written.
// REQUIRES: data.size() == info.elements * ElementSize(info.dtype) (ValidateTensor
// checks it); with a view, `data` outlives the result.
DecodedTensor DecodeTensorData(TensorInfo info, absl::string_view data);

// Fills `out` with `shape` and `values` converted to `type`. Returns how many finite
// values overflowed the 16-bit range and became +-Inf. With `stats`, also takes the
// statistics of `values` (float32: in the pass that writes them).
int64_t EncodeTensor(const std::vector<int64_t>& shape, const float* values,
                     int64_t count, ElementType type, v1::Tensor* out,
                     kernels::ValueStats* stats = nullptr);

// Runs `fill(float* out)` to produce `count` values into `out`: straight into the
// tensor's bytes for FLOAT32 (no second buffer, no copy), through a float buffer and
// a conversion for 16-bit dtypes. Returns the numeric health of the values. A fill
// that takes their statistics itself, in the pass that writes them, passes where
// it leaves them as `stats_taken_by_fill`; else they take a second pass.
// REQUIRES: `fill` writes all `count` values (`out` is not zeroed first).
template <typename Fill>
OutputHealth FillTensor(const std::vector<int64_t>& shape, int64_t count,
                        ElementType type, v1::Tensor* out, Fill fill,
                        const kernels::ValueStats* stats_taken_by_fill = nullptr) {
  OutputHealth health;
  if (type != ElementType::kFloat32) {
    // Not zeroed: `fill` writes every value.
    const std::unique_ptr<float[]> values(new float[count]);
    fill(values.get());
    if (stats_taken_by_fill != nullptr) health.stats = *stats_taken_by_fill;
    health.saturated =
        EncodeTensor(shape, values.get(), count, type, out,
                     stats_taken_by_fill != nullptr ? nullptr : &health.stats);
    return health;
  }
  out->mutable_shape()->Assign(shape.begin(), shape.end());
  out->set_dtype(v1::FLOAT32);
  std::string* data = out->mutable_data();
  // Not zeroed first: `fill` writes every value.
  ResizeUninitialized(data, static_cast<size_t>(count) * sizeof(float));
  // std::string storage comes from operator new: aligned for float.
  float* values = reinterpret_cast<float*>(data->data());
  fill(values);
  // Else a second pass, over values just written (in cache unless they are large).
  health.stats = stats_taken_by_fill != nullptr
                     ? *stats_taken_by_fill
                     : kernels::ComputeValueStats(values, count);
  return health;
}

// "[3,5]": shapes as they appear in error messages.
std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_OPS_TENSOR_CODEC_H_
