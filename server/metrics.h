// Prometheus metrics of the server (prefix layerserve_), registered once at start-up
// with their references kept. Thread-safe: record from any thread.
#ifndef LAYERSERVE_SERVER_METRICS_H_
#define LAYERSERVE_SERVER_METRICS_H_

#include <memory>
#include <string>

#include <grpcpp/support/status.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace layerserve {

class Metrics {
 public:
  Metrics();

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // An RPC was accepted by a handler (counts toward inflight_requests).
  void RequestStarted();
  // The RPC accepted by RequestStarted() was finished with `code` after `elapsed`.
  void RequestFinished(absl::string_view method, grpc::StatusCode code,
                       absl::Duration elapsed);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_total_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Gauge& inflight_;
};

// Name of a gRPC status code as in the gRPC docs: "OK", "INVALID_ARGUMENT"...
std::string StatusCodeName(grpc::StatusCode code);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_METRICS_H_
