// Numeric health of a float32 buffer in one pass: NaN and Inf counts, the largest
// finite magnitude and the sum of squares of the finite values (for an RMS). The
// server runs it on every request's input and output to export them to Prometheus;
// the copying variant is the pass that writes a float32 response, so float32
// outputs get their statistics without a second read.
//
// Every function is pure on plain memory, keeps no state and is safe from any
// thread; none needs aligned pointers, none throws. NaN and Inf are counted, never
// propagated: they are left out of abs_max and sum_squares.
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

// Statistics of x[0, n). REQUIRES: n >= 0 (x may be null when n is 0). Highway,
// dispatched at run time; squares are summed in float lanes over runs of 4096 values
// and the runs in double (ValueTally), so sum_squares may differ from the reference's
// in its last bits.
ValueStats ComputeValueStats(const float* x, int64_t n);
// The same, while copying x to y. REQUIRES: x[0, n) and y[0, n) do not overlap.
ValueStats CopyWithValueStats(const float* x, int64_t n, float* y);

// Scalar twin (every square summed in double): the test oracle. Its count, nan, inf
// and abs_max are what the fast versions give, exactly.
ValueStats ValueStatsReference(const float* x, int64_t n);

}  // namespace layerserve::kernels

#endif  // LAYERSERVE_KERNELS_VALUE_STATS_H_
