// Invariant checks for the fuzz targets. A failed check prints what broke and
// aborts: libFuzzer saves the input as a crash, and the replay test dies with the
// message. (Not gtest: the same code runs inside libFuzzer.)
#ifndef LAYERSERVE_FUZZ_FUZZ_CHECK_H_
#define LAYERSERVE_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "layerserve/v1/layerserve.pb.h"
#include "server/ops/tensor_codec.h"

#define FUZZ_CHECK(condition, message)                                               \
  do {                                                                               \
    if (!(condition)) {                                                              \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: %s\n", __FILE__, __LINE__, \
                   #condition, std::string(message).c_str());                        \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)

namespace layerserve::fuzz {

// The largest job (in values in or out) a target runs: a few milliseconds under
// ASan, so libFuzzer gets through thousands of inputs in its minute.
inline constexpr int64_t kMaxRunElements = int64_t{1} << 16;

// An error status from request validation must carry one of the codes the API
// documents for a bad request, and a message; never OK, INTERNAL or UNKNOWN.
inline void CheckRejection(const absl::Status& status) {
  const absl::StatusCode code = status.code();
  FUZZ_CHECK(code == absl::StatusCode::kInvalidArgument ||
                 code == absl::StatusCode::kOutOfRange ||
                 code == absl::StatusCode::kResourceExhausted ||
                 code == absl::StatusCode::kNotFound ||
                 code == absl::StatusCode::kFailedPrecondition ||
                 code == absl::StatusCode::kUnimplemented,
             status.ToString());
  FUZZ_CHECK(!status.message().empty(), "an error without a message");
}

// A response tensor must be well formed: a served dtype (`dtype`), the `shape` the
// request implies, and exactly the bytes that shape needs.
inline void CheckOutputTensor(const v1::Tensor& tensor, const std::vector<int64_t>& shape,
                              ElementType dtype, const char* field) {
  absl::StatusOr<TensorInfo> info = ValidateTensor(tensor, field, RankRange{1, 8});
  FUZZ_CHECK(info.ok(), info.status().ToString());
  FUZZ_CHECK(info->shape == shape, std::string(field) + ": shape " +
                                       ShapeToString(info->shape) + ", expected " +
                                       ShapeToString(shape));
  FUZZ_CHECK(info->dtype == dtype, std::string(field) + ": wrong dtype");
}

}  // namespace layerserve::fuzz

#endif  // LAYERSERVE_FUZZ_FUZZ_CHECK_H_
