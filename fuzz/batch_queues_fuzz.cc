// The batcher's queues (server/batching/batch_queues.h) driven by a byte-coded program of
// schedule / advance-clock / take / flush / hold / release operations and checked,
// after every operation, against a plain model of what they must hold: every
// accepted task leaves exactly once, in schedule order within its key, in batches
// that obey max_batch_rows, from a queue that is closed (not held; full, old enough
// and gathered, or flushed; while it gathers, full means its next batch is) and
// holds the oldest task among the closed ones.
#include <deque>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_targets.h"
#include "server/batching/batch_queues.h"

namespace layerserve::fuzz {
namespace {

// Reads the program; zeros once it runs out.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  uint8_t Next() { return pos_ < size_ ? data_[pos_++] : 0; }

 private:
  const uint8_t* const data_;
  const size_t size_;
  size_t pos_ = 0;
};

int64_t live_tasks = 0;  // FuzzTasks alive: 0 after each input, or one leaked.

class FuzzTask : public BatchTask {
 public:
  FuzzTask(int64_t id, int64_t rows) : id_(id), rows_(rows) { ++live_tasks; }
  ~FuzzTask() override { --live_tasks; }
  int64_t rows() const override { return rows_; }
  int64_t id() const { return id_; }

 private:
  const int64_t id_;
  const int64_t rows_;
};

struct ModelTask {
  int64_t id;
  int64_t rows;
  absl::Time enqueued;
};

class Checker {
 public:
  explicit Checker(const BatchOptions& options) : options_(options), queues_(options) {}

  void Schedule(int key_index, int64_t rows) {
    const std::string key = absl::StrCat("key", key_index);
    const int64_t id = next_id_++;
    std::unique_ptr<BatchTask> task = std::make_unique<FuzzTask>(id, rows);
    const bool room = waiting_ < options_.max_queue_size;
    const absl::Status status = queues_.Schedule(key, task, now_);
    if (room) {
      FUZZ_CHECK(status.ok(), status.ToString());
      FUZZ_CHECK(task == nullptr, "accepted but not taken");
      model_[key].push_back({id, rows, now_});
      ++waiting_;
    } else {
      FUZZ_CHECK(status.code() == absl::StatusCode::kResourceExhausted,
                 status.ToString());
      FUZZ_CHECK(task != nullptr, "refused but taken");
    }
    CheckSize();
  }

  void Advance(int64_t micros) { now_ += absl::Microseconds(micros); }

  void Hold(int key_index) {
    const std::string key = absl::StrCat("key", key_index);
    queues_.Hold(key);
    ++holds_[key].count;
  }

  void Release(int key_index, int64_t tasks, absl::Duration took, bool gather) {
    const std::string key = absl::StrCat("key", key_index);
    queues_.Release(key, tasks, took, now_, gather);
    auto it = holds_.find(key);
    if (it == holds_.end()) return;  // Not held: nothing happens.
    it->second.tasks += tasks;
    it->second.took = std::max(it->second.took, took);
    it->second.gather = it->second.gather || gather;
    if (--it->second.count > 0) return;
    // If any held batch asked: half the longest one's time, at most
    // max_gather_delay.
    const absl::Duration wait = std::min(options_.max_gather_delay, it->second.took / 2);
    if (it->second.gather && wait > absl::ZeroDuration()) {
      auto queue = model_.find(key);
      const int64_t waiting =
          queue == model_.end() ? 0 : static_cast<int64_t>(queue->second.size());
      gathers_[key] = {it->second.tasks + waiting, now_ + wait};
    }
    holds_.erase(it);
  }

  // One TakeClosed(now, flush), checked; false when nothing was closed.
  bool Take(bool flush) {
    // The queue the model says must go next, if any: closed, oldest front task.
    const std::string* want_key = nullptr;
    absl::Time oldest = absl::InfiniteFuture();
    for (const auto& [key, tasks] : model_) {
      if (tasks.empty() || !(flush || Closed(key, tasks))) continue;
      if (want_key == nullptr || tasks.front().enqueued < oldest) {
        want_key = &key;
        oldest = tasks.front().enqueued;
      }
    }
    std::optional<BatchQueues::Closed> closed = queues_.TakeClosed(now_, flush);
    if (want_key == nullptr) {
      FUZZ_CHECK(!closed.has_value(), "a batch while no queue is closed");
      return false;
    }
    FUZZ_CHECK(closed.has_value(),
               absl::StrCat("no batch while ", *want_key, " is closed"));
    std::deque<ModelTask>& tasks = model_[closed->key];
    FUZZ_CHECK(!tasks.empty() && (flush || Closed(closed->key, tasks)),
               absl::StrCat("batch from ", closed->key, ", which is not closed"));
    FUZZ_CHECK(
        tasks.front().enqueued == oldest,
        absl::StrCat("batch from ", closed->key, " while an older queue is closed"));
    FUZZ_CHECK(!closed->tasks.empty(), "an empty batch");
    int64_t rows = 0;
    for (const auto& task : closed->tasks) {
      FUZZ_CHECK(!tasks.empty(), "a batch holding more tasks than were queued");
      const auto* t = static_cast<const FuzzTask*>(task.get());
      const ModelTask want = tasks.front();
      tasks.pop_front();
      FUZZ_CHECK(t->id() == want.id,
                 absl::StrCat("task ", t->id(), " out of order, expected ", want.id,
                              " in ", closed->key));
      FUZZ_CHECK(task->enqueued() == want.enqueued, "enqueued time");
      rows += want.rows;
    }
    FUZZ_CHECK(closed->rows == rows, "batch rows");
    FUZZ_CHECK(closed->tasks.size() == 1 || rows <= options_.max_batch_rows,
               absl::StrCat(rows, " rows over max_batch_rows ", options_.max_batch_rows));
    FUZZ_CHECK(tasks.empty() || rows + tasks.front().rows > options_.max_batch_rows,
               "the batch left out a task that fits");
    waiting_ -= static_cast<int64_t>(closed->tasks.size());
    gathers_.erase(closed->key);
    if (tasks.empty()) model_.erase(closed->key);
    CheckSize();
    return true;
  }

  void CheckNextClose() {
    absl::Time want = absl::InfiniteFuture();
    for (const auto& [key, tasks] : model_) want = std::min(want, CloseTime(key, tasks));
    FUZZ_CHECK(queues_.NextClose() == want, "NextClose()");
  }

  // Flushes everything out; every accepted task must come out exactly once.
  void Drain() {
    while (Take(/*flush=*/true)) {
    }
    FUZZ_CHECK(waiting_ == 0 && model_.empty(), "tasks left after a full flush");
    FUZZ_CHECK(queues_.size() == 0, "size() after a full flush");
    FUZZ_CHECK(queues_.NextClose() == absl::InfiniteFuture(), "NextClose() when empty");
  }

 private:
  absl::Time CloseTime(const std::string& key, const std::deque<ModelTask>& tasks) const {
    if (holds_.count(key) > 0) return absl::InfiniteFuture();
    const absl::Time aged = tasks.front().enqueued + options_.max_queue_delay;
    auto gather = gathers_.find(key);
    if (gather != gathers_.end() &&
        static_cast<int64_t>(tasks.size()) < gather->second.first) {
      // Gathering: it waits unless the batch it would take now is full (the tasks
      // in order while they fit, at least one).
      int64_t taken = 0;
      for (const ModelTask& t : tasks) {
        if (taken > 0 && taken + t.rows > options_.max_batch_rows) break;
        taken += t.rows;
      }
      if (taken >= options_.max_batch_rows) return absl::InfinitePast();
      return std::max(aged, gather->second.second);
    }
    int64_t rows = 0;
    for (const ModelTask& t : tasks) rows += t.rows;
    if (rows >= options_.max_batch_rows) return absl::InfinitePast();
    return aged;
  }
  bool Closed(const std::string& key, const std::deque<ModelTask>& tasks) const {
    return CloseTime(key, tasks) <= now_;
  }
  void CheckSize() const {
    FUZZ_CHECK(queues_.size() == waiting_,
               absl::StrCat("size() ", queues_.size(), ", expected ", waiting_));
  }

  const BatchOptions options_;
  BatchQueues queues_;
  std::map<std::string, std::deque<ModelTask>> model_;
  struct ModelHolds {
    int count = 0;
    int64_t tasks = 0;
    absl::Duration took;
    bool gather = false;
  };
  std::map<std::string, ModelHolds> holds_;
  // Per key: close once this many tasks wait, or at this time.
  std::map<std::string, std::pair<int64_t, absl::Time>> gathers_;
  int64_t waiting_ = 0;
  int64_t next_id_ = 0;
  absl::Time now_ = absl::UnixEpoch() + absl::Hours(1);
};

}  // namespace

Outcome FuzzBatchQueues(const uint8_t* data, size_t size) {
  Bytes bytes(data, size);
  BatchOptions options;
  options.max_batch_rows = 1 + bytes.Next() % 16;
  options.max_queue_delay = absl::Microseconds(bytes.Next() % 64);
  options.max_queue_size = 1 + bytes.Next() % 32;
  options.max_gather_delay = absl::Microseconds(bytes.Next() % 64);
  {
    Checker checker(options);
    while (!bytes.empty()) {
      const uint8_t op = bytes.Next();
      switch (op % 10) {
        case 0:
        case 1:
        case 2:  // Schedule: key from the op byte, rows from the next (some > max).
          checker.Schedule((op >> 3) % 4, 1 + bytes.Next() % 20);
          break;
        case 3:
          checker.Advance(bytes.Next());
          break;
        case 4:
        case 5:
          checker.Take(/*flush=*/false);
          break;
        case 6:
          checker.Take(/*flush=*/true);
          break;
        case 7:
          checker.CheckNextClose();
          break;
        case 8:
          checker.Hold((op >> 4) % 4);
          break;
        case 9:
          checker.Release((op >> 4) % 4, 1 + bytes.Next() % 8,
                          absl::Microseconds(bytes.Next()), /*gather=*/(op >> 6) != 0);
          break;
      }
    }
    checker.Drain();
  }
  FUZZ_CHECK(live_tasks == 0, absl::StrCat(live_tasks, " tasks leaked or freed twice"));
  return Outcome::kAccepted;
}

}  // namespace layerserve::fuzz
