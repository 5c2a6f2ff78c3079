// ComputeValueStats and CopyWithValueStats against the scalar reference.
#include "kernels/value_stats/value_stats.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace layerserve::kernels {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Counts and abs-max are exact. The sum of squares is summed in float per chunk of
// 4096 values, then in double: relative error <= 4096 * 2^-24 ~ 2.5e-4 in the
// worst case, far less for random data.
void ExpectMatchesReference(const std::vector<float>& x) {
  const ValueStats want = ValueStatsReference(x.data(), x.size());
  std::vector<float> copy(x.size() + 1, -1.0f);
  // Misaligned by one element on both sides.
  std::vector<float> shifted(x.size() + 1);
  std::copy(x.begin(), x.end(), shifted.begin() + 1);
  for (const ValueStats& got :
       {ComputeValueStats(x.data(), x.size()),
        ComputeValueStats(shifted.data() + 1, x.size()),
        CopyWithValueStats(shifted.data() + 1, x.size(), copy.data() + 1)}) {
    EXPECT_EQ(got.count, want.count);
    EXPECT_EQ(got.nan, want.nan);
    EXPECT_EQ(got.inf, want.inf);
    EXPECT_EQ(got.abs_max, want.abs_max);
    EXPECT_NEAR(got.sum_squares, want.sum_squares, 2.5e-4 * want.sum_squares);
  }
  EXPECT_TRUE(x.empty() ||
              std::memcmp(copy.data() + 1, x.data(), x.size() * sizeof(float)) == 0)
      << "the copy must be bit-exact (NaN payloads too)";
  EXPECT_EQ(copy[0], -1.0f) << "nothing written before the output";
}

TEST(ValueStatsTest, OddSizesOfRandomValues) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0, 3);
  for (int64_t n : {0, 1, 7, 15, 16, 17, 64, 4095, 4096, 4097, 12289, 100003}) {
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    SCOPED_TRACE(n);
    ExpectMatchesReference(x);
  }
}

TEST(ValueStatsTest, NanAndInfAreCountedAndLeftOutOfMaxAndRms) {
  for (int64_t n : {1, 7, 33, 4097, 9000}) {
    std::vector<float> x(n, 2.0f);
    x[0] = kNan;
    x[n / 2] = n > 2 ? -kInf : x[n / 2];
    x[n - 1] = n > 1 ? kInf : x[n - 1];
    SCOPED_TRACE(n);
    ExpectMatchesReference(x);
    const ValueStats s = ComputeValueStats(x.data(), n);
    EXPECT_EQ(s.nan, 1);
    EXPECT_EQ(s.inf, n > 2 ? 2 : (n > 1 ? 1 : 0));
    if (s.finite() > 0) {
      EXPECT_EQ(s.abs_max, 2.0f);
      EXPECT_DOUBLE_EQ(s.rms(), 2.0);
    }
  }
}

TEST(ValueStatsTest, HugeFiniteValuesDoNotOverflowTheRms) {
  // 1e30 squared is beyond float but not double.
  std::vector<float> x(5000, 1e30f);
  x[3] = -std::numeric_limits<float>::max();
  ExpectMatchesReference(x);
  const ValueStats s = ComputeValueStats(x.data(), x.size());
  EXPECT_EQ(s.abs_max, std::numeric_limits<float>::max());
  EXPECT_TRUE(std::isfinite(s.rms()));
}

TEST(ValueStatsTest, AllZerosAndAllNan) {
  std::vector<float> zeros(100, 0.0f), nans(100, kNan);
  EXPECT_EQ(ComputeValueStats(zeros.data(), 100).rms(), 0.0);
  const ValueStats s = ComputeValueStats(nans.data(), 100);
  EXPECT_EQ(s.nan, 100);
  EXPECT_EQ(s.finite(), 0);
  EXPECT_EQ(s.rms(), 0.0);
  EXPECT_EQ(s.abs_max, 0.0f);
}

TEST(ValueStatsTest, MergeAddsCountsAndKeepsTheLargerMax) {
  ValueStats a, b;
  a.count = 3;
  a.nan = 1;
  a.abs_max = 2;
  a.sum_squares = 8;
  b.count = 2;
  b.inf = 1;
  b.abs_max = 5;
  b.sum_squares = 25;
  a.Merge(b);
  EXPECT_EQ(a.count, 5);
  EXPECT_EQ(a.nan, 1);
  EXPECT_EQ(a.inf, 1);
  EXPECT_EQ(a.abs_max, 5);
  EXPECT_DOUBLE_EQ(a.rms(), std::sqrt(33.0 / 3));
}

}  // namespace
}  // namespace layerserve::kernels
