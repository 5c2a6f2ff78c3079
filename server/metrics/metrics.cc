#include "server/metrics/metrics.h"

#include <oneapi/dnnl/dnnl.hpp>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "layerserve/v1/layerserve.pb.h"

namespace layerserve {
namespace {

// Buckets from 25 µs (a small Normalize's queue or compute time) to 10 s (a long
// prefill).
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* const kBuckets = new prometheus::Histogram::BucketBoundaries{
      25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
      25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0,  2.5,    5.0,  10.0};
  return *kBuckets;
}

// Powers of two: requests per batch and rows (or tokens) per batch.
const prometheus::Histogram::BucketBoundaries& CountBuckets() {
  static const auto* const kBuckets = new prometheus::Histogram::BucketBoundaries{
      1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
  return *kBuckets;
}

// Decades from 1e-3 to 1e9: activations of a healthy model sit around 1 to 1e3;
// the top buckets catch values on their way to overflow (bfloat16 and float16 end
// at 3.4e38 and 65504).
const prometheus::Histogram::BucketBoundaries& MagnitudeBuckets() {
  static const auto* const kBuckets = new prometheus::Histogram::BucketBoundaries{
      1e-3, 1e-2, 0.1, 1, 10, 100, 1e3, 1e4, 65504, 1e6, 1e9};
  return *kBuckets;
}

// Attention entropy in nats: 0 is one-hot attention, ln(T) uniform over T keys
// (ln 4096 = 8.3).
const prometheus::Histogram::BucketBoundaries& EntropyBuckets() {
  static const auto* const kBuckets = new prometheus::Histogram::BucketBoundaries{
      0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 4, 5, 6, 8, 10};
  return *kBuckets;
}

const char* DtypeLabel(ElementType type) {
  switch (type) {
    case ElementType::kBfloat16:
      return "bfloat16";
    case ElementType::kFloat16:
      return "float16";
    case ElementType::kFloat32:
      break;
  }
  return "float32";
}

// The codes LayerService's handlers answer with (the error list of
// proto/layerserve/v1/layerserve.proto; server/rpc/ and what the ops' parsers return;
// INTERNAL for a kernel that threw, server/rpc/exception_status.h). Codes that gRPC
// answers before a handler runs (UNAUTHENTICATED, a message over the size limit) are not
// counted at all.
constexpr grpc::StatusCode kAnsweredCodes[] = {
    grpc::StatusCode::OK,
    grpc::StatusCode::CANCELLED,
    grpc::StatusCode::INVALID_ARGUMENT,
    grpc::StatusCode::DEADLINE_EXCEEDED,
    grpc::StatusCode::NOT_FOUND,
    grpc::StatusCode::FAILED_PRECONDITION,
    grpc::StatusCode::ABORTED,
    grpc::StatusCode::OUT_OF_RANGE,
    grpc::StatusCode::RESOURCE_EXHAUSTED,
    grpc::StatusCode::INTERNAL,
    grpc::StatusCode::UNAVAILABLE,
};

// Whether messages of `type` hold a layerserve.v1.Tensor, directly or in a nested
// message: the methods taking one are those whose values are checked for NaN/Inf.
bool HoldsTensor(const google::protobuf::Descriptor& type, int depth = 0) {
  if (type.full_name() == v1::Tensor::descriptor()->full_name()) return true;
  if (depth > 8) return false;  // Recursive messages: the API has none this deep.
  for (int i = 0; i < type.field_count(); ++i) {
    const google::protobuf::Descriptor* field = type.field(i)->message_type();
    if (field != nullptr && HoldsTensor(*field, depth + 1)) return true;
  }
  return false;
}

// Whether requests of `type` name a served model (a `model` field): their calls'
// series carry the model as a label once it is resolved.
bool NamesAModel(const google::protobuf::Descriptor& type) {
  return type.FindFieldByName("model") != nullptr;
}

// layerserve.v1.LayerService, whose methods the series are made for in advance.
const google::protobuf::ServiceDescriptor& LayerService() {
  return *v1::NormalizeRequest::descriptor()->file()->FindServiceByName("LayerService");
}

std::string OnednnVersion() {
  const dnnl_version_t* v = dnnl_version();
  return absl::StrCat(v->major, ".", v->minor, ".", v->patch);
}

// The instruction set oneDNN dispatches to on this machine.
std::string OnednnIsa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

}  // namespace

std::string StatusCodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int index = static_cast<int>(code);
  if (index < 0 || index >= static_cast<int>(std::size(kNames))) return "UNKNOWN";
  return kNames[index];
}

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_total_(prometheus::BuildCounter()
                          .Name("layerserve_requests_total")
                          .Help("RPCs finished, by method and gRPC status code.")
                          .Register(*registry_)),
      request_duration_(prometheus::BuildHistogram()
                            .Name("layerserve_request_duration_seconds")
                            .Help("Time from a handler accepting an RPC to finishing "
                                  "it, by method.")
                            .Register(*registry_)),
      queue_duration_(prometheus::BuildHistogram()
                          .Name("layerserve_queue_duration_seconds")
                          .Help("Time a request waited in the batcher's queue.")
                          .Register(*registry_)),
      compute_duration_(prometheus::BuildHistogram()
                            .Name("layerserve_compute_duration_seconds")
                            .Help("Compute time of the kernel call(s) that produced a "
                                  "request's response (a batch's, when batched).")
                            .Register(*registry_)),
      batch_size_(prometheus::BuildHistogram()
                      .Name("layerserve_batch_size")
                      .Help("Requests per batch run by a worker.")
                      .Register(*registry_)),
      batch_rows_(prometheus::BuildHistogram()
                      .Name("layerserve_batch_rows")
                      .Help("Rows (BlockForward: tokens) per batch run by a worker.")
                      .Register(*registry_)),
      request_bytes_(prometheus::BuildCounter()
                         .Name("layerserve_request_bytes_total")
                         .Help("Serialized bytes of the requests received.")
                         .Register(*registry_)),
      response_bytes_(prometheus::BuildCounter()
                          .Name("layerserve_response_bytes_total")
                          .Help("Serialized bytes of the responses sent.")
                          .Register(*registry_)),
      nonfinite_(prometheus::BuildCounter()
                     .Name("layerserve_nonfinite_values_total")
                     .Help("NaN and Inf values in request inputs and response "
                           "outputs (outputs before 16-bit conversion).")
                     .Register(*registry_)),
      output_abs_max_(prometheus::BuildHistogram()
                          .Name("layerserve_output_abs_max")
                          .Help("Largest finite |value| of each response's output.")
                          .Register(*registry_)),
      output_rms_(prometheus::BuildHistogram()
                      .Name("layerserve_output_rms")
                      .Help("Root mean square of each response's finite output "
                            "values.")
                      .Register(*registry_)),
      saturated_(prometheus::BuildCounter()
                     .Name("layerserve_saturated_values_total")
                     .Help("Finite output values beyond the range of the 16-bit "
                           "output dtype, sent as +-Inf.")
                     .Register(*registry_)),
      attention_entropy_(prometheus::BuildHistogram()
                             .Name("layerserve_attention_entropy_nats")
                             .Help("BlockForward: mean attention entropy per head, "
                                   "real token and layer of each request.")
                             .Register(*registry_)),
      zero_variance_rows_(prometheus::BuildCounter()
                              .Name("layerserve_zero_variance_rows_total")
                              .Help("Normalize rows with nothing to normalize: "
                                    "constant (LayerNorm) or all zero (RMSNorm).")
                              .Register(*registry_)
                              .Add({})),
      active_sessions_(prometheus::BuildGauge()
                           .Name("layerserve_active_sessions")
                           .Help("KV-cache sessions open on this replica.")
                           .Register(*registry_)
                           .Add({})),
      kv_cache_bytes_(prometheus::BuildGauge()
                          .Name("layerserve_kv_cache_bytes")
                          .Help("Bytes of KV cache held by sessions (and reserved by "
                                "running calls).")
                          .Register(*registry_)
                          .Add({})),
      session_expiries_(prometheus::BuildCounter()
                            .Name("layerserve_session_expiries_total")
                            .Help("Sessions dropped after --session-ttl without a call.")
                            .Register(*registry_)
                            .Add({})),
      session_evictions_(prometheus::BuildCounter()
                             .Name("layerserve_session_evictions_total")
                             .Help("Idle sessions evicted (least recently used first) "
                                   "to stay within --max-kv-cache-bytes.")
                             .Register(*registry_)
                             .Add({})),
      session_tokens_(prometheus::BuildCounter()
                          .Name("layerserve_session_tokens_total")
                          .Help("Tokens added to sessions: phase=prefill (calls of "
                                "several tokens) or decode (one token).")
                          .Register(*registry_)),
      decode_step_duration_(prometheus::BuildHistogram()
                                .Name("layerserve_decode_step_duration_seconds")
                                .Help("Handler-to-finish time of one-token session "
                                      "calls, by model.")
                                .Register(*registry_)),
      inflight_(prometheus::BuildGauge()
                    .Name("layerserve_inflight_requests")
                    .Help("RPCs accepted and not yet finished.")
                    .Register(*registry_)
                    .Add({})),
      queue_depth_(prometheus::BuildGauge()
                       .Name("layerserve_queue_depth")
                       .Help("Requests waiting in the batcher's queues.")
                       .Register(*registry_)
                       .Add({})),
      model_info_(prometheus::BuildGauge()
                      .Name("layerserve_model_info")
                      .Help("Always 1 per served model; the labels say how its "
                            "weights are held.")
                      .Register(*registry_)),
      model_reloads_(prometheus::BuildCounter()
                         .Name("layerserve_model_reloads_total")
                         .Help("Loads of a model by a repository reload (SIGHUP, "
                               "--repository-poll-interval), new or changed, by "
                               "result (ok, failed).")
                         .Register(*registry_)) {
  prometheus::BuildGauge()
      .Name("layerserve_build_info")
      .Help("Always 1; the labels describe the build and the oneDNN ISA in use.")
      .Register(*registry_)
      .Add({{"version", LAYERSERVE_VERSION},
            {"onednn_version", OnednnVersion()},
            {"isa", OnednnIsa()}})
      .Set(1);
  // Every saturation and token series exists from the start, so rate() sees its
  // first rise.
  for (auto type : {ElementType::kBfloat16, ElementType::kFloat16}) {
    saturated_.Add({{"dtype", DtypeLabel(type)}});
  }
  for (const char* phase : {"prefill", "decode"}) session_tokens_.Add({{"phase", phase}});
  // So are the request counters of every LayerService method and answered code,
  // and the non-finite counters of every method whose values are checked: each
  // dashboard panel and alert then has its series from the first scrape, and
  // rate()/increase() see a counter's first rise (a series born at 1 has none).
  // Requests still find their series through Add() (or Remembered) as before.
  const google::protobuf::ServiceDescriptor& service = LayerService();
  for (int i = 0; i < service.method_count(); ++i) {
    const google::protobuf::MethodDescriptor& method = *service.method(i);
    for (grpc::StatusCode code : kAnsweredCodes) {
      requests_total_.Add({{"method", method.name()}, {"code", StatusCodeName(code)}});
    }
    if (!HoldsTensor(*method.input_type())) continue;
    for (const char* where : {"input", "output"}) {
      for (const char* kind : {"nan", "inf"}) {
        nonfinite_.Add({{"method", method.name()}, {"where", where}, {"kind", kind}});
      }
    }
  }
}

void Metrics::MethodKnown(absl::string_view method) {
  for (grpc::StatusCode code : kAnsweredCodes) {
    requests_total_.Add(
        {{"method", std::string(method)}, {"code", StatusCodeName(code)}});
  }
}

Metrics::MethodSeries& Metrics::Series(absl::string_view method,
                                       absl::string_view model) {
  // Neither a method nor a model (a directory's name) holds a '/'.
  const std::string key =
      model.empty() ? std::string(method) : absl::StrCat(method, "/", model);
  {
    absl::ReaderMutexLock lock(&methods_mu_);
    auto it = methods_.find(key);
    if (it != methods_.end()) return *it->second;
  }
  absl::MutexLock lock(&methods_mu_);
  std::unique_ptr<MethodSeries>& series = methods_[key];
  if (series == nullptr) series = std::make_unique<MethodSeries>();
  return *series;
}

void Metrics::RequestStarted(absl::string_view method, int64_t request_bytes) {
  inflight_.Increment();
  Series(method)
      .request_bytes
      .Get([&]() -> auto& {
        return request_bytes_.Add({{"method", std::string(method)}});
      })
      .Increment(static_cast<double>(request_bytes));
}

void Metrics::RequestFinished(absl::string_view method, absl::string_view model,
                              grpc::StatusCode code, absl::Duration elapsed,
                              int64_t response_bytes) {
  inflight_.Decrement();
  MethodSeries& series = Series(method, model);
  prometheus::Labels labels = {{"method", std::string(method)}};
  if (!model.empty()) labels.emplace("model", std::string(model));
  const auto count_request = [&]() -> prometheus::Counter& {
    prometheus::Labels with_code = labels;
    with_code.emplace("code", StatusCodeName(code));
    return requests_total_.Add(with_code);
  };
  // Errors are rarer, and of many codes: looked up each time.
  (code == grpc::StatusCode::OK ? series.requests_ok.Get(count_request) : count_request())
      .Increment();
  series.request_duration
      .Get([&]() -> auto& { return request_duration_.Add(labels, LatencyBuckets()); })
      .Observe(absl::ToDoubleSeconds(elapsed));
  if (response_bytes > 0) {
    series.response_bytes
        .Get([&]() -> auto& {
          return response_bytes_.Add({{"method", std::string(method)}});
        })
        .Increment(static_cast<double>(response_bytes));
  }
}

void Metrics::SetQueueDepth(int64_t depth) {
  queue_depth_.Set(static_cast<double>(depth));
}

void Metrics::BatchTaken(absl::string_view method, int64_t size, int64_t rows) {
  MethodSeries& series = Series(method);
  series.batch_size
      .Get([&]() -> auto& {
        return batch_size_.Add({{"method", std::string(method)}}, CountBuckets());
      })
      .Observe(static_cast<double>(size));
  series.batch_rows
      .Get([&]() -> auto& {
        return batch_rows_.Add({{"method", std::string(method)}}, CountBuckets());
      })
      .Observe(static_cast<double>(rows));
}

void Metrics::Queued(absl::string_view method, absl::Duration waited) {
  Series(method)
      .queue_duration
      .Get([&]() -> auto& {
        return queue_duration_.Add({{"method", std::string(method)}}, LatencyBuckets());
      })
      .Observe(absl::ToDoubleSeconds(waited));
}

void Metrics::Computed(absl::string_view method, absl::Duration took) {
  Series(method)
      .compute_duration
      .Get([&]() -> auto& {
        return compute_duration_.Add({{"method", std::string(method)}}, LatencyBuckets());
      })
      .Observe(absl::ToDoubleSeconds(took));
}

void Metrics::NonFinite(absl::string_view method, const char* where,
                        const kernels::ValueStats& stats) {
  const std::string method_label(method);
  if (stats.nan > 0) {
    nonfinite_.Add({{"method", method_label}, {"where", where}, {"kind", "nan"}})
        .Increment(static_cast<double>(stats.nan));
  }
  if (stats.inf > 0) {
    nonfinite_.Add({{"method", method_label}, {"where", where}, {"kind", "inf"}})
        .Increment(static_cast<double>(stats.inf));
  }
}

void Metrics::InputValues(absl::string_view method, const kernels::ValueStats& stats) {
  NonFinite(method, "input", stats);
}

void Metrics::OutputValues(absl::string_view method, const kernels::ValueStats& stats) {
  NonFinite(method, "output", stats);
  if (stats.finite() == 0) return;
  MethodSeries& series = Series(method);
  series.output_abs_max
      .Get([&]() -> auto& {
        return output_abs_max_.Add({{"method", std::string(method)}}, MagnitudeBuckets());
      })
      .Observe(stats.abs_max);
  series.output_rms
      .Get([&]() -> auto& {
        return output_rms_.Add({{"method", std::string(method)}}, MagnitudeBuckets());
      })
      .Observe(stats.rms());
}

void Metrics::Saturated(ElementType dtype, int64_t count) {
  if (count > 0) {
    saturated_.Add({{"dtype", DtypeLabel(dtype)}}).Increment(static_cast<double>(count));
  }
}

void Metrics::ZeroVarianceRows(int64_t count) {
  if (count > 0) zero_variance_rows_.Increment(static_cast<double>(count));
}

void Metrics::Sessions(int64_t active, int64_t cache_bytes) {
  active_sessions_.Set(static_cast<double>(active));
  kv_cache_bytes_.Set(static_cast<double>(cache_bytes));
}

void Metrics::SessionExpired() { session_expiries_.Increment(); }

void Metrics::SessionEvicted() { session_evictions_.Increment(); }

void Metrics::SessionTokens(int64_t tokens) {
  session_tokens_.Add({{"phase", tokens == 1 ? "decode" : "prefill"}})
      .Increment(static_cast<double>(tokens));
}

void Metrics::DecodeStep(absl::string_view method, absl::string_view model,
                         absl::Duration took) {
  Series(method, model)
      .decode_step_duration
      .Get([&]() -> auto& {
        return decode_step_duration_.Add({{"model", std::string(model)}},
                                         LatencyBuckets());
      })
      .Observe(absl::ToDoubleSeconds(took));
}

void Metrics::ModelInfo(absl::string_view model, absl::string_view weight_dtype,
                        int64_t weight_group_size) {
  model_info_
      .Add({{"model", std::string(model)},
            {"weight_dtype", std::string(weight_dtype)},
            {"weight_group_size", std::to_string(weight_group_size)}})
      .Set(1);
  const google::protobuf::ServiceDescriptor& service = LayerService();
  for (int i = 0; i < service.method_count(); ++i) {
    const google::protobuf::MethodDescriptor& method = *service.method(i);
    if (!NamesAModel(*method.input_type())) continue;
    for (grpc::StatusCode code : kAnsweredCodes) {
      requests_total_.Add({{"method", method.name()},
                           {"model", std::string(model)},
                           {"code", StatusCodeName(code)}});
    }
  }
}

void Metrics::ModelRemoved(absl::string_view model, absl::string_view weight_dtype,
                           int64_t weight_group_size) {
  model_info_.Remove(
      &model_info_.Add({{"model", std::string(model)},
                        {"weight_dtype", std::string(weight_dtype)},
                        {"weight_group_size", std::to_string(weight_group_size)}}));
}

void Metrics::ModelKnown(absl::string_view model) {
  model_reloads_.Add({{"model", std::string(model)}, {"result", "ok"}});
  model_reloads_.Add({{"model", std::string(model)}, {"result", "failed"}});
}

void Metrics::ModelReloaded(absl::string_view model, bool ok) {
  model_reloads_.Add({{"model", std::string(model)}, {"result", ok ? "ok" : "failed"}})
      .Increment();
}

void Metrics::AttentionEntropy(absl::string_view model, double nats) {
  attention_entropy_.Add({{"model", std::string(model)}}, EntropyBuckets()).Observe(nats);
}

}  // namespace layerserve
