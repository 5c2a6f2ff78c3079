// The command line of layerserve-bench, parsed into BenchOptions. Pure functions;
// safe to call from any thread.
#ifndef LAYERSERVE_TOOLS_LOADGEN_OPTIONS_H_
#define LAYERSERVE_TOOLS_LOADGEN_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "layerserve/v1/layerserve.pb.h"
#include "tools/cli/flags.h"

namespace layerserve::client {

extern const char kBenchUsage[];

struct BenchOptions {
  std::string target = "127.0.0.1:50051";
  absl::Duration timeout = absl::Seconds(30);  // Per request; no retries.
  // --tls, --tls-ca, --tls-cert, --tls-key, --token-file as given (their files are
  // read by ApplySecurityFlags, tools/cli/security_flags.h, not here).
  FlagValues security;

  // What each request is (bench_request.h).
  std::string method = "normalize";
  std::vector<int64_t> shape = {8, 768};
  v1::DataType wire_dtype = v1::FLOAT32;
  std::string kind = "rms";              // normalize: rms or layer
  v1::Activation activation = v1::SILU;  // activate
  std::string model;                     // block-forward, get-model ("" = default)
  int64_t batch = 1;                     // block-forward
  int64_t tokens = 16;                   // block-forward
  int64_t layers = 1;                    // block-forward, decode
  int64_t steps = 256;                   // decode: one-token steps per session
  // decode: sessions each request steps in one call (session_ids), each thread
  // keeping that many. 1: one session_id call per request.
  int64_t sessions_per_call = 1;
  // decode: servers of a model split by --layers, chained as a client Pipeline
  // (client/cpp/pipeline.h) instead of --target. Empty: --target alone.
  std::vector<std::string> pipeline;
  uint64_t seed = 1;

  // How they are sent (load_generator.h). Exactly one of the two sweeps is set:
  // closed loop at each concurrency, or open loop at each rate (requests/s).
  std::vector<int64_t> concurrency;
  std::vector<double> rates;
  bool poisson = true;       // Open loop: exponential gaps, else constant.
  int64_t max_threads = 64;  // Open loop: sender threads.
  int64_t channels = 0;      // 0 = one per sender thread.
  // Each level runs for `duration`, or for exactly `requests` requests when > 0,
  // after `warmup` of the same load whose results are dropped.
  absl::Duration duration = absl::Seconds(10);
  int64_t requests = 0;
  absl::Duration warmup = absl::Seconds(1);

  // Output.
  std::string metrics_url;  // Empty: no server-side numbers.
  bool json = false;
};

// Parses the arguments after the program name. INVALID_ARGUMENT with a message
// naming the flag; "help" requested is reported as a status with code kCancelled
// (the caller prints kBenchUsage and exits 0).
absl::StatusOr<BenchOptions> ParseBenchArgs(const std::vector<std::string>& args);

}  // namespace layerserve::client

#endif  // LAYERSERVE_TOOLS_LOADGEN_OPTIONS_H_
