// BatchQueues with a fake clock: time is a value the test moves, nothing sleeps.
#include "server/batching/batch_queues.h"

#include <limits>
#include <random>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace layerserve {
namespace {

using ::layerserve::testing::StatusIs;

class FakeTask : public BatchTask {
 public:
  FakeTask(int id, int64_t rows,
           int64_t max_batch_rows = std::numeric_limits<int64_t>::max(),
           bool resumed = false, bool first_in_batch = false)
      : id_(id),
        rows_(rows),
        max_batch_rows_(max_batch_rows),
        resumed_(resumed),
        first_in_batch_(first_in_batch) {}
  int64_t rows() const override { return rows_; }
  int64_t max_batch_rows() const override { return max_batch_rows_; }
  bool resumed() const override { return resumed_; }
  bool first_in_batch() const override { return first_in_batch_; }
  int id() const { return id_; }

 private:
  const int id_;
  const int64_t rows_;
  const int64_t max_batch_rows_;
  const bool resumed_;
  const bool first_in_batch_;
};

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

absl::Status Add(BatchQueues& queues, const std::string& key, int id, int64_t rows,
                 absl::Time now,
                 int64_t max_batch_rows = std::numeric_limits<int64_t>::max()) {
  std::unique_ptr<BatchTask> task = std::make_unique<FakeTask>(id, rows, max_batch_rows);
  absl::Status status = queues.Schedule(key, task, now);
  EXPECT_EQ(status.ok(), task == nullptr) << "ownership moves only on success";
  return status;
}

std::vector<int> Ids(const Batch& batch) {
  std::vector<int> ids;
  for (const auto& task : batch) ids.push_back(static_cast<const FakeTask&>(*task).id());
  return ids;
}

BatchOptions Options(int64_t rows, absl::Duration delay, int64_t size) {
  BatchOptions options;
  options.max_batch_rows = rows;
  options.max_queue_delay = delay;
  options.max_queue_size = size;
  return options;
}

TEST(BatchQueuesTest, BatchWaitsForTheDelayThenTakesEverythingThatFits) {
  BatchQueues queues(Options(10, absl::Microseconds(500), 100));
  ASSERT_TRUE(Add(queues, "k", 1, 3, kStart).ok());
  ASSERT_TRUE(Add(queues, "k", 2, 3, kStart + absl::Microseconds(100)).ok());
  EXPECT_EQ(queues.NextClose(), kStart + absl::Microseconds(500));
  EXPECT_FALSE(queues.TakeClosed(kStart + absl::Microseconds(499), false));
  auto closed = queues.TakeClosed(kStart + absl::Microseconds(500), false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->key, "k");
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{1, 2}));
  EXPECT_EQ(closed->rows, 6);
  EXPECT_EQ(closed->tasks[1]->enqueued(), kStart + absl::Microseconds(100));
  EXPECT_EQ(queues.size(), 0);
  EXPECT_EQ(queues.NextClose(), absl::InfiniteFuture());
}

TEST(BatchQueuesTest, FullBatchClosesAtOnceAndLeavesTheRest) {
  BatchQueues queues(Options(10, absl::Seconds(1), 100));
  ASSERT_TRUE(Add(queues, "k", 1, 4, kStart).ok());
  ASSERT_TRUE(Add(queues, "k", 2, 4, kStart).ok());
  EXPECT_FALSE(queues.TakeClosed(kStart, false));
  ASSERT_TRUE(Add(queues, "k", 3, 4, kStart).ok());  // 12 rows >= 10: closed now.
  EXPECT_LE(queues.NextClose(), kStart);
  auto closed = queues.TakeClosed(kStart, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{1, 2}));  // 3 would make 12 > 10.
  EXPECT_EQ(queues.size(), 1);
  // The rest waits for its own delay, from its own arrival.
  EXPECT_EQ(queues.NextClose(), kStart + absl::Seconds(1));
}

TEST(BatchQueuesTest, TaskLargerThanTheLimitRunsAlone) {
  BatchQueues queues(Options(10, absl::ZeroDuration(), 100));
  ASSERT_TRUE(Add(queues, "k", 1, 25, kStart).ok());
  ASSERT_TRUE(Add(queues, "k", 2, 1, kStart).ok());
  auto closed = queues.TakeClosed(kStart, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{1}));
  EXPECT_EQ(closed->rows, 25);
  closed = queues.TakeClosed(kStart, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{2}));
}

// A task's own bound (a chunked prefill's part) limits the batch it is in, whether
// it comes first or joins later; tasks without one batch up to max_batch_rows.
TEST(BatchQueuesTest, TaskBoundLimitsItsBatch) {
  BatchQueues queues(Options(100, absl::Seconds(1), 100));
  ASSERT_TRUE(Add(queues, "k", 1, 4, kStart, /*max_batch_rows=*/8).ok());
  EXPECT_EQ(queues.NextClose(), kStart + absl::Seconds(1)) << "4 rows < its bound 8";
  ASSERT_TRUE(Add(queues, "k", 2, 4, kStart, 8).ok());
  EXPECT_LE(queues.NextClose(), kStart) << "the first task's bound is reached";
  ASSERT_TRUE(Add(queues, "k", 3, 4, kStart, 8).ok());
  ASSERT_TRUE(Add(queues, "k", 4, 30, kStart).ok());
  ASSERT_TRUE(Add(queues, "k", 5, 5, kStart, 8).ok());
  ASSERT_TRUE(Add(queues, "k", 6, 20, kStart).ok());
  ASSERT_TRUE(Add(queues, "k", 7, 20, kStart).ok());
  auto closed = queues.TakeClosed(kStart, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{1, 2}));
  closed = queues.TakeClosed(kStart, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{3})) << "30 more rows pass its 8";
  // 75 rows left, under 100 and under 4's (no) bound: they close by age.
  EXPECT_FALSE(queues.TakeClosed(kStart, false));
  const absl::Time aged = kStart + absl::Seconds(1);
  closed = queues.TakeClosed(aged, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{4})) << "5 would join 30 rows";
  closed = queues.TakeClosed(aged, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{5}));
  closed = queues.TakeClosed(aged, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{6, 7})) << "unbounded: up to 100";
}

// A task queued again to go on (a chunked prefill's next chunk) goes ahead of its
// key's tasks that have not started, behind those going on already; another key's
// task that waited since before it still goes first.
TEST(BatchQueuesTest, ResumedTaskGoesAheadOfItsKeysNewTasksButNotOthersOlderOnes) {
  BatchQueues queues(Options(1, absl::ZeroDuration(), 100));
  const auto add = [&](const std::string& key, int id, absl::Time now, bool resumed) {
    std::unique_ptr<BatchTask> task =
        std::make_unique<FakeTask>(id, 1, std::numeric_limits<int64_t>::max(), resumed);
    ASSERT_TRUE(queues.Schedule(key, task, now).ok());
  };
  add("prefill", 1, kStart, false);
  add("prefill", 2, kStart + absl::Microseconds(1), false);
  add("step", 3, kStart + absl::Microseconds(2), false);
  add("prefill", 4, kStart + absl::Microseconds(3), /*resumed=*/true);
  add("prefill", 5, kStart + absl::Microseconds(4), /*resumed=*/true);
  add("step", 6, kStart + absl::Microseconds(5), false);
  std::vector<int> order;
  while (auto closed = queues.TakeClosed(kStart + absl::Seconds(1), false)) {
    for (int id : Ids(closed->tasks)) order.push_back(id);
  }
  // 3 waited since before 4 was queued again; 4 and 5 go before 1 and 2 then; 1
  // and 2 keep their own arrival, before 6's.
  EXPECT_EQ(order, (std::vector<int>{3, 4, 5, 1, 2, 6}));
}

// Decode steps (first_in_batch) beside prefills in parts (bound 8 each): a batch
// takes every step wherever it waits, then prefill rows up to their bound; the
// steps do not count toward that bound, only toward max_batch_rows. At least one
// prefill runs in each batch that has one waiting, however many steps wait, and
// prefills run in the order they started (a resumed part goes first).
TEST(BatchQueuesTest, StepsGoFirstThenPrefillRowsUpToTheirBound) {
  BatchQueues queues(Options(20, absl::ZeroDuration(), 100));
  const auto add = [&](int id, int64_t rows, int64_t bound, bool resumed, bool step) {
    std::unique_ptr<BatchTask> task =
        std::make_unique<FakeTask>(id, rows, bound, resumed, step);
    ASSERT_TRUE(queues.Schedule("k", task, kStart).ok());
  };
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  add(1, 8, 8, false, false);     // A prefill's first part,
  add(2, 1, kNone, false, true);  // steps,
  add(3, 8, 8, false, false);     // a second prefill,
  add(4, 2, kNone, false, true);
  add(5, 8, 8, /*resumed=*/true, false);  // a prefill's next part: ahead of 1 and 3.
  auto closed = queues.TakeClosed(kStart, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{2, 4, 5})) << "8 + 3 step rows";
  EXPECT_EQ(closed->rows, 11);
  closed = queues.TakeClosed(kStart, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{1}));

  // Steps filling max_batch_rows: the prefill's part still runs beside them.
  for (int id = 10; id < 30; ++id) add(id, 1, kNone, false, true);
  closed = queues.TakeClosed(kStart, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->tasks.size(), 21u) << "20 steps and prefill 3";
  EXPECT_EQ(Ids(closed->tasks).back(), 3);
  EXPECT_EQ(queues.size(), 0);

  // More steps than max_batch_rows: the rest wait for the next batch, and the
  // prefill behind them still runs a part in this one.
  for (int id = 30; id < 55; ++id) add(id, 1, kNone, false, true);
  add(60, 8, 8, false, false);
  closed = queues.TakeClosed(kStart, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->rows, 28);
  EXPECT_EQ(Ids(closed->tasks)[19], 49);
  EXPECT_EQ(Ids(closed->tasks).back(), 60);
  closed = queues.TakeClosed(kStart, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{50, 51, 52, 53, 54}));
}

TEST(BatchQueuesTest, KeysNeverMixAndTheOldestClosedQueueGoesFirst) {
  BatchQueues queues(Options(100, absl::Milliseconds(1), 100));
  ASSERT_TRUE(Add(queues, "b", 1, 1, kStart).ok());
  ASSERT_TRUE(Add(queues, "a", 2, 1, kStart + absl::Microseconds(10)).ok());
  ASSERT_TRUE(Add(queues, "b", 3, 1, kStart + absl::Microseconds(20)).ok());
  const absl::Time later = kStart + absl::Seconds(1);
  auto first = queues.TakeClosed(later, false);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->key, "b");
  EXPECT_EQ(Ids(first->tasks), (std::vector<int>{1, 3}));
  auto second = queues.TakeClosed(later, false);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->key, "a");
  EXPECT_FALSE(queues.TakeClosed(later, false));
}

TEST(BatchQueuesTest, FlushClosesEveryQueueRegardlessOfAge) {
  BatchQueues queues(Options(100, absl::Hours(1), 100));
  ASSERT_TRUE(Add(queues, "a", 1, 1, kStart).ok());
  ASSERT_TRUE(Add(queues, "b", 2, 1, kStart).ok());
  EXPECT_FALSE(queues.TakeClosed(kStart, false));
  EXPECT_TRUE(queues.TakeClosed(kStart, true));
  EXPECT_TRUE(queues.TakeClosed(kStart, true));
  EXPECT_FALSE(queues.TakeClosed(kStart, true));
}

// A held key's queue neither closes nor sets the next close time until every hold
// is released; other keys go on; a flush (shutdown) takes it anyway.
TEST(BatchQueuesTest, HeldKeyWaitsUntilEveryHoldIsReleased) {
  BatchQueues queues(Options(2, absl::Microseconds(10), 100));
  queues.Hold("a");
  queues.Hold("a");
  ASSERT_TRUE(Add(queues, "a", 1, 1, kStart).ok());
  ASSERT_TRUE(Add(queues, "a", 2, 1, kStart).ok());  // Full: would close at once.
  ASSERT_TRUE(Add(queues, "b", 3, 1, kStart).ok());
  EXPECT_EQ(queues.NextClose(), kStart + absl::Microseconds(10));  // b's, not a's.
  std::optional<BatchQueues::Closed> closed =
      queues.TakeClosed(kStart + absl::Hours(1), false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->key, "b");
  EXPECT_EQ(queues.NextClose(), absl::InfiniteFuture());
  EXPECT_FALSE(queues.TakeClosed(kStart + absl::Hours(1), false));
  queues.Release("a", 1, absl::Milliseconds(1), kStart, /*gather=*/true);
  EXPECT_FALSE(queues.TakeClosed(kStart + absl::Hours(1), false));  // One hold left.
  queues.Release("a", 1, absl::Milliseconds(1), kStart, /*gather=*/true);
  EXPECT_EQ(queues.NextClose(), absl::InfinitePast());
  closed = queues.TakeClosed(kStart, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{1, 2}));

  queues.Hold("c");
  ASSERT_TRUE(Add(queues, "c", 4, 1, kStart).ok());
  closed = queues.TakeClosed(kStart, true);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{4}));
}

// After a hold ends, if a held batch's tasks ask to gather, the key's next batch
// waits for as many tasks as the held batch had plus those that waited for it, or
// half the held batch's time (at most max_gather_delay) after the release.
TEST(BatchQueuesTest, NextBatchAfterAHoldGathersAsManyTasksOrWaitsTheGatherDelay) {
  BatchOptions options = Options(100, absl::ZeroDuration(), 100);
  options.max_gather_delay = absl::Milliseconds(2);
  BatchQueues queues(options);
  const absl::Time released = kStart + absl::Milliseconds(5);
  queues.Hold("k");
  ASSERT_TRUE(Add(queues, "k", 1, 1, kStart).ok());  // Waited for the held batch.
  // Expect 3 + 1 back; the batch took 10 ms, so the wait is the 2 ms cap.
  queues.Release("k", /*tasks=*/3, absl::Milliseconds(10), released, /*gather=*/true);
  EXPECT_EQ(queues.NextClose(), released + absl::Milliseconds(2));
  EXPECT_FALSE(queues.TakeClosed(released, false));
  ASSERT_TRUE(Add(queues, "k", 2, 1, released).ok());
  ASSERT_TRUE(Add(queues, "k", 3, 1, released).ok());
  EXPECT_FALSE(queues.TakeClosed(released, false));
  ASSERT_TRUE(Add(queues, "k", 4, 1, released).ok());  // Four: closes at once.
  std::optional<BatchQueues::Closed> closed = queues.TakeClosed(released, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{1, 2, 3, 4}));

  // Once a batch was taken, the next one closes as usual.
  ASSERT_TRUE(Add(queues, "k", 5, 1, released).ok());
  EXPECT_TRUE(queues.TakeClosed(released, false));

  // Fewer come back: the batch goes with what it has after half the held batch's
  // time (two holds: the longer batch counts), here under the cap.
  queues.Hold("k");
  queues.Hold("k");
  queues.Release("k", 1, absl::Microseconds(600), released, /*gather=*/true);
  queues.Release("k", 1, absl::Microseconds(800), released, /*gather=*/false);
  ASSERT_TRUE(Add(queues, "k", 6, 1, released).ok());
  EXPECT_EQ(queues.NextClose(), released + absl::Microseconds(400));
  EXPECT_FALSE(queues.TakeClosed(released + absl::Microseconds(399), false));
  closed = queues.TakeClosed(released + absl::Microseconds(400), false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{6}));

  // Held batches whose tasks do not ask to gather (BatchTask::gathers()): the next
  // batch closes as usual.
  queues.Hold("k");
  queues.Hold("k");
  queues.Release("k", 5, absl::Milliseconds(10), released, /*gather=*/false);
  queues.Release("k", 5, absl::Milliseconds(10), released, /*gather=*/false);
  ASSERT_TRUE(Add(queues, "k", 7, 1, released).ok());
  closed = queues.TakeClosed(released, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{7}));

  // A zero gather delay turns gathering off.
  options.max_gather_delay = absl::ZeroDuration();
  BatchQueues plain(options);
  plain.Hold("k");
  plain.Release("k", 5, absl::Milliseconds(10), released, /*gather=*/true);
  ASSERT_TRUE(Add(plain, "k", 8, 1, released).ok());
  EXPECT_TRUE(plain.TakeClosed(released, false));
}

// Decode steps beside a prefill in parts: after the held batch (4 steps and the
// prefill's part), the part is queued again at once and fills its bound, yet the
// next batch waits for the 4 steps to come back and takes them beside it. Were it
// to close at once, every step would wait out a part of its own.
TEST(BatchQueuesTest, GatherAfterAPrefillPartWaitsForTheStepsBesideItsNextPart) {
  BatchOptions options = Options(100, absl::ZeroDuration(), 100);
  options.max_gather_delay = absl::Milliseconds(8);
  BatchQueues queues(options);
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  const absl::Time released = kStart + absl::Milliseconds(50);
  const auto add = [&](int id, int64_t rows, int64_t bound, bool resumed, bool step,
                       absl::Time now) {
    std::unique_ptr<BatchTask> task =
        std::make_unique<FakeTask>(id, rows, bound, resumed, step);
    ASSERT_TRUE(queues.Schedule("k", task, now).ok());
  };
  queues.Hold("k");
  add(1, 8, 8, /*resumed=*/true, false, released);  // The held prefill's next part.
  add(2, 1, kNone, false, true, kStart);            // A step that waited for it.
  queues.Release("k", /*tasks=*/5, absl::Milliseconds(40), released, /*gather=*/true);
  EXPECT_EQ(queues.NextClose(), released + absl::Milliseconds(8));
  EXPECT_FALSE(queues.TakeClosed(released, false)) << "the part alone fills its bound";
  for (int id = 10; id < 13; ++id) {
    add(id, 1, kNone, false, true, released);
    EXPECT_FALSE(queues.TakeClosed(released, false));
  }
  add(13, 1, kNone, false, true, released);  // The 5 + 1 expected (the part counts once).
  std::optional<BatchQueues::Closed> closed = queues.TakeClosed(released, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{2, 10, 11, 12, 13, 1}));

  // A step missing: the batch goes at the gather delay, steps and part together.
  queues.Hold("k");
  add(20, 8, 8, /*resumed=*/true, false, released);
  queues.Release("k", /*tasks=*/3, absl::Milliseconds(40), released, /*gather=*/true);
  add(21, 1, kNone, false, true, released);
  EXPECT_FALSE(queues.TakeClosed(released + absl::Microseconds(7999), false));
  closed = queues.TakeClosed(released + absl::Milliseconds(8), false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{21, 20}));

  // Full without the missing ones (max_batch_rows): it goes at once.
  queues.Hold("k");
  add(30, 8, 8, /*resumed=*/true, false, released);
  queues.Release("k", /*tasks=*/200, absl::Milliseconds(40), released, /*gather=*/true);
  for (int id = 31; id < 123; ++id) add(id, 1, kNone, false, true, released);
  closed = queues.TakeClosed(released, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->rows, 100);
  EXPECT_EQ(Ids(closed->tasks).back(), 30);
}

// Tasks queued after the held batch began answering may be its own coming back
// (a client that sends its next step at once): they are not counted again among
// those that waited for it, or the next batch would wait out the whole gather
// delay for tasks that never come.
TEST(BatchQueuesTest, GatherCountsTasksQueuedAfterTheAnswersOnce) {
  BatchOptions options = Options(100, absl::ZeroDuration(), 100);
  options.max_gather_delay = absl::Milliseconds(8);
  BatchQueues queues(options);
  const absl::Time answered = kStart + absl::Milliseconds(40);
  const absl::Time released = answered + absl::Microseconds(300);
  queues.Hold("k");
  ASSERT_TRUE(Add(queues, "k", 1, 1, kStart + absl::Milliseconds(10)).ok());  // Waited.
  ASSERT_TRUE(Add(queues, "k", 2, 1, answered + absl::Microseconds(100)).ok());  // Back.
  queues.Release("k", /*tasks=*/3, absl::Milliseconds(40), released, /*gather=*/true,
                 answered);
  EXPECT_FALSE(queues.TakeClosed(released, false));
  ASSERT_TRUE(Add(queues, "k", 3, 1, released).ok());
  EXPECT_FALSE(queues.TakeClosed(released, false));
  ASSERT_TRUE(Add(queues, "k", 4, 1, released).ok());  // 3 held + 1 waited: all here.
  std::optional<BatchQueues::Closed> closed = queues.TakeClosed(released, false);
  ASSERT_TRUE(closed);
  EXPECT_EQ(Ids(closed->tasks), (std::vector<int>{1, 2, 3, 4}));
}

TEST(BatchQueuesTest, FullQueueRefusesAndKeepsTheTaskWithTheCaller) {
  BatchQueues queues(Options(100, absl::Hours(1), 2));
  ASSERT_TRUE(Add(queues, "a", 1, 1, kStart).ok());
  ASSERT_TRUE(Add(queues, "b", 2, 1, kStart).ok());
  std::unique_ptr<BatchTask> task = std::make_unique<FakeTask>(3, 1);
  EXPECT_THAT(queues.Schedule("a", task, kStart),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "server busy: 2 requests already queued (--max-queue-size=2); "
                       "retry later or on another replica"));
  ASSERT_NE(task, nullptr);
  EXPECT_EQ(static_cast<FakeTask&>(*task).id(), 3);
  ASSERT_TRUE(queues.TakeClosed(kStart, true));
  ASSERT_TRUE(queues.Schedule("a", task, kStart).ok());  // Room again.
}

// Random arrivals on three keys: every task leaves exactly once, in arrival order
// within its key, in batches that respect the row limit (or hold one task), never
// before their batch closed.
TEST(BatchQueuesTest, RandomArrivalsLoseNothingAndKeepOrder) {
  std::mt19937 rng(20261130);
  const BatchOptions options = Options(16, absl::Microseconds(300), 20);
  BatchQueues queues(options);
  absl::Time now = kStart;
  std::map<std::string, std::vector<int>> sent, received;
  std::map<int, int64_t> rows_of;
  std::map<std::string, int64_t> pending_rows;
  int next_id = 0, refused = 0;
  for (int step = 0; step < 5000; ++step) {
    now += absl::Microseconds(std::uniform_int_distribution<int>(0, 120)(rng));
    const std::string key(1, static_cast<char>('a' + rng() % 3));
    const int64_t rows = std::uniform_int_distribution<int64_t>(1, 20)(rng);
    const int id = next_id++;
    if (Add(queues, key, id, rows, now).ok()) {
      sent[key].push_back(id);
      rows_of[id] = rows;
      pending_rows[key] += rows;
    } else {
      ++refused;
    }
    while (rng() % 5 == 0) {  // Workers sometimes fall behind: the queue fills.
      auto closed = queues.TakeClosed(now, false);
      if (!closed) break;
      ASSERT_FALSE(closed->tasks.empty());
      int64_t rows_sum = 0;
      for (int got : Ids(closed->tasks)) {
        received[closed->key].push_back(got);
        rows_sum += rows_of[got];
      }
      EXPECT_EQ(rows_sum, closed->rows);
      if (closed->tasks.size() > 1) {
        EXPECT_LE(closed->rows, options.max_batch_rows);
      }
      // It left because its queue held a full batch or its oldest task had waited
      // the delay: never early.
      EXPECT_TRUE(pending_rows[closed->key] >= options.max_batch_rows ||
                  closed->tasks[0]->enqueued() + options.max_queue_delay <= now);
      pending_rows[closed->key] -= rows_sum;
    }
  }
  while (auto closed = queues.TakeClosed(now, true)) {
    for (int got : Ids(closed->tasks)) received[closed->key].push_back(got);
  }
  EXPECT_EQ(sent, received);
  EXPECT_GT(refused, 0) << "the test should also exercise a full queue";
  EXPECT_EQ(queues.size(), 0);
}

}  // namespace
}  // namespace layerserve
