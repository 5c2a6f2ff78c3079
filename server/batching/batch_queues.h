// The queues of the dynamic batcher, without threads or clocks: tasks wait in a
// queue per key (what must match for tasks to share one kernel call) and leave in
// closed batches. Time is passed in, so tests drive it with a fake clock.
//
// A queue's batch closes when its tasks hold max_batch_rows rows (or the bound of
// its first task, below), when its oldest task has waited max_queue_delay, or when
// the caller flushes (shutdown). A closed batch first takes every task that goes
// first (BatchTask::first_in_batch(): decode steps) while they fit in
// max_batch_rows, then the others from the front while they fit in max_batch_rows
// and their rows in the bound of every such task it holds
// (BatchTask::max_batch_rows(): a prefill's chunk), and always at least one of
// them, so a task larger than the limit runs (alone, or beside the first ones) and
// work in parts always advances. Among closed queues the one whose oldest task
// arrived first goes next. Not thread-safe: the Batcher locks.
//
// Holds and gathers, for batches whose loops the Batcher shares with idle workers
// (decode steps of many KV-cache sessions: streaming a model's weights dominates,
// so one batch of all the steps on every worker beats two batches side by side):
// - While a key is held its queue does not close: what arrives waits for the held
//   batch instead of running beside it and reading the same weights again.
// - When the last hold ends, the key's next batch gathers if the held tasks say so
//   (BatchTask::gathers()): it closes once it has as many tasks as the held
//   batches had plus those that waited for them, or, after the release, half the
//   longest held batch's time (at most max_gather_delay), whichever comes first
//   (or when full). A prefill's part that fills its bound does not close it: the
//   steps coming back go beside the part, not after it. Clients that send their next step
//   as soon as they are answered (a decode loop) then come back into one batch instead of
//   splitting into groups that take turns; when fewer come back, the wait costs at most a
//   third of the time. Only work whose every batch streams a large fixed cost (weights
//   too big for the cache) gains: for the demo model, whose weights stay in L3, any wait
//   cost 7-25% at 8 and 32 sessions, and is not asked for.
// A flush takes held and gathering queues like any other.
#ifndef LAYERSERVE_SERVER_BATCHING_BATCH_QUEUES_H_
#define LAYERSERVE_SERVER_BATCHING_BATCH_QUEUES_H_

#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace layerserve {

// One unit of work. The batcher only reads its size.
template <typename Context>
class Batcher;

class BatchTask {
 public:
  virtual ~BatchTask() = default;
  // Rows (or tokens) this task adds to a batch; >= 1.
  virtual int64_t rows() const = 0;
  // When Schedule() accepted it.
  absl::Time enqueued() const { return enqueued_; }
  // Whether, after a held batch of this task's key, the next batch should gather
  // (see above): true for work whose batches each pay a cost that does not grow
  // with their size, such as reading weights from memory.
  virtual bool gathers() const { return false; }
  // The most rows a batch holding this task may have (BatchOptions::max_batch_rows
  // bounds it too): work that runs in parts so that other keys' batches run
  // between them (a chunked prefill) would otherwise gather the parts of many
  // tasks into one long batch.
  virtual int64_t max_batch_rows() const { return std::numeric_limits<int64_t>::max(); }
  // Whether this task is queued again to go on (its earlier parts ran): it goes
  // ahead of the tasks of its key that have not started, behind those going on
  // already, so that work in parts finishes in the order it started instead of
  // taking turns with what arrived later (which would delay every one of them).
  // Other keys still see it as arriving now: their older tasks go first.
  virtual bool resumed() const { return false; }
  // Whether a closed batch takes this task before the others of its key, wherever
  // it waits (decode steps, each a session's next token, beside the chunks of
  // prefills): the tasks taken so do not count toward the other tasks' bounds
  // (max_batch_rows() of this one, and of those), only toward
  // BatchOptions::max_batch_rows.
  virtual bool first_in_batch() const { return false; }

 private:
  friend class BatchQueues;
  template <typename Context>
  friend class Batcher;  // Stamps tasks it runs without queueing them.
  absl::Time enqueued_;
};

using Batch = std::vector<std::unique_ptr<BatchTask>>;

struct BatchOptions {
  int64_t max_batch_rows = 512;
  absl::Duration max_queue_delay = absl::ZeroDuration();
  // The longest a gathering batch waits (see above); zero: no gathering. 8 ms:
  // Python clients of 16 sessions of an 8B-shaped layer take 3-6 ms to all send
  // their next steps, and 2 ms gathered half of them
  // (docs/perf/2026-12-02-gather-delay.md).
  absl::Duration max_gather_delay = absl::Milliseconds(8);
  // Tasks waiting in all queues together.
  int64_t max_queue_size = 1024;
};

class BatchQueues {
 public:
  explicit BatchQueues(const BatchOptions& options) : options_(options) {}

  // Queues `task` under `key` (last, or ahead of those not started if it is
  // resumed()) and takes it (leaving `task` null), or leaves it to the caller and
  // returns RESOURCE_EXHAUSTED when max_queue_size tasks wait.
  absl::Status Schedule(const std::string& key, std::unique_ptr<BatchTask>& task,
                        absl::Time now);

  struct Closed {
    std::string key;
    Batch tasks;
    int64_t rows = 0;
  };
  // The next closed batch at `now` (every non-empty queue counts as closed when
  // `flush`), or nothing.
  std::optional<Closed> TakeClosed(absl::Time now, bool flush);

  // When the next batch closes by age if nothing else happens; InfiniteFuture()
  // when no task waits outside held queues. A full queue is closed already:
  // NextClose() <= now.
  absl::Time NextClose() const;

  // Tasks waiting in all queues.
  int64_t size() const { return size_; }

  // Holds `key`'s queue until a Release for every Hold.
  void Hold(const std::string& key);
  // Ends one hold of `key`, whose batch of `tasks` tasks took `took` and finished
  // at `now`; when it ends the last hold, the next batch gathers if `gather`.
  // `answered`: when the batch began answering its tasks (its computing done).
  // Tasks queued from then on may be its own coming back already (their clients
  // answer fast): they are in `tasks`, not among those that waited for it.
  void Release(const std::string& key, int64_t tasks, absl::Duration took, absl::Time now,
               bool gather, absl::Time answered = absl::InfiniteFuture());

 private:
  struct Queue {
    std::deque<std::unique_ptr<BatchTask>> tasks;
    int64_t rows = 0;
  };
  struct Holds {
    int count = 0;
    int64_t tasks = 0;                             // In the held batches released so far.
    absl::Duration took;                           // The longest of them.
    bool gather = false;                           // Whether any of them asked to gather.
    absl::Time answered = absl::InfiniteFuture();  // The earliest of them.
  };
  // A gathering batch waits at most this share of the held batch's time.
  static constexpr double kGatherShareOfBatch = 0.5;
  struct Gather {
    int64_t tasks = 0;  // Close once this many wait...
    absl::Time until;   // ...or at this time.
  };
  absl::Time CloseTime(const std::string& key, const Queue& queue) const;
  // The positions in `queue` of the tasks its next batch takes, in the order it
  // takes them (see the top of this file), and their rows.
  std::vector<size_t> NextBatch(const Queue& queue, int64_t* rows) const;

  const BatchOptions options_;
  std::map<std::string, Queue> queues_;  // Only non-empty queues.
  int64_t size_ = 0;
  std::map<std::string, Holds> holds_;     // Only keys held now.
  std::map<std::string, Gather> gathers_;  // Keys whose next batch gathers.
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_BATCHING_BATCH_QUEUES_H_
