// The Activate RPC apart from transport: request validation (every error names its
// field), execution of the kernel, and ActivateOp, what the dispatcher
// (server/rpc/dispatch.h) needs of it (server/ops/operation.h). Stateless; safe
// from any thread.
#ifndef LAYERSERVE_SERVER_OPS_ACTIVATE_H_
#define LAYERSERVE_SERVER_OPS_ACTIVATE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "kernels/activation/activation.h"
#include "kernels/value_stats/value_stats.h"
#include "layerserve/v1/layerserve.pb.h"
#include "server/ops/operation.h"
#include "server/ops/tensor_codec.h"

namespace layerserve {

// An Activate request that passed validation, its tensors already float32. FLOAT32
// tensors view the request's bytes: the request must outlive the job.
struct ActivateJob {
  // The element-wise activation, or the one applied to the gate (SWIGLU: kSilu).
  kernels::Activation activation = kernels::Activation::kRelu;
  enum class Form { kElementwise, kGatedTwoTensors, kGatedPacked };
  Form form = Form::kElementwise;
  // Element-wise: x. Gated with a gate tensor: up. Packed: [..., 2F], gate first.
  DecodedTensor input;
  Float32Values gate;  // kGatedTwoTensors only, input's shape.
  std::vector<int64_t> output_shape;
  ElementType output_type = ElementType::kFloat32;
};

// INVALID_ARGUMENT naming the field for every malformed request.
absl::StatusOr<ActivateJob> ParseActivateRequest(const v1::ActivateRequest& request);
// The job would view a request destroyed at the end of the call's full expression.
absl::StatusOr<ActivateJob> ParseActivateRequest(const v1::ActivateRequest&& request) =
    delete;

// Runs the kernel and fills `response`; returns the output's numeric health.
OutputHealth RunActivate(const ActivateJob& job, v1::ActivateResponse* response);

struct ActivateOp : OneTensorOperation<ActivateOp> {
  using Job = ActivateJob;
  using Request = v1::ActivateRequest;
  using Response = v1::ActivateResponse;
  static constexpr const char* kMethod = "Activate";

  static absl::StatusOr<Job> Parse(const Request& request, const ParseContext&) {
    return ParseActivateRequest(request);
  }
  static kernels::ValueStats InputStats(const Job& job, const OutputHealth& output);
  static OutputHealth Run(WorkerContext& worker, const Job& job, Response* response);
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_OPS_ACTIVATE_H_
