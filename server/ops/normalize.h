// The Normalize RPC apart from transport: request validation (every error names its
// field), execution of the kernel, and NormalizeOp, what the dispatcher
// (server/rpc/dispatch.h) needs of it (server/ops/operation.h). Stateless; safe
// from any thread.
#ifndef LAYERSERVE_SERVER_OPS_NORMALIZE_H_
#define LAYERSERVE_SERVER_OPS_NORMALIZE_H_

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "kernels/norm/norm.h"
#include "kernels/value_stats/value_stats.h"
#include "layerserve/v1/layerserve.pb.h"
#include "server/ops/operation.h"
#include "server/ops/tensor_codec.h"

namespace layerserve {

// A Normalize request that passed validation, its tensors already float32. FLOAT32
// tensors view the request's bytes: the request must outlive the job.
struct NormalizeJob {
  v1::NormKind kind = v1::LAYER_NORM;
  DecodedTensor input;
  Float32Values weight;    // Empty: no scale.
  Float32Values bias;      // Empty: no shift.
  Float32Values residual;  // Empty: no fused residual add.
  float epsilon = 0;
  bool weight_offset = false;
  ElementType output_type = ElementType::kFloat32;
};

inline constexpr float kDefaultLayerNormEpsilon = 1e-5f;
inline constexpr float kDefaultRmsNormEpsilon = 1e-6f;

// INVALID_ARGUMENT naming the field for every malformed request.
absl::StatusOr<NormalizeJob> ParseNormalizeRequest(const v1::NormalizeRequest& request);
// The job would view a request destroyed at the end of the call's full expression.
absl::StatusOr<NormalizeJob> ParseNormalizeRequest(const v1::NormalizeRequest&& request) =
    delete;

// Runs the kernel and fills `response`; returns the output's numeric health.
OutputHealth RunNormalize(const NormalizeJob& job, v1::NormalizeResponse* response);

struct NormalizeOp : OneTensorOperation<NormalizeOp> {
  using Job = NormalizeJob;
  using Request = v1::NormalizeRequest;
  using Response = v1::NormalizeResponse;
  static constexpr const char* kMethod = "Normalize";

  static absl::StatusOr<Job> Parse(const Request& request, const ParseContext&) {
    return ParseNormalizeRequest(request);
  }
  static kernels::ValueStats InputStats(const Job& job, const OutputHealth& output);
  static OutputHealth Run(WorkerContext& worker, const Job& job, Response* response);
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_OPS_NORMALIZE_H_
