#include "server/metrics.h"

#include <oneapi/dnnl/dnnl.hpp>

#include "absl/strings/str_cat.h"

namespace layerserve {
namespace {

// Buckets from 50 µs (a small Normalize on loopback) to 10 s (a long prefill).
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
          25e-3, 50e-3,  100e-3, 250e-3, 500e-3, 1.0,  2.5,   5.0, 10.0};
}

std::string OnednnVersion() {
  const dnnl_version_t* v = dnnl_version();
  return absl::StrCat(v->major, ".", v->minor, ".", v->patch);
}

// The instruction set oneDNN dispatches to on this machine.
std::string OnednnIsa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

}  // namespace

std::string StatusCodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {
      "OK",           "CANCELLED",         "UNKNOWN",           "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND",    "ALREADY_EXISTS",    "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",   "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",         "UNAVAILABLE",       "DATA_LOSS",
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
      inflight_(prometheus::BuildGauge()
                    .Name("layerserve_inflight_requests")
                    .Help("RPCs accepted and not yet finished.")
                    .Register(*registry_)
                    .Add({})) {
  prometheus::BuildGauge()
      .Name("layerserve_build_info")
      .Help("Always 1; the labels describe the build and the oneDNN ISA in use.")
      .Register(*registry_)
      .Add({{"version", LAYERSERVE_VERSION},
            {"onednn_version", OnednnVersion()},
            {"isa", OnednnIsa()}})
      .Set(1);
}

void Metrics::RequestStarted() { inflight_.Increment(); }

void Metrics::RequestFinished(absl::string_view method, grpc::StatusCode code,
                              absl::Duration elapsed) {
  inflight_.Decrement();
  const std::string method_label(method);
  requests_total_.Add({{"method", method_label}, {"code", StatusCodeName(code)}})
      .Increment();
  request_duration_.Add({{"method", method_label}}, LatencyBuckets())
      .Observe(absl::ToDoubleSeconds(elapsed));
}

}  // namespace layerserve
