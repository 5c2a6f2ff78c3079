// Activate: serialized ActivateRequest -> ParseActivateRequest -> RunActivate.
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_targets.h"
#include "fuzz/worker.h"
#include "server/ops/activate.h"

namespace layerserve::fuzz {

Outcome FuzzActivate(const uint8_t* data, size_t size) {
  std::optional<v1::ActivateRequest> request =
      ParseRequest<v1::ActivateRequest>(data, size);
  if (!request) return Outcome::kUnparsable;
  absl::StatusOr<ActivateJob> job = ParseActivateRequest(*request);
  if (!job.ok()) {
    CheckRejection(job.status());
    return Outcome::kRejected;
  }
  const TensorInfo& info = job->input.info;
  FUZZ_CHECK(job->input.values.size() == info.elements, "decoded input size");
  if (job->form == ActivateJob::Form::kGatedTwoTensors) {
    FUZZ_CHECK(job->gate.size() == job->input.values.size(), "gate size");
  }
  if (info.elements > kMaxRunElements) return Outcome::kSkipped;

  v1::ActivateResponse response;
  RunActivate(*job, &response);
  CheckOutputTensor(response.output(), job->output_shape, job->output_type, "output");
  return Outcome::kAccepted;
}

}  // namespace layerserve::fuzz
