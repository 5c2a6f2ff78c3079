// The dynamic batcher: keyed queues (BatchQueues) plus the worker threads that run
// closed batches. Handlers Schedule() and return at once; a worker takes the next
// closed batch and hands it to the process callback, which finishes every task in
// it. Generic: it never looks inside a task. Thread-safe.
//
// Each worker builds its own Context on its own thread (kernel contexts that must
// not be shared) and passes it to every batch it runs.
#ifndef LAYERSERVE_SERVER_BATCHER_H_
#define LAYERSERVE_SERVER_BATCHER_H_

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/batch_queues.h"

namespace layerserve {

template <typename Context>
class Batcher {
 public:
  // Runs one closed batch; must finish (answer) every task in it.
  using ProcessBatch = std::function<void(Context&, Batch&)>;
  // Told the number of waiting tasks whenever it changes (under the batcher's lock:
  // keep it cheap, e.g. a gauge).
  using DepthObserver = std::function<void(int64_t)>;

  // REQUIRES: num_threads >= 1.
  Batcher(const BatchOptions& options, int num_threads, ProcessBatch process,
          DepthObserver depth_observer = nullptr)
      : queues_(options),
        process_(std::move(process)),
        depth_observer_(std::move(depth_observer)) {
    threads_.reserve(num_threads);
    for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { RunWorker(); });
  }
  ~Batcher() { Stop(); }

  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Never blocks. Takes `task` (leaving it null) and returns OK, or leaves it with
  // the caller and returns RESOURCE_EXHAUSTED (queue full) or UNAVAILABLE (stopped).
  absl::Status Schedule(const std::string& key, std::unique_ptr<BatchTask>& task) {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("server is shutting down");
    absl::Status status = queues_.Schedule(key, task, absl::Now());
    if (!status.ok()) return status;
    ObserveDepth();
    wake_.Signal();
    return absl::OkStatus();
  }

  // Runs every task already queued (batches close at once), then joins the workers.
  // Idempotent; call from one thread (the owner).
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      wake_.SignalAll();
    }
    for (std::thread& thread : threads_) {
      if (thread.joinable()) thread.join();
    }
    threads_.clear();
  }

 private:
  void ObserveDepth() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (depth_observer_) depth_observer_(queues_.size());
  }

  void RunWorker() {
    Context context;
    absl::MutexLock lock(&mu_);
    while (true) {
      std::optional<BatchQueues::Closed> closed = queues_.TakeClosed(absl::Now(), stopping_);
      if (closed) {
        ObserveDepth();
        // Another batch may be closed too: let another worker look.
        if (queues_.size() > 0) wake_.Signal();
        mu_.Unlock();
        process_(context, closed->tasks);
        mu_.Lock();
        continue;
      }
      if (stopping_ && queues_.size() == 0) return;
      wake_.WaitWithDeadline(&mu_, queues_.NextClose());
    }
  }

  absl::Mutex mu_;
  absl::CondVar wake_;
  BatchQueues queues_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  const ProcessBatch process_;
  const DepthObserver depth_observer_;
  std::vector<std::thread> threads_;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_BATCHER_H_
