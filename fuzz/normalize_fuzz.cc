// Normalize: serialized NormalizeRequest -> ParseNormalizeRequest -> RunNormalize.
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_targets.h"
#include "fuzz/worker.h"
#include "server/ops/normalize.h"

namespace layerserve::fuzz {

Outcome FuzzNormalize(const uint8_t* data, size_t size) {
  std::optional<v1::NormalizeRequest> request =
      ParseRequest<v1::NormalizeRequest>(data, size);
  if (!request) return Outcome::kUnparsable;
  absl::StatusOr<NormalizeJob> job = ParseNormalizeRequest(*request);
  if (!job.ok()) {
    CheckRejection(job.status());
    return Outcome::kRejected;
  }
  const TensorInfo& info = job->input.info;
  FUZZ_CHECK(job->input.values.size() == info.elements, "decoded input size");
  FUZZ_CHECK(job->weight.empty() || job->weight.size() == info.last_dim(), "weight size");
  FUZZ_CHECK(job->bias.empty() || job->bias.size() == info.last_dim(), "bias size");
  FUZZ_CHECK(job->residual.empty() || job->residual.size() == job->input.values.size(),
             "residual size");
  if (info.elements > kMaxRunElements) return Outcome::kSkipped;

  v1::NormalizeResponse response;
  RunNormalize(*job, &response);
  CheckOutputTensor(response.output(), info.shape, job->output_type, "output");
  if (job->residual.empty()) {
    FUZZ_CHECK(!response.has_residual_out(), "residual_out without a residual");
  } else {
    CheckOutputTensor(response.residual_out(), info.shape, job->output_type,
                      "residual_out");
  }
  return Outcome::kAccepted;
}

}  // namespace layerserve::fuzz
