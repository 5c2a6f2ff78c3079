// Hand-written normalization row loops: RmsNorm (oneDNN 2.6 has no RMSNorm
// primitive) and LayerNormLoop (small shapes, where oneDNN's fixed per-call cost
// dominates). Plain C++ the compiler auto-vectorizes for the baseline ISA: no
// intrinsics, no -ffast-math, no OpenMP; each row is processed while in L1.
#include <cmath>
#include <limits>

#include "kernels/norm.h"
#include "kernels/norm_internal.h"

namespace layerserve::kernels {
namespace {

// Sums are kept in kLanes independent partial sums: with a fixed order of
// additions written in the source the loop vectorizes without reassociation
// flags, and the error grows with dim / kLanes instead of dim.
constexpr int kLanes = 16;

float Combine(float (&acc)[kLanes]) {
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j) acc[j] += acc[j + width];
  }
  return acc[0];
}

// Deviations are taken in two steps, (s - pivot) - offset. LayerNorm pivots on the
// row's first value (the shifted-data algorithm): s - pivot is small and mostly
// exact, so a row far from zero (mean 1e4, std 1) keeps its precision and a
// constant row gives exactly 0, hence exactly the bias. RmsNorm passes 0, 0.
float SumDeviations(const float* s, int64_t n, float pivot) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += s[i + j] - pivot;
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] += s[i] - pivot;
  return Combine(acc);
}

float SumSquaredDeviations(const float* s, int64_t n, float pivot, float offset) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const float d = (s[i + j] - pivot) - offset;
      acc[j] += d * d;
    }
  }
  for (int j = 0; i < n; ++i, ++j) {
    const float d = (s[i] - pivot) - offset;
    acc[j] += d * d;
  }
  return Combine(acc);
}

// The row to normalize: x itself, or s = x + residual written to residual_out
// (which may alias x or residual: same-index read before write).
const float* RowSource(const float* x, int64_t row, int64_t dim, const NormParams& p) {
  const float* x_row = x + row * dim;
  if (p.residual == nullptr) return x_row;
  const float* r_row = p.residual + row * dim;
  float* s_row = p.residual_out + row * dim;
  for (int64_t i = 0; i < dim; ++i) s_row[i] = x_row[i] + r_row[i];
  return s_row;
}

enum class Scale { kNone, kWeight, kOffsetWeight };

// y = ((s - pivot) - offset) * rstd * scale + shift. Variants are separate
// instantiations so each inner loop is branch-free and vectorizes. y may equal s.
template <Scale kScale, bool kShift>
void ApplyRow(const float* s, int64_t n, float pivot, float offset, float rstd,
              const NormParams& p, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    float v = ((s[i] - pivot) - offset) * rstd;
    if constexpr (kScale == Scale::kWeight) v *= p.weight[i];
    if constexpr (kScale == Scale::kOffsetWeight) v *= 1.0f + p.weight[i];
    if constexpr (kShift) v += p.bias[i];
    y[i] = v;
  }
}

using ApplyFn = void (*)(const float*, int64_t, float, float, float, const NormParams&,
                         float*);

template <bool kShift>
ApplyFn PickApply(const NormParams& p) {
  if (p.weight == nullptr) return &ApplyRow<Scale::kNone, kShift>;
  if (p.weight_offset) return &ApplyRow<Scale::kOffsetWeight, kShift>;
  return &ApplyRow<Scale::kWeight, kShift>;
}

// A row without finite float32 statistics (it holds NaN/Inf, or its sums overflow)
// becomes all NaN, as the reference does.
void FillNan(float* y_row, int64_t dim) {
  for (int64_t i = 0; i < dim; ++i) y_row[i] = std::numeric_limits<float>::quiet_NaN();
}

}  // namespace

void RmsNorm(NormContext& /*ctx*/, const float* x, int64_t rows, int64_t dim,
             const NormParams& p, float* y) {
  const ApplyFn apply = PickApply</*kShift=*/false>(p);  // No shift in RMSNorm.
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = RowSource(x, r, dim, p);
    float* y_row = y + r * dim;
    const float sum_sq = SumSquaredDeviations(s, dim, 0.0f, 0.0f);
    if (!std::isfinite(sum_sq)) {
      FillNan(y_row, dim);
      continue;
    }
    const float rstd = 1.0f / std::sqrt(sum_sq / static_cast<float>(dim) + p.epsilon);
    apply(s, dim, 0.0f, 0.0f, rstd, p, y_row);  // (s - 0) - 0 == s exactly.
  }
}

namespace internal {

void LayerNormLoop(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                   float* y) {
  const ApplyFn apply = p.bias != nullptr ? PickApply<true>(p) : PickApply<false>(p);
  const float n = static_cast<float>(dim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = RowSource(x, r, dim, p);
    float* y_row = y + r * dim;
    // Two passes (mean, then squared deviations) avoid the cancellation of
    // E[x^2] - mean^2; the row is in L1 for the second pass.
    const float pivot = s[0];
    const float mean_offset = SumDeviations(s, dim, pivot) / n;  // mean - pivot.
    // NaN or Inf anywhere in the row (or overflow) makes sum_sq NaN or Inf.
    const float sum_sq = SumSquaredDeviations(s, dim, pivot, mean_offset);
    if (!std::isfinite(sum_sq)) {
      FillNan(y_row, dim);
      continue;
    }
    const float rstd = 1.0f / std::sqrt(sum_sq / n + p.epsilon);
    apply(s, dim, pivot, mean_offset, rstd, p, y_row);
  }
}

}  // namespace internal
}  // namespace layerserve::kernels
