// ValueTally: the statistics of ValueStats (value_stats.h) taken in vector
// registers by a Highway loop as it writes its output, so the output is not read
// again for them. Shared by ComputeValueStats (value_stats.cc), the norms'
// output pass (norm_loops.cc) and the activations (activation_hwy.cc).
//
// Per-target code: include it after hwy/highway.h in a file that Highway compiles
// once per target (hwy/foreach_target.h). The guard below is Highway's pattern
// for such headers: toggled per target rather than set once.
#if defined(LAYERSERVE_KERNELS_VALUE_TALLY_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LAYERSERVE_KERNELS_VALUE_TALLY_INL_H_
#undef LAYERSERVE_KERNELS_VALUE_TALLY_INL_H_
#else
#define LAYERSERVE_KERNELS_VALUE_TALLY_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "kernels/value_stats.h"

HWY_BEFORE_NAMESPACE();
namespace layerserve::kernels {
namespace HWY_NAMESPACE {

// Lanes tallied since the last Fold: their largest magnitude and their sum of
// squares in float lanes. Non-finite values are rare, so the loop does not test
// for them: a NaN or Inf makes the sum of squares NaN or Inf (as does a square
// beyond float's range, |v| > ~1.8e19), and Fold then recounts those values in
// scalar code. Three vector operations per vector written. Fold at least every
// few thousand values (ComputeValueStats: 4096; the norms: every row): float sums
// over short runs, added in double, keep the RMS within ~1e-6 relative.
struct ValueTally {
  using D = hwy::HWY_NAMESPACE::ScalableTag<float>;
  using V = hwy::HWY_NAMESPACE::Vec<D>;

  // Defined here, not by member initializers: an implicit constructor would not be
  // compiled for this target.
  HWY_INLINE ValueTally()
      : abs_max(hwy::HWY_NAMESPACE::Zero(D())), sum_sq(hwy::HWY_NAMESPACE::Zero(D())) {}

  V abs_max;  // Since the last Fold; meaningful only when sum_sq is finite.
  V sum_sq;   // Since the last Fold.

  // Tallies the lanes of v, which the caller writes; returns v. Lanes it does not
  // write must be zero.
  HWY_INLINE V Add(V v) {
    namespace hn = hwy::HWY_NAMESPACE;
    abs_max = hn::Max(abs_max, hn::Abs(v));
    sum_sq = hn::MulAdd(v, v, sum_sq);
    return v;
  }

  // Adds the values tallied since the last Fold, values[0, n) as written, to
  // `stats`: from the lanes when their sum of squares is finite (then every value
  // was finite and Max saw no NaN), else from the values again, one by one, as
  // ValueStatsReference counts them.
  HWY_INLINE void Fold(const float* values, size_t n, ValueStats& stats) {
    namespace hn = hwy::HWY_NAMESPACE;
    const D d;
    const float sum = hn::GetLane(hn::SumOfLanes(d, sum_sq));
    if (std::isfinite(sum)) {
      stats.count += static_cast<int64_t>(n);
      stats.sum_squares += sum;
      stats.abs_max = std::max(stats.abs_max, hn::GetLane(hn::MaxOfLanes(d, abs_max)));
    } else {
      stats.Merge(ValueStatsReference(values, static_cast<int64_t>(n)));
    }
    abs_max = hn::Zero(d);
    sum_sq = hn::Zero(d);
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace layerserve::kernels
HWY_AFTER_NAMESPACE();

#endif  // LAYERSERVE_KERNELS_VALUE_TALLY_INL_H_
