// ValueTally: the statistics of ValueStats (value_stats.h) taken in vector
// registers by a Highway loop as it writes its output, so the output is not read
// again for them. Shared by ComputeValueStats (value_stats.cc), the norms'
// output pass (kernels/norm/norm_fast.cc), the activations
// (kernels/activation/activation_fast.cc) and, through OutputTally, the positional
// encodings (positional_fast.cc) and RoPE (kernels/rope/rope_fast.cc).
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
#include "kernels/value_stats/value_stats.h"

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

  // Adds the n values tallied since the last Fold to `stats` if their sum of
  // squares is finite (then every value was finite and Max saw no NaN) and returns
  // true; else returns false and leaves `stats` alone. Starts a new tally either way.
  HWY_INLINE bool FoldIfFinite(size_t n, ValueStats& stats) {
    namespace hn = hwy::HWY_NAMESPACE;
    const D d;
    const float sum = hn::GetLane(hn::SumOfLanes(d, sum_sq));
    const bool finite = std::isfinite(sum);
    if (finite) {
      stats.count += static_cast<int64_t>(n);
      stats.sum_squares += sum;
      stats.abs_max = std::max(stats.abs_max, hn::GetLane(hn::MaxOfLanes(d, abs_max)));
    }
    abs_max = hn::Zero(d);
    sum_sq = hn::Zero(d);
    return finite;
  }

  // Adds the values tallied since the last Fold, values[0, n) as written, to
  // `stats`: from the lanes when they were all finite, else from the values again,
  // one by one, as ValueStatsReference counts them.
  HWY_INLINE void Fold(const float* values, size_t n, ValueStats& stats) {
    if (!FoldIfFinite(n, stats)) {
      stats.Merge(ValueStatsReference(values, static_cast<int64_t>(n)));
    }
  }
};

// The statistics of an output written in pieces (rows, head rows, the scalar tail
// of a row) and in any order, for loops that do not write one contiguous run
// (positional encodings, RoPE). Vectors go through Add, which folds the tally
// every kFoldVectors vectors (4096 values on AVX-512; each float lane sums 256
// squares, whatever the vector width); values written one by one are counted
// from memory through AddWritten. A fold that meets a NaN or Inf (or a square
// past float's range) cannot say which piece held it, so Finish then takes the
// statistics of the whole output again: one more read, only for outputs that
// have such values.
// A loop that gets its tally by reference should work on a local copy and store
// it back at the end: through the reference every store to the output might
// overwrite the tally (vector types may alias anything), so GCC reloads and
// stores its registers for each vector written (the cost, see
// docs/perf/2026-12-06-kernel-choices.md). Anything that would take the local's
// address (a call, a lambda not inlined) undoes that.
class OutputTally {
 public:
  using V = ValueTally::V;
  static constexpr size_t kFoldVectors = 256;

  // Not implicit: that would not be compiled for this target (see ValueTally).
  HWY_INLINE OutputTally() {}

  // Tallies the lanes of v, all of which the caller writes; returns v.
  HWY_INLINE V Add(V v) {
    v = tally_.Add(v);
    if (HWY_UNLIKELY(++pending_ == kFoldVectors)) Fold();
    return v;
  }
  // Counts values[0, n), which the caller wrote without Add.
  HWY_INLINE void AddWritten(const float* values, size_t n) {
    if (n > 0) stats_.Merge(ValueStatsReference(values, static_cast<int64_t>(n)));
  }
  // The statistics of output[0, count), every value of which went through Add or
  // AddWritten exactly once.
  HWY_INLINE ValueStats Finish(const float* output, int64_t count) {
    Fold();
    return recount_ ? ComputeValueStats(output, count) : stats_;
  }

 private:
  HWY_INLINE void Fold() {
    const size_t values = pending_ * hwy::HWY_NAMESPACE::Lanes(ValueTally::D());
    if (!tally_.FoldIfFinite(values, stats_)) recount_ = true;
    pending_ = 0;
  }

  ValueTally tally_;
  size_t pending_ = 0;  // Vectors added since the last fold.
  ValueStats stats_;
  bool recount_ = false;
};

// OutputTally's interface for loops run without statistics: compiles to nothing.
struct NoTally {
  template <class V>
  HWY_INLINE V Add(V v) {
    return v;
  }
  HWY_INLINE void AddWritten(const float*, size_t) {}
};

// Runs body(tally) with an OutputTally when `stats` is set, then sets *stats to
// the statistics of output[0, count); with a NoTally otherwise. Each is its own
// instantiation of body, so the loop without statistics is the loop it was.
template <class Body>
HWY_INLINE void WithOutputTally(const float* output, int64_t count, ValueStats* stats,
                                const Body& body) {
  if (stats == nullptr) {
    NoTally none;
    body(none);
    return;
  }
  OutputTally tally;
  body(tally);
  *stats = tally.Finish(output, count);
}

}  // namespace HWY_NAMESPACE
}  // namespace layerserve::kernels
HWY_AFTER_NAMESPACE();

#endif  // LAYERSERVE_KERNELS_VALUE_TALLY_INL_H_
