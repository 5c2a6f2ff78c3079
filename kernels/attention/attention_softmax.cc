// MaskedSoftmaxRows in Google Highway, one copy per x86 target, dispatched at run
// time (the binary stays baseline x86-64). Three passes over a row of scores that
// fits in L1/L2: scale and max, exp and sums, normalize.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention/attention_softmax.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway must come after foreach_target.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/attention/attention.h"

HWY_BEFORE_NAMESPACE();
namespace layerserve::kernels {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// The rare row with -Inf scores (already scaled) beside a finite max: those get
// weight exactly 0 and add nothing to the entropy (the vector loop would compute
// 0 * -Inf = NaN there).
double SoftmaxRowWithNegativeInfinity(float* x, int64_t n, int64_t width, float max) {
  double sum = 0, dot = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float shifted = x[i] - max;
    x[i] = std::isinf(shifted) ? 0.0f : std::exp(shifted);
    sum += x[i];
    if (x[i] > 0) dot += double(x[i]) * shifted;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
  std::memset(x + n, 0, (width - n) * sizeof(float));
  return std::log(sum) - dot / sum;
}

// One row: x[0, n) becomes the distribution, x[n, width) zeros. Returns the entropy.
double SoftmaxRow(float* x, int64_t n, int64_t width, float scale) {
  const D d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const V vscale = hn::Set(d, scale);
  // Pass 1: scale in place, find the max (the tail padded with -inf). `probe` sums
  // v * 0: it stays 0 unless some v is NaN or +-Inf, which the max cannot be
  // trusted to show (x86's max drops a NaN operand, and Exp clamps NaN).
  V vmax = hn::Set(d, -std::numeric_limits<float>::infinity());
  V vprobe = hn::Zero(d);
  const V zero = hn::Zero(d);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const V v = hn::Mul(hn::LoadU(d, x + i), vscale);
    hn::StoreU(v, d, x + i);
    vmax = hn::Max(vmax, v);
    vprobe = hn::MulAdd(v, zero, vprobe);
  }
  float max = hn::GetLane(hn::MaxOfLanes(d, vmax));
  float probe = hn::GetLane(hn::SumOfLanes(d, vprobe));
  for (; i < n; ++i) {
    x[i] *= scale;
    max = std::max(max, x[i]);
    probe += x[i] * 0.0f;
  }
  if (std::isnan(probe)) {
    // As in PyTorch: a NaN or +Inf score, or only -Inf scores, make the whole row
    // NaN (exp(x - max) is NaN somewhere); -Inf scores beside a finite max are just
    // weight 0. Such a row adds no entropy (as in the reference): a NaN would stay in
    // the entropy histogram's sum forever; the NaN outputs are counted elsewhere.
    bool poisoned = std::isinf(max);
    for (int64_t j = 0; j < n && !poisoned; ++j) poisoned = std::isnan(x[j]);
    if (poisoned) {
      std::fill(x, x + n, std::numeric_limits<float>::quiet_NaN());
      std::memset(x + n, 0, (width - n) * sizeof(float));
      return 0.0;
    }
    return SoftmaxRowWithNegativeInfinity(x, n, width, max);
  }
  // Pass 2: e = exp(x - max); sum e and e * (x - max) for the entropy
  // H = log(sum) - sum(e * (x - max)) / sum.
  const V vm = hn::Set(d, max);
  V vsum = hn::Zero(d), vdot = hn::Zero(d);
  i = 0;
  for (; i + lanes <= n; i += lanes) {
    const V shifted = hn::Sub(hn::LoadU(d, x + i), vm);
    const V e = hn::Exp(d, shifted);
    hn::StoreU(e, d, x + i);
    vsum = hn::Add(vsum, e);
    vdot = hn::MulAdd(e, shifted, vdot);
  }
  double sum = hn::GetLane(hn::SumOfLanes(d, vsum));
  double dot = hn::GetLane(hn::SumOfLanes(d, vdot));
  for (; i < n; ++i) {
    const float shifted = x[i] - max;
    const float e = std::exp(shifted);
    x[i] = e;
    sum += e;
    dot += double(e) * shifted;
  }
  // Pass 3: normalize; zero the masked tail.
  const float inv = static_cast<float>(1.0 / sum);
  const V vinv = hn::Set(d, inv);
  i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(hn::Mul(hn::LoadU(d, x + i), vinv), d, x + i);
  for (; i < n; ++i) x[i] *= inv;
  std::memset(x + n, 0, (width - n) * sizeof(float));
  return std::log(sum) - dot / sum;
}

}  // namespace

void SoftmaxRowsImpl(float* scores, int64_t rows, int64_t width, const int64_t* limits,
                     float scale, double* entropy) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = scores + r * width;
    const int64_t n = limits[r];
    double h = 0;
    if (n == 0) {
      std::memset(row, 0, width * sizeof(float));
    } else {
      h = SoftmaxRow(row, n, width, scale);
    }
    if (entropy != nullptr) entropy[r] = h;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace layerserve::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace layerserve::kernels {

HWY_EXPORT(SoftmaxRowsImpl);

void MaskedSoftmaxRows(float* scores, int64_t rows, int64_t width, const int64_t* limits,
                       float scale, double* entropy) {
  HWY_DYNAMIC_DISPATCH(SoftmaxRowsImpl)(scores, rows, width, limits, scale, entropy);
}

}  // namespace layerserve::kernels
#endif  // HWY_ONCE
