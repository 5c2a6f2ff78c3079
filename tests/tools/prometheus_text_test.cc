// Parsing /metrics text, and the server-side numbers layerserve-bench derives from
// two scrapes.
#include "tools/loadgen/prometheus_text.h"

#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tools/loadgen/report.h"

namespace layerserve::client {
namespace {

using ::layerserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::Pair;

// As prometheus-cpp writes it (including its "Nan").
constexpr char kText[] = R"(# HELP exposer_request_latencies Latencies
# TYPE exposer_request_latencies summary
exposer_request_latencies{quantile="0.5"} Nan
# TYPE layerserve_requests_total counter
layerserve_requests_total{code="OK",method="Normalize"} 35410
layerserve_requests_total{code="INVALID_ARGUMENT",method="Normalize"} 3
layerserve_requests_total{code="OK",method="Activate"} 1
layerserve_inflight_requests 0
layerserve_request_duration_seconds_bucket{method="Normalize",le="+Inf"} 35413
weird{path="a\"b\\c\nd", empty=""} -1.5e-3 1700000000000
)";

std::vector<MetricSample> Parse(const std::string& text) {
  absl::StatusOr<std::vector<MetricSample>> samples = ParsePrometheusText(text);
  EXPECT_TRUE(samples.ok()) << samples.status();
  return samples.ok() ? *samples : std::vector<MetricSample>();
}

TEST(PrometheusTextTest, ParsesSamplesLabelsAndSpecialValues) {
  std::vector<MetricSample> s = Parse(kText);
  ASSERT_EQ(s.size(), 7u);
  EXPECT_EQ(s[0].name, "exposer_request_latencies");
  EXPECT_TRUE(std::isnan(s[0].value));
  EXPECT_EQ(s[1].name, "layerserve_requests_total");
  EXPECT_THAT(s[1].labels, ElementsAre(Pair("code", "OK"), Pair("method", "Normalize")));
  EXPECT_EQ(s[1].value, 35410);
  EXPECT_EQ(s[4].name, "layerserve_inflight_requests");
  EXPECT_TRUE(s[4].labels.empty());
  EXPECT_THAT(s[5].labels, ElementsAre(Pair("le", "+Inf"), Pair("method", "Normalize")));
  EXPECT_EQ(s[6].labels.at("path"), "a\"b\\c\nd");  // Unescaped.
  EXPECT_EQ(s[6].labels.at("empty"), "");
  EXPECT_DOUBLE_EQ(s[6].value, -1.5e-3);  // The timestamp is not the value.
}

TEST(PrometheusTextTest, RejectsMalformedLinesByNumber) {
  EXPECT_THAT(ParsePrometheusText("ok 1\nbad{x=\"1\" 2\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "metrics line 2: cannot parse 'bad{x=\"1\" 2'"));
  EXPECT_THAT(ParsePrometheusText("novalue\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(ParsePrometheusText("x 1 2 3\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST(PrometheusTextTest, SumsOverLabelSets) {
  std::vector<MetricSample> s = Parse(kText);
  bool found = false;
  EXPECT_EQ(SumSamples(s, "layerserve_requests_total", {}, &found), 35414);
  EXPECT_TRUE(found);
  EXPECT_EQ(SumSamples(s, "layerserve_requests_total", {{"method", "Normalize"}}), 35413);
  EXPECT_EQ(SumSamples(s, "layerserve_batch_size_count", {}, &found), 0);
  EXPECT_FALSE(found);
  EXPECT_THAT(
      SumSamplesBy(s, "layerserve_requests_total", "code", {{"method", "Normalize"}}),
      ElementsAre(Pair("INVALID_ARGUMENT", 3), Pair("OK", 35410)));
}

TEST(DiffServerMetricsTest, RequestDeltasByCodeAndMeanBatchSize) {
  std::vector<MetricSample> before = Parse(R"(
layerserve_requests_total{code="OK",method="Normalize"} 100
layerserve_requests_total{code="OK",method="Activate"} 7
layerserve_batch_size_sum{method="Normalize"} 300
layerserve_batch_size_count{method="Normalize"} 100
layerserve_batch_size_sum{method="Activate"} 7
layerserve_batch_size_count{method="Activate"} 7
)");
  std::vector<MetricSample> after = Parse(R"(
layerserve_requests_total{code="OK",method="Normalize"} 1100
layerserve_requests_total{code="UNAVAILABLE",method="Normalize"} 4
layerserve_requests_total{code="OK",method="Activate"} 9
layerserve_batch_size_sum{method="Normalize"} 1300
layerserve_batch_size_count{method="Normalize"} 350
layerserve_batch_size_sum{method="Activate"} 9
layerserve_batch_size_count{method="Activate"} 9
)");
  ServerDelta d = DiffServerMetrics(before, after, "Normalize");
  EXPECT_THAT(d.requests_by_code, ElementsAre(Pair("OK", 1000), Pair("UNAVAILABLE", 4)));
  ASSERT_TRUE(d.mean_batch_size.has_value());
  EXPECT_DOUBLE_EQ(*d.mean_batch_size, 1000.0 / 250.0);  // Activate's batches left out.
}

TEST(DiffServerMetricsTest, BatchSizeWithoutMethodLabelSumsEveryLabelSet) {
  std::vector<MetricSample> before = Parse(
      "layerserve_batch_size_sum{queue=\"a\"} "
      "10\nlayerserve_batch_size_count{queue=\"a\"} 5\n");
  std::vector<MetricSample> after = Parse(
      "layerserve_batch_size_sum{queue=\"a\"} "
      "30\nlayerserve_batch_size_count{queue=\"a\"} 10\n"
      "layerserve_batch_size_sum{queue=\"b\"} "
      "20\nlayerserve_batch_size_count{queue=\"b\"} 5\n");
  ServerDelta d = DiffServerMetrics(before, after, "Normalize");
  ASSERT_TRUE(d.mean_batch_size.has_value());
  EXPECT_DOUBLE_EQ(*d.mean_batch_size, 40.0 / 10.0);
}

TEST(DiffServerMetricsTest, AbsentBatchSeriesIsNotANumber) {
  std::vector<MetricSample> s = Parse(kText);
  ServerDelta d = DiffServerMetrics(s, s, "Normalize");
  EXPECT_TRUE(d.requests_by_code.empty());
  EXPECT_FALSE(d.mean_batch_size.has_value());
  LevelReport report;
  report.server = d;
  EXPECT_TRUE(LevelJson(report)["server"]["mean_batch_size"].is_null());
  EXPECT_NE(LevelTable({report}).find("n/a"), std::string::npos);
}

TEST(LevelReportTest, JsonCarriesCountsPercentilesAndErrors) {
  LoadLevel level;
  level.concurrency = 8;
  LoadResult result;
  result.requests = 5;
  result.codes = {{"OK", 4}, {"UNAVAILABLE", 1}};
  result.error_messages = {{"UNAVAILABLE", "Socket closed"}};
  result.ok_latencies = {0.004, 0.001, 0.002, 0.003};
  result.elapsed_seconds = 0.5;
  LevelReport report = MakeLevelReport(level, &result);
  nlohmann::json j = LevelJson(report);
  EXPECT_EQ(j["mode"], "closed");
  EXPECT_EQ(j["concurrency"], 8);
  EXPECT_EQ(j["requests"], 5);
  EXPECT_EQ(j["ok"], 4);
  EXPECT_EQ(j["errors"]["UNAVAILABLE"], 1);
  EXPECT_EQ(j["errors"].size(), 1u);
  EXPECT_EQ(j["error_messages"]["UNAVAILABLE"], "Socket closed");
  EXPECT_NE(LevelTable({report}).find("UNAVAILABLE: Socket closed"), std::string::npos);
  EXPECT_DOUBLE_EQ(j["throughput_rps"].get<double>(), 10);
  EXPECT_DOUBLE_EQ(j["latency_ms"]["p50"].get<double>(), 2);
  EXPECT_DOUBLE_EQ(j["latency_ms"]["max"].get<double>(), 4);
  EXPECT_TRUE(j["server"].is_null());
}

}  // namespace
}  // namespace layerserve::client
