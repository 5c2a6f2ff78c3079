// The tensor codec: the bytes as a serialized v1::Tensor -> ValidateTensor and
// DecodeTensor, then EncodeTensor back to the same dtype. Checks: validation agrees
// with the shape and byte count, FLOAT32 is decoded in place (a view of the bytes),
// the decoded statistics match the scalar reference, and the round trip gives back
// the same bytes (every NaN staying a NaN).
#include <cmath>
#include <cstring>

#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_targets.h"
#include "fuzz/worker.h"
#include "kernels/value_stats/value_stats.h"
#include "server/ops/tensor_codec.h"

namespace layerserve::fuzz {
namespace {

bool IsNan(ElementType type, const char* bytes) {
  float value = 0;
  if (type == ElementType::kFloat32) {
    std::memcpy(&value, bytes, 4);
  } else {
    uint16_t bits = 0;
    std::memcpy(&bits, bytes, 2);
    value =
        type == ElementType::kBfloat16 ? Bfloat16ToFloat32(bits) : Float16ToFloat32(bits);
  }
  return std::isnan(value);
}

}  // namespace

Outcome FuzzTensorCodec(const uint8_t* data, size_t size) {
  std::optional<v1::Tensor> tensor = ParseRequest<v1::Tensor>(data, size);
  if (!tensor) return Outcome::kUnparsable;
  absl::StatusOr<TensorInfo> info = ValidateTensor(*tensor, "input", RankRange{1, 8});
  // A narrower rank range must agree wherever the rank is inside it.
  absl::StatusOr<TensorInfo> narrow = ValidateTensor(*tensor, "input", RankRange{2, 3});
  const int rank = tensor->shape_size();
  if (rank >= 2 && rank <= 3)
    FUZZ_CHECK(narrow.ok() == info.ok(), "rank ranges disagree");
  if (!info.ok()) {
    CheckRejection(info.status());
    FUZZ_CHECK(info.status().code() == absl::StatusCode::kInvalidArgument,
               info.status().ToString());
    FUZZ_CHECK(info.status().message().substr(0, 5) == "input",
               "error does not name the field");
    return Outcome::kRejected;
  }
  int64_t elements = 1;
  for (int64_t d : info->shape) elements *= d;  // Cannot overflow: validated.
  FUZZ_CHECK(info->elements == elements, "element count");
  const int64_t element_size = ElementSize(info->dtype);
  FUZZ_CHECK(static_cast<int64_t>(tensor->data().size()) == elements * element_size,
             "byte count");
  if (elements > kMaxRunElements) return Outcome::kSkipped;

  absl::StatusOr<DecodedTensor> decoded = DecodeTensor(*tensor, "input", RankRange{1, 8});
  FUZZ_CHECK(decoded.ok(), decoded.status().ToString());
  FUZZ_CHECK(decoded->values.size() == elements, "decoded size");
  // FLOAT32 is read in place: the values must be the wire bytes themselves.
  FUZZ_CHECK(decoded->values.is_view() == (info->dtype == ElementType::kFloat32),
             "FLOAT32 decoded by copy or a 16-bit dtype not converted");
  if (decoded->values.is_view()) {
    FUZZ_CHECK(static_cast<const void*>(decoded->values.data()) ==
                   static_cast<const void*>(tensor->data().data()),
               "FLOAT32 view does not point at the wire bytes");
  }
  const kernels::ValueStats want =
      kernels::ValueStatsReference(decoded->values.data(), elements);
  const kernels::ValueStats got = ValueStatsOf(*decoded);
  FUZZ_CHECK(got.count == want.count && got.nan == want.nan && got.inf == want.inf,
             "NaN/Inf counts differ from the reference");
  FUZZ_CHECK(got.abs_max == want.abs_max, "abs_max differs from the reference");
  // Summation order differs (SIMD lanes); squares are non-negative, so the relative
  // error is bounded by the element count times the float epsilon.
  FUZZ_CHECK(std::fabs(got.sum_squares - want.sum_squares) <=
                 1e-6 * static_cast<double>(elements) * want.sum_squares + 1e-30,
             "sum_squares differs from the reference");

  v1::Tensor encoded;
  const int64_t saturated =
      EncodeTensor(info->shape, decoded->values.data(), elements, info->dtype, &encoded);
  FUZZ_CHECK(saturated == 0, "a same-dtype round trip saturated");
  CheckOutputTensor(encoded, info->shape, info->dtype, "encoded");
  const std::string& before = tensor->data();
  const std::string& after = encoded.data();
  for (int64_t i = 0; i < elements; ++i) {
    const char* a = before.data() + i * element_size;
    const char* b = after.data() + i * element_size;
    if (IsNan(info->dtype, a)) {
      FUZZ_CHECK(IsNan(info->dtype, b), "a NaN did not survive the round trip");
    } else {
      FUZZ_CHECK(std::memcmp(a, b, element_size) == 0,
                 "value " + std::to_string(i) + " changed in the round trip");
    }
  }
  return Outcome::kAccepted;
}

}  // namespace layerserve::fuzz
