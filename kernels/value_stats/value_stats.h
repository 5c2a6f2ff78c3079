// Numeric health of a float32 buffer in one pass: NaN and Inf counts, the largest
// finite magnitude and the sum of squares of the finite values (for an RMS). The
// server runs it on every request's input and output to export them to Prometheus;
// the copying variant is the pass that writes a float32 response, so float32
// outputs get their statistics without a second read.
#ifndef LAYERSERVE_KERNELS_VALUE_STATS_H_
#define LAYERSERVE_KERNELS_VALUE_STATS_H_

#include <cmath>
#include <cstdint>

namespace layerserve::kernels {

struct ValueStats {
  int64_t count = 0;  // Values seen, finite or not.
  int64_t nan = 0;
  int64_t inf = 0;
  float abs_max = 0;       // Over finite values.
  double sum_squares = 0;  // Over finite values.

  int64_t finite() const { return count - nan - inf; }
  // Root mean square of the finite values; 0 when there are none.
  double rms() const {
    return finite() > 0 ? std::sqrt(sum_squares / static_cast<double>(finite())) : 0.0;
  }
  void Merge(const ValueStats& other) {
    count += other.count;
    nan += other.nan;
    inf += other.inf;
    abs_max = abs_max > other.abs_max ? abs_max : other.abs_max;
    sum_squares += other.sum_squares;
  }
};

// Statistics of x[0, n). n may be 0.
ValueStats ComputeValueStats(const float* x, int64_t n);
// The same, while copying x to y (no overlap; neither needs alignment).
ValueStats CopyWithValueStats(const float* x, int64_t n, float* y);

// Scalar twin (sum of squares in double): the test oracle.
ValueStats ValueStatsReference(const float* x, int64_t n);

}  // namespace layerserve::kernels

#endif  // LAYERSERVE_KERNELS_VALUE_STATS_H_
