// The one path of every compute RPC, generic over its operation (an Op of
// server/ops/operation.h; nothing here names one): Dispatch<Op> refuses while
// draining, parses, checks the element limit, then runs the job on this thread or
// queues it under its batch key; OperationTask<Op> carries the job and its Call to a
// worker, which runs the batch the Op's way (BatchRun) and answers every call in it.
// A job the Op runs in parts (Op::Finished false after a run) goes back to the
// queue under its key between them, and its call is answered after its last.
//
// The exception boundary: an exception from a parse, a kernel or an allocation
// (oneDNN's dnnl::error, std::bad_alloc) becomes the status of the calls it
// concerns (StatusOfCurrentException) and the server goes on serving. A request
// whose own kernel call threw fails alone; a batch run as one call fails whole. Its
// jobs end as JobOutcome::kFailed (a session step closes its session). Every call
// is answered exactly once: the Call handle travels with the job, and answers
// INTERNAL if dropped unanswered.
//
// Dispatch runs on gRPC's callback threads; RunServedBatch is the Batcher's process
// callback, on a worker (or inline, on the gRPC thread).
#ifndef LAYERSERVE_SERVER_RPC_DISPATCH_H_
#define LAYERSERVE_SERVER_RPC_DISPATCH_H_

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/batching/batcher.h"
#include "server/metrics/metrics.h"
#include "server/ops/operation.h"
#include "server/ops/tensor_codec.h"
#include "server/ops/worker_context.h"
#include "server/rpc/call.h"
#include "server/rpc/call_tracker.h"
#include "server/rpc/exception_status.h"
#include "server/rpc/grpc_status.h"

namespace layerserve {

// Requests of at most this many values may run on the gRPC thread that received
// them (Dispatch): 1 MiB of float32. Waking a worker for such a request costs as
// much as a norm's kernel on it, and the slowest kernel at this size holds the gRPC
// thread less than receiving the message took. Larger requests go to a worker:
// gRPC has only a few callback threads (two on two cores), and milliseconds of
// compute on them stall every other call's I/O. Chosen because running larger
// requests here cost concurrent small calls throughput and tail latency, see
// docs/perf/2026-11-30-serving-overhead.md.
inline constexpr int64_t kMaxInlineElements = 262144;

// What Dispatch uses of the service that owns it (LayerServiceImpl, or a test's):
// every pointer outlives every call.
struct DispatchContext {
  Metrics* metrics = nullptr;
  CallTracker* calls = nullptr;
  // Set: new calls are answered UNAVAILABLE.
  const std::atomic<bool>* draining = nullptr;
  // Its process callback must be RunServedBatch.
  Batcher<WorkerContext>* batcher = nullptr;
  ParseContext parse;
  // Largest tensor a request may carry or ask for, in values (--max-request-elements).
  int64_t max_request_elements = 0;
  // Largest response gRPC will send (--max-message-bytes).
  int64_t max_response_bytes = 0;
};

// A validated request waiting in the batcher, with the call it answers.
class ServedTask : public BatchTask {
 public:
  // Runs `batch` (this task and the others of its key, all of one operation) and
  // answers every call in it, whatever throws.
  virtual void RunBatch(WorkerContext& worker, Batch& batch,
                        Metrics& metrics) noexcept = 0;
  // Answers `status` without computing (the batcher did not take the task).
  virtual void Refuse(const grpc::Status& status) = 0;
};

// The Batcher's process callback: runs a batch of ServedTasks. Never throws.
inline void RunServedBatch(WorkerContext& worker, Batch& batch, Metrics& metrics) {
  static_cast<ServedTask&>(*batch.front()).RunBatch(worker, batch, metrics);
}

template <typename Op>
class OperationTask final : public ServedTask {
 public:
  using Job = typename Op::Job;
  using Response = typename Op::Response;

  // `key` and `batcher`: where a job in parts goes back between them.
  OperationTask(Call call, Job job, Response* response, std::string key,
                Batcher<WorkerContext>* batcher, int64_t max_response_bytes)
      : call_(std::move(call)),
        job_(std::move(job)),
        response_(response),
        key_(std::move(key)),
        batcher_(batcher),
        max_response_bytes_(max_response_bytes) {}

  // Of the job's next part. Read while queued, when the job does not change.
  int64_t rows() const override { return Op::Rows(job_); }
  int64_t max_batch_rows() const override { return Op::MaxBatchRows(job_); }
  // Asked once per batch, of its first task.
  bool gathers() const override { return Op::Gathers(job_); }
  bool first_in_batch() const override { return Op::FirstInBatch(job_); }
  // Queued again for its next part.
  bool resumed() const override { return parts_ > 0; }

  // The batch key it queues under.
  const std::string& key() const { return key_; }
  // Whether it may run on the thread that received it, when a worker is idle:
  // small requests whose Op allows it (MayRunInline). The hand-off would cost more
  // than their kernel, and, run as their own kernel call, they gain nothing from
  // waiting for company.
  bool small_enough_to_run_inline() const {
    return Op::MayRunInline(job_) && Op::Elements(job_) <= kMaxInlineElements;
  }

  void Refuse(const grpc::Status& status) override {
    Answer(JobOutcome::kNotComputed, status);
  }

  void RunBatch(WorkerContext& worker, Batch& batch, Metrics& metrics) noexcept override {
    RunTasks(worker, batch, metrics);
  }

 private:
  // Static, as everything below that runs the batch: a task queued again for its
  // next part may be taken, answered and destroyed by another worker while this
  // batch still runs, and the task RunBatch was called on may be one of them.
  static void RunTasks(WorkerContext& worker, Batch& batch, Metrics& metrics) noexcept {
    try {
      RunTasksOrThrow(worker, batch, metrics);
    } catch (...) {
      // The batch's call (kOneCallPerBatch), or the work around the kernels, threw:
      // every call not answered yet fails with it (a task queued again is no
      // longer in `batch`).
      const grpc::Status failed = StatusOfCurrentException(Op::kMethod);
      for (auto& task : batch) {
        if (task != nullptr) static_cast<OperationTask&>(*task).Fail(failed);
      }
    }
  }

  static void RunTasksOrThrow(WorkerContext& worker, Batch& batch, Metrics& metrics) {
    const absl::Time start = absl::Now();
    int64_t rows = 0;
    std::vector<OperationTask*> live;
    live.reserve(batch.size());
    for (auto& task : batch) {
      auto* t = static_cast<OperationTask*>(task.get());
      rows += t->rows();
      // Once per call, as it is taken for its first part: how long it waited
      // before computing began (tests and dashboards read the count as "a worker
      // took it"). The waits of a job in parts between them are not in it.
      if (t->parts_ == 0) metrics.Queued(t->call_.method(), start - t->enqueued());
      if (t->StillWanted()) live.push_back(t);
    }
    metrics.BatchTaken(Op::kMethod, static_cast<int64_t>(batch.size()), rows);
    if constexpr (Op::kBatchRun == BatchRun::kOneCallPerBatch) {
      absl::Time begin = start;
      while (!live.empty()) {
        std::vector<Job*> jobs;
        std::vector<Response*> responses;
        for (OperationTask* t : live) {
          jobs.push_back(&t->job_);
          responses.push_back(t->response_);
        }
        // Between its layers the batch stops once every call in it is gone.
        const BatchAbandoned abandoned = [&live] {
          return std::none_of(live.begin(), live.end(),
                              [](OperationTask* t) { return t->call_.wanted(); });
        };
        const std::vector<OutputHealth> health =
            Op::RunBatch(worker, jobs, responses, abandoned);
        const absl::Duration took = absl::Now() - begin;
        std::vector<OperationTask*> unfinished;
        for (size_t i = 0; i < live.size(); ++i) {
          OperationTask* t = live[i];
          t->computed_ += took;
          ++t->parts_;
          if (Op::Finished(t->job_)) {
            t->Done(health[i], metrics);
          } else {
            unfinished.push_back(t);
          }
        }
        // Each unfinished job's next part waits behind what is queued already, so
        // other keys' batches (decode steps) run between its parts. One the batcher
        // does not take (it stops, or its queue is full) runs its next part here.
        // A call gone meanwhile (its batch may have stopped part-way for it) is
        // answered now, not after another wait in the queue.
        live.clear();
        for (OperationTask* t : unfinished) {
          if (t->StillWanted() && !t->Requeue(batch) && t->StillWanted()) {
            live.push_back(t);
          }
        }
        begin = absl::Now();
      }
    } else {
      static_assert(Op::kBatchRun == BatchRun::kOneCallPerRequest);
      for (OperationTask* t : live) {
        try {
          const absl::Time begin = absl::Now();
          const OutputHealth health = Op::Run(worker, t->job_, t->response_);
          t->computed_ = absl::Now() - begin;
          t->Done(health, metrics);
        } catch (...) {
          // Its own kernel call: the others of the batch go on.
          t->Fail(StatusOfCurrentException(Op::kMethod));
        }
      }
    }
  }

  // Answers the call, and returns false, if its client has gone or its deadline
  // passed while it was queued (before its first part or between two).
  bool StillWanted() {
    const grpc::Status wanted = call_.CheckStillWanted(/*between_parts=*/parts_ > 0);
    if (wanted.ok()) return true;
    Answer(parts_ > 0 ? JobOutcome::kStopped : JobOutcome::kNotComputed, wanted);
    return false;
  }

  // Hands this task back to the batcher, under its key, for its next part. True if
  // the batcher took it: it may then run, be answered and be destroyed on another
  // thread at once, so nothing of it may be touched after. Else it stays in `batch`.
  bool Requeue(Batch& batch) {
    auto slot = std::find_if(batch.begin(), batch.end(),
                             [this](const auto& task) { return task.get() == this; });
    std::unique_ptr<BatchTask> task = std::move(*slot);
    absl::Status queued;
    try {
      queued = batcher_->Schedule(key_, task);
    } catch (...) {
      *slot = std::move(task);  // Still ours: the batch's failure answers it.
      throw;
    }
    if (queued.ok()) return true;
    *slot = std::move(task);
    return false;
  }

  // Records the call's metrics (once: a job in parts gets here after its last)
  // and answers it.
  void Done(const OutputHealth& health, Metrics& metrics) {
    // The request's own series by the RPC that asked (ModelInfer for the Open
    // Inference Protocol); the values' by the operation that computed them.
    metrics.Computed(call_.method(), computed_);
    const char* method = Op::kMethod;
    metrics.InputValues(method, Op::InputStats(job_, health));
    metrics.OutputValues(method, health.stats);
    metrics.Saturated(Op::OutputType(job_), health.saturated);
    metrics.ZeroVarianceRows(health.zero_variance_rows);
    Op::RecordComputed(job_, health, call_.elapsed(), metrics);
    // gRPC would refuse to send it and the client would see a transport error
    // with no numbers; say what happened instead.
    const int64_t bytes = static_cast<int64_t>(response_->ByteSizeLong());
    if (bytes > max_response_bytes_) {
      response_->Clear();
      Answer(JobOutcome::kComputed,
             grpc::Status(
                 grpc::StatusCode::RESOURCE_EXHAUSTED,
                 absl::StrCat("response too large: ", bytes,
                              " bytes, over the server's limit of ", max_response_bytes_,
                              " (--max-message-bytes); ask for less per "
                              "request (fewer rows, a 16-bit output_dtype)")));
      return;
    }
    Answer(JobOutcome::kComputed, grpc::Status::OK);
  }

  // Ends the job, then answers its call; nothing if already answered.
  void Answer(JobOutcome outcome, const grpc::Status& status) {
    if (!call_.pending()) return;
    Op::End(job_, outcome);
    call_.Finish(status);
  }

  // Answer(kFailed, status), from a catch block: whatever End throws, the call is
  // answered.
  void Fail(const grpc::Status& status) noexcept {
    if (!call_.pending()) return;
    try {
      Op::End(job_, JobOutcome::kFailed);
    } catch (...) {
    }
    call_.Finish(status);
  }

  Call call_;
  Job job_;
  Response* const response_;
  const std::string key_;
  Batcher<WorkerContext>* const batcher_;
  const int64_t max_response_bytes_;
  // Parts run (1 for a job that runs whole), and their compute time, which the
  // metrics record once, with the answer.
  int64_t parts_ = 0;
  absl::Duration computed_;
};

// Answers UNAVAILABLE, and returns false, while the server drains; else admits the
// call (Call::Admit) and returns true.
inline bool AdmitCall(const DispatchContext& service, Call& call) {
  if (service.draining->load()) {
    call.Finish(DrainingStatus());
    return false;
  }
  call.Admit();
  return true;
}

// The first steps of every admitted compute call: validate, label the call with
// its model, check the element limit. Returns the task that carries the job and the
// call (`call` is moved from then), or null once `call` was answered instead (the
// request refused). May throw, `call` then still pending.
template <typename Op>
std::unique_ptr<OperationTask<Op>> ParseTask(const DispatchContext& service, Call& call,
                                             const typename Op::Request& request,
                                             typename Op::Response* response) {
  absl::StatusOr<typename Op::Job> job = Op::Parse(request, service.parse);
  if (!job.ok()) {
    call.Finish(ToGrpcStatus(job.status()));
    return nullptr;
  }
  // An operation that names no model keeps the label the caller gave (the Open
  // Inference Protocol's built-in model names).
  if (const absl::string_view model = Op::ModelLabel(*job); !model.empty()) {
    call.set_model(std::string(model));
  }
  const int64_t elements = Op::Elements(*job);
  if (elements > service.max_request_elements) {
    Op::End(*job, JobOutcome::kNotComputed);
    call.Finish(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("request too large: ", elements,
                     " values, over the server's limit "
                     "of ",
                     service.max_request_elements,
                     " (--max-request-elements); split it into smaller requests")));
    return nullptr;
  }
  std::string key = Op::BatchKey(*job);
  return std::make_unique<OperationTask<Op>>(std::move(call), std::move(*job), response,
                                             std::move(key), service.batcher,
                                             service.max_response_bytes);
}

// The path of a compute request after its call was admitted: validate, check the
// element limit, run here or queue under the job's batch key. The call may be
// answered before or after this returns. `request` and `response` must live until
// it is answered (the job may view the request's bytes). `may_run_inline`: false
// on a thread that must not compute (a worker dispatching a stream's next request).
template <typename Op>
void DispatchAdmitted(const DispatchContext& service, Call call,
                      const typename Op::Request& request,
                      typename Op::Response* response, bool may_run_inline = true) {
  // Holds the call once made.
  std::unique_ptr<BatchTask> task;
  try {
    task = ParseTask<Op>(service, call, request, response);
    if (task == nullptr) return;
    const auto& parsed = static_cast<const OperationTask<Op>&>(*task);
    const std::string key = parsed.key();
    may_run_inline = may_run_inline && parsed.small_enough_to_run_inline();
    if (may_run_inline && service.batcher->TryRunInline(task)) return;
    const absl::Status queued = service.batcher->Schedule(key, task);
    if (!queued.ok()) {
      // Still ours: the batcher took nothing.
      static_cast<ServedTask&>(*task).Refuse(
          queued.code() == absl::StatusCode::kUnavailable ? DrainingStatus()
                                                          : ToGrpcStatus(queued));
    }
  } catch (...) {
    // A parse or an allocation threw on this thread; nothing was computed.
    if (task != nullptr) {
      static_cast<ServedTask&>(*task).Refuse(StatusOfCurrentException(Op::kMethod));
    } else {
      call.FinishWithCurrentException();
    }
  }
}

// Runs an admitted compute call on `worker`, on this thread and now, as a batch of
// its own: DispatchAdmitted's path, but for where the job runs. For work that must
// run on one given worker (the warm-up, which warms each worker's buffers):
// DispatchAdmitted hands a job to whichever worker is free. The call is answered
// when this returns; `request` and `response` must live until then.
template <typename Op>
void RunAdmittedOn(WorkerContext& worker, const DispatchContext& service, Call call,
                   const typename Op::Request& request, typename Op::Response* response) {
  Batch batch;
  // Holds the call once made.
  std::unique_ptr<BatchTask> task;
  try {
    task = ParseTask<Op>(service, call, request, response);
    if (task == nullptr) return;
    batch.push_back(std::move(task));
  } catch (...) {
    // A parse or an allocation threw; nothing was computed.
    if (task != nullptr) {
      static_cast<ServedTask&>(*task).Refuse(StatusOfCurrentException(Op::kMethod));
    } else {
      call.FinishWithCurrentException();
    }
    return;
  }
  RunServedBatch(worker, batch, *service.metrics);
}

// The shape of every compute RPC of layerserve.v1: refuse while draining, then
// DispatchAdmitted. Returns the reactor gRPC waits on; the call may be answered
// before or after.
template <typename Op>
grpc::ServerUnaryReactor* Dispatch(const DispatchContext& service,
                                   grpc::CallbackServerContext* context,
                                   const typename Op::Request& request,
                                   typename Op::Response* response) {
  Call call(context, Op::kMethod, service.metrics, service.calls, &request, response);
  grpc::ServerUnaryReactor* const reactor = call.reactor();
  try {
    if (!AdmitCall(service, call)) return reactor;
  } catch (...) {
    call.FinishWithCurrentException();
    return reactor;
  }
  DispatchAdmitted<Op>(service, std::move(call), request, response);
  return reactor;
}

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_DISPATCH_H_
