// ComputeValueStats / CopyWithValueStats in Google Highway, one copy per x86 target
// dispatched at run time (as kernels/norm/norm_fast.cc): a ValueTally (value_tally-inl.h)
// folded every kChunk values.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/value_stats/value_stats.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway must come after foreach_target.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/value_stats/value_stats.h"
#include "kernels/value_stats/value_tally-inl.h"

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
  ValueTally tally;
  int64_t i = 0;
  while (n - i >= lanes) {
    const int64_t end = std::min(n, i + kChunk) - lanes;
    const int64_t chunk_start = i;
    for (; i <= end; i += lanes) {
      const auto v = tally.Add(hn::LoadU(d, x + i));
      if (kCopy) hn::StoreU(v, d, y + i);
    }
    tally.Fold(x + chunk_start, static_cast<size_t>(i - chunk_start), s);
  }
  s.count += n - i;
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
