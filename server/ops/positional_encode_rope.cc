#include "server/ops/positional_encode_rope.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/ops/positions.h"

namespace layerserve {
namespace {

using kernels::RopeScalingType;

const char* ScalingTypeName(RopeScalingType type) {
  switch (type) {
    case RopeScalingType::kNone:
      return "NONE";
    case RopeScalingType::kLinear:
      return "LINEAR";
    case RopeScalingType::kDynamicNtk:
      return "DYNAMIC_NTK";
    case RopeScalingType::kYarn:
      return "YARN";
    case RopeScalingType::kLlama3:
      return "LLAMA3";
  }
  return "?";
}

// An optional float of RopeScaling that must be finite and > 0 when given.
absl::Status CheckPositive(absl::string_view name, float value) {
  if (!std::isfinite(value) || value <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope.scaling.", name, ": ", value, " must be finite and > 0"));
  }
  return absl::OkStatus();
}

// Validates `scaling` and fills in Hugging Face's defaults.
absl::StatusOr<kernels::RopeScaling> ParseScaling(const v1::RopeScaling& scaling) {
  kernels::RopeScaling out;
  switch (scaling.type()) {
    case v1::RopeScaling::NONE:
      return out;  // Every other field is ignored, as HF ignores them.
    case v1::RopeScaling::LINEAR:
      out.type = RopeScalingType::kLinear;
      break;
    case v1::RopeScaling::DYNAMIC_NTK:
      out.type = RopeScalingType::kDynamicNtk;
      break;
    case v1::RopeScaling::YARN:
      out.type = RopeScalingType::kYarn;
      break;
    case v1::RopeScaling::LLAMA3:
      out.type = RopeScalingType::kLlama3;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("rope.scaling.type: unknown RopeScaling.Type ",
                       static_cast<int>(scaling.type())));
  }
  out.factor = scaling.factor();
  if (!std::isfinite(out.factor) || out.factor < 1) {
    return absl::InvalidArgumentError(absl::StrCat("rope.scaling.factor: ", out.factor,
                                                   " must be finite and >= 1 for ",
                                                   ScalingTypeName(out.type)));
  }
  if (out.type == RopeScalingType::kLinear) return out;

  out.original_max_position_embeddings = scaling.original_max_position_embeddings();
  if (out.original_max_position_embeddings < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope.scaling.original_max_position_embeddings: ",
                     out.original_max_position_embeddings, " must be >= 1 for ",
                     ScalingTypeName(out.type)));
  }
  if (out.type == RopeScalingType::kYarn) {
    if (scaling.has_beta_fast()) out.beta_fast = scaling.beta_fast();
    if (scaling.has_beta_slow()) out.beta_slow = scaling.beta_slow();
    RETURN_IF_ERROR(CheckPositive("beta_fast", out.beta_fast));
    RETURN_IF_ERROR(CheckPositive("beta_slow", out.beta_slow));
    if (out.beta_fast <= out.beta_slow) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope.scaling.beta_fast: ", out.beta_fast, " must be > beta_slow ",
                       out.beta_slow));
    }
    if (scaling.has_attention_factor()) {
      out.has_attention_factor = true;
      out.attention_factor = scaling.attention_factor();
      RETURN_IF_ERROR(CheckPositive("attention_factor", out.attention_factor));
    }
  } else if (out.type == RopeScalingType::kLlama3) {
    if (scaling.has_low_freq_factor()) out.low_freq_factor = scaling.low_freq_factor();
    if (scaling.has_high_freq_factor()) out.high_freq_factor = scaling.high_freq_factor();
    RETURN_IF_ERROR(CheckPositive("low_freq_factor", out.low_freq_factor));
    RETURN_IF_ERROR(CheckPositive("high_freq_factor", out.high_freq_factor));
    if (out.low_freq_factor >= out.high_freq_factor) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope.scaling.low_freq_factor: ", out.low_freq_factor,
                       " must be < high_freq_factor ", out.high_freq_factor));
    }
  }
  return out;
}

// Dimension `index` of a rank-4 shape in layout order, named in errors.
struct Dims {
  int64_t batch, heads, tokens, head_dim;
};

Dims DimsOf(const std::vector<int64_t>& shape, bool bhtd) {
  return bhtd ? Dims{shape[0], shape[1], shape[2], shape[3]}
              : Dims{shape[0], shape[2], shape[1], shape[3]};
}

}  // namespace

absl::StatusOr<RopeJob> ParseRope(const v1::Rope& rope, v1::DataType output_dtype) {
  RopeJob job;
  switch (rope.layout()) {
    case v1::Rope::LAYOUT_UNSPECIFIED:
    case v1::Rope::BHTD:
      job.bhtd = true;
      break;
    case v1::Rope::BTHD:
      job.bhtd = false;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("rope.layout: unknown Rope.Layout ",
                                                     static_cast<int>(rope.layout())));
  }
  switch (rope.style()) {
    case v1::Rope::STYLE_UNSPECIFIED:
    case v1::Rope::HALF:
      job.style = kernels::RopeStyle::kHalf;
      break;
    case v1::Rope::INTERLEAVED:
      job.style = kernels::RopeStyle::kInterleaved;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("rope.style: unknown Rope.Style ",
                                                     static_cast<int>(rope.style())));
  }
  const char* layout_name = job.bhtd ? "BHTD" : "BTHD";

  if (!rope.has_query()) return absl::InvalidArgumentError("rope.query: required");
  ASSIGN_OR_RETURN(job.query, DecodeTensor(rope.query(), "rope.query", {4, 4}));
  const Dims q = DimsOf(job.query.info.shape, job.bhtd);
  job.batch = q.batch;
  job.tokens = q.tokens;
  job.query_heads = q.heads;
  job.head_dim = q.head_dim;

  if (rope.has_key()) {
    job.has_key = true;
    ASSIGN_OR_RETURN(job.key, DecodeTensor(rope.key(), "rope.key", {4, 4}));
    const Dims k = DimsOf(job.key.info.shape, job.bhtd);
    if (k.batch != q.batch || k.tokens != q.tokens || k.head_dim != q.head_dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope.key.shape: ", ShapeToString(job.key.info.shape), " (",
                       layout_name, ") must have the B, T and Dh of rope.query.shape ",
                       ShapeToString(job.query.info.shape), ": B=", q.batch,
                       ", T=", q.tokens, ", Dh=", q.head_dim));
    }
    if (q.heads % k.heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat("rope.key.shape: ", k.heads,
                                                     " key heads must divide the ",
                                                     q.heads, " query heads"));
    }
    job.key_heads = k.heads;
  }

  job.rotary_dim = rope.rotary_dim();
  if (job.rotary_dim < 0) {
    return absl::InvalidArgumentError(absl::StrCat("rope.rotary_dim: ", job.rotary_dim,
                                                   " must be >= 0 (0 = head dim)"));
  }
  if (job.rotary_dim > job.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("rope.rotary_dim: ", job.rotary_dim,
                                                   " exceeds head dim ", job.head_dim));
  }
  if (job.rotary_dim == 0) {
    job.rotary_dim = job.head_dim;
    if (job.rotary_dim % 2 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope.rotary_dim: 0 means head dim ", job.head_dim,
                       ", which is odd; set an even rotary_dim"));
    }
  } else if (job.rotary_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope.rotary_dim: ", job.rotary_dim, " must be even"));
  }

  float theta = kDefaultRopeTheta;
  if (rope.has_theta()) {
    theta = rope.theta();
    if (!std::isfinite(theta) || theta <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope.theta: ", theta, " must be finite and > 0"));
    }
  }
  ASSIGN_OR_RETURN(const kernels::RopeScaling scaling, ParseScaling(rope.scaling()));

  ASSIGN_OR_RETURN(job.positions,
                   ResolvePositions(rope.position_offset(), rope.positions(), job.batch,
                                    job.tokens, "rope."));
  // Positions shared by every batch row need one table row per token, not B.
  job.shared_positions =
      job.batch == 1 || rope.positions_size() != job.batch * job.tokens;
  if (job.shared_positions) job.positions.resize(job.tokens);

  const int64_t max_position =
      *std::max_element(job.positions.begin(), job.positions.end());
  // Clamped: an L past int64 (position INT64_MAX) only matters to dynamic NTK,
  // where any L that large gives the same float32 base.
  const int64_t seq_len = max_position == INT64_MAX ? max_position : max_position + 1;
  job.frequencies =
      kernels::ComputeRopeFrequencies(theta, job.rotary_dim, scaling, seq_len);

  ASSIGN_OR_RETURN(job.output_type,
                   ResolveOutputType(output_dtype, job.query.info.dtype, "output_dtype"));
  return job;
}

OutputHealth RunRope(const RopeJob& job, v1::PositionalEncodeResponse* response) {
  const int64_t table_rows = static_cast<int64_t>(job.positions.size());
  std::vector<float> cos(table_rows * job.rotary_dim);
  std::vector<float> sin(table_rows * job.rotary_dim);
  kernels::ComputeRopeTables(job.frequencies, job.style, job.positions.data(), table_rows,
                             cos.data(), sin.data());

  // Rotated straight into the reply's bytes (FLOAT32; through a float buffer for
  // 16-bit outputs), as the other methods' kernels write theirs: no zeroed
  // buffer, no copy. The kernel takes each output's statistics as it writes it:
  // the query's are the reply's numeric health; of the key's only the NaN and Inf
  // count is used (to tell whether the input needs reading for its own).
  auto rotate = [&](const DecodedTensor& tensor, int64_t heads, v1::Tensor* out) {
    const kernels::RopeGeometry geometry = kernels::ContiguousRopeGeometry(
        job.bhtd, job.batch, heads, job.tokens, job.head_dim, job.rotary_dim,
        job.shared_positions);
    kernels::ValueStats stats;
    return FillTensor(
        tensor.info.shape, tensor.info.elements, job.output_type, out,
        [&](float* y) {
          kernels::ApplyRope(tensor.values.data(), y, geometry, job.style, cos.data(),
                             sin.data(), &stats);
        },
        &stats);
  };
  OutputHealth health = rotate(job.query, job.query_heads, response->mutable_output());
  if (job.has_key) {
    const OutputHealth key = rotate(job.key, job.key_heads, response->mutable_key());
    health.saturated += key.saturated;
    health.other_outputs_nonfinite += key.stats.nan + key.stats.inf;
  }
  return health;
}

}  // namespace layerserve
