// What a compute operation (one RPC of layerserve.v1.LayerService that runs a
// kernel) tells the server, so that one generic dispatcher (server/rpc/dispatch.h)
// serves every operation and adding an RPC means writing one struct.
//
// An operation is a stateless struct of static members, in its op's own header
// (e.g. NormalizeOp in server/ops/normalize.h), usually deriving from
// OperationDefaults (or OneTensorOperation, which adds what operations on one input
// tensor share). It must provide:
//
//   using Job = ...;        The validated request, as the kernels take it.
//   using Request = ...;    The RPC's request and response messages.
//   using Response = ...;
//   static constexpr const char* kMethod;   The RPC's name ("Normalize"): the
//                                           metrics' method label, and how error
//                                           messages name the operation.
//   static constexpr BatchRun kBatchRun;    How a batch of its jobs runs (below).
//   static absl::StatusOr<Job> Parse(const Request&, const ParseContext&);
//       Validates on the gRPC thread; every error names its field. The job may
//       view the request's bytes: the request outlives it.
//   static std::string BatchKey(const Job&);   What must match for jobs to share
//                                              a batch (the batcher's queue key).
//   static int64_t Rows(const Job&);           What a job adds to a batch (>= 1):
//                                              its next part's rows.
//   static int64_t Elements(const Job&);       Its size for --max-request-elements.
//   static kernels::ValueStats InputStats(const Job&, const OutputHealth&);
//       The input's statistics, taken after the kernel (server/ops/input_stats.h).
//   static ElementType OutputType(const Job&);
//   kOneCallPerRequest:
//     static OutputHealth Run(WorkerContext&, const Job&, Response*);
//   kOneCallPerBatch:
//     static std::vector<OutputHealth> RunBatch(WorkerContext&,
//         const std::vector<Job*>&, const std::vector<Response*>&,
//         const BatchAbandoned&);
//
// and may replace OperationDefaults' MayRunInline, ModelLabel, Gathers,
// MaxBatchRows, Finished, RecordComputed and End.
//
// Run and RunBatch are called on a worker thread (or inline on a gRPC thread) with
// that thread's WorkerContext; they may throw (oneDNN's dnnl::error,
// std::bad_alloc): the dispatcher turns that into the calls' status.
//
// Jobs in parts (kOneCallPerBatch only): RunBatch may run only the next part of a
// job, keeping its progress in the job, and leave it not Finished. The dispatcher
// then queues the job again under its batch key, behind what waits already (other
// keys' batches run before its next part), and answers its call once, when a run
// leaves it Finished: the health RunBatch returns for an unfinished job is unused,
// and the response must be whole by then; its metrics are recorded once (compute
// time: the parts' sum; queue time: before the first). Between parts the call is
// checked as in the queue (cancelled, expired: JobOutcome::kStopped). Rows() and
// MaxBatchRows() describe the next part. BlockForward's chunked prefill is the one
// user.
//
// Stopping part-way: a RunBatch that takes long may ask its BatchAbandoned between
// steps (BlockForward: between layers) and, once it says every call of the batch
// is gone, return at once with no job advanced (not Finished, nothing committed).
// The dispatcher then answers each call as stopped between parts, and the worker
// is free for what waits.
#ifndef LAYERSERVE_SERVER_OPS_OPERATION_H_
#define LAYERSERVE_SERVER_OPS_OPERATION_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace layerserve {

class Metrics;
class ModelRepository;
class SessionStore;
struct BlockForwardOptions;
struct OutputHealth;
struct WorkerContext;

// What parsing may use besides the request. Owned by the service; outlives every
// call. Thread-safe.
struct ParseContext {
  const ModelRepository* models = nullptr;
  SessionStore* sessions = nullptr;  // Null: no sessions (Parse refuses them).
  // The service's settings of the operations that have some (server/ops/<op>.h);
  // null: the operation's defaults.
  const BlockForwardOptions* block_forward = nullptr;
};

// Whether every call of a running batch was cancelled or passed its deadline, so
// that the rest of its computation would be for no one. Cheap (no lock, no
// allocation); call it from the thread running the batch.
using BatchAbandoned = std::function<bool()>;

// How a batch of an operation's jobs runs.
enum class BatchRun {
  // One kernel call per request, each timed alone. Element-wise and row-wise
  // kernels have no per-call cost worth sharing, and concatenating would cost a
  // copy as large as the kernel's own traffic (and change which of oneDNN or
  // Highway runs, so the bits). A request whose call throws fails alone.
  kOneCallPerRequest,
  // The whole batch in one call, timed as a batch: its requests share the cost of
  // streaming weights (BlockForward's linear layers). A throw fails every request
  // of the batch.
  kOneCallPerBatch,
};

// How a job ends (OperationDefaults::End).
enum class JobOutcome {
  kNotComputed,  // Refused, cancelled or expired before its kernel ran.
  kComputed,     // Its kernel ran and its response is filled.
  kFailed,       // Its kernel (or the batch's) threw: it may have run part-way.
  kStopped,      // A job in parts, cancelled or expired between two of them: its
                 // earlier parts ran, its response is not filled.
};

// The members most operations share. Templates, so they fit any Job.
struct OperationDefaults {
  // Whether a small job may run on the gRPC thread that received it when a worker
  // is idle (the dispatcher's inline policy, server/rpc/dispatch.h). True: a job
  // that runs as its own kernel call gains nothing from waiting for company.
  template <typename Job>
  static bool MayRunInline(const Job&) {
    return true;
  }
  // The served model the job is for: its request metrics' `model` label; empty
  // for operations that name no model.
  template <typename Job>
  static absl::string_view ModelLabel(const Job&) {
    return {};
  }
  // Whether the batch after a held batch of this job's key gathers
  // (BatchTask::gathers()).
  template <typename Job>
  static bool Gathers(const Job&) {
    return false;
  }
  // The most rows a batch holding this job may have (BatchTask::max_batch_rows()),
  // besides --max-batch-rows.
  template <typename Job>
  static int64_t MaxBatchRows(const Job&) {
    return std::numeric_limits<int64_t>::max();
  }
  // Whether a batch of this job's key takes the job before the others that wait,
  // whatever their order (BatchTask::first_in_batch()).
  template <typename Job>
  static bool FirstInBatch(const Job&) {
    return false;
  }
  // Whether the job is done after a RunBatch, or has parts left to run (above).
  template <typename Job>
  static bool Finished(const Job&) {
    return true;
  }
  // Records what this operation measures beyond every operation's metrics, once
  // its job is computed; `call_elapsed`: since the call was accepted.
  template <typename Job>
  static void RecordComputed(const Job&, const OutputHealth&, absl::Duration, Metrics&) {}
  // Ends what a job holds beyond its answer (a session lease) just before its call
  // is answered, so the client's next call finds it free. Called once per job the
  // dispatcher accepted past Parse.
  template <typename Job>
  static void End(Job&, JobOutcome) {}
};

// What an operation `Op` whose job holds one input tensor (`input`, a DecodedTensor)
// and its `output_type` shares with the others of its kind (Normalize, Activate):
// one kernel call per request, every job under one batch key, the input's rows and
// values its size. `Op` still provides Job, Request, Response, kMethod, Parse,
// InputStats and Run.
template <typename Op>
struct OneTensorOperation : OperationDefaults {
  static constexpr BatchRun kBatchRun = BatchRun::kOneCallPerRequest;

  // Its jobs run as a kernel call each: any may share a batch with any other.
  template <typename Job>
  static std::string BatchKey(const Job&) {
    return Op::kMethod;
  }
  template <typename Job>
  static int64_t Rows(const Job& job) {
    return job.input.info.rows();
  }
  template <typename Job>
  static int64_t Elements(const Job& job) {
    return job.input.info.elements;
  }
  template <typename Job>
  static auto OutputType(const Job& job) {
    return job.output_type;
  }
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_OPS_OPERATION_H_
