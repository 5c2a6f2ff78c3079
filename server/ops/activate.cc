#include "server/ops/activate.h"

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/ops/input_stats.h"
#include "server/ops/worker_context.h"

namespace layerserve {
namespace {

using kernels::Activation;

struct ActivationKind {
  Activation activation;
  bool gated;
};

// The kernel activation of each wire value; nullopt for values that are not one.
std::optional<ActivationKind> KindOf(v1::Activation activation) {
  switch (activation) {
    case v1::RELU:
      return ActivationKind{Activation::kRelu, false};
    case v1::GELU:
      return ActivationKind{Activation::kGelu, false};
    case v1::GELU_TANH:
      return ActivationKind{Activation::kGeluTanh, false};
    case v1::SILU:
      return ActivationKind{Activation::kSilu, false};
    case v1::SIGMOID:
      return ActivationKind{Activation::kSigmoid, false};
    case v1::TANH:
      return ActivationKind{Activation::kTanh, false};
    case v1::QUICK_GELU:
      return ActivationKind{Activation::kQuickGelu, false};
    case v1::SWIGLU:
      return ActivationKind{Activation::kSilu, true};
    case v1::GEGLU:
      return ActivationKind{Activation::kGelu, true};
    case v1::GEGLU_TANH:
      return ActivationKind{Activation::kGeluTanh, true};
    case v1::REGLU:
      return ActivationKind{Activation::kRelu, true};
    default:
      return std::nullopt;
  }
}

}  // namespace

absl::StatusOr<ActivateJob> ParseActivateRequest(const v1::ActivateRequest& request) {
  ActivateJob job;
  if (request.activation() == v1::ACTIVATION_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        "activation: ACTIVATION_UNSPECIFIED; set RELU, GELU, GELU_TANH, SILU, SIGMOID, "
        "TANH, QUICK_GELU, SWIGLU, GEGLU, GEGLU_TANH or REGLU");
  }
  const std::optional<ActivationKind> kind = KindOf(request.activation());
  if (!kind.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "activation: unknown Activation ", static_cast<int>(request.activation())));
  }
  job.activation = kind->activation;
  const std::string name = v1::Activation_Name(request.activation());
  // Checked before decoding anything: a cheap error first.
  if (request.has_gate() && !kind->gated) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gate: ", name,
        " is element-wise and takes no gate; only SWIGLU, GEGLU, GEGLU_TANH and REGLU "
        "do"));
  }
  if (!request.has_input()) return absl::InvalidArgumentError("input: required");
  ASSIGN_OR_RETURN(job.input, DecodeTensor(request.input(), "input", {1, 8}));
  const std::vector<int64_t>& shape = job.input.info.shape;
  job.output_shape = shape;

  if (!kind->gated) {
    job.form = ActivateJob::Form::kElementwise;
  } else if (request.has_gate()) {
    job.form = ActivateJob::Form::kGatedTwoTensors;
    ASSIGN_OR_RETURN(DecodedTensor gate, DecodeTensor(request.gate(), "gate", {1, 8}));
    if (gate.info.shape != shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("gate.shape: ", ShapeToString(gate.info.shape),
                       " must equal input.shape ", ShapeToString(shape)));
    }
    job.gate = std::move(gate.values);
  } else {
    job.form = ActivateJob::Form::kGatedPacked;
    if (shape.back() % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input.shape: packed gate+up needs an even last dim, got ", shape.back()));
    }
    job.output_shape.back() = shape.back() / 2;
  }
  ASSIGN_OR_RETURN(
      job.output_type,
      ResolveOutputType(request.output_dtype(), job.input.info.dtype, "output_dtype"));
  return job;
}

OutputHealth RunActivate(const ActivateJob& job, v1::ActivateResponse* response) {
  const TensorInfo& info = job.input.info;
  const float* x = job.input.values.data();
  const int64_t outputs = job.form == ActivateJob::Form::kGatedPacked
                              ? info.rows() * (info.last_dim() / 2)
                              : info.elements;
  // The kernel writes the response's bytes directly (FLOAT32 outputs), and takes
  // their statistics as it writes them, checking its inputs as it reads them: no
  // second read of either in the common case.
  kernels::ValueStats output_stats;
  bool inputs_finite = false;
  OutputHealth health = FillTensor(
      job.output_shape, outputs, job.output_type, response->mutable_output(),
      [&](float* y) {
        switch (job.form) {
          case ActivateJob::Form::kElementwise:
            kernels::Activate(job.activation, x, info.elements, y, &output_stats,
                              &inputs_finite);
            break;
          case ActivateJob::Form::kGatedTwoTensors:
            kernels::GatedActivate(job.activation, job.gate.data(), x, info.rows(),
                                   info.last_dim(), info.last_dim(), y, &output_stats,
                                   &inputs_finite);
            break;
          case ActivateJob::Form::kGatedPacked: {
            const int64_t f = info.last_dim() / 2;
            kernels::GatedActivate(job.activation, x, x + f, info.rows(), f, 2 * f, y,
                                   &output_stats, &inputs_finite);
            break;
          }
        }
      },
      &output_stats);
  health.inputs_seen_finite = inputs_finite;
  return health;
}

// The activation loops check their inputs as they read them (an output does not
// tell: ReLU, sigmoid and tanh send -Inf to finite values). The gate, when a
// tensor of its own, is an input too.
kernels::ValueStats ActivateOp::InputStats(const Job& job, const OutputHealth& output) {
  const int64_t gate_count = job.gate.size();
  if (output.inputs_seen_finite) return AllFinite(job.input.info.elements + gate_count);
  kernels::ValueStats stats = ValueStatsOf(job.input);
  if (gate_count > 0)
    stats.Merge(kernels::ComputeValueStats(job.gate.data(), gate_count));
  return stats;
}

OutputHealth ActivateOp::Run(WorkerContext& /*worker*/, const Job& job,
                             Response* response) {
  return RunActivate(job, response);
}

}  // namespace layerserve
