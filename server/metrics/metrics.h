// Prometheus metrics of the server (prefix layerserve_; the names are an interface:
// dashboards and alerts in deploy/ use them, tests/deploy checks them),
// registered once at start-up. Thread-safe: record from any thread.
//
// The series whose label sets are known in advance exist at 0 from construction:
// requests_total for every LayerService method (method="Normalize", the proto's
// name) and every code its handlers answer, nonfinite_values_total for every
// method whose request holds a tensor, saturated_values_total and
// session_tokens_total. Histograms appear with their first observation.
#ifndef LAYERSERVE_SERVER_METRICS_METRICS_H_
#define LAYERSERVE_SERVER_METRICS_METRICS_H_

#include <grpcpp/support/status.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/dtype.h"
#include "kernels/value_stats/value_stats.h"

namespace layerserve {

class Metrics {
 public:
  Metrics();

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // Makes requests_total of `method` (an RPC of another service on the same server,
  // the Open Inference Protocol's) exist at 0 for every code handlers answer, as
  // the LayerService methods' do from construction.
  void MethodKnown(absl::string_view method);

  // An RPC was accepted by a handler (counts toward inflight_requests).
  void RequestStarted(absl::string_view method, int64_t request_bytes);
  // The RPC accepted by RequestStarted() was finished with `code` after `elapsed`.
  // `model`: the served model the call was for (BlockForward, OpenSession: the
  // name it resolved to, so the default model's name for an empty one), which
  // requests_total and request_duration_seconds then carry as a `model` label;
  // empty for other methods and for calls that named no served model (an unknown
  // name is never a label value: clients could make series without end).
  void RequestFinished(absl::string_view method, absl::string_view model,
                       grpc::StatusCode code, absl::Duration elapsed,
                       int64_t response_bytes);

  // Batcher: tasks waiting; a batch of `size` requests and `rows` rows taken.
  void SetQueueDepth(int64_t depth);
  void BatchTaken(absl::string_view method, int64_t size, int64_t rows);
  // One request's time in the queue, and the compute time of the kernel call(s)
  // that produced it (for a batch: the whole batch's).
  void Queued(absl::string_view method, absl::Duration waited);
  void Computed(absl::string_view method, absl::Duration took);

  // Numeric health.
  void InputValues(absl::string_view method, const kernels::ValueStats& stats);
  void OutputValues(absl::string_view method, const kernels::ValueStats& stats);
  void Saturated(ElementType dtype, int64_t count);
  void ZeroVarianceRows(int64_t count);
  void AttentionEntropy(absl::string_view model, double nats);

  // KV-cache sessions.
  void Sessions(int64_t active, int64_t cache_bytes);
  void SessionExpired();
  void SessionEvicted();
  // Tokens a session call added: prefill (a call of several tokens) or decode (one).
  void SessionTokens(int64_t tokens);
  // A one-token session call of `method` (BlockForward) and `model` took `took`,
  // handler to finish.
  void DecodeStep(absl::string_view method, absl::string_view model, absl::Duration took);

  // layerserve_model_info{model, weight_dtype, weight_group_size} = 1 for a model
  // the server serves: how its weights are held (weight_dtype as ModelInfo names it,
  // "FLOAT32", "BFLOAT16" or "INT8"; weight_group_size as ModelInfo's, 0 but for
  // INT8). Called once per model at start-up; it also makes the model's request
  // counters exist at 0: of every answered code and every LayerService method whose
  // request names a model (a `model` field: BlockForward, OpenSession).
  void ModelInfo(absl::string_view model, absl::string_view weight_dtype,
                 int64_t weight_group_size);
  // Drops the model_info series of a model a reload removed.
  void ModelRemoved(absl::string_view model, absl::string_view weight_dtype,
                    int64_t weight_group_size);

  // layerserve_model_reloads_total{model, result="ok"|"failed"}: the loads a
  // repository reload made of `model` because it was new or its files changed.
  // ModelKnown() creates both series at 0 (every model at start, each one a reload
  // adds); ModelReloaded() counts one load.
  void ModelKnown(absl::string_view model);
  void ModelReloaded(absl::string_view model, bool ok);

 private:
  // One labelled series, found in its family on first use and remembered: a
  // family's Add() hashes the labels, builds a label map and takes a lock, about
  // 3 µs over the series one request touches (bench/request_metrics_bench.cc).
  // Add() returns the same series for the same labels, so racing first uses agree.
  template <typename T>
  class Remembered {
   public:
    template <typename Add>
    T& Get(Add add) {
      T* series = series_.load(std::memory_order_acquire);
      if (series == nullptr) {
        series = &add();
        series_.store(series, std::memory_order_release);
      }
      return *series;
    }

   private:
    std::atomic<T*> series_{nullptr};
  };

  // The series of one method label that every computed request touches.
  struct MethodSeries {
    Remembered<prometheus::Counter> requests_ok;
    Remembered<prometheus::Histogram> request_duration;
    Remembered<prometheus::Histogram> queue_duration;
    Remembered<prometheus::Histogram> compute_duration;
    Remembered<prometheus::Histogram> batch_size;
    Remembered<prometheus::Histogram> batch_rows;
    Remembered<prometheus::Counter> request_bytes;
    Remembered<prometheus::Counter> response_bytes;
    Remembered<prometheus::Histogram> output_abs_max;
    Remembered<prometheus::Histogram> output_rms;
    Remembered<prometheus::Histogram> decode_step_duration;  // Per model.
  };
  // The series of `method`; with a `model`, its requests_ok and request_duration
  // carry that model label (the other series are the method's).
  MethodSeries& Series(absl::string_view method, absl::string_view model = "");

  void NonFinite(absl::string_view method, const char* where,
                 const kernels::ValueStats& stats);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_total_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Family<prometheus::Histogram>& queue_duration_;
  prometheus::Family<prometheus::Histogram>& compute_duration_;
  prometheus::Family<prometheus::Histogram>& batch_size_;
  prometheus::Family<prometheus::Histogram>& batch_rows_;
  prometheus::Family<prometheus::Counter>& request_bytes_;
  prometheus::Family<prometheus::Counter>& response_bytes_;
  prometheus::Family<prometheus::Counter>& nonfinite_;
  prometheus::Family<prometheus::Histogram>& output_abs_max_;
  prometheus::Family<prometheus::Histogram>& output_rms_;
  prometheus::Family<prometheus::Counter>& saturated_;
  prometheus::Family<prometheus::Histogram>& attention_entropy_;
  prometheus::Counter& zero_variance_rows_;
  prometheus::Gauge& active_sessions_;
  prometheus::Gauge& kv_cache_bytes_;
  prometheus::Counter& session_expiries_;
  prometheus::Counter& session_evictions_;
  prometheus::Family<prometheus::Counter>& session_tokens_;
  prometheus::Family<prometheus::Histogram>& decode_step_duration_;
  prometheus::Gauge& inflight_;
  prometheus::Gauge& queue_depth_;
  prometheus::Family<prometheus::Gauge>& model_info_;
  prometheus::Family<prometheus::Counter>& model_reloads_;

  absl::Mutex methods_mu_;
  // By method, or method and model ("BlockForward/demo"). Node-based: a
  // MethodSeries never moves once handed out.
  absl::flat_hash_map<std::string, std::unique_ptr<MethodSeries>> methods_
      ABSL_GUARDED_BY(methods_mu_);
};

// Name of a gRPC status code as in the gRPC docs: "OK", "INVALID_ARGUMENT"...
std::string StatusCodeName(grpc::StatusCode code);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_METRICS_METRICS_H_
