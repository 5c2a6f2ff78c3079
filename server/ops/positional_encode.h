// The PositionalEncode RPC apart from transport: request validation (every error
// names its field, e.g. "alibi.num_heads", and the numbers), execution on a kernel
// context, and PositionalEncodeOp, what the dispatcher (server/rpc/dispatch.h)
// needs of it (server/ops/operation.h). Dispatches on the request's `method` oneof;
// the rope method is server/ops/positional_encode_rope.h's. Stateless; safe from
// any thread (RunPositionalEncode needs the caller's own PositionalContext).
#ifndef LAYERSERVE_SERVER_OPS_POSITIONAL_ENCODE_H_
#define LAYERSERVE_SERVER_OPS_POSITIONAL_ENCODE_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "kernels/positional/positional.h"
#include "kernels/value_stats/value_stats.h"
#include "layerserve/v1/layerserve.pb.h"
#include "server/ops/operation.h"
#include "server/ops/positional_encode_rope.h"
#include "server/ops/tensor_codec.h"

namespace layerserve {

// The most elements a generated tensor (a sinusoidal table, an ALiBi or T5 bias
// without scores) may have: 2^25, 128 MiB as FLOAT32, half the default
// --max-message-bytes. A larger request is RESOURCE_EXHAUSTED naming this limit:
// ask for fewer rows at a time (query_offset / position_offset select them).
inline constexpr int64_t kMaxGeneratedElements = int64_t{1} << 25;
inline constexpr float kDefaultSinusoidalBase = 10000.0f;
inline constexpr int64_t kDefaultT5MaxDistance = 128;

struct SinusoidalJob {
  bool has_input = false;
  DecodedTensor input;         // [B, T, D] or [T, D] when has_input.
  std::vector<int64_t> shape;  // Of the output: input's, or [num_positions, dim].
  int64_t rows = 0;            // B * T, or num_positions.
  int64_t dim = 0;
  float base = kDefaultSinusoidalBase;
  kernels::SinusoidalLayout layout = kernels::SinusoidalLayout::kInterleaved;
  std::vector<int64_t> positions;  // [rows], resolved.
  ElementType output_type = ElementType::kFloat32;
};

struct LearnedJob {
  DecodedTensor input;             // [B, T, D] or [T, D].
  DecodedTensor table;             // [max_len, D].
  std::vector<int64_t> positions;  // [B * T], each < max_len.
  ElementType output_type = ElementType::kFloat32;
};

struct AlibiJob {
  kernels::AlibiShape shape;
  bool has_scores = false;
  DecodedTensor scores;  // [B, H, Tq, Tk] or [H, Tq, Tk] when has_scores.
  int64_t batch = 1;
  std::vector<int64_t> output_shape;
  ElementType output_type = ElementType::kFloat32;
};

struct T5BiasJob {
  kernels::T5BiasShape shape;
  DecodedTensor table;  // [num_buckets, H].
  ElementType output_type = ElementType::kFloat32;
};

// A PositionalEncode request that passed validation: one job per method. FLOAT32
// tensors view the request's bytes: the request must outlive the job.
using PositionalEncodeJob =
    std::variant<SinusoidalJob, LearnedJob, RopeJob, AlibiJob, T5BiasJob>;

// INVALID_ARGUMENT naming the field for every malformed request; OUT_OF_RANGE for a
// learned position past the table; RESOURCE_EXHAUSTED for a generated tensor over
// kMaxGeneratedElements.
absl::StatusOr<PositionalEncodeJob> ParsePositionalEncodeRequest(
    const v1::PositionalEncodeRequest& request);
// The job would view a request destroyed at the end of the call's full expression.
absl::StatusOr<PositionalEncodeJob> ParsePositionalEncodeRequest(
    const v1::PositionalEncodeRequest&& request) = delete;

// Runs the method's kernel and fills `response`; returns the output's numeric
// health.
OutputHealth RunPositionalEncode(kernels::PositionalContext& context,
                                 const PositionalEncodeJob& job,
                                 v1::PositionalEncodeResponse* response);

struct PositionalEncodeOp : OperationDefaults {
  using Job = PositionalEncodeJob;
  using Request = v1::PositionalEncodeRequest;
  using Response = v1::PositionalEncodeResponse;
  static constexpr const char* kMethod = "PositionalEncode";
  static constexpr BatchRun kBatchRun = BatchRun::kOneCallPerRequest;

  static absl::StatusOr<Job> Parse(const Request& request, const ParseContext&) {
    return ParsePositionalEncodeRequest(request);
  }
  static std::string BatchKey(const Job&) { return kMethod; }
  static int64_t Rows(const Job&) { return 1; }
  static int64_t Elements(const Job& job);
  static kernels::ValueStats InputStats(const Job& job, const OutputHealth& output);
  static ElementType OutputType(const Job& job);
  static OutputHealth Run(WorkerContext& worker, const Job& job, Response* response);
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_OPS_POSITIONAL_ENCODE_H_
