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

absl::Time BatchQueues::CloseTime(const std::string& key, const Queue& queue) const {
  if (holds_.count(key) > 0) return absl::InfiniteFuture();
  if (queue.rows >=
      std::min(options_.max_batch_rows, queue.tasks.front()->max_batch_rows()))
    return absl::InfinitePast();
  const absl::Time aged = queue.tasks.front()->enqueued() + options_.max_queue_delay;
  auto gather = gathers_.find(key);
  if (gather == gathers_.end() ||
      static_cast<int64_t>(queue.tasks.size()) >= gather->second.tasks) {
    return aged;
  }
  return std::max(aged, gather->second.until);
}

absl::Time BatchQueues::NextClose() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [key, queue] : queues_) next = std::min(next, CloseTime(key, queue));
  return next;
}

void BatchQueues::Hold(const std::string& key) { ++holds_[key].count; }

void BatchQueues::Release(const std::string& key, int64_t tasks, absl::Duration took,
                          absl::Time now, bool gather) {
  auto it = holds_.find(key);
  if (it == holds_.end()) return;
  it->second.tasks += tasks;
  it->second.took = std::max(it->second.took, took);
  it->second.gather = it->second.gather || gather;
  if (--it->second.count > 0) return;
  auto queue = queues_.find(key);
  const int64_t waiting =
      queue == queues_.end() ? 0 : static_cast<int64_t>(queue->second.tasks.size());
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
  auto take = [&](std::deque<std::unique_ptr<BatchTask>>::iterator it) {
    closed.rows += (*it)->rows();
    closed.tasks.push_back(std::move(*it));
    return queue.tasks.erase(it);
  };
  for (auto it = queue.tasks.begin(); it != queue.tasks.end();) {
    const bool fits =
        closed.tasks.empty() || closed.rows + (*it)->rows() <= options_.max_batch_rows;
    it = (*it)->first_in_batch() && fits ? take(it) : std::next(it);
  }
  // Then the others in their order (steps that did not fit stay for the next
  // batch), at least one.
  int64_t limit = options_.max_batch_rows;  // And every taken task's bound...
  int64_t rows = 0;                         // ...on the rows of these tasks.
  for (auto it = queue.tasks.begin(); it != queue.tasks.end();) {
    if ((*it)->first_in_batch()) {
      ++it;
      continue;
    }
    const int64_t next_limit = std::min(limit, (*it)->max_batch_rows());
    if (rows > 0 && (rows + (*it)->rows() > next_limit ||
                     closed.rows + (*it)->rows() > options_.max_batch_rows)) {
      break;
    }
    limit = next_limit;
    rows += (*it)->rows();
    it = take(it);
  }
  queue.rows -= closed.rows;
  size_ -= static_cast<int64_t>(closed.tasks.size());
  gathers_.erase(chosen->first);  // Gathered or not, this was the batch it waited for.
  if (queue.tasks.empty()) queues_.erase(chosen);
  return closed;
}

}  // namespace layerserve
