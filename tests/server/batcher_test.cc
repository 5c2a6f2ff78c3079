// Batcher::TryRunInline: small tasks run on the caller's thread only when a worker
// place is free and nothing waits in the queue, and compute never runs on more
// threads than there are workers. Batcher::Run (kernels::ParallelFor): a running
// batch shares a loop with idle workers, every index runs once, and the batch's key
// is held meanwhile. Batcher::RunOnEachWorker reaches every worker's own context
// once per round. Real threads; the waits are on latches the test opens, never
// on time, except the bounded polls for "a worker has taken it".
#include "server/batching/batcher.h"

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace layerserve {
namespace {

struct NoContext {};

// Records where and how concurrently it ran; blocks until `release` if given.
struct Probe {
  std::atomic<int> running{0}, most{0}, runs{0};
  std::atomic<std::thread::id> last_thread{};
};

class ProbeTask : public BatchTask {
 public:
  ProbeTask(Probe* probe, absl::Notification* release)
      : probe_(probe), release_(release) {}
  int64_t rows() const override { return 1; }
  void Run() {
    const int now = ++probe_->running;
    int most = probe_->most.load();
    while (now > most && !probe_->most.compare_exchange_weak(most, now)) {
    }
    probe_->last_thread = std::this_thread::get_id();
    if (release_ != nullptr) release_->WaitForNotification();
    --probe_->running;
    ++probe_->runs;
  }

 private:
  Probe* probe_;
  absl::Notification* release_;
};

Batcher<NoContext>::ProcessBatch RunAll() {
  return [](NoContext&, Batch& batch) {
    for (auto& task : batch) static_cast<ProbeTask&>(*task).Run();
  };
}

std::unique_ptr<BatchTask> Task(Probe* probe, absl::Notification* release = nullptr) {
  return std::make_unique<ProbeTask>(probe, release);
}

// Polls (bounded) until `done`; the batcher's threads need a moment to get there.
template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 5000 && !done(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return done();
}

TEST(BatcherInlineTest, IdleBatcherRunsTheTaskOnTheCallingThread) {
  Probe probe;
  Batcher<NoContext> batcher(BatchOptions{}, 2, RunAll());
  std::unique_ptr<BatchTask> task = Task(&probe);
  EXPECT_TRUE(batcher.TryRunInline(task));
  EXPECT_EQ(task, nullptr);
  EXPECT_EQ(probe.runs, 1);
  EXPECT_EQ(probe.last_thread.load(), std::this_thread::get_id());
}

TEST(BatcherInlineTest, EveryPlaceTakenLeavesTheTaskWithTheCaller) {
  Probe probe;
  absl::Notification release;
  Batcher<NoContext> batcher(BatchOptions{}, 1, RunAll());
  std::unique_ptr<BatchTask> busy = Task(&probe, &release);
  ASSERT_TRUE(batcher.Schedule("k", busy).ok());
  ASSERT_TRUE(Eventually([&] { return probe.running == 1; }));
  std::unique_ptr<BatchTask> small = Task(&probe);
  EXPECT_FALSE(batcher.TryRunInline(small));
  ASSERT_NE(small, nullptr);  // Still the caller's: it may queue it instead.
  ASSERT_TRUE(batcher.Schedule("k", small).ok());
  // Something waits in the queue now: an inline run would jump it.
  std::unique_ptr<BatchTask> other = Task(&probe);
  EXPECT_FALSE(batcher.TryRunInline(other));
  release.Notify();
  ASSERT_TRUE(Eventually([&] { return probe.runs == 2; }));
  EXPECT_EQ(probe.most, 1);
}

TEST(BatcherInlineTest, InlineRunsHoldAWorkerPlaceSoComputeNeverOversubscribes) {
  Probe probe;
  absl::Notification release;
  Batcher<NoContext> batcher(BatchOptions{}, 2, RunAll());
  // Place 1: a worker. Place 2: an inline run on another thread.
  std::unique_ptr<BatchTask> queued = Task(&probe, &release);
  ASSERT_TRUE(batcher.Schedule("k", queued).ok());
  ASSERT_TRUE(Eventually([&] { return probe.running == 1; }));
  std::thread caller([&] {
    std::unique_ptr<BatchTask> inline_task = Task(&probe, &release);
    EXPECT_TRUE(batcher.TryRunInline(inline_task));
  });
  ASSERT_TRUE(Eventually([&] { return probe.running == 2; }));
  // No third place: not inline, and a queued task waits although a worker idles.
  std::unique_ptr<BatchTask> third = Task(&probe);
  EXPECT_FALSE(batcher.TryRunInline(third));
  ASSERT_TRUE(batcher.Schedule("k", third).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(probe.runs, 0);
  release.Notify();
  caller.join();
  ASSERT_TRUE(Eventually([&] { return probe.runs == 3; }));
  EXPECT_EQ(probe.most, 2);
}

TEST(BatcherInlineTest, StopWaitsForNothingAnInlineRunHolds) {
  Probe probe;
  absl::Notification release;
  auto batcher = std::make_unique<Batcher<NoContext>>(BatchOptions{}, 1, RunAll());
  std::thread caller([&] {
    std::unique_ptr<BatchTask> task = Task(&probe, &release);
    EXPECT_TRUE(batcher->TryRunInline(task));
  });
  ASSERT_TRUE(Eventually([&] { return probe.running == 1; }));
  // The only worker waits for the place the inline run holds; Stop must still end
  // it once the run is over, and a stopped batcher runs nothing inline.
  std::thread stopper([&] { batcher->Stop(); });
  release.Notify();
  caller.join();
  stopper.join();
  std::unique_ptr<BatchTask> late = Task(&probe);
  EXPECT_FALSE(batcher->TryRunInline(late));
  EXPECT_EQ(probe.runs, 1);
}

// A task that runs `work` (which may call the batcher's Run) as its batch.
class WorkTask : public BatchTask {
 public:
  explicit WorkTask(std::function<void()> work, bool gathers = false)
      : work_(std::move(work)), gathers_(gathers) {}
  int64_t rows() const override { return 1; }
  bool gathers() const override { return gathers_; }
  void Run() { work_(); }

 private:
  std::function<void()> work_;
  const bool gathers_;
};

// Opens `latch` when it goes out of scope, if nothing did: declared after the
// batcher, it frees a worker blocked on the latch before the batcher joins it, also
// when an assertion ends the test early.
struct OpenAtExit {
  absl::Notification& latch;
  ~OpenAtExit() {
    if (!latch.HasBeenNotified()) latch.Notify();
  }
};

Batcher<NoContext>::ProcessBatch RunWork() {
  return [](NoContext&, Batch& batch) {
    for (auto& task : batch) static_cast<WorkTask&>(*task).Run();
  };
}

std::unique_ptr<BatchTask> Work(std::function<void()> work) {
  return std::make_unique<WorkTask>(std::move(work));
}

TEST(BatcherSharedLoopTest, IdleWorkerHelpsAndEveryIndexRunsOnce) {
  Batcher<NoContext> batcher(BatchOptions{}, 2, RunWork());
  constexpr int64_t kN = 64;
  std::vector<std::atomic<int>> calls(kN);
  std::mutex mu;
  std::set<std::thread::id> threads;
  std::atomic<int> running{0}, most{0};
  absl::Notification done;
  std::unique_ptr<BatchTask> task = Work([&] {
    batcher.Run(kN, [&](int64_t i) {
      const int now = ++running;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      ++calls[i];
      {
        std::lock_guard<std::mutex> lock(mu);
        threads.insert(std::this_thread::get_id());
      }
      // Index 0 waits (bounded) for a second thread, so the helper gets to join.
      if (i == 0) {
        Eventually([&] {
          std::lock_guard<std::mutex> lock(mu);
          return threads.size() >= 2;
        });
      }
      --running;
    });
    done.Notify();
  });
  ASSERT_TRUE(batcher.Schedule("k", task).ok());
  done.WaitForNotification();
  for (int64_t i = 0; i < kN; ++i) EXPECT_EQ(calls[i], 1) << i;
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(threads.size(), 2u);
  EXPECT_LE(most, 2);  // Never more threads than workers.
}

TEST(BatcherSharedLoopTest, LoopRunsAloneWhenNoWorkerIsIdle) {
  absl::Notification release, blocked;
  Batcher<NoContext> batcher(BatchOptions{}, 2, RunWork());
  OpenAtExit open{release};
  // Worker 1 is busy until released.
  std::unique_ptr<BatchTask> busy = Work([&] {
    blocked.Notify();
    release.WaitForNotification();
  });
  ASSERT_TRUE(batcher.Schedule("busy", busy).ok());
  blocked.WaitForNotification();
  // (std::mutex, not the absl::Notification: TSan sees only instrumented sync.)
  std::mutex mu;
  std::set<std::thread::id> threads;
  absl::Notification done;
  std::unique_ptr<BatchTask> task = Work([&] {
    batcher.Run(16, [&](int64_t) {
      std::lock_guard<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
    });
    done.Notify();
  });
  ASSERT_TRUE(batcher.Schedule("k", task).ok());
  done.WaitForNotification();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(threads.size(), 1u);
}

TEST(BatcherSharedLoopTest, KeyOfASharingBatchIsHeldUntilItEnds) {
  Batcher<NoContext> batcher(BatchOptions{}, 2, RunWork());
  absl::Notification in_loop, release;
  OpenAtExit open{release};
  std::atomic<int> same_key_runs{0}, other_key_runs{0};
  // The batch shares a loop, then stays busy (its key is held until it ends).
  std::unique_ptr<BatchTask> sharing = Work([&] {
    batcher.Run(4, [](int64_t) {});
    in_loop.Notify();
    release.WaitForNotification();
  });
  ASSERT_TRUE(batcher.Schedule("k", sharing).ok());
  in_loop.WaitForNotification();
  // The other worker is idle, yet a task of the same key waits for the batch...
  std::unique_ptr<BatchTask> same = Work([&] { ++same_key_runs; });
  ASSERT_TRUE(batcher.Schedule("k", same).ok());
  // ...while another key runs at once.
  std::unique_ptr<BatchTask> other = Work([&] { ++other_key_runs; });
  ASSERT_TRUE(batcher.Schedule("other", other).ok());
  ASSERT_TRUE(Eventually([&] { return other_key_runs == 1; }));
  EXPECT_EQ(same_key_runs, 0);
  release.Notify();
  ASSERT_TRUE(Eventually([&] { return same_key_runs == 1; }));
}

// Work that gathers (whose batches each stream the weights) holds its key from the
// batch's start, before its first shared loop: a task of the key that arrives then
// waits for the batch instead of running beside it on the idle worker, as a
// prefill's waiting part did beside a batch of decode steps. Other work holds its
// key only while it shares a loop.
TEST(BatcherSharedLoopTest, KeyOfAGatheringBatchIsHeldFromItsStart) {
  Batcher<NoContext> batcher(BatchOptions{}, 2, RunWork());
  absl::Notification started, release;
  OpenAtExit open{release};
  std::atomic<int> same_key_runs{0};
  std::unique_ptr<BatchTask> gathering = std::make_unique<WorkTask>(
      [&] {
        started.Notify();
        release.WaitForNotification();
      },
      /*gathers=*/true);
  ASSERT_TRUE(batcher.Schedule("k", gathering).ok());
  started.WaitForNotification();
  std::unique_ptr<BatchTask> same = Work([&] { ++same_key_runs; });
  ASSERT_TRUE(batcher.Schedule("k", same).ok());
  absl::Notification other_ran;
  std::unique_ptr<BatchTask> other = Work([&] { other_ran.Notify(); });
  ASSERT_TRUE(batcher.Schedule("other", other).ok());
  other_ran.WaitForNotification();  // The idle worker was free all along...
  EXPECT_EQ(same_key_runs, 0);      // ...yet the key's task waited.
  release.Notify();
  ASSERT_TRUE(Eventually([&] { return same_key_runs == 1; }));

  // Not gathering: a second batch of the key runs beside a first that shares no
  // loop yet.
  absl::Notification started2, release2;
  OpenAtExit open2{release2};
  std::unique_ptr<BatchTask> plain = Work([&] {
    started2.Notify();
    release2.WaitForNotification();
  });
  ASSERT_TRUE(batcher.Schedule("k", plain).ok());
  started2.WaitForNotification();
  std::unique_ptr<BatchTask> beside = Work([&] { ++same_key_runs; });
  ASSERT_TRUE(batcher.Schedule("k", beside).ok());
  ASSERT_TRUE(Eventually([&] { return same_key_runs == 2; }));
  release2.Notify();
}

// Each round runs once on every worker thread, with that worker's own context (the
// same one it runs its batches with), never on the caller's; tasks run after.
TEST(BatcherEachWorkerTest, EachRoundRunsOnceOnEveryWorkerWithItsOwnContext) {
  struct Counted {
    int rounds = 0;
  };
  std::mutex mu;
  std::set<std::thread::id> threads;
  std::set<const Counted*> contexts;
  std::atomic<int> batches{0};
  Batcher<Counted> batcher(BatchOptions{}, /*num_threads=*/3,
                           [&](Counted&, Batch& batch) {
                             for (auto& task : batch)
                               static_cast<ProbeTask&>(*task).Run();
                             ++batches;
                           });
  for (int round = 1; round <= 2; ++round) {
    int calls = 0;
    batcher.RunOnEachWorker([&](Counted& context) {
      std::lock_guard<std::mutex> lock(mu);
      ++calls;
      EXPECT_EQ(++context.rounds, round);
      threads.insert(std::this_thread::get_id());
      contexts.insert(&context);
    });
    EXPECT_EQ(calls, 3) << "round " << round;
  }
  EXPECT_EQ(threads.size(), 3u);
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
  EXPECT_EQ(contexts.size(), 3u);
  Probe probe;
  std::unique_ptr<BatchTask> task = Task(&probe);
  ASSERT_TRUE(batcher.Schedule("key", task).ok());
  EXPECT_TRUE(Eventually([&] { return probe.runs.load() == 1; }));
  batcher.Stop();
}

}  // namespace
}  // namespace layerserve
