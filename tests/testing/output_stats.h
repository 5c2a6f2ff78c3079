// Checks for kernels that take the statistics of their output in the pass that
// writes it (an `output_stats` argument): asking for them must not change the
// output, and they must be the output's (ValueStatsReference).
#ifndef LAYERSERVE_TESTS_TESTING_OUTPUT_STATS_H_
#define LAYERSERVE_TESTS_TESTING_OUTPUT_STATS_H_

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/value_stats/value_stats.h"

namespace layerserve::testing {

// `with_stats`, written by a run that took statistics, equals `y`, written by the
// same run without, bit for bit; NaN's sign aside (with two NaN operands SSE's
// mulps keeps the first, and the compiler may order a product either way).
inline void ExpectSameOutput(const float* with_stats, const float* y, int64_t n,
                             const std::string& what = "") {
  for (int64_t i = 0; i < n; ++i) {
    const bool same = std::memcmp(&with_stats[i], &y[i], sizeof(float)) == 0 ||
                      (std::isnan(with_stats[i]) && std::isnan(y[i]));
    ASSERT_TRUE(same) << what
                      << ": the output changed when its statistics were asked for, at "
                      << i << ": " << with_stats[i] << " vs " << y[i];
  }
}

// `got` are the statistics of y[0, n): counts and abs-max exactly. Squares are
// summed in float lanes and folded into double every few thousand values (or
// per row): the sum is held to 1e-5 relative, plus what float squares lose below
// their range (|v| < 1e-19).
inline void ExpectStatsOf(const kernels::ValueStats& got, const float* y, int64_t n,
                          const std::string& what = "") {
  const kernels::ValueStats want = kernels::ValueStatsReference(y, n);
  EXPECT_EQ(got.count, want.count) << what;
  EXPECT_EQ(got.nan, want.nan) << what;
  EXPECT_EQ(got.inf, want.inf) << what;
  EXPECT_EQ(got.abs_max, want.abs_max) << what;
  EXPECT_NEAR(got.sum_squares, want.sum_squares,
              1e-5 * want.sum_squares + static_cast<double>(n) * 1e-38 + 1e-37)
      << what;
}

}  // namespace layerserve::testing

#endif  // LAYERSERVE_TESTS_TESTING_OUTPUT_STATS_H_
