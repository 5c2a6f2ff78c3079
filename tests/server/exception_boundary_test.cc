// The exception boundary of the generic dispatch (server/rpc/dispatch.h), through
// the real path: test operations (the shape of NormalizeOp) whose parse or kernel
// throws a real dnnl::error, fails a real allocation, or throws something else, are
// dispatched by the real Dispatch<Op>, Batcher and RunServedBatch behind a real
// gRPC server on 127.0.0.1 port 0, and called through a real stub. Checked: the
// codes and messages (naming the operation), that every call is answered exactly
// once (CallTracker, requests_total), inline and queued, that a request failing
// alone leaves its batch mates computed while a batch run as one call fails whole,
// that the server serves the next call, and that a BlockForward session whose step
// failed is closed (its next call: NOT_FOUND, prefill again).
#include <grpcpp/grpcpp.h>
#include <prometheus/metric_family.h>

#include <atomic>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"
#include "layerserve/v1/layerserve.grpc.pb.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "server/models/model_repository.h"
#include "server/ops/block_forward.h"
#include "server/ops/operation.h"
#include "server/rpc/call.h"
#include "server/rpc/dispatch.h"
#include "server/sessions/session_store.h"
#include "tests/testing/loopback_server.h"
#include "tests/testing/wire_tensors.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LAYERSERVE_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LAYERSERVE_TEST_SANITIZED 1
#endif
#endif

namespace layerserve {
namespace {

using ::layerserve::testing::MakeTensor;
using ::layerserve::testing::TensorValues;
using ::testing::HasSubstr;

// What a test request asks of the operation, in NormalizeRequest.epsilon.
enum Fault {
  kNone = 0,
  kDnnlError = 1,         // The kernel: a real oneDNN call that fails.
  kOutOfMemory = 2,       // The kernel: an allocation that fails.
  kUnknownException = 3,  // The kernel: a throw of something not an std::exception.
  kParseThrows = 4,       // The parse (on the gRPC thread): std::runtime_error.
  kParseOutOfMemory = 5,  // The parse: an allocation that fails.
};

// A real dnnl::error: a memory descriptor of a negative size, which oneDNN
// refuses as it refuses any bad primitive argument.
void FailInOneDnn() {
  const dnnl::memory::desc desc({-1}, dnnl::memory::data_type::f32,
                                dnnl::memory::format_tag::a);
  (void)desc;
}

std::string OneDnnMessage() {
  try {
    FailInOneDnn();
  } catch (const dnnl::error& e) {
    return e.what();
  }
  return "oneDNN did not fail";
}

std::atomic<float*> allocation_sink{nullptr};

// A real failing allocation: 4 EiB, past any address space. Under ASan and TSan
// their allocator reports a failed `new` and ends the process instead of throwing
// (allocator_may_return_null does not change that for the throwing `new`), so
// there the test throws what `new` throws.
void FailToAllocate() {
#ifdef LAYERSERVE_TEST_SANITIZED
  throw std::bad_alloc();
#else
  // Not a constant: clang rejects a constant array size this large at compile time.
  volatile size_t elements = size_t{1} << 60;
  float* huge = new float[elements];
  // Escapes, so the compiler may not elide the allocation.
  allocation_sink.store(huge);
  delete[] huge;
#endif
}

// Where each test job ran, counted by the operation.
std::atomic<int> runs_inline{0}, runs_on_worker{0};
absl::Mutex batches_mu;
std::vector<int> whole_batch_sizes ABSL_GUARDED_BY(batches_mu);

struct FaultyJob {
  Fault fault = kNone;
  bool queue = false;  // NormalizeRequest.weight_offset: never inline.
  const v1::Tensor* input = nullptr;
  std::thread::id parsed_on;
};

void RunFaultyJob(const FaultyJob& job, v1::NormalizeResponse* response) {
  (job.parsed_on == std::this_thread::get_id() ? runs_inline : runs_on_worker)++;
  switch (job.fault) {
    case kDnnlError:
      FailInOneDnn();
      break;
    case kOutOfMemory:
      FailToAllocate();
      break;
    case kUnknownException:
      throw 42;
    default:
      break;
  }
  *response->mutable_output() = *job.input;
}

// The shape of NormalizeOp: the Normalize messages, its own method name.
template <BatchRun kRun>
struct FaultyOp : OperationDefaults {
  using Job = FaultyJob;
  using Request = v1::NormalizeRequest;
  using Response = v1::NormalizeResponse;
  static constexpr const char* kMethod = "FaultyNormalize";
  static constexpr BatchRun kBatchRun = kRun;

  static absl::StatusOr<Job> Parse(const Request& request, const ParseContext&) {
    Job job;
    job.fault = static_cast<Fault>(static_cast<int>(request.epsilon()));
    if (job.fault == kParseThrows) throw std::runtime_error("the parse broke");
    if (job.fault == kParseOutOfMemory) FailToAllocate();
    job.queue = request.weight_offset();
    job.input = &request.input();
    job.parsed_on = std::this_thread::get_id();
    return job;
  }
  static std::string BatchKey(const Job&) { return kMethod; }
  static int64_t Rows(const Job&) { return 1; }
  static int64_t Elements(const Job& job) { return job.input->data().size() / 4; }
  static kernels::ValueStats InputStats(const Job&, const OutputHealth&) { return {}; }
  static ElementType OutputType(const Job&) { return ElementType::kFloat32; }
  static bool MayRunInline(const Job& job) { return !job.queue; }

  static OutputHealth Run(WorkerContext&, const Job& job, Response* response) {
    RunFaultyJob(job, response);
    return {};
  }
  // One call for the batch: a fault of any job fails it whole, after the jobs
  // before it were computed.
  static std::vector<OutputHealth> RunBatch(WorkerContext&, const std::vector<Job*>& jobs,
                                            const std::vector<Response*>& responses,
                                            const BatchAbandoned&) {
    {
      absl::MutexLock lock(&batches_mu);
      whole_batch_sizes.push_back(static_cast<int>(jobs.size()));
    }
    for (size_t i = 0; i < jobs.size(); ++i) RunFaultyJob(*jobs[i], responses[i]);
    return std::vector<OutputHealth>(jobs.size());
  }
};

// The real BlockForward, whose batch throws a real dnnl::error after it ran (its
// steps appended to and committed into their sessions' caches) while
// `fail_block_forward` is set.
std::atomic<bool> fail_block_forward{false};
struct FaultyBlockForwardOp : BlockForwardOp {
  static std::vector<OutputHealth> RunBatch(WorkerContext& worker,
                                            const std::vector<Job*>& jobs,
                                            const std::vector<Response*>& responses,
                                            const BatchAbandoned& abandoned) {
    std::vector<OutputHealth> health =
        BlockForwardOp::RunBatch(worker, jobs, responses, abandoned);
    if (fail_block_forward.load()) FailInOneDnn();
    return health;
  }
};

// The service's machinery around the test operations: Normalize is FaultyOp<run>,
// BlockForward FaultyBlockForwardOp, ListModels drops its call unanswered.
class FaultyService final : public v1::LayerService::CallbackService {
 public:
  FaultyService(BatchRun run, const BatchOptions& batch)
      : run_(run),
        sessions_(SessionOptions{}, &metrics_),
        batcher_(batch, /*num_threads=*/2,
                 [this](WorkerContext& worker, Batch& tasks) {
                   RunServedBatch(worker, tasks, metrics_);
                 }),
        dispatch_{&metrics_,
                  &calls_,
                  &draining_,
                  &batcher_,
                  ParseContext{models_.get(), &sessions_},
                  /*max_request_elements=*/int64_t{1} << 26,
                  /*max_response_bytes=*/int64_t{256} << 20} {}

  grpc::ServerUnaryReactor* Normalize(grpc::CallbackServerContext* context,
                                      const v1::NormalizeRequest* request,
                                      v1::NormalizeResponse* response) override {
    if (run_ == BatchRun::kOneCallPerBatch) {
      return Dispatch<FaultyOp<BatchRun::kOneCallPerBatch>>(dispatch_, context, *request,
                                                            response);
    }
    return Dispatch<FaultyOp<BatchRun::kOneCallPerRequest>>(dispatch_, context, *request,
                                                            response);
  }
  grpc::ServerUnaryReactor* BlockForward(grpc::CallbackServerContext* context,
                                         const v1::BlockForwardRequest* request,
                                         v1::BlockForwardResponse* response) override {
    return Dispatch<FaultyBlockForwardOp>(dispatch_, context, *request, response);
  }
  // A handler that loses its call: the handle answers it anyway.
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override {
    Call call(context, "ListModels", &metrics_, &calls_, request, response);
    return call.reactor();
  }

  void StopWorkers() { batcher_.Stop(); }
  Metrics& metrics() { return metrics_; }
  const CallTracker& calls() const { return calls_; }
  SessionStore& sessions() { return sessions_; }
  std::shared_ptr<const Model> model() const { return models_->default_model(); }

 private:
  const BatchRun run_;
  Metrics metrics_;
  CallTracker calls_;
  std::atomic<bool> draining_{false};
  std::unique_ptr<ModelRepository> models_ =
      ModelRepository::Demo(kernels::WeightType::kFloat32);
  SessionStore sessions_;
  Batcher<WorkerContext> batcher_;
  const DispatchContext dispatch_;
};

class ExceptionBoundaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    runs_inline = 0;
    runs_on_worker = 0;
    fail_block_forward = false;
    absl::MutexLock lock(&batches_mu);
    whole_batch_sizes.clear();
  }

  // A batch closes when `batch_rows` requests wait (each is one row), so
  // concurrent queued calls share one; with 1, each request runs alone at once.
  void Start(BatchRun run, int64_t batch_rows = 1) {
    BatchOptions batch;
    batch.max_batch_rows = batch_rows;
    batch.max_queue_delay = batch_rows > 1 ? absl::Seconds(30) : absl::ZeroDuration();
    service_ = std::make_unique<FaultyService>(run, batch);
    server_ = std::make_unique<testing::LoopbackServer>(service_.get());
    ASSERT_TRUE(server_->started());
    stub_ = v1::LayerService::NewStub(server_->NewInsecureChannel());
  }

  void TearDown() override {
    if (server_) server_->Shutdown();
    if (service_) service_->StopWorkers();
  }

  static v1::NormalizeRequest Request(Fault fault, bool queue, float value = 1.5f) {
    v1::NormalizeRequest request;
    request.set_epsilon(static_cast<float>(fault));
    request.set_weight_offset(queue);
    *request.mutable_input() = MakeTensor({1, 2}, {value, -value});
    return request;
  }

  grpc::Status Normalize(const v1::NormalizeRequest& request,
                         v1::NormalizeResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return stub_->Normalize(&context, request, response);
  }

  // Sends every request at once, each from its own thread.
  std::vector<grpc::Status> NormalizeConcurrently(
      const std::vector<v1::NormalizeRequest>& requests,
      std::vector<v1::NormalizeResponse>* responses) {
    std::vector<grpc::Status> statuses(requests.size());
    responses->assign(requests.size(), {});
    std::vector<std::thread> threads;
    for (size_t i = 0; i < requests.size(); ++i) {
      threads.emplace_back(
          [&, i] { statuses[i] = Normalize(requests[i], &(*responses)[i]); });
    }
    for (std::thread& thread : threads) thread.join();
    return statuses;
  }

  grpc::Status BlockForward(const v1::BlockForwardRequest& request,
                            v1::BlockForwardResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return stub_->BlockForward(&context, request, response);
  }

  // requests_total{method, code}: how many calls were answered with `code` (summed
  // over the model label BlockForward's series may carry).
  double Answered(const std::string& method, const std::string& code) {
    double sum = 0;
    for (const prometheus::MetricFamily& family :
         service_->metrics().registry()->Collect()) {
      if (family.name != "layerserve_requests_total") continue;
      for (const prometheus::ClientMetric& metric : family.metric) {
        std::map<std::string, std::string> labels;
        for (const auto& label : metric.label) labels[label.name] = label.value;
        if (labels["method"] == method && labels["code"] == code) {
          sum += metric.counter.value;
        }
      }
    }
    return sum;
  }

  // The batch_size histogram of `method`: {batches, requests in them}.
  std::pair<uint64_t, double> Batches(const std::string& method) {
    for (const prometheus::MetricFamily& family :
         service_->metrics().registry()->Collect()) {
      if (family.name != "layerserve_batch_size") continue;
      for (const prometheus::ClientMetric& metric : family.metric) {
        if (metric.label.size() == 1 && metric.label[0].value == method) {
          return {metric.histogram.sample_count, metric.histogram.sample_sum};
        }
      }
    }
    return {0, 0};
  }

  // Every call answered, each once: none in flight, and requests_total counts
  // `calls` answers in all. (A call counts as finished just after its answer is
  // sent, so the client may see it first: the tracker is waited for.)
  void ExpectEachAnsweredOnce(const std::string& method, int calls) {
    EXPECT_TRUE(service_->calls().AwaitIdle(absl::ZeroDuration(),
                                            absl::Now() + absl::Seconds(30)))
        << service_->calls().inflight() << " calls in flight";
    double answered = 0;
    for (const char* code : {"OK", "INTERNAL", "RESOURCE_EXHAUSTED", "NOT_FOUND"}) {
      answered += Answered(method, code);
    }
    EXPECT_EQ(answered, calls);
  }

  std::unique_ptr<FaultyService> service_;
  std::unique_ptr<testing::LoopbackServer> server_;
  std::unique_ptr<v1::LayerService::Stub> stub_;
};

// The whole seconds of the google.rpc.RetryInfo `status` carries, if any.
std::optional<int64_t> RetryDelaySeconds(const grpc::Status& status) {
  google::rpc::Status details;
  if (!details.ParseFromString(status.error_details())) return std::nullopt;
  for (const auto& detail : details.details()) {
    google::rpc::RetryInfo retry_info;
    if (detail.UnpackTo(&retry_info)) return retry_info.retry_delay().seconds();
  }
  return std::nullopt;
}

const std::string kOutOfMemoryMessage =
    "FaultyNormalize: the server ran out of memory computing this request; send "
    "smaller requests (fewer rows or tokens), or retry later";

TEST_F(ExceptionBoundaryTest, KernelFailuresBecomeStatusesInlineAndQueued) {
  Start(BatchRun::kOneCallPerRequest);
  struct Case {
    Fault fault;
    grpc::StatusCode code;
    std::string message;
  };
  const Case cases[] = {
      {kDnnlError, grpc::StatusCode::INTERNAL,
       "FaultyNormalize failed on the server: " + OneDnnMessage()},
      {kOutOfMemory, grpc::StatusCode::RESOURCE_EXHAUSTED, kOutOfMemoryMessage},
      {kUnknownException, grpc::StatusCode::INTERNAL,
       "FaultyNormalize failed on the server: an exception of unknown type"},
  };
  int calls = 0;
  for (const bool queue : {false, true}) {
    for (const Case& c : cases) {
      v1::NormalizeResponse response;
      const grpc::Status status = Normalize(Request(c.fault, queue), &response);
      ++calls;
      EXPECT_EQ(status.error_code(), c.code) << c.message << (queue ? " queued" : "");
      EXPECT_EQ(status.error_message(), c.message);
      EXPECT_EQ(RetryDelaySeconds(status), c.code == grpc::StatusCode::RESOURCE_EXHAUSTED
                                               ? std::optional<int64_t>(1)
                                               : std::nullopt);
      // The server goes on: the next call is computed.
      const grpc::Status next = Normalize(Request(kNone, queue, 2.0f), &response);
      ++calls;
      ASSERT_TRUE(next.ok()) << next.error_message();
      EXPECT_THAT(TensorValues(response.output()), ::testing::ElementsAre(2.0f, -2.0f));
    }
  }
  EXPECT_EQ(runs_inline.load(), 6) << "the small unqueued calls run on the gRPC thread";
  EXPECT_EQ(runs_on_worker.load(), 6);
  ExpectEachAnsweredOnce("FaultyNormalize", calls);
  EXPECT_EQ(Answered("FaultyNormalize", "INTERNAL"), 4);
  EXPECT_EQ(Answered("FaultyNormalize", "RESOURCE_EXHAUSTED"), 2);
  EXPECT_EQ(Answered("FaultyNormalize", "OK"), 6);
}

TEST_F(ExceptionBoundaryTest, ParseFailuresOnTheGrpcThreadBecomeStatuses) {
  Start(BatchRun::kOneCallPerRequest);
  v1::NormalizeResponse response;
  grpc::Status status = Normalize(Request(kParseThrows, false), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(status.error_message(),
            "FaultyNormalize failed on the server: the parse broke");
  status = Normalize(Request(kParseOutOfMemory, true), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(status.error_message(), kOutOfMemoryMessage);
  EXPECT_EQ(RetryDelaySeconds(status), 1);
  EXPECT_TRUE(Normalize(Request(kNone, false), &response).ok());
  EXPECT_EQ(runs_inline.load() + runs_on_worker.load(), 1) << "no failed parse ran";
  ExpectEachAnsweredOnce("FaultyNormalize", 3);
}

// One kernel call per request: the request whose call threw fails alone; its
// batch mates are computed.
TEST_F(ExceptionBoundaryTest, RequestRunAloneFailsAloneInItsBatch) {
  Start(BatchRun::kOneCallPerRequest, /*batch_rows=*/4);
  std::vector<v1::NormalizeResponse> responses;
  const std::vector<grpc::Status> statuses =
      NormalizeConcurrently({Request(kNone, true, 1), Request(kDnnlError, true, 2),
                             Request(kNone, true, 3), Request(kOutOfMemory, true, 4)},
                            &responses);
  EXPECT_EQ(Batches("FaultyNormalize"), std::make_pair(uint64_t{1}, 4.0))
      << "one batch of the four";
  EXPECT_TRUE(statuses[0].ok()) << statuses[0].error_message();
  EXPECT_EQ(statuses[1].error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(statuses[1].error_message(), HasSubstr(OneDnnMessage()));
  EXPECT_TRUE(statuses[2].ok()) << statuses[2].error_message();
  EXPECT_EQ(statuses[3].error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(TensorValues(responses[0].output()), ::testing::ElementsAre(1.0f, -1.0f));
  EXPECT_THAT(TensorValues(responses[2].output()), ::testing::ElementsAre(3.0f, -3.0f));
  ExpectEachAnsweredOnce("FaultyNormalize", 4);
}

// One call for the batch: when it throws, every request of the batch fails with
// it, and the next batch is computed.
TEST_F(ExceptionBoundaryTest, BatchRunAsOneCallFailsWhole) {
  Start(BatchRun::kOneCallPerBatch, /*batch_rows=*/3);
  std::vector<v1::NormalizeResponse> responses;
  std::vector<grpc::Status> statuses = NormalizeConcurrently(
      {Request(kNone, true), Request(kDnnlError, true), Request(kNone, true)},
      &responses);
  for (const grpc::Status& status : statuses) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL);
    EXPECT_EQ(status.error_message(),
              "FaultyNormalize failed on the server: " + OneDnnMessage());
  }
  statuses = NormalizeConcurrently(
      {Request(kNone, true, 5), Request(kNone, true, 6), Request(kNone, true, 7)},
      &responses);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(statuses[i].ok()) << statuses[i].error_message();
    EXPECT_EQ(TensorValues(responses[i].output())[0], 5.0f + i);
  }
  {
    absl::MutexLock lock(&batches_mu);
    EXPECT_THAT(whole_batch_sizes, ::testing::ElementsAre(3, 3));
  }
  ExpectEachAnsweredOnce("FaultyNormalize", 6);
  EXPECT_EQ(Answered("FaultyNormalize", "INTERNAL"), 3);
}

TEST_F(ExceptionBoundaryTest, CallDroppedUnansweredIsAnsweredInternal) {
  Start(BatchRun::kOneCallPerRequest);
  grpc::ClientContext context;
  v1::ListModelsResponse response;
  const grpc::Status status = stub_->ListModels(&context, {}, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(status.error_message(),
            "ListModels: the server dropped the call without answering it; retry");
  ExpectEachAnsweredOnce("ListModels", 1);
}

// A step that failed may have left part of itself in the session's KV cache (here
// all of it, committed): the session is closed, and its next call says to prefill
// again instead of continuing from that cache. Other calls go on.
TEST_F(ExceptionBoundaryTest, SessionWhoseStepFailedIsClosed) {
  Start(BatchRun::kOneCallPerRequest);
  const std::string id = *service_->sessions().Open(service_->model(), 0, 2, 0);
  const std::string other = *service_->sessions().Open(service_->model(), 0, 2, 0);
  v1::BlockForwardRequest request;
  request.set_num_layers(2);
  *request.mutable_hidden_states() =
      MakeTensor({3, 512}, std::vector<float>(3 * 512, 0.25f), ElementType::kFloat32);
  v1::BlockForwardResponse response;
  for (const std::string& session : {id, other}) {
    request.set_session_id(session);
    const grpc::Status prefill = BlockForward(request, &response);
    ASSERT_TRUE(prefill.ok()) << prefill.error_message();
    EXPECT_EQ(response.session_length(), 3);
  }

  *request.mutable_hidden_states() =
      MakeTensor({1, 512}, std::vector<float>(512, 0.5f), ElementType::kFloat32);
  request.set_session_id(id);
  fail_block_forward = true;
  const grpc::Status step = BlockForward(request, &response);
  fail_block_forward = false;
  EXPECT_EQ(step.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(step.error_message(),
            "BlockForward failed on the server: " + OneDnnMessage());

  const grpc::Status next = BlockForward(request, &response);
  EXPECT_EQ(next.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(next.error_message(),
            "session_id: session \"" + id +
                "\" was closed by the server: a call on it failed part-way, which may "
                "have left part of that call in its KV cache; open a new session and "
                "prefill again");

  request.set_session_id(other);
  const grpc::Status other_step = BlockForward(request, &response);
  ASSERT_TRUE(other_step.ok()) << other_step.error_message();
  EXPECT_EQ(response.session_length(), 4);
  EXPECT_EQ(service_->sessions().active(), 1);
  ExpectEachAnsweredOnce("BlockForward", 5);
  EXPECT_EQ(Answered("BlockForward", "INTERNAL"), 1);
  EXPECT_EQ(Answered("BlockForward", "NOT_FOUND"), 1);
}

}  // namespace
}  // namespace layerserve
