#include "server/batching/batch_queues.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/retry_delay.h"

namespace layerserve {

absl::Status BatchQueues::Schedule(const std::string& key,
                                   std::unique_ptr<BatchTask>& task, absl::Time now) {
  if (size_ >= options_.max_queue_size) {
    // A place frees when a worker takes a batch; a batch runs in about 1 to 100
    // ms here (docs/BENCHMARKS.md), so a retry after the longest of them finds
    // room unless the load itself is too high, which the client's backoff handles.
    return WithRetryDelay(
        absl::ResourceExhaustedError(absl::StrCat(
            "server busy: ", size_, " requests already queued (--max-queue-size=",
            options_.max_queue_size, "); retry later or on another replica")),
        absl::Milliseconds(100));
  }
  task->enqueued_ = now;
  Queue& queue = queues_[key];
  auto at = queue.tasks.end();
  if (task->resumed()) {
    at = std::find_if(queue.tasks.begin(), queue.tasks.end(),
                      [](const auto& queued) { return !queued->resumed(); });
  }
  queue.rows += task->rows();
  queue.tasks.insert(at, std::move(task));
  ++size_;
  return absl::OkStatus();
}

std::vector<size_t> BatchQueues::NextBatch(const Queue& queue, int64_t* rows) const {
  std::vector<size_t> taken;
  *rows = 0;
  const auto& tasks = queue.tasks;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const bool fits =
        taken.empty() || *rows + tasks[i]->rows() <= options_.max_batch_rows;
    if (tasks[i]->first_in_batch() && fits) {
      taken.push_back(i);
      *rows += tasks[i]->rows();
    }
  }
  // Then the others in their order (steps that did not fit stay for the next
  // batch), at least one.
  int64_t limit = options_.max_batch_rows;  // And every taken task's bound...
  int64_t part_rows = 0;                    // ...on the rows of these tasks.
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i]->first_in_batch()) continue;
    const int64_t task_rows = tasks[i]->rows();
    const int64_t next_limit = std::min(limit, tasks[i]->max_batch_rows());
    if (part_rows > 0 && (part_rows + task_rows > next_limit ||
                          *rows + task_rows > options_.max_batch_rows)) {
      break;
    }
    limit = next_limit;
    part_rows += task_rows;
    *rows += task_rows;
    taken.push_back(i);
  }
  return taken;
}

absl::Time BatchQueues::CloseTime(const std::string& key, const Queue& queue) const {
  if (holds_.count(key) > 0) return absl::InfiniteFuture();
  const absl::Time aged = queue.tasks.front()->enqueued() + options_.max_queue_delay;
  auto gather = gathers_.find(key);
  if (gather != gathers_.end() &&
      static_cast<int64_t>(queue.tasks.size()) < gather->second.tasks) {
    // Waits for the steps coming back unless the batch is full without them, even
    // when a prefill's part fills its own bound already: the part goes beside the
    // steps, and a batch closed at once would leave every step to the batch after
    // it, each step then waiting out a whole part of its own.
    int64_t rows = 0;
    NextBatch(queue, &rows);
    if (rows >= options_.max_batch_rows) return absl::InfinitePast();
    return std::max(aged, gather->second.until);
  }
  if (queue.rows >=
      std::min(options_.max_batch_rows, queue.tasks.front()->max_batch_rows())) {
    return absl::InfinitePast();
  }
  return aged;
}

absl::Time BatchQueues::NextClose() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [key, queue] : queues_) next = std::min(next, CloseTime(key, queue));
  return next;
}

void BatchQueues::Hold(const std::string& key) { ++holds_[key].count; }

void BatchQueues::Release(const std::string& key, int64_t tasks, absl::Duration took,
                          absl::Time now, bool gather, absl::Time answered) {
  auto it = holds_.find(key);
  if (it == holds_.end()) return;
  it->second.tasks += tasks;
  it->second.took = std::max(it->second.took, took);
  it->second.gather = it->second.gather || gather;
  it->second.answered = std::min(it->second.answered, answered);
  if (--it->second.count > 0) return;
  // The tasks that waited for the held batches come too. Not counted again: the
  // held batches' own tasks, back as resumed parts or as their clients' next calls
  // queued since the batches answered.
  auto queue = queues_.find(key);
  const absl::Time before = it->second.answered;
  const int64_t waiting =
      queue == queues_.end()
          ? 0
          : std::count_if(queue->second.tasks.begin(), queue->second.tasks.end(),
                          [before](const auto& task) {
                            return !task->resumed() && task->enqueued() < before;
                          });
  const absl::Duration wait =
      std::min(options_.max_gather_delay, it->second.took * kGatherShareOfBatch);
  if (it->second.gather && wait > absl::ZeroDuration()) {
    gathers_[key] = {it->second.tasks + waiting, now + wait};
  }
  holds_.erase(it);
}

std::optional<BatchQueues::Closed> BatchQueues::TakeClosed(absl::Time now, bool flush) {
  auto chosen = queues_.end();
  for (auto it = queues_.begin(); it != queues_.end(); ++it) {
    if (!flush && CloseTime(it->first, it->second) > now) continue;
    if (chosen == queues_.end() ||
        it->second.tasks.front()->enqueued() < chosen->second.tasks.front()->enqueued()) {
      chosen = it;
    }
  }
  if (chosen == queues_.end()) return std::nullopt;
  Closed closed;
  closed.key = chosen->first;
  Queue& queue = chosen->second;
  for (size_t i : NextBatch(queue, &closed.rows)) {
    closed.tasks.push_back(std::move(queue.tasks[i]));
  }
  queue.tasks.erase(std::remove(queue.tasks.begin(), queue.tasks.end(), nullptr),
                    queue.tasks.end());
  queue.rows -= closed.rows;
  size_ -= static_cast<int64_t>(closed.tasks.size());
  gathers_.erase(chosen->first);  // Gathered or not, this was the batch it waited for.
  if (queue.tasks.empty()) queues_.erase(chosen);
  return closed;
}

}  // namespace layerserve
