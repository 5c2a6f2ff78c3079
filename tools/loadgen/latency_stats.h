// Latency percentiles of a load-generator run. Pure functions; safe to call from
// any thread.
#ifndef LAYERSERVE_TOOLS_LOADGEN_LATENCY_STATS_H_
#define LAYERSERVE_TOOLS_LOADGEN_LATENCY_STATS_H_

#include <cstdint>
#include <vector>

namespace layerserve::client {

// The nearest-rank percentile p (0 < p <= 100) of `sorted` (ascending): the
// smallest value with at least p% of the values at or below it, so every reported
// percentile is a latency that was actually measured (perf_analyzer's and
// wrk2's convention). 0 for an empty list.
double Percentile(const std::vector<double>& sorted, double p);

struct LatencySummary {
  int64_t count = 0;
  double mean = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
};

// Summary of `values` (any order; sorted in place).
LatencySummary Summarize(std::vector<double>* values);

}  // namespace layerserve::client

#endif  // LAYERSERVE_TOOLS_LOADGEN_LATENCY_STATS_H_
