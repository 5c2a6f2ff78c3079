// The load loops with a fake send function: exact request counts, status codes,
// arrival schedules, and latency counted from the scheduled time in the open loop.
#include "tools/loadgen/load_generator.h"

#include <atomic>
#include <cmath>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/loadgen/report.h"

namespace layerserve::client {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

// Clients are only handed to the send function, which ignores them; Create does not
// connect.
std::vector<std::unique_ptr<Client>> Clients(int n) {
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < n; ++i) {
    ClientOptions options;
    options.target = "127.0.0.1:1";
    clients.push_back(*Client::Create(options));
  }
  return clients;
}

std::vector<Client*> Pointers(const std::vector<std::unique_ptr<Client>>& owned) {
  std::vector<Client*> p;
  for (const auto& c : owned) p.push_back(c.get());
  return p;
}

TEST(ArrivalOffsetsTest, ConstantRate) {
  EXPECT_THAT(ArrivalOffsets(4, false, 5, 0, 1), ElementsAre(0, 0.25, 0.5, 0.75, 1.0));
  // By duration: every arrival before 1 s.
  std::vector<double> by_duration = ArrivalOffsets(10, false, 0, 1.0, 1);
  ASSERT_EQ(by_duration.size(), 10u);
  EXPECT_DOUBLE_EQ(by_duration.back(), 0.9);
}

TEST(ArrivalOffsetsTest, PoissonGapsAreExponentialAndSeeded) {
  const int n = 20000;
  const double rate = 100;
  std::vector<double> t = ArrivalOffsets(rate, true, n, 0, 42);
  ASSERT_EQ(t.size(), static_cast<size_t>(n));
  EXPECT_EQ(t[0], 0);
  std::vector<double> gaps;
  for (int i = 1; i < n; ++i) {
    ASSERT_GE(t[i], t[i - 1]);
    gaps.push_back(t[i] - t[i - 1]);
  }
  const double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / gaps.size();
  double var = 0;
  for (double g : gaps) var += (g - mean) * (g - mean);
  const double stddev = std::sqrt(var / gaps.size());
  // Exponential: mean 1/rate and standard deviation equal to the mean. With 20000
  // samples both are within ~1% (3 sigma ~2%) of the truth.
  EXPECT_NEAR(mean, 1 / rate, 0.03 / rate);
  EXPECT_NEAR(stddev / mean, 1.0, 0.05);
  EXPECT_EQ(ArrivalOffsets(rate, true, 100, 0, 42),
            std::vector<double>(t.begin(), t.begin() + 100));
}

TEST(RunLoadTest, ClosedLoopSendsExactlyTheRequestCount) {
  auto owned = Clients(3);
  std::atomic<int> calls{0};
  LoadLevel level;
  level.concurrency = 8;  // More threads than clients: shared round robin.
  level.requests = 1000;
  LoadResult r = RunLoad(level, Pointers(owned), [&](Client&) {
    // Every 10th request fails.
    return calls.fetch_add(1) % 10 == 9 ? absl::UnavailableError("connection reset")
                                        : absl::OkStatus();
  });
  EXPECT_EQ(calls.load(), 1000);
  EXPECT_EQ(r.requests, 1000);
  EXPECT_THAT(r.codes, ElementsAre(Pair("OK", 900), Pair("UNAVAILABLE", 100)));
  EXPECT_THAT(r.error_messages, ElementsAre(Pair("UNAVAILABLE", "connection reset")));
  EXPECT_EQ(r.ok_latencies.size(), 900u);
  EXPECT_GT(r.elapsed_seconds, 0);
}

// Decode: a step's latency counts among all requests' and among the steps' alone;
// a failed step in neither.
TEST(RunLoadTest, StepsAreSummarizedApartFromThePrefillsBesideThem) {
  auto owned = Clients(1);
  std::atomic<int> calls{0};
  LoadLevel level;
  level.concurrency = 2;
  level.requests = 100;
  LoadResult r = RunLoad(level, Pointers(owned), [&](Client&) -> SendOutcome {
    const int i = calls.fetch_add(1);
    if (i % 10 == 0) return {absl::OkStatus(), /*step=*/false};  // A prefill.
    if (i % 10 == 9) return {absl::AbortedError("busy"), /*step=*/true};
    return {absl::OkStatus(), /*step=*/true};
  });
  EXPECT_EQ(r.ok_latencies.size(), 90u);
  EXPECT_EQ(r.ok_step_latencies.size(), 80u);
  LevelReport report = MakeLevelReport(level, &r);
  ASSERT_TRUE(report.step_latency.has_value());
  EXPECT_EQ(report.step_latency->count, 80);
  EXPECT_EQ(LevelJson(report)["step_latency_ms"]["count"], 80);

  LoadResult stateless =
      RunLoad(level, Pointers(owned), [](Client&) { return absl::OkStatus(); });
  report = MakeLevelReport(level, &stateless);
  EXPECT_FALSE(report.step_latency.has_value());
  EXPECT_FALSE(LevelJson(report).contains("step_latency_ms"));
}

TEST(RunLoadTest, ClosedLoopByDurationStopsStartingRequests) {
  auto owned = Clients(1);
  LoadLevel level;
  level.concurrency = 2;
  level.duration = absl::Milliseconds(100);
  LoadResult r = RunLoad(level, Pointers(owned), [](Client&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return absl::OkStatus();
  });
  EXPECT_GE(r.elapsed_seconds, 0.1);
  EXPECT_LT(r.elapsed_seconds, 5.0);
  // At most one request per thread per 2 ms, plus the one started at the end.
  EXPECT_GE(r.requests, 2);
  EXPECT_LE(r.requests, 2 * 51);
  for (double latency : r.ok_latencies) EXPECT_GE(latency, 0.002);
}

// A call that starts before the duration ends and finishes after it counts in
// `requests` (and stretches elapsed_seconds) but not in the window's count: with one
// sender, exactly the last one.
TEST(RunLoadTest, ClosedLoopCountsWhatFinishedWithinTheDuration) {
  auto owned = Clients(1);
  LoadLevel level;
  level.concurrency = 1;
  level.duration = absl::Milliseconds(100);
  LoadResult r = RunLoad(level, Pointers(owned), [](Client&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    return absl::OkStatus();
  });
  EXPECT_DOUBLE_EQ(r.window_seconds, 0.1);
  ASSERT_GE(r.requests, 2);
  EXPECT_EQ(r.finished_in_window, r.requests - 1);
  EXPECT_GE(r.elapsed_seconds, 0.1);
  const LevelReport report = MakeLevelReport(level, &r);
  EXPECT_DOUBLE_EQ(report.window_throughput, (r.requests - 1) / 0.1);
  EXPECT_LT(report.throughput, r.requests / 0.1);  // Its time counts the drain.
  EXPECT_DOUBLE_EQ(LevelJson(report)["window_throughput_rps"].get<double>(),
                   report.window_throughput);
  // The table says so when the drain ran past 5% of the duration (here >= 20 ms).
  if (r.elapsed_seconds > 0.105) {
    EXPECT_NE(LevelTable({report}).find("req/s finished within the 0.1 s duration"),
              std::string::npos);
  }
}

TEST(RunLoadTest, OpenLoopCountsQueueingAsLatency) {
  auto owned = Clients(1);
  LoadLevel level;
  level.rate = 1000;  // One request per ms...
  level.poisson = false;
  level.threads = 1;  // ...but one sender taking 5 ms each.
  level.requests = 20;
  LoadResult r = RunLoad(level, Pointers(owned), [](Client&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return absl::OkStatus();
  });
  EXPECT_EQ(r.requests, 20);
  ASSERT_EQ(r.ok_latencies.size(), 20u);
  // Request i is scheduled at i ms and cannot finish before 5 (i + 1) ms: the last
  // one's latency is at least 100 - 19 = 81 ms, though each call took ~5 ms.
  EXPECT_GE(*std::max_element(r.ok_latencies.begin(), r.ok_latencies.end()), 0.081);
  EXPECT_GE(r.late_sends, 15);
  EXPECT_GE(r.elapsed_seconds, 0.1);
}

TEST(RunLoadTest, OpenLoopAtAnEasyRateKeepsItsSchedule) {
  auto owned = Clients(2);
  LoadLevel level;
  level.rate = 200;
  level.poisson = false;
  level.threads = 4;
  level.requests = 40;
  LoadResult r =
      RunLoad(level, Pointers(owned), [](Client&) { return absl::OkStatus(); });
  EXPECT_EQ(r.requests, 40);
  EXPECT_THAT(r.codes, ElementsAre(Pair("OK", 40)));
  // A fixed count has no window: the window's rate is the plain one.
  EXPECT_EQ(r.window_seconds, 0);
  EXPECT_EQ(r.finished_in_window, 0);
  const LevelReport report = MakeLevelReport(level, &r);
  EXPECT_DOUBLE_EQ(report.window_throughput, report.throughput);
  // The last request is scheduled at 39 / 200 s = 195 ms.
  EXPECT_GE(r.elapsed_seconds, 0.195);
  EXPECT_LT(r.elapsed_seconds, 2.0);
}

}  // namespace
}  // namespace layerserve::client
