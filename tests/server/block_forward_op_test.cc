// BlockForwardOp, what the dispatcher needs of BlockForward (server/ops/
// block_forward.h): the gather rule, the batch keys, never inline, and how a job's
// end releases its session lease (a failed step closes the session).
#include <deque>
#include <limits>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/models/model_repository.h"
#include "server/ops/block_forward.h"
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
                                        int64_t layers = 1, int64_t chunk_tokens = 0) {
    v1::BlockForwardRequest request;
    request.set_num_layers(layers);
    request.set_session_id(session_id);
    *request.mutable_hidden_states() = MakeTensor(
        {tokens, 512}, std::vector<float>(tokens * 512, 0.5f), ElementType::kFloat32);
    requests_.push_back(request);
    return BlockForwardOp::Parse(
        requests_.back(), ParseContext{models_.get(), sessions_.get(), chunk_tokens});
  }

  std::unique_ptr<ModelRepository> models_ =
      ModelRepository::Demo(kernels::WeightType::kFloat32);
  std::unique_ptr<SessionStore> sessions_;
  std::deque<v1::BlockForwardRequest> requests_;  // The jobs view them.
};

TEST_F(BlockForwardOpTest, StepsAndSequencesQueueApartAndNeverInline) {
  absl::StatusOr<BlockForwardJob> step = Parse(1, "", 2);
  absl::StatusOr<BlockForwardJob> sequence = Parse(kernels::kShortSequenceTokens + 1, "");
  ASSERT_TRUE(step.ok() && sequence.ok());
  EXPECT_EQ(BlockForwardOp::BatchKey(*step), "BlockForward/demo/0/2/causal/steps");
  EXPECT_EQ(BlockForwardOp::BatchKey(*sequence),
            "BlockForward/demo/0/1/causal/sequences");
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
// its call's key, and any session prefill bounds its batch to 5 tokens; decode
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
  EXPECT_EQ(BlockForwardOp::BatchKey(*job), "BlockForward/demo/0/1/causal/sequences");
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
  BlockForwardOp::End(*job, JobOutcome::kNotComputed);

  job = Parse(12, "", 1, 5);  // No session, no cache to attend over: whole.
  ASSERT_TRUE(job.ok());
  EXPECT_FALSE(job->InChunks());
  EXPECT_EQ(BlockForwardOp::Rows(*job), 12);
  EXPECT_EQ(BlockForwardOp::MaxBatchRows(*job), kUnbounded);
}

}  // namespace
}  // namespace layerserve
