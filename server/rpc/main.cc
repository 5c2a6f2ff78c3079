// layerserve: the gRPC server binary.
//
// Start-up prints one line per listener ("layerserve: gRPC listening on HOST:PORT",
// "layerserve: metrics on http://HOST:PORT/metrics"); with --port=0 or
// --metrics-port=0 the OS picks the port and the line tells which.
// SIGHUP reloads the model repository (server/rpc/reloader.h); so does
// --repository-poll-interval, without a signal.
// SIGTERM or SIGINT drains: health turns NOT_SERVING, new RPCs get UNAVAILABLE,
// accepted RPCs finish (up to --shutdown-grace), and the process exits 0. The signals
// are taken with sigwait(), so this also works as PID 1 in a container, where the
// kernel would ignore a default-disposition SIGTERM.
// The flags are in server_flags.cc (their values: ServerConfig, server_config.h);
// --help (usage.h) lists them as the docs write them (--metrics-port); --version
// prints "layerserve VERSION" (the version of layerserve_build_info). Both exit 0.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <prometheus/exposer.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/metrics/metrics.h"
#include "server/models/layer_span.h"
#include "server/models/model_info_proto.h"
#include "server/models/model_repository.h"
#include "server/rpc/allocator.h"
#include "server/rpc/health_service.h"
#include "server/rpc/inference_service.h"
#include "server/rpc/reloader.h"
#include "server/rpc/server_config.h"
#include "server/rpc/server_flags.h"
#include "server/rpc/service.h"
#include "server/rpc/usage.h"
#include "server/security/auth.h"
#include "server/security/tls.h"

namespace layerserve {
namespace {

std::string HostPort(const std::string& host, int port) {
  // IPv6 literals need brackets.
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

// How long a draining server must see no call arrive or finish before it closes its
// connections: requests still uploading then reach a handler and get UNAVAILABLE
// (retryable) instead of a cancelled stream, and clients read the last answers'
// bytes still in the socket buffers (closing a socket with unread input resets the
// connection, and the client loses what it had not read). A heuristic: an upload
// slower than this can still be cut off (the client then sees CANCELLED).
constexpr absl::Duration kDrainQuietPeriod = absl::Milliseconds(500);

// --compute-threads, 0 resolved.
int ComputeThreads(int flag) {
  if (flag > 0) return flag;
  const unsigned cores = std::thread::hardware_concurrency();
  return cores > 0 ? static_cast<int>(cores) : 1;
}

// gRPC channel arguments take milliseconds in an int; InfiniteDuration() maps to
// INT_MAX, gRPC's "never".
int Milliseconds(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return INT32_MAX;
  return static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 0, INT32_MAX));
}

// Names this process in session ids (a pod name under Kubernetes), so a session
// call routed to another replica is told so.
std::string ReplicaName() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0)
    std::snprintf(host, sizeof host, "layerserve");
  return absl::StrCat(host, "-", getpid());
}

int Run(const ServerConfig& config) {
  // Block the stop and reload signals before any thread exists, so every thread
  // inherits the mask and only sigwait() below receives them (a SIGHUP during
  // start-up waits for it).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  TuneAllocator();

  if (const absl::Status valid = config.Validate(); !valid.ok()) {
    std::fprintf(stderr, "layerserve: %s\n", std::string(valid.message()).c_str());
    return 2;
  }
  const std::string& host = config.host;
  const int64_t max_message_bytes = config.max_message_bytes;
  const std::string& weight_dtype = config.weight_dtype;
  const kernels::WeightFormat weight_type(
      weight_dtype == "float32"    ? kernels::WeightType::kFloat32
      : weight_dtype == "bfloat16" ? kernels::WeightType::kBfloat16
                                   : kernels::WeightType::kInt8,
      config.weight_group_size);
  // Validate() checked it.
  const LayerSpan span = *ParseLayerSpan(config.layers);
  // Access control before the models load, so a bad file fails at once. The
  // authenticator must outlive the server (declared later, destroyed first).
  std::unique_ptr<TokenAuthenticator> authenticator;
  if (const std::string& path = config.auth_token_file; !path.empty()) {
    absl::StatusOr<std::unique_ptr<TokenAuthenticator>> loaded =
        TokenAuthenticator::FromFile(path);
    if (!loaded.ok()) {
      std::fprintf(stderr, "layerserve: %s\n",
                   std::string(loaded.status().message()).c_str());
      return 2;
    }
    authenticator = *std::move(loaded);
  }
  const TlsFiles tls{config.tls_cert, config.tls_key, config.tls_client_ca};
  // Like the authenticator, it must outlive the server: gRPC asks it for the
  // certificates at each handshake.
  absl::StatusOr<ListenerSecurity> security =
      ListenerCredentials(tls, authenticator.get());
  if (!security.ok()) {
    std::fprintf(stderr, "layerserve: %s\n",
                 std::string(security.status().message()).c_str());
    return 2;
  }
  if (authenticator != nullptr && tls.cert.empty()) {
    std::printf(
        "layerserve: warning: bearer tokens without --tls-cert cross the network in "
        "cleartext; use only behind a TLS-terminating proxy on a trusted link\n");
  }

  std::unique_ptr<ModelRepository> models;
  const std::string& repository = config.model_repository;
  if (repository.empty()) {
    models = ModelRepository::Demo(weight_type, span);
  } else {
    absl::StatusOr<std::unique_ptr<ModelRepository>> loaded =
        ModelRepository::Load(repository, weight_type, span);
    if (!loaded.ok()) {
      std::fprintf(stderr, "layerserve: %s\n",
                   std::string(loaded.status().message()).c_str());
      return 1;
    }
    models = std::move(*loaded);
  }
  for (const auto& model : models->models()) {
    if (model->ready()) {
      const std::string served =
          span.all() ? ""
                     : absl::StrCat(", serving layers ", model->span_start, "..",
                                    model->span_end - 1);
      std::printf("layerserve: model %s (%s, %lld layers%s, %s weights)%s\n",
                  model->name.c_str(), model->config.model_type.c_str(),
                  static_cast<long long>(model->config.num_layers), served.c_str(),
                  weight_dtype.c_str(),
                  model == models->default_model() ? " [default]" : "");
    } else {
      std::printf("layerserve: model %s FAILED: %s\n", model->name.c_str(),
                  model->error.c_str());
    }
  }

  Metrics metrics;
  for (const auto& model : models->models()) {
    metrics.ModelKnown(model->name);
    if (!model->ready()) continue;
    metrics.ModelInfo(model->name, v1::DataType_Name(WeightDtype(model->weight_type)),
                      model->weight_group_size);
  }
  std::optional<prometheus::Exposer> exposer;
  std::string metrics_host = config.metrics_host;
  if (metrics_host.empty()) metrics_host = host;
  if (config.metrics_port >= 0) {
    const std::string address = HostPort(metrics_host, config.metrics_port);
    try {
      exposer.emplace(address, /*num_threads=*/1);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "layerserve: cannot serve metrics on %s: %s\n",
                   address.c_str(), e.what());
      return 1;
    }
    exposer->RegisterCollectable(metrics.registry());
  }

  ServiceOptions options;
  options.compute_threads = ComputeThreads(config.compute_threads);
  options.batch.max_batch_rows = config.max_batch_rows;
  options.batch.max_queue_delay = absl::Microseconds(config.max_queue_delay_us);
  options.batch.max_gather_delay = absl::Microseconds(config.max_gather_delay_us);
  options.batch.max_queue_size = config.max_queue_size;
  options.max_request_elements = config.max_request_elements;
  options.max_response_bytes = max_message_bytes;
  options.block_forward.prefill_chunk_tokens = config.prefill_chunk_tokens;
  options.sessions.cache_type = config.kv_cache_dtype == "float32"
                                    ? kernels::KvCacheType::kFloat32
                                    : kernels::KvCacheType::kBfloat16;
  options.sessions.max_bytes = config.max_kv_cache_bytes;
  options.sessions.ttl = config.session_ttl;
  options.sessions.replica = ReplicaName();
  LayerServiceImpl service(options, &metrics, models.get());
  // The Open Inference Protocol on the same port, through the same dispatch.
  InferenceServiceImpl inference(&service, models.get());

  // Per model too: "layerserve.v1.LayerService/NAME", never SERVING for a model
  // that failed to load, so a probe or a client can ask about the model it needs.
  std::vector<std::string> health_services = {
      v1::LayerService::service_full_name(),
      inference::GRPCInferenceService::service_full_name()};
  std::set<std::string> failed_models;
  for (const auto& model : models->models()) {
    health_services.push_back(ModelHealthService(model->name));
    if (!model->ready()) failed_models.insert(health_services.back());
  }
  HealthService health(health_services, failed_models);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int grpc_port = 0;
  builder.AddListeningPort(HostPort(host, config.port), security->credentials,
                           &grpc_port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(max_message_bytes));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                             Milliseconds(config.max_connection_age));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                             Milliseconds(config.max_connection_age_grace));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             Milliseconds(config.keepalive_time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             Milliseconds(config.keepalive_timeout));
  // Clients may keep idle connections alive with pings (load balancers drop
  // silent ones), as often as --keepalive-min-client-interval.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             Milliseconds(config.keepalive_min_client_interval));
  builder.RegisterService(&service);
  builder.RegisterService(&inference);
  builder.RegisterService(&health);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || grpc_port == 0) {
    std::fprintf(stderr, "layerserve: cannot listen on %s\n",
                 HostPort(host, config.port).c_str());
    return 1;
  }
  if (config.warm_up) {
    const absl::Time begin = absl::Now();
    const int warmed = service.WarmUp();
    int ready = 0;
    for (const auto& model : models->models()) ready += model->ready();
    std::printf(
        "layerserve: warm-up: %d model(s) on %d compute thread(s) in %s%s\n", ready,
        options.compute_threads,
        absl::FormatDuration(absl::Trunc(absl::Now() - begin, absl::Milliseconds(1)))
            .c_str(),
        warmed == ready * options.compute_threads ? "" : " (some failed: see above)");
  }
  health.SetServing(true);

  std::printf("layerserve: memory allocator %s\n", AllocatorName().c_str());
  const char* access = tls.cert.empty()        ? "plaintext"
                       : tls.client_ca.empty() ? "TLS"
                                               : "mutual TLS";
  std::printf("layerserve: gRPC listening on %s (%s%s)\n",
              HostPort(host, grpc_port).c_str(), access,
              authenticator != nullptr ? ", bearer token" : "");
  if (exposer) {
    std::printf("layerserve: metrics on http://%s/metrics\n",
                HostPort(metrics_host, exposer->GetListeningPorts().at(0)).c_str());
  }
  std::fflush(stdout);

  // Reloads run on their own thread, from now on: the start-up warm-up is over
  // (RunOnEachWorker takes one caller at a time).
  std::unique_ptr<RepositoryReloader> reloader;
  if (!models->dir().empty()) {
    ReloaderOptions reload_options;
    reload_options.poll_interval = config.repository_poll_interval;
    reload_options.warm_up = config.warm_up;
    reloader = std::make_unique<RepositoryReloader>(reload_options, models.get(),
                                                    &service, &health, &metrics);
    reloader->Start();
  }

  int signal_number = 0;
  while (true) {
    sigwait(&signals, &signal_number);
    if (signal_number != SIGHUP) break;
    if (reloader != nullptr) {
      reloader->Trigger();
    } else {
      std::printf(
          "layerserve: SIGHUP: no --model-repository (the built-in demo model): "
          "nothing to reload\n");
      std::fflush(stdout);
    }
  }
  const absl::Duration grace = config.shutdown_grace;
  // Drain. Health first, so load balancers stop sending; then new calls are refused
  // with UNAVAILABLE while accepted ones finish, until none runs and none has
  // arrived for a moment (requests still uploading then get UNAVAILABLE too, not a
  // cancelled stream). Only then gRPC's Shutdown: it would wait for health Watch
  // streams (ended first) and cancel whatever runs at its deadline.
  health.SetServing(false);
  service.StartDraining();
  inference.StartDraining();
  // No reload during the drain; one loading a model finishes loading first.
  if (reloader != nullptr) reloader->Stop();
  const absl::Time deadline = absl::Now() + grace;
  std::printf("layerserve: signal %d, draining %lld accepted calls (grace %s)\n",
              signal_number, static_cast<long long>(service.calls().admitted()),
              absl::FormatDuration(grace).c_str());
  std::fflush(stdout);
  if (!service.calls().AwaitIdle(kDrainQuietPeriod, deadline)) {
    std::printf("layerserve: grace over with %lld calls running; cancelling them\n",
                static_cast<long long>(service.calls().inflight()));
    std::fflush(stdout);
  }
  health.Shutdown();
  server->Shutdown(absl::ToChronoTime(std::max(deadline, absl::Now())));
  server->Wait();
  service.StopWorkers();
  std::printf("layerserve: stopped\n");
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace layerserve

int main(int argc, char** argv) {
  layerserve::SetUpUsage();
  if (layerserve::AsksForHelp(argc, argv)) {
    std::fputs(layerserve::Usage().c_str(), stdout);
    return 0;
  }
  const layerserve::ServerConfig config = layerserve::ParseServerFlags(argc, argv);
  // Debian's Abseil is built with Mutex deadlock detection on: every lock then
  // looks itself up in a graph under one process-wide lock (in profiles of 32
  // decode sessions, ~1% of the server's CPU). The tests, which link the same
  // code without this main, keep it on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return layerserve::Run(config);
}
