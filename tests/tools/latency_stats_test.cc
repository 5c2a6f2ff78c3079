// Nearest-rank percentiles.
#include "tools/loadgen/latency_stats.h"

#include <vector>

#include "gtest/gtest.h"

namespace layerserve::client {
namespace {

TEST(PercentileTest, NearestRankOnOneToHundred) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_EQ(Percentile(v, 50), 50);
  EXPECT_EQ(Percentile(v, 90), 90);
  EXPECT_EQ(Percentile(v, 99), 99);
  EXPECT_EQ(Percentile(v, 99.5), 100);
  EXPECT_EQ(Percentile(v, 100), 100);
  EXPECT_EQ(Percentile(v, 0.1), 1);
}

TEST(PercentileTest, SmallSamplesReportMeasuredValues) {
  const std::vector<double> ten = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(Percentile(ten, 50), 5);   // rank ceil(5) = 5
  EXPECT_EQ(Percentile(ten, 90), 9);   // rank 9, not 10 despite 0.9 * 10 rounding
  EXPECT_EQ(Percentile(ten, 99), 10);  // rank ceil(9.9) = 10
  const std::vector<double> one = {7};
  EXPECT_EQ(Percentile(one, 50), 7);
  EXPECT_EQ(Percentile(one, 99), 7);
  EXPECT_EQ(Percentile({}, 50), 0);
}

TEST(SummarizeTest, SortsAndSummarizes) {
  std::vector<double> v = {0.004, 0.001, 0.003, 0.002};
  LatencySummary s = Summarize(&v);
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.mean, 0.0025);
  EXPECT_EQ(s.p50, 0.002);
  EXPECT_EQ(s.p90, 0.004);
  EXPECT_EQ(s.p99, 0.004);
  EXPECT_EQ(s.max, 0.004);
  EXPECT_EQ(v.front(), 0.001);  // Sorted in place.
  std::vector<double> empty;
  EXPECT_EQ(Summarize(&empty).count, 0);
}

}  // namespace
}  // namespace layerserve::client
