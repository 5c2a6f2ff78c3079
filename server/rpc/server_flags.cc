#include "server/rpc/server_flags.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"

namespace {

// The flags' defaults: ServerConfig's.
const layerserve::ServerConfig& Defaults() {
  static const auto* const defaults = new layerserve::ServerConfig();
  return *defaults;
}

}  // namespace

ABSL_FLAG(std::string, host, Defaults().host,
          "Address the gRPC and metrics listeners bind to (0.0.0.0: all IPv4).");
ABSL_FLAG(int, port, Defaults().port,
          "gRPC port; 0 lets the OS pick one (printed at start).");
ABSL_FLAG(int, metrics_port, Defaults().metrics_port,
          "Prometheus /metrics port; 0 lets the OS pick one, -1 disables it.");
ABSL_FLAG(int64_t, max_message_bytes, Defaults().max_message_bytes,
          "Largest request or response message in bytes.");
ABSL_FLAG(int, compute_threads, Defaults().compute_threads,
          "Worker threads that run kernels; 0 = one per online CPU.");
ABSL_FLAG(std::string, model_repository, Defaults().model_repository,
          "Directory with one Hugging Face model per sub-directory (config.json + "
          "safetensors). Empty: serve the built-in `demo` model.");
ABSL_FLAG(absl::Duration, repository_poll_interval, Defaults().repository_poll_interval,
          "Rescan --model-repository this often and reload what changed (as SIGHUP "
          "does): new models load, removed ones unload, changed ones are replaced "
          "once the new version has loaded. 0: only on SIGHUP.");
ABSL_FLAG(std::string, layers, Defaults().layers,
          "START:END (half-open, zero-based): load and serve only blocks START..END-1 "
          "of each model, so replicas can split a model too large for one machine. "
          "Empty: every layer.");
ABSL_FLAG(std::string, weight_dtype, Defaults().weight_dtype,
          "How block weights are held: float32, bfloat16 or int8 (weight-only: "
          "symmetric int8 with a float scale per output and group of inputs).");
ABSL_FLAG(int64_t, weight_group_size, Defaults().weight_group_size,
          "With --weight-dtype=int8: inputs sharing one scale; 0 = one scale per "
          "output.");
ABSL_FLAG(absl::Duration, shutdown_grace, Defaults().shutdown_grace,
          "On SIGTERM/SIGINT, how long accepted RPCs may take to finish before they "
          "are cancelled.");
ABSL_FLAG(int64_t, max_batch_rows, Defaults().max_batch_rows,
          "Most rows (BlockForward: tokens) one batch may hold; 1 runs every request "
          "alone. A larger request still runs, alone.");
ABSL_FLAG(int64_t, max_queue_delay_us, Defaults().max_queue_delay_us,
          "How long a request may wait for others to fill its batch. 0: a free worker "
          "takes what is queued at once (requests still batch while workers are "
          "busy).");
ABSL_FLAG(int64_t, max_gather_delay_us, Defaults().max_gather_delay_us,
          "After a batch whose loops idle workers shared (decode steps of KV-cache "
          "sessions), the next batch of its kind waits for as many requests as that "
          "batch and its waiters held, for at most half that batch's time and at most "
          "this long, so sessions stepping together run as one batch. Only for models "
          "whose layers' weights outgrow the CPU's last-level cache. 0: no wait.");
ABSL_FLAG(int64_t, prefill_chunk_tokens, Defaults().prefill_chunk_tokens,
          "A BlockForward call on a KV-cache session with more tokens (a long prefill) "
          "runs this many at a time, each chunk through all its layers and into the "
          "session's cache, and waits in the queue again between chunks; a batch takes "
          "every waiting decode step first, then at most this many prefill tokens "
          "(the token budget). Answered once, after its last chunk. "
          "Larger: more prefill throughput while prefills queue up, longer decode "
          "steps beside them (a step waits for its batch's chunk). 0: prefills run "
          "whole.");
ABSL_FLAG(int64_t, max_queue_size, Defaults().max_queue_size,
          "Requests that may wait in the queues; more get RESOURCE_EXHAUSTED at once.");
ABSL_FLAG(int64_t, max_request_elements, Defaults().max_request_elements,
          "Largest tensor (values) a request may send or ask for; larger requests get "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(absl::Duration, max_connection_age, Defaults().max_connection_age,
          "Close client connections after this long (GOAWAY; clients reconnect), so "
          "L4 load balancers can rebalance long-lived HTTP/2 connections. e.g. 5m.");
ABSL_FLAG(absl::Duration, max_connection_age_grace, Defaults().max_connection_age_grace,
          "After --max-connection-age, how long RPCs on the old connection may finish.");
ABSL_FLAG(absl::Duration, keepalive_time, Defaults().keepalive_time,
          "Ping an idle client connection this often to detect dead peers.");
ABSL_FLAG(absl::Duration, keepalive_timeout, Defaults().keepalive_timeout,
          "Close a connection whose keepalive ping is not answered within this.");
ABSL_FLAG(std::string, kv_cache_dtype, Defaults().kv_cache_dtype,
          "How sessions hold cached keys and values: float32 or bfloat16 (half the "
          "memory; values rounded to bfloat16).");
ABSL_FLAG(int64_t, max_kv_cache_bytes, Defaults().max_kv_cache_bytes,
          "Bytes all sessions' KV caches may hold; past it idle sessions are evicted, "
          "least recently used first.");
ABSL_FLAG(absl::Duration, session_ttl, Defaults().session_ttl,
          "A session without a call for this long expires (its cache is freed).");
ABSL_FLAG(absl::Duration, keepalive_min_client_interval,
          Defaults().keepalive_min_client_interval,
          "Shortest keepalive ping interval accepted from clients (shorter: GOAWAY).");
ABSL_FLAG(std::string, metrics_host, Defaults().metrics_host,
          "Address the metrics listener binds to (e.g. an internal interface); empty: "
          "--host.");
ABSL_FLAG(std::string, tls_cert, Defaults().tls_cert,
          "PEM certificate chain for the gRPC listener; with --tls-key turns TLS on. "
          "Read again (with --tls-key and --tls-client-ca) when the files change.");
ABSL_FLAG(std::string, tls_key, Defaults().tls_key,
          "PEM private key of --tls-cert (unencrypted).");
ABSL_FLAG(std::string, tls_client_ca, Defaults().tls_client_ca,
          "PEM CA certificates; when set, clients must present a certificate one of "
          "them signed (mutual TLS).");
ABSL_FLAG(bool, warm_up, Defaults().warm_up,
          "Before health says SERVING, run BlockForward calls of 16 and 512 tokens "
          "(at least a --prefill-chunk-tokens chunk), and a session's prefill of as "
          "many tokens then a decode step, of every model on every compute thread, "
          "so the first calls are not the slow ones (oneDNN's primitives, buffers "
          "grown).");
ABSL_FLAG(std::string, auth_token_file, Defaults().auth_token_file,
          "File of accepted bearer tokens, one per line; when set, every call but "
          "grpc.health.v1 needs `authorization: Bearer <token>` metadata. Read again "
          "when it changes (looked at once a second at most).");

namespace layerserve {

bool IsServerFlagFile(absl::string_view file) {
  return absl::EndsWith(file, "server/rpc/server_flags.cc");
}

ServerConfig ParseServerFlags(int argc, char** argv) {
  // Flags are documented as --metrics-port; absl names them --metrics_port. Accept
  // both spellings by rewriting dashes in flag names.
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& arg = args[i];
    if (arg == "--") break;
    if (arg.rfind("--", 0) != 0) continue;
    const size_t name_end = std::min(arg.find('='), arg.size());
    std::replace(arg.begin() + 2, arg.begin() + name_end, '-', '_');
  }
  std::vector<char*> arg_pointers;
  for (std::string& arg : args) arg_pointers.push_back(arg.data());
  absl::ParseCommandLine(static_cast<int>(arg_pointers.size()), arg_pointers.data());

  ServerConfig config;
  config.host = absl::GetFlag(FLAGS_host);
  config.port = absl::GetFlag(FLAGS_port);
  config.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  config.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  config.compute_threads = absl::GetFlag(FLAGS_compute_threads);
  config.model_repository = absl::GetFlag(FLAGS_model_repository);
  config.repository_poll_interval = absl::GetFlag(FLAGS_repository_poll_interval);
  config.layers = absl::GetFlag(FLAGS_layers);
  config.weight_dtype = absl::GetFlag(FLAGS_weight_dtype);
  config.weight_group_size = absl::GetFlag(FLAGS_weight_group_size);
  config.shutdown_grace = absl::GetFlag(FLAGS_shutdown_grace);
  config.max_batch_rows = absl::GetFlag(FLAGS_max_batch_rows);
  config.max_queue_delay_us = absl::GetFlag(FLAGS_max_queue_delay_us);
  config.max_gather_delay_us = absl::GetFlag(FLAGS_max_gather_delay_us);
  config.prefill_chunk_tokens = absl::GetFlag(FLAGS_prefill_chunk_tokens);
  config.max_queue_size = absl::GetFlag(FLAGS_max_queue_size);
  config.max_request_elements = absl::GetFlag(FLAGS_max_request_elements);
  config.max_connection_age = absl::GetFlag(FLAGS_max_connection_age);
  config.max_connection_age_grace = absl::GetFlag(FLAGS_max_connection_age_grace);
  config.keepalive_time = absl::GetFlag(FLAGS_keepalive_time);
  config.keepalive_timeout = absl::GetFlag(FLAGS_keepalive_timeout);
  config.kv_cache_dtype = absl::GetFlag(FLAGS_kv_cache_dtype);
  config.max_kv_cache_bytes = absl::GetFlag(FLAGS_max_kv_cache_bytes);
  config.session_ttl = absl::GetFlag(FLAGS_session_ttl);
  config.keepalive_min_client_interval =
      absl::GetFlag(FLAGS_keepalive_min_client_interval);
  config.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  config.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  config.tls_key = absl::GetFlag(FLAGS_tls_key);
  config.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  config.warm_up = absl::GetFlag(FLAGS_warm_up);
  config.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  return config;
}

}  // namespace layerserve
