// What the server is started with: every flag of the layerserve binary
// (server/rpc/server_flags.cc), parsed, as one value. The defaults here are the
// flags' defaults. Validate() holds every check a flag's value gets before start-up;
// what needs files or the network (the token file, TLS, the listeners) is checked
// where it is used.
#ifndef LAYERSERVE_SERVER_RPC_SERVER_CONFIG_H_
#define LAYERSERVE_SERVER_RPC_SERVER_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "kernels/linear/linear.h"

namespace layerserve {

struct ServerConfig {
  // Listeners.
  std::string host = "0.0.0.0";
  int port = 50051;
  int metrics_port = 9464;   // -1: no metrics listener.
  std::string metrics_host;  // Empty: host.
  int64_t max_message_bytes = int64_t{256} << 20;
  absl::Duration max_connection_age = absl::InfiniteDuration();
  absl::Duration max_connection_age_grace = absl::Seconds(30);
  absl::Duration keepalive_time = absl::Hours(2);
  absl::Duration keepalive_timeout = absl::Seconds(20);
  absl::Duration keepalive_min_client_interval = absl::Seconds(10);
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  std::string auth_token_file;

  // Models.
  std::string model_repository;  // Empty: the built-in demo model.
  absl::Duration repository_poll_interval = absl::ZeroDuration();
  std::string layers;  // ParseLayerSpan's text.
  std::string weight_dtype = "float32";
  int64_t weight_group_size = kernels::kDefaultInt8GroupSize;

  // Compute and batching.
  int compute_threads = 0;  // 0: one per online CPU.
  int64_t max_batch_rows = 512;
  int64_t max_queue_delay_us = 0;
  int64_t max_gather_delay_us = 8000;
  // 64: on 2 Zen 5 cores, 64 sessions of an 8B-shaped layer with a 128-token
  // prefill every 64 steps kept the step p99 at 2.4x the steady p50 for 0.76 of
  // the work-conserving calls/s, where 256 gave 6.7x and 0.80
  // (docs/perf/2026-12-07-steps-beside-prefill-parts.md). A 64-row part is still
  // bound by its products, not the weights' read, on this CPU and on AMX.
  int64_t prefill_chunk_tokens = 64;
  int64_t max_queue_size = 1024;
  int64_t max_request_elements = int64_t{1} << 26;
  bool warm_up = true;

  // KV-cache sessions.
  std::string kv_cache_dtype = "float32";
  int64_t max_kv_cache_bytes = int64_t{2} << 30;
  absl::Duration session_ttl = absl::Minutes(5);

  // Lifecycle.
  absl::Duration shutdown_grace = absl::Seconds(30);

  // INVALID_ARGUMENT naming the flag (as the docs spell it, --max-batch-rows) of the
  // first value the server cannot start with; OK for the defaults.
  absl::Status Validate() const;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_SERVER_CONFIG_H_
