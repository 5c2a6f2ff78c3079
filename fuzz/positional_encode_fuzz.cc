// PositionalEncode: serialized PositionalEncodeRequest ->
// ParsePositionalEncodeRequest -> RunPositionalEncode, for every method of the oneof.
#include <variant>

#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_targets.h"
#include "fuzz/worker.h"
#include "server/ops/positional_encode.h"

namespace layerserve::fuzz {
namespace {

// What running the job reads and writes, in values: the inputs, or the generated
// table or bias.
int64_t JobElements(const PositionalEncodeJob& job) {
  if (const auto* j = std::get_if<SinusoidalJob>(&job)) return j->rows * j->dim;
  if (const auto* j = std::get_if<LearnedJob>(&job)) {
    return j->input.info.elements + j->table.info.elements;
  }
  if (const auto* j = std::get_if<RopeJob>(&job)) {
    return j->query.info.elements + (j->has_key ? j->key.info.elements : 0);
  }
  if (const auto* j = std::get_if<AlibiJob>(&job)) {
    return j->batch * j->shape.heads * j->shape.query_length * j->shape.key_length;
  }
  const auto& t5 = std::get<T5BiasJob>(job);
  return t5.shape.heads * t5.shape.query_length * t5.shape.key_length +
         t5.table.info.elements;
}

// The output shape the request implies.
std::vector<int64_t> OutputShape(const PositionalEncodeJob& job) {
  if (const auto* j = std::get_if<SinusoidalJob>(&job)) return j->shape;
  if (const auto* j = std::get_if<LearnedJob>(&job)) return j->input.info.shape;
  if (const auto* j = std::get_if<RopeJob>(&job)) return j->query.info.shape;
  if (const auto* j = std::get_if<AlibiJob>(&job)) return j->output_shape;
  const auto& t5 = std::get<T5BiasJob>(job);
  return {t5.shape.heads, t5.shape.query_length, t5.shape.key_length};
}

}  // namespace

Outcome FuzzPositionalEncode(const uint8_t* data, size_t size) {
  std::optional<v1::PositionalEncodeRequest> request =
      ParseRequest<v1::PositionalEncodeRequest>(data, size);
  if (!request) return Outcome::kUnparsable;
  absl::StatusOr<PositionalEncodeJob> job = ParsePositionalEncodeRequest(*request);
  if (!job.ok()) {
    CheckRejection(job.status());
    return Outcome::kRejected;
  }
  const int64_t elements = JobElements(*job);
  FUZZ_CHECK(elements >= 1, "a job with no values");
  if (elements > kMaxRunElements) return Outcome::kSkipped;
  const ElementType output_type =
      std::visit([](const auto& j) { return j.output_type; }, *job);

  v1::PositionalEncodeResponse response;
  RunPositionalEncode(Worker().positional, *job, &response);
  CheckOutputTensor(response.output(), OutputShape(*job), output_type, "output");
  const auto* rope = std::get_if<RopeJob>(&*job);
  if (rope != nullptr && rope->has_key) {
    CheckOutputTensor(response.key(), rope->key.info.shape, output_type, "key");
  } else {
    FUZZ_CHECK(!response.has_key(), "a key without a RoPE key input");
  }
  return Outcome::kAccepted;
}

}  // namespace layerserve::fuzz
