// SessionStore with a fake clock: leases, expiry, LRU eviction under the byte cap,
// closing, and the NOT_FOUND messages that tell a client what happened.
#include "server/sessions/session_store.h"

#include <vector>

#include "common/retry_delay.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace layerserve {
namespace {

using ::layerserve::testing::StatusIs;
using ::testing::HasSubstr;

absl::Time fake_now = absl::FromUnixSeconds(1'800'000'000);
absl::Time FakeNow() { return fake_now; }

class SessionStoreTest : public ::testing::Test {
 protected:
  SessionStore MakeStore(int64_t max_bytes) {
    SessionOptions options;
    options.max_bytes = max_bytes;
    options.ttl = absl::Seconds(60);
    options.replica = "replica-a";
    return SessionStore(options, nullptr);
  }

  // Runs a call that adds `tokens` to the leased session, as a worker would.
  static void Compute(SessionLease lease, int64_t tokens) {
    kernels::KvCache& cache = lease.get()->cache;
    std::vector<float> rows(tokens * cache.width());
    for (int64_t layer = 0; layer < cache.layers(); ++layer) {
      cache.Append(layer, rows.data(), rows.data(), cache.width(), tokens);
    }
    cache.Commit(tokens);
    lease.Release(/*computed=*/true);
  }

  // Bytes one block of 64 tokens takes in every layer of a one-layer demo session.
  int64_t BlockBytes() const {
    return 2 * kernels::kKvBlockTokens * model_->block.num_kv_heads *
           model_->block.head_dim * 4;
  }

  std::unique_ptr<ModelRepository> models_ =
      ModelRepository::Demo(kernels::WeightType::kFloat32);
  const std::shared_ptr<const Model> model_ = models_->default_model();
};

TEST_F(SessionStoreTest, LeaseAppendsAndFreesTheSessionForTheNextCall) {
  SessionStore store = MakeStore(int64_t{1} << 30);
  store.set_clock_for_testing(&FakeNow);
  absl::StatusOr<std::string> id = store.Open(model_, 0, 1, 0);
  ASSERT_TRUE(id.ok());
  EXPECT_THAT(*id, ::testing::StartsWith("replica-a."));
  absl::StatusOr<SessionLease> lease = store.Acquire(*id, 5);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(store.bytes(), BlockBytes()) << "reserved up front";
  EXPECT_THAT(store.Acquire(*id, 1), StatusIs(absl::StatusCode::kAborted,
                                              HasSubstr("is in use by another call")));
  Compute(std::move(*lease), 5);
  lease = store.Acquire(*id, 1);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->get()->cache.length(), 5);
  lease->Release(/*computed=*/false);
  EXPECT_EQ(store.bytes(), BlockBytes());
}

TEST_F(SessionStoreTest, UnusedReservationIsReturned) {
  SessionStore store = MakeStore(int64_t{1} << 30);
  const std::string id = *store.Open(model_, 0, 2, 0);
  {
    absl::StatusOr<SessionLease> lease = store.Acquire(id, 65);
    ASSERT_TRUE(lease.ok());
    EXPECT_EQ(store.bytes(), 2 * 2 * BlockBytes());
  }  // Dropped without compute (deadline, cancellation).
  EXPECT_EQ(store.bytes(), 0);
  EXPECT_TRUE(store.Acquire(id, 1).ok());
}

TEST_F(SessionStoreTest, LengthPastMaxLengthIsOutOfRange) {
  SessionStore store = MakeStore(int64_t{1} << 30);
  const std::string id = *store.Open(model_, 0, 1, 8);
  Compute(*store.Acquire(id, 6), 6);
  EXPECT_THAT(store.Acquire(id, 3),
              StatusIs(absl::StatusCode::kOutOfRange,
                       "hidden_states: session \"" + id +
                           "\" holds 6 tokens; 3 more would pass its max_length 8"));
  EXPECT_TRUE(store.Acquire(id, 2).ok());
  EXPECT_THAT(
      store.Open(model_, 0, 1, model_->config.max_position_embeddings + 1),
      StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("max_position_embeddings")));
  EXPECT_THAT(store.Open(model_, 0, 1, -1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_length: -1")));
}

TEST_F(SessionStoreTest, IdleSessionsExpireAndSaySo) {
  SessionStore store = MakeStore(int64_t{1} << 30);
  store.set_clock_for_testing(&FakeNow);
  const std::string id = *store.Open(model_, 0, 1, 0);
  const std::string kept = *store.Open(model_, 0, 1, 0);
  Compute(*store.Acquire(id, 3), 3);
  fake_now += absl::Seconds(40);
  ASSERT_TRUE(store.Acquire(kept, 1).ok());  // Used: its clock restarts.
  fake_now += absl::Seconds(30);
  EXPECT_THAT(store.Acquire(id, 1),
              StatusIs(absl::StatusCode::kNotFound,
                       "session_id: session \"" + id +
                           "\" was expired after 1m without a call (--session-ttl); open "
                           "a new session and prefill again"));
  EXPECT_TRUE(store.Acquire(kept, 1).ok());
  EXPECT_EQ(store.active(), 1);
  EXPECT_EQ(store.bytes(), 0) << "the expired session's memory is returned";
}

TEST_F(SessionStoreTest, ByteCapEvictsTheLeastRecentlyUsedIdleSession) {
  SessionStore store = MakeStore(2 * BlockBytes());
  store.set_clock_for_testing(&FakeNow);
  const std::string a = *store.Open(model_, 0, 1, 0);
  const std::string b = *store.Open(model_, 0, 1, 0);
  const std::string c = *store.Open(model_, 0, 1, 0);
  Compute(*store.Acquire(a, 1), 1);
  fake_now += absl::Seconds(1);
  Compute(*store.Acquire(b, 1), 1);
  fake_now += absl::Seconds(1);
  Compute(*store.Acquire(a, 1), 1);  // a is now the most recent.
  fake_now += absl::Seconds(1);
  Compute(*store.Acquire(c, 1), 1);  // Needs a block: b goes.
  EXPECT_THAT(store.Acquire(b, 1),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("was evicted to free KV-cache memory")));
  EXPECT_TRUE(store.Acquire(a, 1).ok());
  EXPECT_EQ(store.bytes(), 2 * BlockBytes());
}

TEST_F(SessionStoreTest, CapThatBusySessionsFillIsResourceExhausted) {
  SessionStore store = MakeStore(BlockBytes());
  const std::string a = *store.Open(model_, 0, 1, 0);
  const std::string b = *store.Open(model_, 0, 1, 0);
  absl::StatusOr<SessionLease> held = store.Acquire(a, 1);
  ASSERT_TRUE(held.ok());
  const absl::Status full = store.Acquire(b, 1).status();
  EXPECT_THAT(full,
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("KV cache full")));
  // Room frees when a's call ends: worth retrying.
  EXPECT_EQ(RetryDelayOf(full), absl::Seconds(1));
  EXPECT_THAT(store.Acquire(a, 1), StatusIs(absl::StatusCode::kAborted, ::testing::_));
}

TEST_F(SessionStoreTest, AcquireAllLeasesEverySessionOrNone) {
  SessionStore store = MakeStore(8 * BlockBytes());
  const std::string a = *store.Open(model_, 0, 1, 0);
  const std::string b = *store.Open(model_, 0, 1, 0);
  const std::string c = *store.Open(model_, 0, 1, 0);
  absl::StatusOr<SessionLease> held = store.Acquire(b, 1);
  ASSERT_TRUE(held.ok());
  const int64_t bytes = store.bytes();
  EXPECT_THAT(
      store.AcquireAll(
          {{a, 1, "session_ids[0]"}, {b, 1, "session_ids[1]"}, {c, 1, "session_ids[2]"}}),
      StatusIs(absl::StatusCode::kAborted,
               HasSubstr("session_ids[1]: session \"" + b + "\" is in use")));
  EXPECT_EQ(store.bytes(), bytes) << "nothing reserved";
  held->Release(/*computed=*/false);
  absl::StatusOr<std::vector<SessionLease>> all = store.AcquireAll(
      {{a, 1, "session_ids[0]"}, {b, 2, "session_ids[1]"}, {c, 3, "session_ids[2]"}});
  ASSERT_TRUE(all.ok()) << all.status() << ": none was left leased";
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[1].get()->id, b);
  EXPECT_EQ(store.bytes(), 3 * BlockBytes());
  EXPECT_THAT(store.Acquire(c, 1), StatusIs(absl::StatusCode::kAborted, ::testing::_));
}

TEST_F(SessionStoreTest, MakingRoomNeverEvictsASessionOfTheSameCall) {
  SessionStore store = MakeStore(2 * BlockBytes());
  store.set_clock_for_testing(&FakeNow);
  const std::string a = *store.Open(model_, 0, 1, 0);
  const std::string b = *store.Open(model_, 0, 1, 0);
  const std::string c = *store.Open(model_, 0, 1, 0);
  Compute(*store.Acquire(a, 1), 1);  // a is the least recently used...
  fake_now += absl::Seconds(1);
  Compute(*store.Acquire(b, 1), 1);
  fake_now += absl::Seconds(1);
  // ...but it is in this call, whose new block for c evicts b instead.
  absl::StatusOr<std::vector<SessionLease>> all =
      store.AcquireAll({{c, 1, "session_ids[0]"}, {a, 1, "session_ids[1]"}});
  ASSERT_TRUE(all.ok()) << all.status();
  all->clear();
  EXPECT_THAT(store.Acquire(b, 1),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("was evicted")));
}

TEST_F(SessionStoreTest, AcquireAllNamesTheRowOfEachError) {
  SessionStore store = MakeStore(8 * BlockBytes());
  const std::string a = *store.Open(model_, 0, 1, /*max_length=*/2);
  EXPECT_THAT(store.AcquireAll({{a, 3, "session_ids[4]"}}),
              StatusIs(absl::StatusCode::kOutOfRange,
                       "session_ids[4]: session \"" + a +
                           "\" holds 0 tokens; 3 more would pass its max_length 2"));
  EXPECT_THAT(store.AcquireAll({{"replica-a.77", 1, "session_ids[2]"}}),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("session_ids[2]: session \"replica-a.77\" is unknown")));
}

TEST_F(SessionStoreTest, StepBiggerThanTheWholeCacheHasNoRetryDelay) {
  SessionStore store = MakeStore(BlockBytes());
  const std::string a = *store.Open(model_, 0, 1, 0);
  const absl::StatusOr<SessionLease> lease =
      store.Acquire(a, 2 * kernels::kKvBlockTokens);
  EXPECT_THAT(lease,
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("KV cache full")));
  EXPECT_EQ(RetryDelayOf(lease.status()), std::nullopt);
}

TEST_F(SessionStoreTest, CloseWhileInUseFreesWhenTheCallEnds) {
  SessionStore store = MakeStore(int64_t{1} << 30);
  const std::string id = *store.Open(model_, 0, 1, 0);
  absl::StatusOr<SessionLease> lease = store.Acquire(id, 4);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(store.Close(id).ok());
  EXPECT_EQ(store.active(), 0);
  EXPECT_EQ(store.bytes(), 0);
  Compute(std::move(*lease), 4);  // The running call finishes on its own copy.
  EXPECT_EQ(store.bytes(), 0);
  EXPECT_THAT(store.Close(id), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_THAT(store.Acquire(id, 1),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("was closed")));
}

// A call whose kernel threw may have appended its tokens to some layers, or
// committed them with no answer sent: the session is closed, not continued.
TEST_F(SessionStoreTest, FailedCallClosesItsSessionAndSaysToPrefillAgain) {
  SessionStore store = MakeStore(int64_t{1} << 30);
  const std::string id = *store.Open(model_, 0, 2, 0);
  const std::string other = *store.Open(model_, 0, 2, 0);
  Compute(*store.Acquire(id, 3), 3);
  Compute(*store.Acquire(other, 3), 3);
  absl::StatusOr<SessionLease> lease = store.Acquire(id, 1);
  ASSERT_TRUE(lease.ok());
  kernels::KvCache& cache = lease->get()->cache;
  std::vector<float> row(cache.width());
  cache.Append(0, row.data(), row.data(), cache.width(), 1);  // Layer 1 never came.
  lease->ReleaseFailed();
  EXPECT_FALSE(*lease);
  EXPECT_EQ(store.active(), 1);
  EXPECT_EQ(store.bytes(), 2 * BlockBytes()) << "the closed session's memory is returned";
  EXPECT_THAT(store.Acquire(id, 1),
              StatusIs(absl::StatusCode::kNotFound,
                       "session_id: session \"" + id +
                           "\" was closed by the server: a call on it failed part-way, "
                           "which may have left part of that call in its KV cache; open "
                           "a new session and prefill again"));
  EXPECT_TRUE(store.Acquire(other, 1).ok()) << "other sessions go on";
}

TEST_F(SessionStoreTest, FailedCallOnASessionClosedMeanwhileChangesNothing) {
  SessionStore store = MakeStore(int64_t{1} << 30);
  const std::string id = *store.Open(model_, 0, 1, 0);
  absl::StatusOr<SessionLease> lease = store.Acquire(id, 1);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(store.Close(id).ok());
  lease->ReleaseFailed();
  EXPECT_THAT(store.Acquire(id, 1),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("was closed;")));
}

TEST_F(SessionStoreTest, UnknownAndOtherReplicasSessionsAreNotFound) {
  SessionStore store = MakeStore(int64_t{1} << 30);
  EXPECT_THAT(store.Acquire("replica-a.ffff", 1),
              StatusIs(absl::StatusCode::kNotFound,
                       "session_id: session \"replica-a.ffff\" is unknown; open a new "
                       "session and prefill again"));
  EXPECT_THAT(store.Acquire("replica-b.12", 1),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("was not opened on this replica (\"replica-a\")")));
}

}  // namespace
}  // namespace layerserve
