// Scalar reference normalization: one row at a time, statistics in double so that
// they are exact enough to judge the float32 fast kernels (and no finite float32
// input can overflow them: 4097 * 3.4e38^2 is far inside double's range).
//
// The contract is float32 compute, though: a finite row whose statistics are
// beyond float32 range (its sum or sum of squares overflows, at |x| >~ 1e17 for
// dim 4096) has no float32 answer, so it becomes NaN like a row holding NaN.
// Rows holding +-Inf come out as PyTorch's float32 formulas give them: LayerNorm's
// mean and variance are then NaN, so the row is all NaN; RMSNorm's mean square is
// +Inf and rsqrt(+Inf) = 0, so y = s * 0 * scale: NaN at each Inf, +-0 elsewhere.
#include <cassert>
#include <cmath>
#include <limits>

#include "kernels/norm/norm.h"

namespace layerserve::kernels {
namespace {

// Returns the row to normalize: x itself, or s = x + residual (added in float32, as
// the fast kernels and PyTorch do) written to residual_out.
const float* ResidualSum(const float* x, int64_t dim, int64_t row, const NormParams& p) {
  const float* x_row = x + row * dim;
  if (p.residual == nullptr) return x_row;
  assert(p.residual_out != nullptr);
  const float* r_row = p.residual + row * dim;
  float* s_row = p.residual_out + row * dim;
  for (int64_t i = 0; i < dim; ++i) s_row[i] = x_row[i] + r_row[i];
  return s_row;
}

double Scale(const NormParams& p, int64_t i) {
  if (p.weight == nullptr) return 1.0;
  return p.weight_offset ? 1.0 + p.weight[i] : p.weight[i];
}

constexpr double kFloatMax = std::numeric_limits<float>::max();

// A row without float32 statistics (NaN, or a finite row that overflows them)
// becomes all NaN, so the caller's health check sees it and no half-finite row
// slips through.
void FillNan(float* y_row, int64_t dim) {
  for (int64_t i = 0; i < dim; ++i) y_row[i] = std::numeric_limits<float>::quiet_NaN();
}

}  // namespace

void LayerNormReference(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                        float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = ResidualSum(x, dim, r, p);
    float* y_row = y + r * dim;
    double sum = 0;
    for (int64_t i = 0; i < dim; ++i) sum += s[i];
    const double mean = sum / dim;
    double sq = 0;  // Two passes: no cancellation from E[x^2] - mean^2.
    for (int64_t i = 0; i < dim; ++i) sq += (s[i] - mean) * (s[i] - mean);
    // NaN/Inf inputs make these NaN or Inf, which fail the comparisons too.
    if (!(std::fabs(sum) <= kFloatMax && sq <= kFloatMax)) {
      FillNan(y_row, dim);
      continue;
    }
    const double var = sq / dim;  // Biased, as torch.nn.functional.layer_norm.
    const double rstd = 1.0 / std::sqrt(var + p.epsilon);
    for (int64_t i = 0; i < dim; ++i) {
      const double shift = p.bias != nullptr ? p.bias[i] : 0.0;
      y_row[i] = static_cast<float>((s[i] - mean) * rstd * Scale(p, i) + shift);
    }
  }
}

void RmsNormReference(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                      float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = ResidualSum(x, dim, r, p);
    float* y_row = y + r * dim;
    double sq = 0;
    bool has_inf = false;
    for (int64_t i = 0; i < dim; ++i) {
      sq += static_cast<double>(s[i]) * s[i];
      has_inf |= std::isinf(s[i]);
    }
    double rstd;
    if (sq <= kFloatMax) {
      rstd = 1.0 / std::sqrt(sq / dim + p.epsilon);
    } else if (has_inf && !std::isnan(sq)) {
      rstd = 0.0;  // rsqrt(+Inf): NaN at the Infs (Inf * 0), +-0 elsewhere.
    } else {
      FillNan(y_row, dim);  // NaN, or a finite row beyond float32.
      continue;
    }
    for (int64_t i = 0; i < dim; ++i) {
      y_row[i] = static_cast<float>(s[i] * rstd * Scale(p, i));
    }
  }
}

}  // namespace layerserve::kernels
