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
// --help lists the flags below as the docs write them (--metrics-port); --version
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

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/metrics/metrics.h"
#include "server/models/layer_span.h"
#include "server/models/model_repository.h"
#include "server/rpc/allocator.h"
#include "server/rpc/health_service.h"
#include "server/rpc/inference_service.h"
#include "server/rpc/reloader.h"
#include "server/rpc/service.h"
#include "server/security/auth.h"
#include "server/security/tls.h"

ABSL_FLAG(std::string, host, "0.0.0.0",
          "Address the gRPC and metrics listeners bind to (0.0.0.0: all IPv4).");
ABSL_FLAG(int, port, 50051, "gRPC port; 0 lets the OS pick one (printed at start).");
ABSL_FLAG(int, metrics_port, 9464,
          "Prometheus /metrics port; 0 lets the OS pick one, -1 disables it.");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{256} << 20,
          "Largest request or response message in bytes.");
ABSL_FLAG(int, compute_threads, 0,
          "Worker threads that run kernels; 0 = one per online CPU.");
ABSL_FLAG(std::string, model_repository, "",
          "Directory with one Hugging Face model per sub-directory (config.json + "
          "safetensors). Empty: serve the built-in `demo` model.");
ABSL_FLAG(absl::Duration, repository_poll_interval, absl::ZeroDuration(),
          "Rescan --model-repository this often and reload what changed (as SIGHUP "
          "does): new models load, removed ones unload, changed ones are replaced "
          "once the new version has loaded. 0: only on SIGHUP.");
ABSL_FLAG(std::string, layers, "",
          "START:END (half-open, zero-based): load and serve only blocks START..END-1 "
          "of each model, so replicas can split a model too large for one machine. "
          "Empty: every layer.");
ABSL_FLAG(std::string, weight_dtype, "float32",
          "How block weights are held: float32, bfloat16 or int8 (weight-only: "
          "symmetric int8 with a float scale per output and group of inputs).");
ABSL_FLAG(int64_t, weight_group_size, layerserve::kernels::kDefaultInt8GroupSize,
          "With --weight-dtype=int8: inputs sharing one scale; 0 = one scale per "
          "output.");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(30),
          "On SIGTERM/SIGINT, how long accepted RPCs may take to finish before they "
          "are cancelled.");
ABSL_FLAG(int64_t, max_batch_rows, 512,
          "Most rows (BlockForward: tokens) one batch may hold; 1 runs every request "
          "alone. A larger request still runs, alone.");
ABSL_FLAG(int64_t, max_queue_delay_us, 0,
          "How long a request may wait for others to fill its batch. 0: a free worker "
          "takes what is queued at once (requests still batch while workers are "
          "busy).");
ABSL_FLAG(int64_t, max_gather_delay_us, 8000,
          "After a batch whose loops idle workers shared (decode steps of KV-cache "
          "sessions), the next batch of its kind waits for as many requests as that "
          "batch and its waiters held, for at most half that batch's time and at most "
          "this long, so sessions stepping together run as one batch. Only for models "
          "whose layers' weights outgrow the CPU's last-level cache. 0: no wait.");
ABSL_FLAG(int64_t, prefill_chunk_tokens, 256,
          "A BlockForward call on a KV-cache session with more tokens (a long prefill) "
          "runs this many at a time, each chunk through all its layers and into the "
          "session's cache, and waits in the queue again between chunks, so that "
          "waiting decode steps run before its next chunk; answered once, after its "
          "last. A batch holding a session's prefill holds at most this many tokens. "
          "Smaller: shorter decode stalls, less prefill throughput (each chunk reads "
          "the layer's weights again); 64-128 on one-core replicas. 0: prefills run "
          "whole.");
ABSL_FLAG(int64_t, max_queue_size, 1024,
          "Requests that may wait in the queues; more get RESOURCE_EXHAUSTED at once.");
ABSL_FLAG(int64_t, max_request_elements, int64_t{1} << 26,
          "Largest tensor (values) a request may send or ask for; larger requests get "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(absl::Duration, max_connection_age, absl::InfiniteDuration(),
          "Close client connections after this long (GOAWAY; clients reconnect), so "
          "L4 load balancers can rebalance long-lived HTTP/2 connections. e.g. 5m.");
ABSL_FLAG(absl::Duration, max_connection_age_grace, absl::Seconds(30),
          "After --max-connection-age, how long RPCs on the old connection may finish.");
ABSL_FLAG(absl::Duration, keepalive_time, absl::Hours(2),
          "Ping an idle client connection this often to detect dead peers.");
ABSL_FLAG(absl::Duration, keepalive_timeout, absl::Seconds(20),
          "Close a connection whose keepalive ping is not answered within this.");
ABSL_FLAG(std::string, kv_cache_dtype, "float32",
          "How sessions hold cached keys and values: float32 or bfloat16 (half the "
          "memory; values rounded to bfloat16).");
ABSL_FLAG(int64_t, max_kv_cache_bytes, int64_t{2} << 30,
          "Bytes all sessions' KV caches may hold; past it idle sessions are evicted, "
          "least recently used first.");
ABSL_FLAG(absl::Duration, session_ttl, absl::Minutes(5),
          "A session without a call for this long expires (its cache is freed).");
ABSL_FLAG(absl::Duration, keepalive_min_client_interval, absl::Seconds(10),
          "Shortest keepalive ping interval accepted from clients (shorter: GOAWAY).");
ABSL_FLAG(std::string, metrics_host, "",
          "Address the metrics listener binds to (e.g. an internal interface); empty: "
          "--host.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain for the gRPC listener; with --tls-key turns TLS on. "
          "Read again (with --tls-key and --tls-client-ca) when the files change.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert (unencrypted).");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificates; when set, clients must present a certificate one of "
          "them signed (mutual TLS).");
ABSL_FLAG(bool, warm_up, true,
          "Before health says SERVING, run BlockForward calls of 16 and 512 tokens "
          "and a decode step of every model on every compute thread, so the first "
          "calls are not the slow ones (oneDNN's primitives, buffers grown).");
ABSL_FLAG(std::string, auth_token_file, "",
          "File of accepted bearer tokens, one per line; when set, every call but "
          "grpc.health.v1 needs `authorization: Bearer <token>` metadata. Read again "
          "when it changes (looked at once a second at most).");

namespace layerserve {
namespace {

// Whether flags defined in `file` are the server's own (those above), not
// Abseil's or a library's. absl passes the file as __FILE__ was, less leading
// slashes; how much of the path that holds depends on the build.
bool IsServerFlagFile(absl::string_view file) {
  return absl::EndsWith(file, "server/rpc/main.cc");
}

// "INT" for `--name=INT` in the help text; empty for a bool (a bare --name).
std::string FlagValueName(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<bool>()) return "";
  if (flag.IsOfType<int>() || flag.IsOfType<int64_t>()) return "INT";
  if (flag.IsOfType<absl::Duration>()) return "DURATION";
  if (flag.IsOfType<std::string>()) return "STRING";
  return "VALUE";
}

// `text` as lines of at most `width` columns, each indented by `indent`.
std::string Wrapped(absl::string_view text, int indent, size_t width) {
  std::string out;
  std::string line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) {
      absl::StrAppend(&out, std::string(indent, ' '), line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  if (!line.empty()) absl::StrAppend(&out, std::string(indent, ' '), line, "\n");
  return out;
}

// The text of --help: the server's flags, named as the docs name them (with
// dashes; absl would print --metrics_port), each with its default and help.
std::string Usage() {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (IsServerFlagFile(flag->Filename())) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  std::string out = absl::StrCat(
      "Usage: layerserve [--flag=VALUE ...]\n\n", absl::ProgramUsageMessage(),
      "\n\nFlags (\"--flag VALUE\" and --flag_name work too):\n");
  for (const absl::CommandLineFlag* flag : flags) {
    const std::string value_name = FlagValueName(*flag);
    std::string default_value = flag->DefaultValue();
    if (flag->IsOfType<std::string>())
      default_value = absl::StrCat("\"", default_value, "\"");
    absl::StrAppend(&out, "  --", absl::StrReplaceAll(flag->Name(), {{"_", "-"}}),
                    value_name.empty() ? "" : "=", value_name, "  (default ",
                    default_value, ")\n", Wrapped(flag->Help(), 6, 80));
  }
  absl::StrAppend(&out,
                  "  --help\n      Print this text and exit.\n"
                  "  --version\n      Print the version and exit.\n");
  return out;
}

// absl's own usage flags (--helpshort, --helppackage, --helpfull) report the
// server's flags too, and its --version the version.
absl::FlagsUsageConfig UsageConfig() {
  absl::FlagsUsageConfig config;
  config.contains_helpshort_flags = IsServerFlagFile;
  config.contains_help_flags = IsServerFlagFile;
  config.contains_helppackage_flags = IsServerFlagFile;
  config.version_string = [] {
    return std::string("layerserve " LAYERSERVE_VERSION "\n");
  };
  return config;
}

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

int ComputeThreads() {
  const int flag = absl::GetFlag(FLAGS_compute_threads);
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

int Run() {
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

  const std::string host = absl::GetFlag(FLAGS_host);
  const int64_t max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  if (max_message_bytes < 1 || max_message_bytes > INT32_MAX) {
    std::fprintf(stderr, "layerserve: --max-message-bytes must be in [1, %d]\n",
                 INT32_MAX);
    return 2;
  }

  const std::string weight_dtype = absl::GetFlag(FLAGS_weight_dtype);
  if (weight_dtype != "float32" && weight_dtype != "bfloat16" && weight_dtype != "int8") {
    std::fprintf(stderr,
                 "layerserve: --weight-dtype must be float32, bfloat16 or int8, not %s\n",
                 weight_dtype.c_str());
    return 2;
  }
  // Bounded so that ModelInfo's int32 field holds it.
  const int64_t weight_group_size = absl::GetFlag(FLAGS_weight_group_size);
  if (weight_group_size < 0 || weight_group_size > INT32_MAX) {
    std::fprintf(stderr,
                 "layerserve: --weight-group-size must be 0 (one scale per output) or "
                 "in [1, %d], not %lld\n",
                 INT32_MAX, static_cast<long long>(weight_group_size));
    return 2;
  }
  const kernels::WeightFormat weight_type(
      weight_dtype == "float32"    ? kernels::WeightType::kFloat32
      : weight_dtype == "bfloat16" ? kernels::WeightType::kBfloat16
                                   : kernels::WeightType::kInt8,
      weight_group_size);
  const absl::Duration poll_interval = absl::GetFlag(FLAGS_repository_poll_interval);
  if (poll_interval < absl::ZeroDuration()) {
    std::fprintf(stderr,
                 "layerserve: --repository-poll-interval must be >= 0 (0: only on "
                 "SIGHUP), not %s\n",
                 absl::FormatDuration(poll_interval).c_str());
    return 2;
  }
  const absl::StatusOr<LayerSpan> span = ParseLayerSpan(absl::GetFlag(FLAGS_layers));
  if (!span.ok()) {
    std::fprintf(stderr, "layerserve: %s\n",
                 std::string(span.status().message()).c_str());
    return 2;
  }
  // Access control before the models load, so a bad file fails at once. The
  // authenticator must outlive the server (declared later, destroyed first).
  std::unique_ptr<TokenAuthenticator> authenticator;
  if (const std::string path = absl::GetFlag(FLAGS_auth_token_file); !path.empty()) {
    absl::StatusOr<std::unique_ptr<TokenAuthenticator>> loaded =
        TokenAuthenticator::FromFile(path);
    if (!loaded.ok()) {
      std::fprintf(stderr, "layerserve: %s\n",
                   std::string(loaded.status().message()).c_str());
      return 2;
    }
    authenticator = *std::move(loaded);
  }
  const TlsFiles tls{absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                     absl::GetFlag(FLAGS_tls_client_ca)};
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
  const std::string repository = absl::GetFlag(FLAGS_model_repository);
  if (repository.empty()) {
    models = ModelRepository::Demo(weight_type, *span);
  } else {
    absl::StatusOr<std::unique_ptr<ModelRepository>> loaded =
        ModelRepository::Load(repository, weight_type, *span);
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
          span->all() ? ""
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
  std::string metrics_host = absl::GetFlag(FLAGS_metrics_host);
  if (metrics_host.empty()) metrics_host = host;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    const std::string address = HostPort(metrics_host, absl::GetFlag(FLAGS_metrics_port));
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
  options.compute_threads = ComputeThreads();
  options.batch.max_batch_rows = absl::GetFlag(FLAGS_max_batch_rows);
  options.batch.max_queue_delay =
      absl::Microseconds(absl::GetFlag(FLAGS_max_queue_delay_us));
  options.batch.max_gather_delay =
      absl::Microseconds(absl::GetFlag(FLAGS_max_gather_delay_us));
  options.batch.max_queue_size = absl::GetFlag(FLAGS_max_queue_size);
  options.max_request_elements = absl::GetFlag(FLAGS_max_request_elements);
  options.max_response_bytes = max_message_bytes;
  if (options.batch.max_batch_rows < 1 || options.batch.max_queue_size < 1 ||
      options.max_request_elements < 1 || absl::GetFlag(FLAGS_max_queue_delay_us) < 0 ||
      absl::GetFlag(FLAGS_max_gather_delay_us) < 0) {
    std::fprintf(stderr,
                 "layerserve: --max-batch-rows, --max-queue-size and "
                 "--max-request-elements must be >= 1, --max-queue-delay-us and "
                 "--max-gather-delay-us >= 0\n");
    return 2;
  }
  options.prefill_chunk_tokens = absl::GetFlag(FLAGS_prefill_chunk_tokens);
  if (options.prefill_chunk_tokens < 0) {
    std::fprintf(stderr,
                 "layerserve: --prefill-chunk-tokens must be >= 0 (0: prefills run "
                 "whole), not %lld\n",
                 static_cast<long long>(options.prefill_chunk_tokens));
    return 2;
  }
  const std::string kv_cache_dtype = absl::GetFlag(FLAGS_kv_cache_dtype);
  if (kv_cache_dtype != "float32" && kv_cache_dtype != "bfloat16") {
    std::fprintf(stderr,
                 "layerserve: --kv-cache-dtype must be float32 or bfloat16, not %s\n",
                 kv_cache_dtype.c_str());
    return 2;
  }
  options.sessions.cache_type = kv_cache_dtype == "float32"
                                    ? kernels::KvCacheType::kFloat32
                                    : kernels::KvCacheType::kBfloat16;
  options.sessions.max_bytes = absl::GetFlag(FLAGS_max_kv_cache_bytes);
  options.sessions.ttl = absl::GetFlag(FLAGS_session_ttl);
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
  builder.AddListeningPort(HostPort(host, absl::GetFlag(FLAGS_port)),
                           security->credentials, &grpc_port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(max_message_bytes));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                             Milliseconds(absl::GetFlag(FLAGS_max_connection_age)));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                             Milliseconds(absl::GetFlag(FLAGS_max_connection_age_grace)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             Milliseconds(absl::GetFlag(FLAGS_keepalive_time)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             Milliseconds(absl::GetFlag(FLAGS_keepalive_timeout)));
  // Clients may keep idle connections alive with pings (load balancers drop
  // silent ones), as often as --keepalive-min-client-interval.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      Milliseconds(absl::GetFlag(FLAGS_keepalive_min_client_interval)));
  builder.RegisterService(&service);
  builder.RegisterService(&inference);
  builder.RegisterService(&health);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || grpc_port == 0) {
    std::fprintf(stderr, "layerserve: cannot listen on %s\n",
                 HostPort(host, absl::GetFlag(FLAGS_port)).c_str());
    return 1;
  }
  if (absl::GetFlag(FLAGS_warm_up)) {
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
    reload_options.poll_interval = poll_interval;
    reload_options.warm_up = absl::GetFlag(FLAGS_warm_up);
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
  const absl::Duration grace = absl::GetFlag(FLAGS_shutdown_grace);
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
  absl::SetProgramUsageMessage(
      "Serves Transformer layer computations over gRPC (layerserve.v1.LayerService, and "
      "the Open Inference Protocol's inference.GRPCInferenceService on the same port).");
  absl::SetFlagsUsageConfig(layerserve::UsageConfig());
  // Flags are documented as --metrics-port; absl names them --metrics_port (a C++
  // identifier). Accept both spellings by rewriting dashes in flag names.
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& arg = args[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-help" || arg == "-h") {
      std::fputs(layerserve::Usage().c_str(), stdout);
      return 0;
    }
    if (arg.rfind("--", 0) != 0) continue;
    const size_t name_end = std::min(arg.find('='), arg.size());
    std::replace(arg.begin() + 2, arg.begin() + name_end, '-', '_');
  }
  std::vector<char*> arg_pointers;
  for (std::string& arg : args) arg_pointers.push_back(arg.data());
  absl::ParseCommandLine(static_cast<int>(arg_pointers.size()), arg_pointers.data());
  // Debian's Abseil is built with Mutex deadlock detection on: every lock then
  // looks itself up in a graph under one process-wide lock (in profiles of 32
  // decode sessions, ~1% of the server's CPU). The tests, which link the same
  // code without this main, keep it on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return layerserve::Run();
}
