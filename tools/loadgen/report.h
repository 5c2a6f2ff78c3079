// What layerserve-bench reports per load level, from the client's measurements and
// two scrapes of the server's /metrics, as a text table or JSON. Pure functions;
// safe to call from any thread.
#ifndef LAYERSERVE_TOOLS_LOADGEN_REPORT_H_
#define LAYERSERVE_TOOLS_LOADGEN_REPORT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tools/loadgen/latency_stats.h"
#include "tools/loadgen/load_generator.h"
#include "tools/loadgen/prometheus_text.h"

namespace layerserve::client {

// The server's view of one level: deltas between a scrape before and one after.
struct ServerDelta {
  // layerserve_requests_total{method=<rpc>} by code.
  std::map<std::string, int64_t> requests_by_code;
  // delta layerserve_batch_size_sum / delta layerserve_batch_size_count, summed over
  // the label sets of `rpc` (all label sets if the series has no method label).
  // Empty when the server does not export the series or ran no batch.
  std::optional<double> mean_batch_size;
};

ServerDelta DiffServerMetrics(const std::vector<MetricSample>& before,
                              const std::vector<MetricSample>& after,
                              const std::string& rpc);

struct LevelReport {
  LoadLevel level;
  int64_t warmup_requests = 0;
  int64_t requests = 0;
  std::map<std::string, int64_t> errors;              // By code, OK left out.
  std::map<std::string, std::string> error_messages;  // One per code in `errors`.
  double elapsed_seconds = 0;
  double throughput = 0;  // Finished requests (any status) per second.
  // By duration: the requests that finished within it, per second of it (the rate
  // of the load itself, without the drain of calls still queued at its end; see
  // LoadResult::window_seconds). Equal to `throughput` for a fixed request count.
  double window_throughput = 0;
  double window_seconds = 0;  // The duration; 0 for a fixed request count.
  LatencySummary latency;     // Of the OK requests, seconds.
  // Of the OK decode steps alone (LoadResult::ok_step_latencies), when there were.
  std::optional<LatencySummary> step_latency;
  int64_t late_sends = 0;
  std::optional<ServerDelta> server;  // Without --metrics-url or if a scrape failed.
  std::string server_error;           // Why `server` is empty, if a scrape failed.
};

// The report of `result`; `result.ok_latencies` is sorted in place.
LevelReport MakeLevelReport(const LoadLevel& level, LoadResult* result);

// One JSON object per level; latencies in milliseconds, absent server numbers null.
nlohmann::json LevelJson(const LevelReport& report);

// The table: a header line, then one line per level, then error and server-count
// lines.
std::string LevelTable(const std::vector<LevelReport>& reports);

}  // namespace layerserve::client

#endif  // LAYERSERVE_TOOLS_LOADGEN_REPORT_H_
