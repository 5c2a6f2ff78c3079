#include "tools/loadgen/report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace layerserve::client {
namespace {

// The label filter of `rpc`'s series in `samples`: by method when the series
// carries that label, else none.
MetricLabels MethodFilter(const std::vector<MetricSample>& samples,
                          absl::string_view name, const std::string& rpc) {
  for (const MetricSample& s : samples) {
    if (s.name == name && s.labels.count("method") != 0) return {{"method", rpc}};
  }
  return {};
}

nlohmann::json LatencyJson(const LatencySummary& s) {
  return {{"mean", s.mean * 1e3},
          {"p50", s.p50 * 1e3},
          {"p90", s.p90 * 1e3},
          {"p99", s.p99 * 1e3},
          {"max", s.max * 1e3}};
}

std::string LevelName(const LoadLevel& level) {
  if (level.rate > 0) return absl::StrCat("rate ", level.rate, "/s");
  return absl::StrCat("concurrency ", level.concurrency);
}

}  // namespace

ServerDelta DiffServerMetrics(const std::vector<MetricSample>& before,
                              const std::vector<MetricSample>& after,
                              const std::string& rpc) {
  ServerDelta delta;
  const MetricLabels method = {{"method", rpc}};
  std::map<std::string, double> b =
      SumSamplesBy(before, "layerserve_requests_total", "code", method);
  for (const auto& [code, value] :
       SumSamplesBy(after, "layerserve_requests_total", "code", method)) {
    const int64_t d = std::llround(value - b[code]);
    if (d != 0) delta.requests_by_code[code] = d;
  }
  constexpr char kSum[] = "layerserve_batch_size_sum";
  constexpr char kCount[] = "layerserve_batch_size_count";
  const MetricLabels filter = MethodFilter(after, kCount, rpc);
  bool found_sum = false, found_count = false;
  const double sum =
      SumSamples(after, kSum, filter, &found_sum) - SumSamples(before, kSum, filter);
  const double count = SumSamples(after, kCount, filter, &found_count) -
                       SumSamples(before, kCount, filter);
  if (found_sum && found_count && count > 0) delta.mean_batch_size = sum / count;
  return delta;
}

LevelReport MakeLevelReport(const LoadLevel& level, LoadResult* result) {
  LevelReport r;
  r.level = level;
  r.requests = result->requests;
  for (const auto& [code, n] : result->codes) {
    if (code != "OK") r.errors[code] = n;
  }
  r.error_messages = result->error_messages;
  r.elapsed_seconds = result->elapsed_seconds;
  r.throughput =
      result->elapsed_seconds > 0 ? result->requests / result->elapsed_seconds : 0;
  r.window_seconds = result->window_seconds;
  r.window_throughput = result->window_seconds > 0
                            ? result->finished_in_window / result->window_seconds
                            : r.throughput;
  r.latency = Summarize(&result->ok_latencies);
  if (!result->ok_step_latencies.empty()) {
    r.step_latency = Summarize(&result->ok_step_latencies);
  }
  r.late_sends = result->late_sends;
  return r;
}

nlohmann::json LevelJson(const LevelReport& r) {
  nlohmann::json j;
  if (r.level.rate > 0) {
    j["mode"] = "open";
    j["rate"] = r.level.rate;
    j["distribution"] = r.level.poisson ? "poisson" : "constant";
    j["threads"] = r.level.threads;
    j["late_sends"] = r.late_sends;
  } else {
    j["mode"] = "closed";
    j["concurrency"] = r.level.concurrency;
  }
  j["warmup_requests"] = r.warmup_requests;
  j["requests"] = r.requests;
  j["ok"] = r.latency.count;
  j["errors"] = r.errors;
  if (!r.error_messages.empty()) j["error_messages"] = r.error_messages;
  j["elapsed_s"] = r.elapsed_seconds;
  j["throughput_rps"] = r.throughput;
  j["window_throughput_rps"] = r.window_throughput;
  j["latency_ms"] = LatencyJson(r.latency);
  if (r.step_latency) {
    j["step_latency_ms"] = LatencyJson(*r.step_latency);
    j["step_latency_ms"]["count"] = r.step_latency->count;
  }
  if (r.server) {
    j["server"] = {{"requests_total", r.server->requests_by_code},
                   {"mean_batch_size", r.server->mean_batch_size
                                           ? nlohmann::json(*r.server->mean_batch_size)
                                           : nlohmann::json(nullptr)}};
  } else {
    j["server"] = nullptr;
    if (!r.server_error.empty()) j["server_error"] = r.server_error;
  }
  return j;
}

std::string LevelTable(const std::vector<LevelReport>& reports) {
  const bool open = !reports.empty() && reports[0].level.rate > 0;
  std::string out = absl::StrFormat("%-12s %9s %7s %11s %8s %8s %8s %8s %12s%s\n",
                                    open ? "rate/s" : "concurrency", "requests", "errors",
                                    "req/s", "p50 ms", "p90 ms", "p99 ms", "max ms",
                                    "server batch", open ? "  late sends" : "");
  std::string notes;
  for (const LevelReport& r : reports) {
    int64_t errors = 0;
    for (const auto& [code, n] : r.errors) errors += n;
    std::string batch = "n/a";
    if (r.server && r.server->mean_batch_size) {
      batch = absl::StrFormat("%.2f", *r.server->mean_batch_size);
    }
    absl::StrAppend(
        &out,
        absl::StrFormat(
            "%-12s %9d %7d %11.1f %8.3f %8.3f %8.3f %8.3f %12s",
            open ? absl::StrCat(r.level.rate) : absl::StrCat(r.level.concurrency),
            r.requests, errors, r.throughput, r.latency.p50 * 1e3, r.latency.p90 * 1e3,
            r.latency.p99 * 1e3, r.latency.max * 1e3, batch),
        open ? absl::StrFormat(" %12d", r.late_sends) : "", "\n");
    auto join_counts = [](const auto& counts) {
      return absl::StrJoin(counts, ", ", [](std::string* s, const auto& kv) {
        absl::StrAppend(s, kv.first, " ", kv.second);
      });
    };
    if (!r.errors.empty()) {
      absl::StrAppend(&notes, LevelName(r.level), ": errors ", join_counts(r.errors),
                      "\n");
      for (const auto& [code, message] : r.error_messages) {
        absl::StrAppend(&notes, "  ", code, ": ", message, "\n");
      }
    }
    // Calls that queued long (prefills behind others) finished well after the
    // duration: the table's req/s counts that drain, so say the load's own rate.
    if (r.window_seconds > 0 && r.elapsed_seconds > 1.05 * r.window_seconds) {
      absl::StrAppend(&notes, LevelName(r.level),
                      absl::StrFormat(": %.1f req/s finished within the %.1f s duration "
                                      "(the last calls finished %.1f s after it)\n",
                                      r.window_throughput, r.window_seconds,
                                      r.elapsed_seconds - r.window_seconds));
    }
    if (r.step_latency) {
      absl::StrAppend(
          &notes, LevelName(r.level),
          absl::StrFormat(": decode steps alone (%d): p50 %.3f, p90 %.3f, p99 %.3f, "
                          "max %.3f ms\n",
                          r.step_latency->count, r.step_latency->p50 * 1e3,
                          r.step_latency->p90 * 1e3, r.step_latency->p99 * 1e3,
                          r.step_latency->max * 1e3));
    }
    if (r.server) {
      absl::StrAppend(&notes, LevelName(r.level), ": server requests_total ",
                      r.server->requests_by_code.empty()
                          ? "no change"
                          : join_counts(r.server->requests_by_code),
                      "\n");
    } else if (!r.server_error.empty()) {
      absl::StrAppend(&notes, LevelName(r.level),
                      ": server metrics unavailable: ", r.server_error, "\n");
    }
  }
  return out + notes;
}

}  // namespace layerserve::client
