// layerserve-bench: a load generator for a layerserve server. See kBenchUsage
// (bench_options.cc) for the flags; the loops are load_generator.h, the report
// bench_report.h.
#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cpp/client.h"
#include "nlohmann/json.hpp"
#include "tools/cli/security_flags.h"
#include "tools/loadgen/http_get.h"
#include "tools/loadgen/load_generator.h"
#include "tools/loadgen/options.h"
#include "tools/loadgen/prometheus_text.h"
#include "tools/loadgen/report.h"
#include "tools/loadgen/request.h"

namespace layerserve::client {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitUsage = 1;
constexpr int kExitErrors = 2;  // The run failed, or some requests did.

absl::StatusOr<std::vector<MetricSample>> Scrape(const std::string& url) {
  absl::StatusOr<std::string> text = HttpGet(url);
  if (!text.ok()) return text.status();
  return ParsePrometheusText(*text);
}

int Main(const std::vector<std::string>& args) {
  absl::StatusOr<BenchOptions> parsed = ParseBenchArgs(args);
  if (parsed.status().code() == absl::StatusCode::kCancelled) {
    std::cout << kBenchUsage;
    return kExitOk;
  }
  if (std::find(args.begin(), args.end(), "--version") != args.end()) {
    std::cout << "layerserve-bench " LAYERSERVE_VERSION "\n";
    return kExitOk;
  }
  if (!parsed.ok()) {
    std::cerr << "error: " << parsed.status().message() << "\n\n" << kBenchUsage;
    return kExitUsage;
  }
  const BenchOptions& o = *parsed;

  // Every error is reported as it is: no retries.
  ClientOptions client_options;
  client_options.target = o.target;
  client_options.timeout = o.timeout;
  client_options.retry.max_attempts = 1;
  if (absl::Status s = ApplySecurityFlags(
          o.security, std::getenv(kTokenEnvironmentVariable), &client_options);
      !s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return kExitUsage;
  }
  const bool open = !o.rates.empty();
  const int64_t threads =
      open ? o.max_threads
           : *std::max_element(o.concurrency.begin(), o.concurrency.end());
  const int64_t channel_count = o.channels > 0 ? o.channels : threads;
  std::vector<std::unique_ptr<Client>> owned;
  std::vector<Client*> clients;
  for (int64_t i = 0; i < channel_count; ++i) {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(client_options);
    if (!client.ok()) {
      std::cerr << "error: " << client.status().message() << "\n";
      return kExitUsage;
    }
    clients.push_back(client->get());
    owned.push_back(*std::move(client));
  }
  absl::StatusOr<BenchRequest> request = MakeBenchRequest(o, *clients[0]);
  if (!request.ok()) {
    std::cerr << "error: " << absl::StatusCodeToString(request.status().code()) << ": "
              << request.status().message() << "\n";
    return request.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                                         : kExitErrors;
  }
  const SendFn send = [&](Client& client) {
    return request->send(client, CallOptions());
  };

  const std::string per_level = o.requests > 0
                                    ? absl::StrCat(o.requests, " requests")
                                    : absl::StrCat(absl::FormatDuration(o.duration));
  if (!o.json) {
    std::cout << "layerserve-bench: " << request->description << " ("
              << request->request_bytes << " bytes) to "
              << (o.pipeline.empty() ? o.target : absl::StrJoin(o.pipeline, ",")) << ", "
              << (open ? "open" : "closed") << " loop, " << per_level << " per level, "
              << (o.warmup > absl::ZeroDuration()
                      ? absl::StrCat(absl::FormatDuration(o.warmup), " warm-up, ")
                      : std::string("no warm-up, "))
              << channel_count << " channel(s)\n";
  }

  std::vector<LevelReport> reports;
  const size_t level_count = open ? o.rates.size() : o.concurrency.size();
  bool any_error = false;
  for (size_t i = 0; i < level_count; ++i) {
    LoadLevel level;
    if (open) {
      level.rate = o.rates[i];
      level.poisson = o.poisson;
      level.threads = o.max_threads;
    } else {
      level.concurrency = o.concurrency[i];
    }
    level.seed = o.seed + i;
    int64_t warmup_requests = 0;
    if (o.warmup > absl::ZeroDuration()) {
      LoadLevel warmup = level;
      warmup.requests = 0;
      warmup.duration = o.warmup;
      warmup_requests = RunLoad(warmup, clients, send).requests;
    }
    level.requests = o.requests;
    level.duration = o.duration;

    // Scraped after the warm-up has finished, so the server's counts cover exactly
    // the measured requests (the server counts a request before it answers it).
    absl::StatusOr<std::vector<MetricSample>> before;
    if (!o.metrics_url.empty()) before = Scrape(o.metrics_url);
    LoadResult result = RunLoad(level, clients, send);
    LevelReport report = MakeLevelReport(level, &result);
    report.warmup_requests = warmup_requests;
    if (!o.metrics_url.empty()) {
      absl::StatusOr<std::vector<MetricSample>> after = Scrape(o.metrics_url);
      if (before.ok() && after.ok()) {
        report.server = DiffServerMetrics(*before, *after, request->rpc);
      } else {
        report.server_error =
            std::string((before.ok() ? after.status() : before.status()).message());
      }
    }
    any_error = any_error || !report.errors.empty();
    if (!o.json) {
      std::cerr << "layerserve-bench: level " << i + 1 << "/" << level_count
                << " done: " << report.requests << " requests\n";
    }
    reports.push_back(std::move(report));
  }

  if (o.json) {
    nlohmann::json out;
    out["target"] = o.pipeline.empty() ? o.target : absl::StrJoin(o.pipeline, ",");
    out["rpc"] = request->rpc;
    out["request"] = request->description;
    out["request_bytes"] = request->request_bytes;
    out["channels"] = channel_count;
    out["mode"] = open ? "open" : "closed";
    if (o.requests > 0) {
      out["requests_per_level"] = o.requests;
    } else {
      out["duration_s"] = absl::ToDoubleSeconds(o.duration);
    }
    out["warmup_s"] = absl::ToDoubleSeconds(o.warmup);
    out["levels"] = nlohmann::json::array();
    for (const LevelReport& r : reports) out["levels"].push_back(LevelJson(r));
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << LevelTable(reports);
  }
  return any_error ? kExitErrors : kExitOk;
}

}  // namespace
}  // namespace layerserve::client

int main(int argc, char** argv) {
  // Keep freed message buffers for reuse, as the server and the Python client do
  // (docs/perf/2026-12-02-large-messages.md): with glibc's defaults each 8 MiB
  // response was faulted in anew, and the load generator's own page faults added
  // 10-40 ms to an 8 MiB call's 14 ms p50, which it reports as the server's.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return layerserve::client::Main(std::vector<std::string>(argv + 1, argv + argc));
}
