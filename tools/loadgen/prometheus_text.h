// Reading the Prometheus text exposition format (what a server's /metrics
// returns), as much as a load generator needs: the samples and sums over them.
// Pure functions; safe to call from any thread.
#ifndef LAYERSERVE_TOOLS_LOADGEN_PROMETHEUS_TEXT_H_
#define LAYERSERVE_TOOLS_LOADGEN_PROMETHEUS_TEXT_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace layerserve::client {

using MetricLabels = std::map<std::string, std::string, std::less<>>;

struct MetricSample {
  std::string name;  // e.g. "layerserve_batch_size_sum"
  MetricLabels labels;
  double value = 0;
};

// The samples of `text`, in order. Comment (# HELP/# TYPE) and blank lines are
// skipped; label values are unescaped (\\, \", \n); values may be +Inf, -Inf or
// NaN; a trailing timestamp is ignored. INVALID_ARGUMENT names the line number of
// the first malformed line.
absl::StatusOr<std::vector<MetricSample>> ParsePrometheusText(absl::string_view text);

// Sum of the values of the samples called `name` whose labels include every pair
// of `match` (so an empty `match` sums over all label sets). `*found` (optional)
// tells whether any sample matched.
double SumSamples(const std::vector<MetricSample>& samples, absl::string_view name,
                  const MetricLabels& match = {}, bool* found = nullptr);

// SumSamples per value of label `by` (samples without it are left out).
std::map<std::string, double> SumSamplesBy(const std::vector<MetricSample>& samples,
                                           absl::string_view name, absl::string_view by,
                                           const MetricLabels& match = {});

}  // namespace layerserve::client

#endif  // LAYERSERVE_TOOLS_LOADGEN_PROMETHEUS_TEXT_H_
