#include "tools/loadgen/latency_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace layerserve::client {

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  // Rank ceil(p/100 * n), 1-based. The small epsilon keeps p = 90 of n = 10 at
  // rank 9 when p/100 * n lands just above an integer in floating point.
  const double exact = p / 100 * static_cast<double>(sorted.size());
  int64_t rank = static_cast<int64_t>(std::ceil(exact - 1e-9));
  rank = std::clamp<int64_t>(rank, 1, static_cast<int64_t>(sorted.size()));
  return sorted[rank - 1];
}

LatencySummary Summarize(std::vector<double>* values) {
  LatencySummary s;
  if (values->empty()) return s;
  std::sort(values->begin(), values->end());
  s.count = static_cast<int64_t>(values->size());
  s.mean = std::accumulate(values->begin(), values->end(), 0.0) / s.count;
  s.p50 = Percentile(*values, 50);
  s.p90 = Percentile(*values, 90);
  s.p99 = Percentile(*values, 99);
  s.max = values->back();
  return s;
}

}  // namespace layerserve::client
