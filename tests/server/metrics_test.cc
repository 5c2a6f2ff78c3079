// The series Metrics exports before any request (server/metrics/metrics.h): request
// counters by method and code and non-finite counters by method, where and kind,
// all at 0, and requests counted into those same series afterwards.
#include "server/metrics/metrics.h"

#include <prometheus/metric_family.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/value_stats/value_stats.h"

namespace layerserve {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

using Labels = std::map<std::string, std::string>;

// {labels: value_of(sample)} of every sample of family `name`.
template <typename ValueOf>
auto Samples(const Metrics& metrics, const std::string& name, ValueOf value_of) {
  std::map<Labels, decltype(value_of(prometheus::ClientMetric{}))> samples;
  for (const prometheus::MetricFamily& family : metrics.registry()->Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& metric : family.metric) {
      Labels labels;
      for (const auto& label : metric.label) labels[label.name] = label.value;
      samples[labels] = value_of(metric);
    }
  }
  return samples;
}

// {labels: value} of every counter sample of family `name`.
std::map<Labels, double> Counters(const Metrics& metrics, const std::string& name) {
  return Samples(metrics, name,
                 [](const prometheus::ClientMetric& m) { return m.counter.value; });
}

// The method labels service.cc passes, one per RPC of layerserve.v1.LayerService.
const std::vector<std::string> kMethods = {"Normalize",    "PositionalEncode", "Activate",
                                           "BlockForward", "ListModels",       "GetModel",
                                           "OpenSession",  "CloseSession"};
const std::vector<std::string> kValueCheckedMethods = {"Normalize", "PositionalEncode",
                                                       "Activate", "BlockForward"};
// The codes the dashboard's and alerts' error ratio select, and those the proto's
// error list names: each must have a series per method.
const std::vector<std::string> kCodes = {"OK",
                                         "INVALID_ARGUMENT",
                                         "NOT_FOUND",
                                         "OUT_OF_RANGE",
                                         "RESOURCE_EXHAUSTED",
                                         "DEADLINE_EXCEEDED",
                                         "CANCELLED",
                                         "UNAVAILABLE",
                                         "FAILED_PRECONDITION",
                                         "ABORTED",
                                         "INTERNAL"};

TEST(MetricsTest, RequestCountersOfEveryMethodAndCodeStartAtZero) {
  const Metrics metrics;
  const std::map<Labels, double> requests =
      Counters(metrics, "layerserve_requests_total");
  EXPECT_EQ(requests.size(), kMethods.size() * kCodes.size());
  for (const std::string& method : kMethods) {
    for (const std::string& code : kCodes) {
      const auto it = requests.find({{"method", method}, {"code", code}});
      ASSERT_NE(it, requests.end()) << method << " " << code;
      EXPECT_EQ(it->second, 0) << method << " " << code;
    }
  }
}

TEST(MetricsTest, NonFiniteCountersOfMethodsWithTensorsStartAtZero) {
  const Metrics metrics;
  const std::map<Labels, double> nonfinite =
      Counters(metrics, "layerserve_nonfinite_values_total");
  std::set<Labels> expected;
  for (const std::string& method : kValueCheckedMethods) {
    for (const char* where : {"input", "output"}) {
      for (const char* kind : {"nan", "inf"}) {
        expected.insert({{"method", method}, {"where", where}, {"kind", kind}});
      }
    }
  }
  std::set<Labels> got;
  for (const auto& [labels, value] : nonfinite) {
    got.insert(labels);
    EXPECT_EQ(value, 0);
  }
  EXPECT_EQ(got, expected);
}

TEST(MetricsTest, RequestsAreCountedInTheSeriesThatExistedBefore) {
  Metrics metrics;
  metrics.RequestStarted("Normalize", 10);
  metrics.RequestFinished("Normalize", "", grpc::StatusCode::OK, absl::Milliseconds(1),
                          10);
  metrics.RequestStarted("Normalize", 10);
  metrics.RequestFinished("Normalize", "", grpc::StatusCode::OK, absl::Milliseconds(1),
                          10);
  metrics.RequestStarted("GetModel", 10);
  metrics.RequestFinished("GetModel", "", grpc::StatusCode::NOT_FOUND,
                          absl::Milliseconds(1), 0);
  kernels::ValueStats stats;
  stats.count = 3;
  stats.nan = 3;
  metrics.OutputValues("Activate", stats);

  const std::map<Labels, double> requests =
      Counters(metrics, "layerserve_requests_total");
  EXPECT_EQ(requests.size(), kMethods.size() * kCodes.size());
  std::map<Labels, double> nonzero;
  for (const auto& [labels, value] : requests) {
    if (value != 0) nonzero[labels] = value;
  }
  EXPECT_THAT(nonzero,
              ElementsAre(Pair(Labels{{"method", "GetModel"}, {"code", "NOT_FOUND"}}, 1),
                          Pair(Labels{{"method", "Normalize"}, {"code", "OK"}}, 2)));
  const std::map<Labels, double> nonfinite =
      Counters(metrics, "layerserve_nonfinite_values_total");
  EXPECT_EQ(nonfinite.size(), kValueCheckedMethods.size() * 4);
  EXPECT_EQ(nonfinite.at({{"method", "Activate"}, {"where", "output"}, {"kind", "nan"}}),
            3);
}

// {labels: sample count} of every histogram of family `name`.
std::map<Labels, uint64_t> HistogramCounts(const Metrics& metrics,
                                           const std::string& name) {
  return Samples(metrics, name, [](const prometheus::ClientMetric& m) {
    return m.histogram.sample_count;
  });
}

// BlockForward and session calls of a served model carry its name; calls that
// named none (a parse error, an unknown model) keep the method's series.
TEST(MetricsTest, ModelCallsCarryTheModelLabel) {
  Metrics metrics;
  metrics.ModelInfo("llama", "BFLOAT16", 0);
  std::map<Labels, double> requests = Counters(metrics, "layerserve_requests_total");
  EXPECT_EQ(requests.size(), (kMethods.size() + 2) * kCodes.size());
  for (const char* method : {"BlockForward", "OpenSession"}) {
    for (const std::string& code : kCodes) {
      const Labels labels = {{"method", method}, {"model", "llama"}, {"code", code}};
      ASSERT_TRUE(requests.count(labels)) << method << " " << code;
      EXPECT_EQ(requests.at(labels), 0);
    }
  }

  metrics.RequestStarted("BlockForward", 10);
  metrics.RequestFinished("BlockForward", "llama", grpc::StatusCode::OK,
                          absl::Milliseconds(1), 10);
  metrics.RequestStarted("BlockForward", 10);
  metrics.RequestFinished("BlockForward", "", grpc::StatusCode::NOT_FOUND,
                          absl::Milliseconds(1), 0);
  metrics.DecodeStep("BlockForward", "llama", absl::Milliseconds(2));

  requests = Counters(metrics, "layerserve_requests_total");
  std::map<Labels, double> nonzero;
  for (const auto& [labels, value] : requests) {
    if (value != 0) nonzero[labels] = value;
  }
  EXPECT_THAT(
      nonzero,
      ElementsAre(
          Pair(Labels{{"method", "BlockForward"}, {"code", "NOT_FOUND"}}, 1),
          Pair(Labels{{"method", "BlockForward"}, {"model", "llama"}, {"code", "OK"}},
               1)));
  EXPECT_THAT(
      HistogramCounts(metrics, "layerserve_request_duration_seconds"),
      ElementsAre(Pair(Labels{{"method", "BlockForward"}}, 1),
                  Pair(Labels{{"method", "BlockForward"}, {"model", "llama"}}, 1)));
  EXPECT_THAT(HistogramCounts(metrics, "layerserve_decode_step_duration_seconds"),
              ElementsAre(Pair(Labels{{"model", "llama"}}, 1)));
}

// layerserve_model_info: one gauge at 1 per model, labelled with how its weights
// are held.
TEST(MetricsTest, ModelInfoLabelsTheWeightDtypeAndGroupSize) {
  Metrics metrics;
  metrics.ModelInfo("llama", "INT8", 64);
  metrics.ModelInfo("gpt2", "BFLOAT16", 0);
  const std::map<Labels, double> gauges =
      Samples(metrics, "layerserve_model_info",
              [](const prometheus::ClientMetric& m) { return m.gauge.value; });
  EXPECT_THAT(gauges, ElementsAre(Pair(Labels{{"model", "gpt2"},
                                              {"weight_dtype", "BFLOAT16"},
                                              {"weight_group_size", "0"}},
                                       1.0),
                                  Pair(Labels{{"model", "llama"},
                                              {"weight_dtype", "INT8"},
                                              {"weight_group_size", "64"}},
                                       1.0)));
}

}  // namespace
}  // namespace layerserve
