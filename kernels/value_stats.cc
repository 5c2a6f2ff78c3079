// ComputeValueStats / CopyWithValueStats in Google Highway, one copy per x86 target
// dispatched at run time (as norm_loops.cc). Non-finite values are rare, so the
// vector loop only notes that a chunk held one and redoes that chunk in scalar
// code; squares are summed in float lanes per chunk of kChunk values and in double
// across chunks, which keeps the RMS within ~1e-6 relative at any length.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/value_stats.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway must come after foreach_target.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/value_stats.h"

// Once, not per target: the scalar step shared by the vector loop's tails and
// redone chunks and by the reference.
#ifndef LAYERSERVE_KERNELS_VALUE_STATS_ACCOUNT_
#define LAYERSERVE_KERNELS_VALUE_STATS_ACCOUNT_
namespace layerserve::kernels {
inline void Account(float v, ValueStats& s) {
  if (std::isnan(v)) {
    ++s.nan;
  } else if (std::isinf(v)) {
    ++s.inf;
  } else {
    s.abs_max = std::max(s.abs_max, std::fabs(v));
    s.sum_squares += static_cast<double>(v) * v;
  }
}
}  // namespace layerserve::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace layerserve::kernels {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kChunk = 4096;

template <bool kCopy>
ValueStats StatsPass(const float* HWY_RESTRICT x, int64_t n, float* HWY_RESTRICT y) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  ValueStats s;
  s.count = n;
  auto vmax = hn::Zero(d);
  int64_t i = 0;
  while (n - i >= lanes) {
    const int64_t end = std::min(n, i + kChunk) - lanes;
    const int64_t chunk_start = i;
    auto sum = hn::Zero(d);
    auto bad = hn::FirstN(d, 0);  // All false.
    for (; i <= end; i += lanes) {
      const auto v = hn::LoadU(d, x + i);
      if (kCopy) hn::StoreU(v, d, y + i);
      const auto finite = hn::IsFinite(v);
      bad = hn::Or(bad, hn::Not(finite));
      const auto f = hn::IfThenElseZero(finite, v);
      vmax = hn::Max(vmax, hn::Abs(f));
      sum = hn::MulAdd(f, f, sum);
    }
    const float chunk_sum = hn::GetLane(hn::SumOfLanes(d, sum));
    if (hn::AllFalse(d, bad) && std::isfinite(chunk_sum)) {
      s.sum_squares += chunk_sum;
    } else {
      // Non-finite values, or squares beyond float range (|x| > ~1.8e19): redo
      // the chunk in scalar code, squares in double.
      for (int64_t j = chunk_start; j < i; ++j) Account(x[j], s);
    }
  }
  s.abs_max = std::max(s.abs_max, hn::GetLane(hn::MaxOfLanes(d, vmax)));
  for (; i < n; ++i) {
    if (kCopy) y[i] = x[i];
    Account(x[i], s);
  }
  return s;
}

}  // namespace

ValueStats ComputeStatsTarget(const float* x, int64_t n) {
  return StatsPass<false>(x, n, nullptr);
}
ValueStats CopyStatsTarget(const float* x, int64_t n, float* y) {
  return StatsPass<true>(x, n, y);
}

}  // namespace HWY_NAMESPACE
}  // namespace layerserve::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace layerserve::kernels {

HWY_EXPORT(ComputeStatsTarget);
HWY_EXPORT(CopyStatsTarget);

ValueStats ComputeValueStats(const float* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(ComputeStatsTarget)(x, n);
}

ValueStats CopyWithValueStats(const float* x, int64_t n, float* y) {
  return HWY_DYNAMIC_DISPATCH(CopyStatsTarget)(x, n, y);
}

ValueStats ValueStatsReference(const float* x, int64_t n) {
  ValueStats s;
  s.count = n;
  for (int64_t i = 0; i < n; ++i) Account(x[i], s);
  return s;
}

}  // namespace layerserve::kernels
#endif  // HWY_ONCE
