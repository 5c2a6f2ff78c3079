// BlockForward: serialized BlockForwardRequest -> ParseBlockForwardRequest against
// the built-in demo model -> RunBlockForward.
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_targets.h"
#include "fuzz/worker.h"
#include "server/models/model_repository.h"
#include "server/ops/block_forward.h"

namespace layerserve::fuzz {
namespace {

// Tokens of a job the target runs: 16 tokens through the 4 demo layers take a few
// milliseconds (the matmuls run in the uninstrumented oneDNN).
constexpr int64_t kMaxRunTokens = 16;

const ModelRepository& Models() {
  static const ModelRepository* const models =
      ModelRepository::Demo(kernels::WeightType::kFloat32).release();
  return *models;
}

}  // namespace

Outcome FuzzBlockForward(const uint8_t* data, size_t size) {
  std::optional<v1::BlockForwardRequest> request =
      ParseRequest<v1::BlockForwardRequest>(data, size);
  if (!request) return Outcome::kUnparsable;
  absl::StatusOr<BlockForwardJob> job = ParseBlockForwardRequest(*request, Models());
  if (!job.ok()) {
    CheckRejection(job.status());
    return Outcome::kRejected;
  }
  const int64_t layers = static_cast<int64_t>(job->model->blocks.size());
  FUZZ_CHECK(job->layer_start >= 0 && job->num_layers >= 1 &&
                 job->layer_start + job->num_layers <= layers,
             "layer range outside the model");
  const int64_t tokens = job->batch * job->tokens;
  FUZZ_CHECK(job->hidden.info.elements == tokens * job->model->config.hidden_size,
             "hidden_states elements");
  FUZZ_CHECK(job->positions.size() == static_cast<size_t>(tokens), "positions size");
  FUZZ_CHECK(job->lengths.size() == static_cast<size_t>(job->batch), "lengths size");
  for (int64_t length : job->lengths) {
    FUZZ_CHECK(length >= 1 && length <= job->tokens, "sequence length out of range");
  }
  if (tokens > kMaxRunTokens) return Outcome::kSkipped;

  v1::BlockForwardResponse response;
  RunBlockForward(Worker().block, *job, &response);
  CheckOutputTensor(response.hidden_states(), job->hidden.info.shape, job->output_type,
                    "hidden_states");
  if (job->want_attention_stats) {
    FUZZ_CHECK(response.attention_stats_size() == job->num_layers,
               "one attention_stats entry per layer");
  }
  return Outcome::kAccepted;
}

}  // namespace layerserve::fuzz
