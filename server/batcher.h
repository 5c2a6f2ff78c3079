// The dynamic batcher: keyed queues (BatchQueues) plus the worker threads that run
// closed batches. Handlers Schedule() and return at once; a worker takes the next
// closed batch and hands it to the process callback, which finishes every task in
// it. Generic: it never looks inside a task. Thread-safe.
//
// Each worker builds its own Context on its own thread (kernel contexts that must
// not be shared) and passes it to every batch it runs.
//
// Small tasks may instead run on the caller's thread (TryRunInline) when a worker is
// idle: handing a task to a sleeping worker costs a thread wake-up (15-25 µs on the
// target machine), more than the kernel of a small request. Compute never runs on
// more threads than there are workers: an inline run takes an idle worker's place.
#ifndef LAYERSERVE_SERVER_BATCHER_H_
#define LAYERSERVE_SERVER_BATCHER_H_

#include <functional>
#include <memory>
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
        num_threads_(num_threads),
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

  // Runs `task` now on the calling thread, as a batch of one, if nothing is queued
  // and fewer than num_threads batches are running; the caller's thread then counts
  // as a worker until it returns. Else returns false and leaves `task` with the
  // caller. Never waits for anything but the task itself.
  bool TryRunInline(std::unique_ptr<BatchTask>& task) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || queues_.size() > 0 || running_ >= num_threads_) return false;
      ++running_;
    }
    task->enqueued_ = absl::Now();
    // One per calling thread (gRPC's callback threads), built on first use.
    static thread_local Context context;
    Batch batch;
    batch.push_back(std::move(task));
    process_(context, batch);
    absl::MutexLock lock(&mu_);
    --running_;
    // A worker may be waiting for the place this run held (to take a batch, or to
    // see that it may stop).
    wake_.Signal();
    return true;
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
      if (stopping_ && queues_.size() == 0) return;
      // Every place taken (inline runs hold some): wait for one to free up.
      if (running_ >= num_threads_) {
        wake_.Wait(&mu_);
        continue;
      }
      std::optional<BatchQueues::Closed> closed = queues_.TakeClosed(absl::Now(), stopping_);
      if (closed) {
        ObserveDepth();
        ++running_;
        // Another batch may be closed too: let another worker look.
        if (queues_.size() > 0) wake_.Signal();
        mu_.Unlock();
        process_(context, closed->tasks);
        mu_.Lock();
        --running_;
        continue;
      }
      wake_.WaitWithDeadline(&mu_, queues_.NextClose());
    }
  }

  absl::Mutex mu_;
  absl::CondVar wake_;
  BatchQueues queues_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  const int num_threads_;
  // Batches being processed, by workers and inline.
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  const ProcessBatch process_;
  const DepthObserver depth_observer_;
  std::vector<std::thread> threads_;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_BATCHER_H_
