#include "tools/loadgen/load_generator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>

namespace layerserve::client {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// What one sender thread saw; merged after the threads are joined, so the hot loop
// shares nothing but an atomic counter.
struct ThreadResult {
  std::map<std::string, int64_t> codes;
  std::map<std::string, std::string> error_messages;  // The first of each code.
  std::vector<double> ok_latencies;
  std::vector<double> ok_step_latencies;
  int64_t requests = 0;
  int64_t late_sends = 0;
  int64_t finished_in_window = 0;
  Clock::time_point last_finish;

  // `window_end`: the end of the level's duration (Clock::time_point::max() for a
  // level of a fixed request count).
  void Record(const SendOutcome& sent, double latency, Clock::time_point finish,
              Clock::time_point window_end) {
    const absl::Status& status = sent.status;
    ++requests;
    if (finish <= window_end) ++finished_in_window;
    const std::string code = absl::StatusCodeToString(status.code());
    if (++codes[code] == 1 && !status.ok()) {
      error_messages[code] = std::string(status.message());
    }
    if (status.ok()) ok_latencies.push_back(latency);
    if (status.ok() && sent.step) ok_step_latencies.push_back(latency);
    last_finish = std::max(last_finish, finish);
  }
};

// The end of `level`'s duration from `start`, or never for a fixed request count.
Clock::time_point WindowEnd(const LoadLevel& level, Clock::time_point start) {
  if (level.requests > 0) return Clock::time_point::max();
  return start + absl::ToChronoNanoseconds(level.duration);
}

LoadResult Merge(std::vector<ThreadResult>& threads, const LoadLevel& level,
                 Clock::time_point start) {
  LoadResult result;
  const bool by_duration = level.requests == 0;
  if (by_duration) result.window_seconds = absl::ToDoubleSeconds(level.duration);
  Clock::time_point last = start;
  for (ThreadResult& t : threads) {
    result.requests += t.requests;
    if (by_duration) result.finished_in_window += t.finished_in_window;
    result.late_sends += t.late_sends;
    for (const auto& [code, n] : t.codes) result.codes[code] += n;
    result.error_messages.insert(t.error_messages.begin(), t.error_messages.end());
    result.ok_latencies.insert(result.ok_latencies.end(), t.ok_latencies.begin(),
                               t.ok_latencies.end());
    result.ok_step_latencies.insert(result.ok_step_latencies.end(),
                                    t.ok_step_latencies.begin(),
                                    t.ok_step_latencies.end());
    last = std::max(last, t.last_finish);
  }
  result.elapsed_seconds = Seconds(last - start);
  return result;
}

LoadResult RunClosed(const LoadLevel& level, absl::Span<Client* const> clients,
                     const SendFn& send) {
  std::vector<ThreadResult> results(level.concurrency);
  std::atomic<int64_t> claimed{0};
  const Clock::time_point start = Clock::now();
  const Clock::time_point end = WindowEnd(level, start);
  std::vector<std::thread> threads;
  for (int64_t k = 0; k < level.concurrency; ++k) {
    threads.emplace_back([&, k] {
      Client& client = *clients[k % clients.size()];
      ThreadResult& r = results[k];
      while (true) {
        if (level.requests > 0) {
          if (claimed.fetch_add(1, std::memory_order_relaxed) >= level.requests) break;
        } else if (Clock::now() >= end) {
          break;
        }
        const Clock::time_point sent = Clock::now();
        const SendOutcome outcome = send(client);
        const Clock::time_point done = Clock::now();
        r.Record(outcome, Seconds(done - sent), done, end);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return Merge(results, level, start);
}

LoadResult RunOpen(const LoadLevel& level, absl::Span<Client* const> clients,
                   const SendFn& send) {
  const std::vector<double> arrivals =
      ArrivalOffsets(level.rate, level.poisson, level.requests,
                     absl::ToDoubleSeconds(level.duration), level.seed);
  const int64_t n = static_cast<int64_t>(arrivals.size());
  const int64_t thread_count = std::max<int64_t>(1, std::min<int64_t>(level.threads, n));
  std::vector<ThreadResult> results(thread_count);
  std::atomic<int64_t> next{0};
  const Clock::time_point start = Clock::now();
  const Clock::time_point end = WindowEnd(level, start);
  std::vector<std::thread> threads;
  for (int64_t k = 0; k < thread_count; ++k) {
    threads.emplace_back([&, k] {
      Client& client = *clients[k % clients.size()];
      ThreadResult& r = results[k];
      while (true) {
        const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
        if (i >= n) break;
        const Clock::time_point scheduled =
            start + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::duration<double>(arrivals[i]));
        std::this_thread::sleep_until(scheduled);
        if (Clock::now() - scheduled > std::chrono::milliseconds(1)) ++r.late_sends;
        const SendOutcome outcome = send(client);
        const Clock::time_point done = Clock::now();
        r.Record(outcome, Seconds(done - scheduled), done, end);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return Merge(results, level, start);
}

}  // namespace

std::vector<double> ArrivalOffsets(double rate, bool poisson, int64_t count,
                                   double duration_seconds, uint64_t seed) {
  std::vector<double> offsets;
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  double t = 0;
  for (int64_t i = 0; count > 0 ? i < count : t < duration_seconds; ++i) {
    offsets.push_back(t);
    t = poisson ? t + gap(rng) : static_cast<double>(i + 1) / rate;
  }
  return offsets;
}

LoadResult RunLoad(const LoadLevel& level, absl::Span<Client* const> clients,
                   const SendFn& send) {
  return level.rate > 0 ? RunOpen(level, clients, send) : RunClosed(level, clients, send);
}

}  // namespace layerserve::client
