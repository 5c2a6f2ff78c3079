// Chunked prefill (--prefill-chunk-tokens) through the real path: the real
// BlockForwardOp, Dispatch, Batcher (one worker, so the order of batches is the
// order of the queue) and RunServedBatch behind a real gRPC server on 127.0.0.1
// port 0, called through a real stub. The operation is observed after each batch
// (which job ran how many tokens), and the test acts between two chunks of a
// prefill: it sends a decode step, cancels the call, lets its deadline pass, or
// closes its session. Checked: a prefill in chunks equals the prefill run whole
// and is answered once; a decode step queued during a chunk runs beside the next
// one, each bit for bit as alone; a call cancelled or expired between chunks stops
// there and leaves its session as before the call; a session closed between chunks
// still gets its whole answer; prefills queued together run at most a chunk's
// tokens per batch, one after another in the order they came. Each with float32
// and with bfloat16 weights.
#include <grpcpp/grpcpp.h>
#include <prometheus/metric_family.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "layerserve/v1/layerserve.grpc.pb.h"
#include "server/models/model_repository.h"
#include "server/ops/block_forward.h"
#include "server/ops/worker_context.h"
#include "server/rpc/dispatch.h"
#include "server/sessions/session_store.h"
#include "tests/testing/loopback_server.h"
#include "tests/testing/wire_tensors.h"

namespace layerserve {
namespace {

using ::layerserve::testing::MakeTensor;
using ::layerserve::testing::TensorValues;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kChunk = 5;
constexpr int64_t kHidden = 512;  // The demo model's.
constexpr int kLayers = 2;

// One job's share of a batch the worker ran.
struct Part {
  std::string session;
  int64_t tokens = 0;
};

// What the worker ran, and the test's hook between parts. Shared by the worker and
// the test's threads.
class Observer {
 public:
  // Runs on the worker after each batch: logs it, then calls the hook, if any.
  void Ran(const std::vector<BlockForwardJob*>& jobs, const std::vector<int64_t>& parts) {
    std::vector<Part> batch;
    for (size_t j = 0; j < jobs.size(); ++j) {
      const std::vector<SessionLease>& sessions = jobs[j]->sessions;
      batch.push_back({sessions.empty() ? "" : sessions.front().get()->id, parts[j]});
    }
    std::function<void(const std::vector<Part>&)> hook;
    {
      absl::MutexLock lock(&mu_);
      batches_.push_back(batch);
      hook = hook_;
    }
    if (hook) hook(batch);
  }

  void SetHook(std::function<void(const std::vector<Part>&)> hook) {
    absl::MutexLock lock(&mu_);
    hook_ = std::move(hook);
  }
  std::vector<std::vector<Part>> batches() const {
    absl::MutexLock lock(&mu_);
    return batches_;
  }
  // The tokens each batch ran of `session`, in order (batches without it left out).
  std::vector<int64_t> PartsOf(const std::string& session) const {
    std::vector<int64_t> parts;
    for (const auto& batch : batches()) {
      for (const Part& part : batch) {
        if (part.session == session) parts.push_back(part.tokens);
      }
    }
    return parts;
  }
  // Indices of the batches that held `session`.
  std::vector<size_t> BatchesOf(const std::string& session) const {
    std::vector<size_t> indices;
    const auto all = batches();
    for (size_t i = 0; i < all.size(); ++i) {
      for (const Part& part : all[i]) {
        if (part.session == session) indices.push_back(i);
      }
    }
    return indices;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::vector<Part>> batches_ ABSL_GUARDED_BY(mu_);
  std::function<void(const std::vector<Part>&)> hook_ ABSL_GUARDED_BY(mu_);
};

Observer* observer = nullptr;  // The running test's.

// The real BlockForward, observed after each batch.
struct ObservedBlockForwardOp : BlockForwardOp {
  static std::vector<OutputHealth> RunBatch(WorkerContext& worker,
                                            const std::vector<Job*>& jobs,
                                            const std::vector<Response*>& responses,
                                            const BatchAbandoned& abandoned) {
    std::vector<int64_t> parts;
    for (const Job* job : jobs) parts.push_back(job->PartTokens());
    std::vector<OutputHealth> health =
        BlockForwardOp::RunBatch(worker, jobs, responses, abandoned);
    observer->Ran(jobs, parts);
    return health;
  }
};

// BlockForward through ObservedBlockForwardOp on one worker; remembers each
// session call's server context, so a hook can wait for its cancellation.
class ChunkingService final : public v1::LayerService::CallbackService {
 public:
  ChunkingService(int64_t chunk_tokens, kernels::WeightType weights)
      : block_forward_{chunk_tokens},
        models_(ModelRepository::Demo(weights)),
        sessions_(SessionOptions{}, &metrics_),
        batcher_(
            BatchOptions{}, /*num_threads=*/1,
            [this](WorkerContext& worker, Batch& tasks) {
              RunServedBatch(worker, tasks, metrics_);
            },
            [this](int64_t depth) { depth_ = depth; }),
        dispatch_{&metrics_,
                  &calls_,
                  &draining_,
                  &batcher_,
                  ParseContext{models_.get(), &sessions_, &block_forward_},
                  /*max_request_elements=*/int64_t{1} << 26,
                  /*max_response_bytes=*/int64_t{256} << 20} {}

  grpc::ServerUnaryReactor* BlockForward(grpc::CallbackServerContext* context,
                                         const v1::BlockForwardRequest* request,
                                         v1::BlockForwardResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      contexts_[request->session_id()] = context;
    }
    return Dispatch<ObservedBlockForwardOp>(dispatch_, context, *request, response);
  }

  // The server context of the last call on `session`.
  grpc::CallbackServerContext* ContextOf(const std::string& session) {
    absl::MutexLock lock(&mu_);
    return contexts_[session];
  }
  void StopWorkers() { batcher_.Stop(); }
  Metrics& metrics() { return metrics_; }
  const CallTracker& calls() const { return calls_; }
  SessionStore& sessions() { return sessions_; }
  std::shared_ptr<const Model> model() const { return models_->default_model(); }
  // Tasks waiting in the batcher's queues.
  int64_t depth() const { return depth_.load(); }

 private:
  const BlockForwardOptions block_forward_;
  Metrics metrics_;
  CallTracker calls_;
  std::atomic<bool> draining_{false};
  std::unique_ptr<ModelRepository> models_;
  SessionStore sessions_;
  std::atomic<int64_t> depth_{0};
  Batcher<WorkerContext> batcher_;
  const DispatchContext dispatch_;
  absl::Mutex mu_;
  std::map<std::string, grpc::CallbackServerContext*> contexts_ ABSL_GUARDED_BY(mu_);
};

// Waits, at most 30 s, until `done()`; false if it never was.
bool WaitUntil(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

std::vector<float> Hidden(int64_t tokens, int seed) {
  std::vector<float> x(tokens * kHidden);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i + seed);
  return x;
}

v1::BlockForwardRequest SessionCall(const std::string& session,
                                    const std::vector<float>& x) {
  v1::BlockForwardRequest request;
  request.set_session_id(session);
  request.set_want_attention_stats(true);
  *request.mutable_hidden_states() =
      MakeTensor({static_cast<int64_t>(x.size()) / kHidden, kHidden}, x);
  return request;
}

// |got - want| <= 1e-4 * max(1, |want|), the sessions' tolerance for the same sums
// in another order.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  int reported = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= 1e-4f * std::max(1.0f, std::fabs(want[i]))) &&
        reported++ < 5) {
      ADD_FAILURE() << "[" << i << "]: got " << got[i] << ", want " << want[i];
    }
  }
}

// Float32 weights, and bfloat16, whose decode steps and prefill chunks share each
// product of a batch where the CPU gives a row the same bits through both kinds of
// call (kernels::LinearWeights::calls_share_bits).
class ChunkedPrefillTest : public ::testing::TestWithParam<kernels::WeightType> {
 protected:
  void SetUp() override {
    observer = &observer_;
    service_ = std::make_unique<ChunkingService>(kChunk, GetParam());
    server_ = std::make_unique<testing::LoopbackServer>(service_.get());
    ASSERT_TRUE(server_->started());
    stub_ = v1::LayerService::NewStub(server_->NewInsecureChannel());
  }

  void TearDown() override {
    observer_.SetHook(nullptr);
    if (server_) server_->Shutdown();
    if (service_) service_->StopWorkers();
    observer = nullptr;
  }

  std::string Open() {
    return *service_->sessions().Open(service_->model(), 0, kLayers, 0);
  }

  grpc::Status Call(const v1::BlockForwardRequest& request,
                    v1::BlockForwardResponse* response,
                    grpc::ClientContext* context = nullptr) {
    grpc::ClientContext own;
    if (context == nullptr) {
      context = &own;
      context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    }
    return stub_->BlockForward(context, request, response);
  }

  // The calls of `x`'s tokens, cut as `cuts` says, on a fresh session of a server
  // that runs every call whole (the same kernels, called in-process): the
  // reference.
  std::vector<v1::BlockForwardResponse> Whole(const std::vector<float>& x,
                                              const std::vector<int64_t>& cuts) {
    SessionStore store(SessionOptions{}, nullptr);
    const std::string id = *store.Open(models_->default_model(), 0, kLayers, 0);
    WorkerContext worker;
    std::vector<v1::BlockForwardResponse> responses;
    int64_t start = 0;
    for (int64_t tokens : cuts) {
      const v1::BlockForwardRequest request =
          SessionCall(id, std::vector<float>(x.begin() + start * kHidden,
                                             x.begin() + (start + tokens) * kHidden));
      absl::StatusOr<BlockForwardJob> job =
          ParseBlockForwardRequest(request, *models_, &store, /*prefill_chunk_tokens=*/0);
      EXPECT_TRUE(job.ok()) << job.status();
      responses.emplace_back();
      RunBlockForward(worker.block, *job, &responses.back());
      BlockForwardOp::End(*job, JobOutcome::kComputed);
      start += tokens;
    }
    return responses;
  }

  // requests_total{method=BlockForward, code}.
  double Answered(const std::string& code) {
    return Sample("layerserve_requests_total",
                  {{"method", "BlockForward"}, {"code", code}});
  }
  // The sample count of histogram `name`, or a counter's value, summed over the
  // series whose labels include `want`.
  double Sample(const std::string& name, const std::map<std::string, std::string>& want) {
    double sum = 0;
    for (const prometheus::MetricFamily& family :
         service_->metrics().registry()->Collect()) {
      if (family.name != name) continue;
      for (const prometheus::ClientMetric& metric : family.metric) {
        std::map<std::string, std::string> labels;
        for (const auto& label : metric.label) labels[label.name] = label.value;
        bool match = true;
        for (const auto& [k, v] : want) match = match && labels[k] == v;
        if (!match) continue;
        // Summed: a BlockForward of a served model is in its model's series.
        sum += family.type == prometheus::MetricType::Histogram
                   ? static_cast<double>(metric.histogram.sample_count)
                   : metric.counter.value;
      }
    }
    return sum;
  }
  double CountOf(const std::string& histogram) {
    return Sample(histogram, {{"method", "BlockForward"}});
  }

  void AwaitAnswered() {
    EXPECT_TRUE(service_->calls().AwaitIdle(absl::ZeroDuration(),
                                            absl::Now() + absl::Seconds(30)));
  }

  Observer observer_;
  std::unique_ptr<ModelRepository> models_ = ModelRepository::Demo(GetParam());
  std::unique_ptr<ChunkingService> service_;
  std::unique_ptr<testing::LoopbackServer> server_;
  std::unique_ptr<v1::LayerService::Stub> stub_;
};

// 23 tokens run as chunks of 5, 5, 5, 5 and 3, answered once with what the call
// run whole answers (outputs, attention stats, session length), counted once; a
// decode step after it matches too.
TEST_P(ChunkedPrefillTest, ChunksEqualTheWholePrefillAndAreAnsweredOnce) {
  const std::string id = Open();
  const std::vector<float> x = Hidden(24, 1);
  const std::vector<v1::BlockForwardResponse> want = Whole(x, {23, 1});

  v1::BlockForwardResponse prefill, step;
  grpc::Status status = Call(
      SessionCall(id, std::vector<float>(x.begin(), x.begin() + 23 * kHidden)), &prefill);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(observer_.PartsOf(id), ElementsAre(5, 5, 5, 5, 3));
  EXPECT_EQ(prefill.session_length(), 23);
  EXPECT_THAT(prefill.hidden_states().shape(), ElementsAre(23, kHidden));
  ExpectClose(TensorValues(prefill.hidden_states()),
              TensorValues(want[0].hidden_states()));
  ASSERT_EQ(prefill.attention_stats_size(), kLayers);
  for (int l = 0; l < kLayers; ++l) {
    EXPECT_EQ(prefill.attention_stats(l).layer(), l);
    const auto& got = prefill.attention_stats(l).head_entropy_nats();
    const auto& expected = want[0].attention_stats(l).head_entropy_nats();
    ASSERT_EQ(got.size(), expected.size());
    for (int h = 0; h < got.size(); ++h) EXPECT_NEAR(got[h], expected[h], 1e-4);
  }

  status =
      Call(SessionCall(id, std::vector<float>(x.begin() + 23 * kHidden, x.end())), &step);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(step.session_length(), 24);
  ExpectClose(TensorValues(step.hidden_states()), TensorValues(want[1].hidden_states()));

  AwaitAnswered();
  EXPECT_EQ(Answered("OK"), 2);
  EXPECT_EQ(CountOf("layerserve_batch_size"), 6) << "5 chunks, 1 step";
  EXPECT_EQ(CountOf("layerserve_compute_duration_seconds"), 2) << "once per call";
  EXPECT_EQ(CountOf("layerserve_queue_duration_seconds"), 2);
  EXPECT_EQ(CountOf("layerserve_request_duration_seconds"), 2);
  EXPECT_EQ(Sample("layerserve_session_tokens_total", {{"phase", "prefill"}}), 23);
  EXPECT_EQ(Sample("layerserve_session_tokens_total", {{"phase", "decode"}}), 1);
}

// Sends `request` on its own thread; joined (and its status ready) by Join().
class AsyncCall {
 public:
  AsyncCall(v1::LayerService::Stub* stub, v1::BlockForwardRequest request,
            absl::Duration deadline = absl::Seconds(60))
      : request_(std::move(request)) {
    context_.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    thread_ = std::thread(
        [this, stub] { status_ = stub->BlockForward(&context_, request_, &response_); });
  }
  ~AsyncCall() { Join(); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  grpc::ClientContext& context() { return context_; }
  const grpc::Status& status() const { return status_; }
  const v1::BlockForwardResponse& response() const { return response_; }

 private:
  const v1::BlockForwardRequest request_;
  grpc::ClientContext context_;
  v1::BlockForwardResponse response_;
  grpc::Status status_;
  std::thread thread_;
};

// A hook that, after the first chunk of `session`'s prefill, runs `between` (on
// the worker, before the chunk's task goes back to the queue) once.
std::function<void(const std::vector<Part>&)> AfterFirstChunk(
    const std::string& session, std::function<void()> between) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  return [session, between, done](const std::vector<Part>& batch) {
    for (const Part& part : batch) {
      if (part.session == session && !done->exchange(true)) between();
    }
  };
}

// One worker: while the prefill's first chunk runs, a decode step of another
// session is queued; it runs in the next batch, beside the prefill's next chunk
// (not after its last), and both get what they get alone, bit for bit.
TEST_P(ChunkedPrefillTest, DecodeStepQueuedDuringAChunkRunsBesideTheNext) {
  const std::string decoding = Open(), prefilling = Open();
  const std::string decoding_alone = Open(), prefilling_alone = Open();
  const std::vector<float> history = Hidden(3, 2), step_x = Hidden(1, 4),
                           prompt = Hidden(50, 3);
  v1::BlockForwardResponse response;
  for (const std::string& s : {decoding, decoding_alone}) {
    ASSERT_TRUE(Call(SessionCall(s, history), &response).ok());
  }

  std::atomic<bool> first_chunk_ran{false};
  observer_.SetHook(AfterFirstChunk(prefilling, [&] {
    first_chunk_ran = true;
    // The step is queued (the prefill is not: it runs here).
    EXPECT_TRUE(WaitUntil([&] { return service_->depth() >= 1; }));
  }));
  AsyncCall prefill(stub_.get(), SessionCall(prefilling, prompt));
  ASSERT_TRUE(WaitUntil([&] { return first_chunk_ran.load(); }));
  AsyncCall step(stub_.get(), SessionCall(decoding, step_x));
  step.Join();
  prefill.Join();
  ASSERT_TRUE(step.status().ok()) << step.status().error_message();
  ASSERT_TRUE(prefill.status().ok()) << prefill.status().error_message();
  EXPECT_EQ(step.response().session_length(), 4);
  EXPECT_EQ(prefill.response().session_length(), 50);

  const std::vector<size_t> steps = observer_.BatchesOf(decoding);
  const std::vector<size_t> chunks = observer_.BatchesOf(prefilling);
  ASSERT_EQ(steps.size(), 2u);  // The 3-token prefill, then the step.
  ASSERT_EQ(chunks.size(), 10u);
  EXPECT_EQ(steps[1], chunks[1]) << "the step ran in one batch with the second chunk";
  EXPECT_EQ(observer_.PartsOf(decoding), (std::vector<int64_t>{3, 1}));

  observer_.SetHook(nullptr);
  v1::BlockForwardResponse step_alone, prefill_alone;
  ASSERT_TRUE(Call(SessionCall(decoding_alone, step_x), &step_alone).ok());
  ASSERT_TRUE(Call(SessionCall(prefilling_alone, prompt), &prefill_alone).ok());
  EXPECT_EQ(step.response().hidden_states().data(), step_alone.hidden_states().data());
  EXPECT_EQ(prefill.response().hidden_states().data(),
            prefill_alone.hidden_states().data());
}

// Cancelled between chunks: the rest is not computed, the call is answered
// CANCELLED once, and the session is as before the call (its length, its bytes):
// the same prefill sent again gives what a fresh session gives, bit for bit.
TEST_P(ChunkedPrefillTest, CancelledBetweenChunksStopsAndLeavesTheSessionAsItWas) {
  const std::string id = Open(), fresh = Open();
  const std::vector<float> history = Hidden(3, 5), prompt = Hidden(70, 6);
  v1::BlockForwardResponse response;
  for (const std::string& s : {id, fresh}) {
    ASSERT_TRUE(Call(SessionCall(s, history), &response).ok());
  }
  const int64_t bytes_before = service_->sessions().bytes();

  std::atomic<bool> first_chunk_ran{false};
  observer_.SetHook(AfterFirstChunk(id, [&] {
    first_chunk_ran = true;
    grpc::CallbackServerContext* context = service_->ContextOf(id);
    EXPECT_TRUE(WaitUntil([&] { return context->IsCancelled(); }));
  }));
  {
    AsyncCall prefill(stub_.get(), SessionCall(id, prompt));
    ASSERT_TRUE(WaitUntil([&] { return first_chunk_ran.load(); }));
    prefill.context().TryCancel();
    prefill.Join();
    EXPECT_EQ(prefill.status().error_code(), grpc::StatusCode::CANCELLED);
  }
  AwaitAnswered();
  EXPECT_EQ(Answered("CANCELLED"), 1);
  EXPECT_THAT(observer_.PartsOf(id), ElementsAre(3, 5)) << "stopped after one chunk";
  EXPECT_EQ(service_->sessions().bytes(), bytes_before) << "its blocks and reservation";

  observer_.SetHook(nullptr);
  v1::BlockForwardResponse again, reference;
  ASSERT_TRUE(Call(SessionCall(id, prompt), &again).ok());
  ASSERT_TRUE(Call(SessionCall(fresh, prompt), &reference).ok());
  EXPECT_EQ(again.session_length(), 73);
  EXPECT_EQ(again.hidden_states().data(), reference.hidden_states().data());
  const std::vector<float> next = Hidden(1, 7);
  ASSERT_TRUE(Call(SessionCall(id, next), &again).ok());
  ASSERT_TRUE(Call(SessionCall(fresh, next), &reference).ok());
  EXPECT_EQ(again.hidden_states().data(), reference.hidden_states().data());
}

// The deadline passes between chunks: DEADLINE_EXCEEDED, the rest not computed,
// the session as before.
TEST_P(ChunkedPrefillTest, ExpiredBetweenChunksStops) {
  const std::string id = Open();
  observer_.SetHook(AfterFirstChunk(id, [&] {
    grpc::CallbackServerContext* context = service_->ContextOf(id);
    EXPECT_TRUE(WaitUntil([&] {
      return context->IsCancelled() &&
             std::chrono::system_clock::now() >= context->deadline();
    }));
  }));
  {
    AsyncCall prefill(stub_.get(), SessionCall(id, Hidden(40, 8)), absl::Seconds(3));
    prefill.Join();
    EXPECT_EQ(prefill.status().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  AwaitAnswered();
  EXPECT_EQ(Answered("DEADLINE_EXCEEDED"), 1);
  EXPECT_THAT(observer_.PartsOf(id), ElementsAre(5));
  EXPECT_EQ(service_->sessions().bytes(), 0);
  observer_.SetHook(nullptr);
  v1::BlockForwardResponse response;
  ASSERT_TRUE(Call(SessionCall(id, Hidden(2, 9)), &response).ok());
  EXPECT_EQ(response.session_length(), 2) << "the stopped chunk is not in the cache";
}

// A session closed while its prefill runs (between chunks): the call holds the
// session, so it finishes and is answered whole; the session is gone after.
TEST_P(ChunkedPrefillTest, SessionClosedBetweenChunksStillAnswersTheWholePrefill) {
  const std::string id = Open(), fresh = Open();
  const std::vector<float> prompt = Hidden(17, 10);
  observer_.SetHook(
      AfterFirstChunk(id, [&] { EXPECT_TRUE(service_->sessions().Close(id).ok()); }));
  v1::BlockForwardResponse closed, reference;
  ASSERT_TRUE(Call(SessionCall(id, prompt), &closed).ok());
  EXPECT_THAT(observer_.PartsOf(id), ElementsAre(5, 5, 5, 2));
  observer_.SetHook(nullptr);
  ASSERT_TRUE(Call(SessionCall(fresh, prompt), &reference).ok());
  EXPECT_EQ(closed.hidden_states().data(), reference.hidden_states().data());
  EXPECT_EQ(closed.session_length(), 17);

  const grpc::Status next = Call(SessionCall(id, Hidden(1, 11)), &closed);
  EXPECT_EQ(next.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(next.error_message(), HasSubstr("was closed"));
  EXPECT_EQ(service_->sessions().active(), 1);
  ASSERT_TRUE(service_->sessions().Close(fresh).ok());
  EXPECT_EQ(service_->sessions().bytes(), 0);
}

// Prefills queued together run at most a chunk's tokens per batch, one after
// another (not taking turns), and each gets what it gets alone, bit for bit.
TEST_P(ChunkedPrefillTest, PrefillsQueuedTogetherRunAChunkPerBatch) {
  const std::string first = Open();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(Open());
  std::vector<std::string> alone;
  for (int i = 0; i < 3; ++i) alone.push_back(Open());

  observer_.SetHook(AfterFirstChunk(
      first, [&] { EXPECT_TRUE(WaitUntil([&] { return service_->depth() >= 3; })); }));
  std::vector<std::unique_ptr<AsyncCall>> calls;
  calls.push_back(
      std::make_unique<AsyncCall>(stub_.get(), SessionCall(first, Hidden(12, 20))));
  ASSERT_TRUE(WaitUntil([&] { return !observer_.batches().empty(); }));
  for (int i = 0; i < 3; ++i) {
    calls.push_back(std::make_unique<AsyncCall>(stub_.get(),
                                                SessionCall(ids[i], Hidden(12, 21 + i))));
  }
  for (auto& call : calls) call->Join();
  for (auto& call : calls) {
    ASSERT_TRUE(call->status().ok()) << call->status().error_message();
  }
  for (const auto& batch : observer_.batches()) {
    int64_t rows = 0;
    for (const Part& part : batch) rows += part.tokens;
    EXPECT_LE(rows, kChunk);
  }
  // The prefill going on goes on first: its chunks before the others' first; and
  // each of the others finishes before the next begins, in the order they came
  // (which the three calls' threads decide: the order of their first chunks).
  EXPECT_LT(observer_.BatchesOf(first).back(), observer_.BatchesOf(ids[0]).front());
  std::vector<std::vector<size_t>> batches_of;
  for (const std::string& id : ids) batches_of.push_back(observer_.BatchesOf(id));
  std::sort(batches_of.begin(), batches_of.end());
  for (size_t i = 0; i + 1 < batches_of.size(); ++i) {
    EXPECT_LT(batches_of[i].back(), batches_of[i + 1].front()) << i;
  }
  observer_.SetHook(nullptr);
  for (int i = 0; i < 3; ++i) {
    v1::BlockForwardResponse response;
    ASSERT_TRUE(Call(SessionCall(alone[i], Hidden(12, 21 + i)), &response).ok());
    EXPECT_EQ(calls[i + 1]->response().hidden_states().data(),
              response.hidden_states().data())
        << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Weights, ChunkedPrefillTest,
                         ::testing::Values(kernels::WeightType::kFloat32,
                                           kernels::WeightType::kBfloat16),
                         [](const ::testing::TestParamInfo<kernels::WeightType>& info) {
                           return info.param == kernels::WeightType::kFloat32
                                      ? "float32"
                                      : "bfloat16";
                         });

}  // namespace
}  // namespace layerserve
