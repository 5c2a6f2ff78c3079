#include "server/rpc/service.h"

#include <type_traits>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/batching/cpu_cache.h"
#include "server/ops/activate.h"
#include "server/ops/batch_gathering.h"
#include "server/ops/block_forward.h"
#include "server/ops/normalize.h"
#include "server/ops/positional_encode.h"
#include "server/rpc/grpc_status.h"

namespace layerserve {
namespace {

// One accepted RPC: finishes its reactor exactly once and records the outcome.
class Call {
 public:
  Call(grpc::CallbackServerContext* context, const char* method, Metrics* metrics,
       CallTracker* tracker, const google::protobuf::Message* request,
       const google::protobuf::Message* response)
      : context_(context),
        reactor_(context->DefaultReactor()),
        method_(method),
        metrics_(metrics),
        tracker_(tracker),
        response_(response),
        start_(absl::Now()) {
    tracker_->Started();
    metrics_->RequestStarted(method, request == nullptr ? 0 : request->ByteSizeLong());
  }

  grpc::ServerUnaryReactor* reactor() const { return reactor_; }
  const char* method() const { return method_; }
  absl::Duration elapsed() const { return absl::Now() - start_; }

  // The status to answer instead of computing, if the client is gone or its
  // deadline passed while the request waited; OK to go on.
  grpc::Status CheckStillWanted() const {
    if (!context_->IsCancelled()) return grpc::Status::OK;
    if (std::chrono::system_clock::now() >= context_->deadline()) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "deadline passed while the request waited in the queue; it "
                          "was not computed");
    }
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "the client cancelled the call before it was computed");
  }

  void Finish(const grpc::Status& status) {
    const int64_t response_bytes =
        status.ok() && response_ != nullptr ? response_->ByteSizeLong() : 0;
    metrics_->RequestFinished(method_, status.error_code(), absl::Now() - start_,
                              response_bytes);
    reactor_->Finish(status);
    tracker_->Finished();
  }

 private:
  grpc::CallbackServerContext* const context_;
  grpc::ServerUnaryReactor* const reactor_;
  const char* const method_;
  Metrics* const metrics_;
  CallTracker* const tracker_;
  const google::protobuf::Message* const response_;
  const absl::Time start_;
};

// Requests of at most this many values may run on the gRPC thread that received
// them (LayerServiceImpl::Dispatch): 1 MiB of float32. Waking a worker for such a
// request cost 31-62 µs here, as much as a norm's kernel on it; the slowest
// kernel at this size (GELU, ~0.2 ms) holds the gRPC thread less than receiving
// the message took. Larger requests go to a worker: gRPC has only a few callback
// threads (two on two cores), and milliseconds of compute on them stall every
// other call's I/O. Running 16 MiB norms here, even one at a time, saved their
// 45-60 µs hand-off but cost concurrent 1 KiB calls 8% of their throughput and
// 16% on their p99 (docs/BENCHMARKS.md, "Serving overhead").
constexpr int64_t kMaxInlineElements = 262144;

const grpc::Status kDraining(grpc::StatusCode::UNAVAILABLE,
                             "server is draining (shutting down); retry on another "
                             "replica");

template <typename... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <typename... F>
Overloaded(F...) -> Overloaded<F...>;

// What the service needs of each job type, as overloads: its batch key (what must
// match to share one kernel call), rows, size for --max-request-elements, input
// statistics (after the kernel), output dtype.

std::string BatchKey(const NormalizeJob&) { return "Normalize"; }
std::string BatchKey(const ActivateJob&) { return "Activate"; }
std::string BatchKey(const PositionalEncodeJob&) { return "PositionalEncode"; }
// Decode steps and longer sequences never share a kernel call (kernels/block.h
// sends them to different ones), so they queue apart: a prefill runs beside the
// decode batches, whose loops the workers share, instead of inside one.
std::string BatchKey(const BlockForwardJob& job) {
  return absl::StrCat(
      "BlockForward/", job.model->name, "/", job.layer_start, "/", job.num_layers,
      job.causal ? "/causal" : "/bidirectional",
      job.tokens <= kernels::kShortSequenceTokens ? "/steps" : "/sequences");
}

int64_t BatchRows(const NormalizeJob& job) { return job.input.info.rows(); }
int64_t BatchRows(const ActivateJob& job) { return job.input.info.rows(); }
int64_t BatchRows(const PositionalEncodeJob&) { return 1; }
int64_t BatchRows(const BlockForwardJob& job) { return job.batch * job.tokens; }

int64_t RequestElements(const NormalizeJob& job) { return job.input.info.elements; }
int64_t RequestElements(const ActivateJob& job) { return job.input.info.elements; }
int64_t RequestElements(const BlockForwardJob& job) { return job.hidden.info.elements; }
int64_t RequestElements(const PositionalEncodeJob& job) {
  return std::visit(
      Overloaded{[](const SinusoidalJob& j) { return j.rows * j.dim; },
                 [](const LearnedJob& j) { return j.input.info.elements; },
                 [](const RopeJob& j) {
                   return j.query.info.elements + (j.has_key ? j.key.info.elements : 0);
                 },
                 [](const AlibiJob& j) {
                   return j.batch * j.shape.heads * j.shape.query_length *
                          j.shape.key_length;
                 },
                 [](const T5BiasJob& j) {
                   return j.shape.heads * j.shape.query_length * j.shape.key_length;
                 }},
      job);
}

// Input statistics, taken after the kernel (only their NaN and Inf counts are
// exported). Where every input value reaches the output through operations that
// keep a NaN or Inf non-finite, an output without them proves the input had none:
// the common case skips a read of the whole input, which cost 25-40 µs per MiB
// outside the kernel (docs/BENCHMARKS.md).
bool OutputHasNonFinite(const OutputHealth& output) {
  return output.stats.nan + output.stats.inf + output.other_outputs_nonfinite > 0;
}
kernels::ValueStats AllFinite(int64_t count) {
  kernels::ValueStats stats;
  stats.count = count;
  return stats;
}
kernels::ValueStats StatsUnlessOutputFinite(const DecodedTensor& input,
                                            const OutputHealth& output) {
  return OutputHasNonFinite(output) ? ValueStatsOf(input)
                                    : AllFinite(input.info.elements);
}
// A norm makes a NaN of every NaN or Inf it is given: a NaN makes its row all
// NaN, and so does an Inf in LayerNorm (mean and variance are NaN), while RMSNorm,
// as PyTorch, gives NaN at each Inf (mean square +Inf, rsqrt 0, Inf * 0 = NaN;
// then NaN * weight) and +-0 beside it. So an input with either has an output
// with NaN.
kernels::ValueStats InputStats(const NormalizeJob& job, const OutputHealth& output) {
  return StatsUnlessOutputFinite(job.input, output);
}
// The activation loops check their inputs as they read them (an output does not
// tell: ReLU, sigmoid and tanh send -Inf to finite values). The gate, when a
// tensor of its own, is an input too.
kernels::ValueStats InputStats(const ActivateJob& job, const OutputHealth& output) {
  const int64_t gate_count = job.gate.size();
  if (output.inputs_seen_finite) return AllFinite(job.input.info.elements + gate_count);
  kernels::ValueStats stats = ValueStatsOf(job.input);
  if (gate_count > 0)
    stats.Merge(kernels::ComputeValueStats(job.gate.data(), gate_count));
  return stats;
}
kernels::ValueStats InputStats(const BlockForwardJob& job, const OutputHealth&) {
  return ValueStatsOf(job.hidden);
}
// The additive encodings add a finite value to each input value (x + NaN or
// +-Inf is not finite), and RoPE's x * cos + partner * sin is not finite when x is
// not (Inf * 0 is NaN); pass-through dims are copies. T5's output holds only the
// table entries its buckets select, so its table is read.
kernels::ValueStats InputStats(const PositionalEncodeJob& job,
                               const OutputHealth& output) {
  return std::visit(
      Overloaded{
          [&](const SinusoidalJob& j) {
            return j.has_input ? StatsUnlessOutputFinite(j.input, output)
                               : kernels::ValueStats();
          },
          [&](const LearnedJob& j) { return StatsUnlessOutputFinite(j.input, output); },
          [&](const RopeJob& j) {
            kernels::ValueStats s = StatsUnlessOutputFinite(j.query, output);
            if (j.has_key) s.Merge(StatsUnlessOutputFinite(j.key, output));
            return s;
          },
          [&](const AlibiJob& j) {
            return j.has_scores ? StatsUnlessOutputFinite(j.scores, output)
                                : kernels::ValueStats();
          },
          [](const T5BiasJob& j) { return ValueStatsOf(j.table); }},
      job);
}

template <typename Job>
ElementType OutputType(const Job& job) {
  return job.output_type;
}
ElementType OutputType(const PositionalEncodeJob& job) {
  return std::visit([](const auto& j) { return j.output_type; }, job);
}

// Whether the batch after a held batch of this job's key gathers: only session
// steps of weights beyond the cache (server/ops/batch_gathering.h).
template <typename Job>
bool Gathers(const Job&) {
  return false;
}
bool Gathers(const BlockForwardJob& job) {
  if (!job.session) return false;
  int64_t bytes = 0;
  for (int64_t l = job.layer_start; l < job.layer_start + job.num_layers; ++l) {
    bytes += job.model->blocks[l].bytes();
  }
  return BlockForwardGathers(/*session_step=*/true, bytes, LastLevelCacheBytes());
}

// Ends what a job holds beyond its answer (a session lease) before the call is
// answered, so the client's next call on the session finds it free.
template <typename Job>
void EndJob(Job&, bool /*computed*/) {}
void EndJob(BlockForwardJob& job, bool computed) { job.session.Release(computed); }

OutputHealth RunOne(WorkerContext& /*worker*/, NormalizeJob& job,
                    v1::NormalizeResponse* response) {
  return RunNormalize(job, response);
}
OutputHealth RunOne(WorkerContext& /*worker*/, ActivateJob& job,
                    v1::ActivateResponse* response) {
  return RunActivate(job, response);
}
OutputHealth RunOne(WorkerContext& worker, PositionalEncodeJob& job,
                    v1::PositionalEncodeResponse* response) {
  return RunPositionalEncode(worker.positional, job, response);
}

// A validated request waiting in the batcher, with the RPC it answers.
class ServedTask : public BatchTask {
 public:
  // Runs `batch` (this task and the others of its key) and finishes every call.
  virtual void RunBatch(WorkerContext& worker, Batch& batch, Metrics& metrics) = 0;
};

template <typename Job, typename Response>
class JobTask final : public ServedTask {
 public:
  JobTask(Call call, Job job, Response* response, int64_t max_response_bytes)
      : call_(call),
        job_(std::move(job)),
        response_(response),
        rows_(BatchRows(job_)),
        max_response_bytes_(max_response_bytes) {}

  int64_t rows() const override { return rows_; }
  // Asked once per batch, of its first task.
  bool gathers() const override { return Gathers(job_); }

  void RunBatch(WorkerContext& worker, Batch& batch, Metrics& metrics) override {
    const absl::Time start = absl::Now();
    int64_t rows = 0;
    std::vector<JobTask*> live;
    for (auto& task : batch) {
      auto* t = static_cast<JobTask*>(task.get());
      rows += t->rows_;
      metrics.Queued(call_.method(), start - t->enqueued());
      // Expired or cancelled while queued: answered, never computed.
      const grpc::Status wanted = t->call_.CheckStillWanted();
      if (wanted.ok()) {
        live.push_back(t);
      } else {
        EndJob(t->job_, /*computed=*/false);
        t->call_.Finish(wanted);
      }
    }
    metrics.BatchTaken(call_.method(), static_cast<int64_t>(batch.size()), rows);
    if constexpr (std::is_same_v<Job, BlockForwardJob>) {
      if (live.empty()) return;
      std::vector<const BlockForwardJob*> jobs;
      std::vector<v1::BlockForwardResponse*> responses;
      for (JobTask* t : live) {
        jobs.push_back(&t->job_);
        responses.push_back(t->response_);
      }
      const std::vector<OutputHealth> health =
          RunBlockForwardBatch(worker.block, jobs, responses);
      const absl::Duration took = absl::Now() - start;
      for (size_t i = 0; i < live.size(); ++i) live[i]->Done(health[i], took, metrics);
    } else {
      // Element-wise and row-wise kernels have no per-call cost worth sharing, and
      // concatenating would cost a copy as large as the kernel's own traffic (and
      // change which of oneDNN or Highway runs, so the bits): one call per request.
      for (JobTask* t : live) {
        const absl::Time begin = absl::Now();
        const OutputHealth health = RunOne(worker, t->job_, t->response_);
        t->Done(health, absl::Now() - begin, metrics);
      }
    }
  }

 private:
  void Done(const OutputHealth& health, absl::Duration took, Metrics& metrics) {
    const char* method = call_.method();
    metrics.Computed(method, took);
    metrics.InputValues(method, InputStats(job_, health));
    metrics.OutputValues(method, health.stats);
    metrics.Saturated(OutputType(job_), health.saturated);
    metrics.ZeroVarianceRows(health.zero_variance_rows);
    if constexpr (std::is_same_v<Job, BlockForwardJob>) {
      metrics.AttentionEntropy(job_.model->name, health.attention_entropy_nats);
      if (job_.session) {
        metrics.SessionTokens(job_.tokens);
        if (job_.tokens == 1) metrics.DecodeStep(call_.elapsed());
      }
    }
    EndJob(job_, /*computed=*/true);
    // gRPC would refuse to send it and the client would see a transport error
    // with no numbers; say what happened instead.
    const int64_t bytes = static_cast<int64_t>(response_->ByteSizeLong());
    if (bytes > max_response_bytes_) {
      response_->Clear();
      call_.Finish(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("response too large: ", bytes,
                       " bytes, over the server's limit of ", max_response_bytes_,
                       " (--max-message-bytes); ask for less per "
                       "request (fewer rows, a 16-bit output_dtype)")));
      return;
    }
    call_.Finish(grpc::Status::OK);
  }

  Call call_;
  Job job_;
  Response* const response_;
  const int64_t rows_;
  const int64_t max_response_bytes_;
};

}  // namespace

LayerServiceImpl::LayerServiceImpl(const ServiceOptions& options, Metrics* metrics,
                                   const ModelRepository* models)
    : options_(options),
      metrics_(metrics),
      models_(models),
      sessions_(options.sessions, metrics),
      batcher_(
          options.batch, options.compute_threads,
          [this, metrics](WorkerContext& worker, Batch& batch) {
            // Decode steps share their loops with idle workers (Batcher::Run).
            worker.block.parallel = &batcher_;
            static_cast<ServedTask&>(*batch.front()).RunBatch(worker, batch, *metrics);
          },
          [metrics](int64_t depth) { metrics->SetQueueDepth(depth); }) {}

LayerServiceImpl::~LayerServiceImpl() { StopWorkers(); }

template <typename Job, typename Response, typename Parse>
grpc::ServerUnaryReactor* LayerServiceImpl::Dispatch(
    grpc::CallbackServerContext* context, const char* method,
    const google::protobuf::Message& request, Response* response, Parse parse) {
  Call call(context, method, metrics_, &calls_, &request, response);
  if (draining_.load()) {
    call.Finish(kDraining);
    return call.reactor();
  }
  absl::StatusOr<Job> job = parse();
  if (!job.ok()) {
    call.Finish(ToGrpcStatus(job.status()));
    return call.reactor();
  }
  const int64_t elements = RequestElements(*job);
  if (elements > options_.max_request_elements) {
    EndJob(*job, /*computed=*/false);
    call.Finish(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("request too large: ", elements,
                     " values, over the server's limit "
                     "of ",
                     options_.max_request_elements,
                     " (--max-request-elements); split it into smaller requests")));
    return call.reactor();
  }
  const std::string key = BatchKey(*job);
  std::unique_ptr<BatchTask> task = std::make_unique<JobTask<Job, Response>>(
      call, std::move(*job), response, options_.max_response_bytes);
  // Small element-wise requests run here when a worker is idle: the hand-off would
  // cost more than their kernel, and they gain nothing from waiting for company
  // (each request is its own kernel call). BlockForward always goes to the queue,
  // where requests share their linear layers.
  if constexpr (!std::is_same_v<Job, BlockForwardJob>) {
    if (elements <= kMaxInlineElements && batcher_.TryRunInline(task)) {
      return call.reactor();
    }
  }
  const absl::Status queued = batcher_.Schedule(key, task);
  if (!queued.ok()) {
    // Still ours: the batcher took nothing.
    task.reset();
    call.Finish(queued.code() == absl::StatusCode::kUnavailable ? kDraining
                                                                : ToGrpcStatus(queued));
  }
  return call.reactor();
}

grpc::ServerUnaryReactor* LayerServiceImpl::Normalize(
    grpc::CallbackServerContext* context, const v1::NormalizeRequest* request,
    v1::NormalizeResponse* response) {
  return Dispatch<NormalizeJob>(context, "Normalize", *request, response,
                                [&] { return ParseNormalizeRequest(*request); });
}

grpc::ServerUnaryReactor* LayerServiceImpl::PositionalEncode(
    grpc::CallbackServerContext* context, const v1::PositionalEncodeRequest* request,
    v1::PositionalEncodeResponse* response) {
  return Dispatch<PositionalEncodeJob>(
      context, "PositionalEncode", *request, response,
      [&] { return ParsePositionalEncodeRequest(*request); });
}

grpc::ServerUnaryReactor* LayerServiceImpl::Activate(grpc::CallbackServerContext* context,
                                                     const v1::ActivateRequest* request,
                                                     v1::ActivateResponse* response) {
  return Dispatch<ActivateJob>(context, "Activate", *request, response,
                               [&] { return ParseActivateRequest(*request); });
}

grpc::ServerUnaryReactor* LayerServiceImpl::BlockForward(
    grpc::CallbackServerContext* context, const v1::BlockForwardRequest* request,
    v1::BlockForwardResponse* response) {
  return Dispatch<BlockForwardJob>(context, "BlockForward", *request, response, [&] {
    return ParseBlockForwardRequest(*request, *models_, &sessions_);
  });
}

grpc::ServerUnaryReactor* LayerServiceImpl::ListModels(
    grpc::CallbackServerContext* context, const v1::ListModelsRequest* request,
    v1::ListModelsResponse* response) {
  // Answered on the handler thread: a few fields per model, no compute.
  Call call(context, "ListModels", metrics_, &calls_, request, response);
  if (draining_.load()) {
    call.Finish(kDraining);
    return call.reactor();
  }
  for (const auto& model : models_->models()) {
    models_->Describe(*model, response->add_models());
  }
  call.Finish(grpc::Status::OK);
  return call.reactor();
}

grpc::ServerUnaryReactor* LayerServiceImpl::GetModel(grpc::CallbackServerContext* context,
                                                     const v1::GetModelRequest* request,
                                                     v1::ModelInfo* response) {
  Call call(context, "GetModel", metrics_, &calls_, request, response);
  if (draining_.load()) {
    call.Finish(kDraining);
    return call.reactor();
  }
  const std::string& name = request->name();
  const Model* found = name.empty() ? models_->default_model() : nullptr;
  for (const auto& model : models_->models()) {
    if (model->name == name) found = model.get();
  }
  if (found == nullptr) {
    call.Finish(grpc::Status(grpc::StatusCode::NOT_FOUND,
                             name.empty()
                                 ? "name: no default model is ready"
                                 : "name: no model \"" + name + "\" (see ListModels)"));
  } else {
    models_->Describe(*found, response);
    call.Finish(grpc::Status::OK);
  }
  return call.reactor();
}

grpc::ServerUnaryReactor* LayerServiceImpl::OpenSession(
    grpc::CallbackServerContext* context, const v1::OpenSessionRequest* request,
    v1::OpenSessionResponse* response) {
  // Answered on the handler thread: no compute, a short critical section.
  Call call(context, "OpenSession", metrics_, &calls_, request, response);
  if (draining_.load()) {
    call.Finish(kDraining);
    return call.reactor();
  }
  absl::StatusOr<LayerRange> range = ResolveLayerRange(
      *models_, request->model(), request->layer_start(), request->num_layers());
  absl::StatusOr<std::string> id =
      range.ok() ? sessions_.Open(range->model, range->start, range->count,
                                  request->max_length())
                 : range.status();
  if (id.ok()) {
    response->set_session_id(*id);
    response->set_ttl_ms(absl::ToInt64Milliseconds(sessions_.ttl()));
  }
  call.Finish(ToGrpcStatus(id.status()));
  return call.reactor();
}

grpc::ServerUnaryReactor* LayerServiceImpl::CloseSession(
    grpc::CallbackServerContext* context, const v1::CloseSessionRequest* request,
    v1::CloseSessionResponse* response) {
  Call call(context, "CloseSession", metrics_, &calls_, request, response);
  // Served while draining too: closing frees memory and starts nothing.
  call.Finish(ToGrpcStatus(sessions_.Close(request->session_id())));
  return call.reactor();
}

}  // namespace layerserve
