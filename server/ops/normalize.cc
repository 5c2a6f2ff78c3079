#include "server/ops/normalize.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/ops/input_stats.h"
#include "server/ops/worker_context.h"

namespace layerserve {
namespace {

// A [D] parameter tensor (weight or bias) whose length must equal the input's last
// dimension.
absl::StatusOr<Float32Values> DecodeRowParameter(const v1::Tensor& tensor,
                                                 absl::string_view field, int64_t dim) {
  ASSIGN_OR_RETURN(DecodedTensor decoded, DecodeTensor(tensor, field, {1, 1}));
  if (decoded.info.shape[0] != dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape: length ", decoded.info.shape[0],
                     " does not match input's last dimension ", dim));
  }
  return std::move(decoded.values);
}

}  // namespace

absl::StatusOr<NormalizeJob> ParseNormalizeRequest(const v1::NormalizeRequest& request) {
  NormalizeJob job;
  switch (request.kind()) {
    case v1::LAYER_NORM:
    case v1::RMS_NORM:
      job.kind = request.kind();
      break;
    case v1::NORM_KIND_UNSPECIFIED:
      return absl::InvalidArgumentError(
          "kind: NORM_KIND_UNSPECIFIED; set LAYER_NORM or RMS_NORM");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("kind: unknown NormKind ", static_cast<int>(request.kind())));
  }
  if (!request.has_input()) return absl::InvalidArgumentError("input: required");
  ASSIGN_OR_RETURN(job.input, DecodeTensor(request.input(), "input", {1, 8}));
  const int64_t dim = job.input.info.last_dim();

  if (request.has_weight()) {
    ASSIGN_OR_RETURN(job.weight, DecodeRowParameter(request.weight(), "weight", dim));
  }
  if (request.has_bias()) {
    if (job.kind == v1::RMS_NORM) {
      return absl::InvalidArgumentError("bias: RMS_NORM takes no bias");
    }
    ASSIGN_OR_RETURN(job.bias, DecodeRowParameter(request.bias(), "bias", dim));
  }
  job.weight_offset = request.weight_offset();
  if (job.weight_offset && !request.has_weight()) {
    return absl::InvalidArgumentError("weight_offset: requires weight");
  }

  job.epsilon =
      job.kind == v1::LAYER_NORM ? kDefaultLayerNormEpsilon : kDefaultRmsNormEpsilon;
  if (request.has_epsilon()) {
    job.epsilon = request.epsilon();
    if (!std::isfinite(job.epsilon) || job.epsilon < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("epsilon: ", job.epsilon, " must be finite and >= 0"));
    }
  }

  if (request.has_residual()) {
    ASSIGN_OR_RETURN(DecodedTensor residual,
                     DecodeTensor(request.residual(), "residual", {1, 8}));
    if (residual.info.shape != job.input.info.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("residual.shape: ", ShapeToString(residual.info.shape),
                       " must equal input.shape ", ShapeToString(job.input.info.shape)));
    }
    job.residual = std::move(residual.values);
  }
  ASSIGN_OR_RETURN(
      job.output_type,
      ResolveOutputType(request.output_dtype(), job.input.info.dtype, "output_dtype"));
  return job;
}

// Rows with nothing to normalize: constant rows for LayerNorm (their output is
// the bias: usually a sign of a dead upstream layer), all-zero rows for RMSNorm.
// Stops at a row's first differing value, so a normal row costs two reads.
int64_t CountZeroVarianceRows(const float* x, int64_t rows, int64_t dim,
                              v1::NormKind kind) {
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * dim;
    const float first = kind == v1::LAYER_NORM ? row[0] : 0.0f;
    int64_t i = 0;
    while (i < dim && row[i] == first) ++i;
    if (i == dim) ++count;
  }
  return count;
}

OutputHealth RunNormalize(const NormalizeJob& job, v1::NormalizeResponse* response) {
  const TensorInfo& info = job.input.info;
  kernels::NormParams params;
  params.epsilon = job.epsilon;
  params.weight = job.weight.empty() ? nullptr : job.weight.data();
  params.bias = job.bias.empty() ? nullptr : job.bias.data();
  params.weight_offset = job.weight_offset;
  // Taken by the kernel as it writes the output: no second read of it.
  kernels::ValueStats output_stats;
  params.output_stats = &output_stats;
  std::vector<float> residual_out;
  if (!job.residual.empty()) {
    residual_out.resize(info.elements);
    params.residual = job.residual.data();
    params.residual_out = residual_out.data();
  }
  OutputHealth health = FillTensor(
      info.shape, info.elements, job.output_type, response->mutable_output(),
      [&](float* output) {
        if (job.kind == v1::LAYER_NORM) {
          kernels::LayerNorm(job.input.values.data(), info.rows(), info.last_dim(),
                             params, output);
        } else {
          kernels::RmsNorm(job.input.values.data(), info.rows(), info.last_dim(), params,
                           output);
        }
      },
      &output_stats);
  const float* normalized =
      residual_out.empty() ? job.input.values.data() : residual_out.data();
  health.zero_variance_rows =
      CountZeroVarianceRows(normalized, info.rows(), info.last_dim(), job.kind);
  if (!residual_out.empty()) {
    health.saturated += EncodeTensor(info.shape, residual_out.data(), info.elements,
                                     job.output_type, response->mutable_residual_out());
  }
  return health;
}

// A norm makes a NaN of every NaN or Inf it is given: a NaN makes its row all
// NaN, and so does an Inf in LayerNorm (mean and variance are NaN), while RMSNorm,
// as PyTorch, gives NaN at each Inf (mean square +Inf, rsqrt 0, Inf * 0 = NaN;
// then NaN * weight) and +-0 beside it. So an input with either has an output
// with NaN.
kernels::ValueStats NormalizeOp::InputStats(const Job& job, const OutputHealth& output) {
  return StatsUnlessOutputFinite(job.input, output);
}

OutputHealth NormalizeOp::Run(WorkerContext& /*worker*/, const Job& job,
                              Response* response) {
  return RunNormalize(job, response);
}

}  // namespace layerserve
