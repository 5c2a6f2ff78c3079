// BlockForwardOp, what the dispatcher needs of BlockForward (server/ops/
// block_forward.h): the gather rule, the batch keys, never inline, how a job's
// end releases its session lease (a failed step closes the session), and a batch
// that stops between layers once its calls are gone.
#include <deque>
#include <limits>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/models/model_repository.h"
#include "server/ops/block_forward.h"
#include "server/ops/worker_context.h"
#include "server/sessions/session_store.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wire_tensors.h"

namespace layerserve {
namespace {

using ::layerserve::testing::MakeTensor;
using ::layerserve::testing::StatusIs;
using ::testing::HasSubstr;

// Only session steps whose weights outgrow the last-level cache gather; stateless
// requests never do.
TEST(BlockForwardGathersTest, OnlySessionStepsOfWeightsBeyondTheCache) {
  constexpr int64_t kCache = 32 << 20;
  EXPECT_FALSE(BlockForwardGathers(/*session_step=*/false, 45 << 20, kCache));
  EXPECT_FALSE(BlockForwardGathers(false, 45 << 20, /*last_level_cache_bytes=*/0));
  EXPECT_FALSE(BlockForwardGathers(true, 23 << 20, kCache));
  EXPECT_FALSE(BlockForwardGathers(true, kCache, kCache));
  EXPECT_TRUE(BlockForwardGathers(true, kCache + 1, kCache));
  EXPECT_TRUE(BlockForwardGathers(true, 1, /*last_level_cache_bytes=*/0));  // Unknown.
}

class BlockForwardOpTest : public ::testing::Test {
 protected:
  BlockForwardOpTest() {
    SessionOptions options;
    options.replica = "replica-a";
    sessions_ = std::make_unique<SessionStore>(options, nullptr);
  }

  absl::StatusOr<BlockForwardJob> Parse(int64_t tokens, const std::string& session_id,
                                        int64_t layers = 1, int64_t chunk_tokens = 0,
                                        int64_t first_token = 0) {
    v1::BlockForwardRequest request;
    request.set_num_layers(layers);
    request.set_session_id(session_id);
    // Token t of a sequence holds values of its own (0.5 everywhere would give
    // every row one result and hide a row computed twice or not at all).
    std::vector<float> values(tokens * 512);
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = 0.01f * static_cast<float>((first_token * 512 + i) % 97) - 0.5f;
    }
    *request.mutable_hidden_states() =
        MakeTensor({tokens, 512}, values, ElementType::kFloat32);
    requests_.push_back(request);
    const BlockForwardOptions options{chunk_tokens};
    return BlockForwardOp::Parse(requests_.back(),
                                 ParseContext{models_.get(), sessions_.get(), &options});
  }

  std::unique_ptr<ModelRepository> models_ =
      ModelRepository::Demo(kernels::WeightType::kFloat32);
  std::unique_ptr<SessionStore> sessions_;
  std::deque<v1::BlockForwardRequest> requests_;  // The jobs view them.
};

TEST_F(BlockForwardOpTest, StatelessStepsAndSequencesQueueApartAndNeverInline) {
  absl::StatusOr<BlockForwardJob> step = Parse(1, "", 2);
  absl::StatusOr<BlockForwardJob> sequence = Parse(kernels::kShortSequenceTokens + 1, "");
  ASSERT_TRUE(step.ok() && sequence.ok());
  EXPECT_EQ(BlockForwardOp::BatchKey(*step), "BlockForward/demo/v1/0/2/causal/steps");
  EXPECT_EQ(BlockForwardOp::BatchKey(*sequence),
            "BlockForward/demo/v1/0/1/causal/sequences");
  EXPECT_EQ(BlockForwardOp::Rows(*sequence), kernels::kShortSequenceTokens + 1);
  EXPECT_FALSE(BlockForwardOp::MayRunInline(*step));
  EXPECT_FALSE(BlockForwardOp::Gathers(*step)) << "stateless";
}

TEST_F(BlockForwardOpTest, EndReleasesTheLeaseAndAFailedStepClosesTheSession) {
  const std::string id = *sessions_->Open(models_->default_model(), 0, 1, 0);
  absl::StatusOr<BlockForwardJob> job = Parse(2, id);
  ASSERT_TRUE(job.ok());
  EXPECT_THAT(Parse(1, id), StatusIs(absl::StatusCode::kAborted, HasSubstr("in use")));
  BlockForwardOp::End(*job, JobOutcome::kNotComputed);
  job = Parse(2, id);
  ASSERT_TRUE(job.ok()) << "free again";
  BlockForwardOp::End(*job, JobOutcome::kFailed);
  EXPECT_THAT(Parse(1, id), StatusIs(absl::StatusCode::kNotFound,
                                     HasSubstr("a call on it failed part-way")));
}

// --prefill-chunk-tokens=5: a session call of more tokens runs 5 at a time under
// its call's key, and any session prefill bounds its batch's prefill tokens to 5;
// session calls, steps and prefills, share a key, in which steps go first; decode
// steps and calls without a session are neither cut nor bounded.
TEST_F(BlockForwardOpTest, LongSessionPrefillsRunInChunksThatBoundTheirBatch) {
  constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();
  const std::string id = *sessions_->Open(models_->default_model(), 0, 1, 0);
  absl::StatusOr<BlockForwardJob> job = Parse(12, id, 1, /*chunk_tokens=*/5);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->InChunks());
  EXPECT_EQ(BlockForwardOp::Rows(*job), 5);
  EXPECT_EQ(BlockForwardOp::MaxBatchRows(*job), 5);
  EXPECT_FALSE(BlockForwardOp::Finished(*job));
  EXPECT_EQ(BlockForwardOp::BatchKey(*job), "BlockForward/demo/v1/0/1/causal/sessions");
  EXPECT_FALSE(BlockForwardOp::FirstInBatch(*job));
  job->done = 10;  // As after two chunks: the last is the rest.
  EXPECT_EQ(BlockForwardOp::Rows(*job), 2);
  job->done = 12;
  EXPECT_TRUE(BlockForwardOp::Finished(*job));
  BlockForwardOp::End(*job, JobOutcome::kComputed);

  job = Parse(5, id, 1, 5);  // Within one chunk: whole, but its batch bounded.
  ASSERT_TRUE(job.ok());
  EXPECT_FALSE(job->InChunks());
  EXPECT_EQ(BlockForwardOp::Rows(*job), 5);
  EXPECT_EQ(BlockForwardOp::MaxBatchRows(*job), 5);
  BlockForwardOp::End(*job, JobOutcome::kNotComputed);

  job = Parse(1, id, 1, 5);  // A decode step batches with every session's.
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(BlockForwardOp::MaxBatchRows(*job), kUnbounded);
  EXPECT_TRUE(BlockForwardOp::FirstInBatch(*job));
  EXPECT_EQ(BlockForwardOp::BatchKey(*job), "BlockForward/demo/v1/0/1/causal/sessions");
  BlockForwardOp::End(*job, JobOutcome::kNotComputed);

  job = Parse(12, "", 1, 5);  // No session, no cache to attend over: whole.
  ASSERT_TRUE(job.ok());
  EXPECT_FALSE(job->InChunks());
  EXPECT_EQ(BlockForwardOp::Rows(*job), 12);
  EXPECT_EQ(BlockForwardOp::MaxBatchRows(*job), kUnbounded);
  EXPECT_FALSE(BlockForwardOp::FirstInBatch(*job));
}

// Once every call of a batch is gone, it stops before its next layer: no job
// advances, a session's cache keeps only what earlier calls committed, and after
// End(kStopped) the session computes the same call again as if it had never begun.
TEST_F(BlockForwardOpTest, AnAbandonedBatchStopsBetweenLayersAndLeavesItsSessionAsItWas) {
  constexpr int64_t kLayers = 4, kPast = 6, kTokens = 70;  // 76 tokens: two KV blocks.
  WorkerContext worker;
  auto run = [&](BlockForwardJob& job, v1::BlockForwardResponse* response,
                 const BatchAbandoned& abandoned) {
    return BlockForwardOp::RunBatch(worker, {&job}, {response}, abandoned);
  };
  // A session that cached kPast tokens, then a call of kTokens more that stops.
  auto session_with_past = [&] {
    const std::string id = *sessions_->Open(models_->default_model(), 0, kLayers, 0);
    absl::StatusOr<BlockForwardJob> past = Parse(kPast, id, kLayers);
    EXPECT_TRUE(past.ok()) << past.status();
    v1::BlockForwardResponse response;
    run(*past, &response, nullptr);
    EXPECT_TRUE(BlockForwardOp::Finished(*past));
    BlockForwardOp::End(*past, JobOutcome::kComputed);
    return id;
  };
  const std::string id = session_with_past();
  absl::StatusOr<BlockForwardJob> job = Parse(kTokens, id, kLayers, 0, kPast);
  ASSERT_TRUE(job.ok()) << job.status();
  const kernels::KvCache& cache = job->sessions.front().get()->cache;
  const int64_t bytes_before = cache.bytes();
  int asked = 0;
  v1::BlockForwardResponse stopped;
  run(*job, &stopped, [&] { return ++asked == 2; });  // Gone during layer 1.
  EXPECT_EQ(asked, 2) << "asked before layers 1 and 2, and stopped there";
  EXPECT_FALSE(BlockForwardOp::Finished(*job));
  EXPECT_EQ(job->done, 0);
  EXPECT_FALSE(stopped.has_hidden_states());
  EXPECT_EQ(cache.length(), kPast) << "nothing of the stopped call committed";
  BlockForwardOp::End(*job, JobOutcome::kStopped);

  // The same call again on that session, and on one that never saw a stop.
  job = Parse(kTokens, id, kLayers, 0, kPast);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->sessions.front().get()->cache.bytes(), bytes_before);
  v1::BlockForwardResponse again;
  run(*job, &again, [] { return false; });
  ASSERT_TRUE(BlockForwardOp::Finished(*job));
  BlockForwardOp::End(*job, JobOutcome::kComputed);
  absl::StatusOr<BlockForwardJob> fresh =
      Parse(kTokens, session_with_past(), kLayers, 0, kPast);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  v1::BlockForwardResponse expected;
  run(*fresh, &expected, nullptr);
  BlockForwardOp::End(*fresh, JobOutcome::kComputed);
  EXPECT_EQ(again.hidden_states().data(), expected.hidden_states().data());
  EXPECT_EQ(again.session_length(), kPast + kTokens);

  // A stateless call is asked before each layer after the first, and stops too.
  absl::StatusOr<BlockForwardJob> stateless = Parse(kTokens, "", kLayers);
  ASSERT_TRUE(stateless.ok()) << stateless.status();
  asked = 0;
  v1::BlockForwardResponse none;
  run(*stateless, &none, [&] { return ++asked > 0; });
  EXPECT_EQ(asked, 1);
  EXPECT_FALSE(BlockForwardOp::Finished(*stateless));
  asked = 0;
  run(*stateless, &none, [&] { return ++asked < 0; });
  EXPECT_EQ(asked, kLayers - 1);
  EXPECT_TRUE(BlockForwardOp::Finished(*stateless));
}

}  // namespace
}  // namespace layerserve
