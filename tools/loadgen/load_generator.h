// The load loops of layerserve-bench. Closed loop: `concurrency` threads, each
// sending its next request as soon as the previous one returns. Open loop: requests
// scheduled at a fixed rate (constant or Poisson gaps) and sent by a pool of
// threads; a request's latency counts from its scheduled time, so when every
// sender is busy the wait shows up as latency instead of silently lowering the
// rate ("coordinated omission", as wrk2 and perf_analyzer avoid it).
// Latencies are measured with std::chrono::steady_clock.
#ifndef LAYERSERVE_TOOLS_LOADGEN_LOAD_GENERATOR_H_
#define LAYERSERVE_TOOLS_LOADGEN_LOAD_GENERATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/cpp/client.h"

namespace layerserve::client {

struct LoadLevel {
  // Open loop when rate > 0, closed loop otherwise.
  int64_t concurrency = 1;  // Closed loop: requests in flight, one thread each.
  double rate = 0;          // Open loop: requests per second.
  bool poisson = true;      // Open loop: exponential gaps, else constant 1/rate.
  int64_t threads = 64;     // Open loop: sender threads.
  // Exactly `requests` requests when > 0; otherwise until `duration` has passed
  // (closed loop: no request starts after it; open loop: those scheduled before it).
  int64_t requests = 0;
  absl::Duration duration = absl::Seconds(10);
  uint64_t seed = 1;
};

struct LoadResult {
  int64_t requests = 0;                  // Finished, any status.
  std::map<std::string, int64_t> codes;  // By status code name, "OK" included.
  // By code, errors only: the message of one failed request (the first that some
  // thread saw), which says more than the code ("failed to connect", a GOAWAY...).
  std::map<std::string, std::string> error_messages;
  std::vector<double> ok_latencies;  // Seconds, of the OK requests, unordered.
  // Seconds, of the OK requests that were decode steps (SendOutcome::step): the
  // latency of a step apart from the prefills mixed in. Empty for other requests.
  std::vector<double> ok_step_latencies;
  double elapsed_seconds = 0;  // From the start to the last finish.
  int64_t late_sends = 0;      // Open loop: sent > 1 ms after schedule.
  // By duration: the level's duration, and how many requests (any status) finished
  // within it. The calls still in flight at its end finish after it, and when they
  // queued long (a prefill behind many others) that drain stretches elapsed_seconds
  // far past the duration; requests over elapsed_seconds then understates the
  // rate the load ran at. 0 and 0 for a level of a fixed request count.
  double window_seconds = 0;
  int64_t finished_in_window = 0;
};

// Open-loop send times in seconds from the start, ascending: exactly `count` when
// count > 0, else every one before `duration_seconds`. Gaps are 1/rate, or
// exponential with mean 1/rate (seeded) when `poisson`. The first is at 0.
std::vector<double> ArrivalOffsets(double rate, bool poisson, int64_t count,
                                   double duration_seconds, uint64_t seed);

// What one send did: its status, and whether it was a decode step (one token per
// session) rather than anything else (a prefill, a stateless call).
struct SendOutcome {
  SendOutcome(absl::Status status = absl::OkStatus(), bool step = false)  // NOLINT
      : status(std::move(status)), step(step) {}
  absl::Status status;
  bool step;
};

// Sends one request through `client`. Must be thread-safe.
using SendFn = std::function<SendOutcome(Client& client)>;

// Runs one level. Sender thread k uses clients[k % clients.size()].
// REQUIRES: !clients.empty().
LoadResult RunLoad(const LoadLevel& level, absl::Span<Client* const> clients,
                   const SendFn& send);

}  // namespace layerserve::client

#endif  // LAYERSERVE_TOOLS_LOADGEN_LOAD_GENERATOR_H_
