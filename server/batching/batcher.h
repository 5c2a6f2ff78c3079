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
//
// A running batch may share a loop with idle workers (the kernels::ParallelFor this
// is): decode steps of many sessions stream all of a model's weights once per batch,
// and one batch on both cores reads them once where two batches, one per core, read
// them twice. A worker takes a closed batch before it helps, but while a batch
// shares loops, or from its start if its tasks gather (BatchTask::gathers()), the
// queue of its key is held (BatchQueues::Hold): what arrives meanwhile waits for
// it, and, if its tasks gather, the next batch gathers what comes back
// (BatchOptions::max_gather_delay), so sessions stepping together run as one batch
// on all the workers.
#ifndef LAYERSERVE_SERVER_BATCHING_BATCHER_H_
#define LAYERSERVE_SERVER_BATCHING_BATCHER_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "kernels/common/parallel_for.h"
#include "server/batching/batch_queues.h"

namespace layerserve {

template <typename Context>
class Batcher : public kernels::ParallelFor {
 public:
  // Runs one closed batch; must finish (answer) every task in it, and must not
  // throw (a worker's place would be lost; the server's catches everything).
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
  ~Batcher() override { Stop(); }

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
    ++events_;
    wake_.Signal();
    return absl::OkStatus();
  }

  // Runs `task` now on the calling thread, as a batch of one, if nothing is queued
  // and fewer than num_threads batches are running; the caller's thread then counts
  // as a worker until it returns. Else returns false and leaves `task` with the
  // caller. Never waits for anything but the task itself.
  bool TryRunInline(std::unique_ptr<BatchTask>& task) {
    // One per calling thread (gRPC's callback threads), built on first use. Built,
    // and the batch's room allocated, before a place is taken: if either throws,
    // no place is lost and the task stays with the caller.
    static thread_local Context context;
    Batch batch;
    batch.reserve(1);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || queues_.size() > 0 || running_ + helping_ >= num_threads_)
        return false;
      ++running_;
    }
    task->enqueued_ = absl::Now();
    batch.push_back(std::move(task));
    process_(context, batch);
    absl::MutexLock lock(&mu_);
    --running_;
    // A worker may be waiting for the place this run held (to take a batch, or to
    // see that it may stop).
    wake_.Signal();
    return true;
  }

  // kernels::ParallelFor, for the process callback: body(i) for i in [0, n) on this
  // thread and on workers that are idle (no closed batch to take) while a place is
  // free. With none, or another loop already shared, it runs here alone.
  void Run(int64_t n, const std::function<void(int64_t)>& body) override {
    SharedLoop loop(n, body);
    bool shared = false;
    {
      absl::MutexLock lock(&mu_);
      if (shared_ == nullptr && busy_workers_ < num_threads_ &&
          running_ + helping_ < num_threads_) {
        shared_ = &loop;
        shared = true;
        ++events_;
        wake_.SignalAll();
      }
      // Held even when no one is idle now: a worker that finishes its own batch then
      // helps this one instead of starting another of its kind.
      if (running_batch_ != nullptr && running_batch_->batcher == this &&
          !running_batch_->holds) {
        queues_.Hold(running_batch_->key);
        running_batch_->holds = true;
      }
    }
    loop.Take();
    if (shared) {
      {
        absl::MutexLock lock(&mu_);
        shared_ = nullptr;  // No one joins from here on.
      }
      // Helpers that joined finish the index each holds (the loop is on this stack).
      while (loop.helpers.load() > 0) std::this_thread::yield();
    }
    // A batch answers after its last loop: what its key's queue gets from then on
    // may be its own tasks coming back (BatchQueues::Release).
    if (running_batch_ != nullptr && running_batch_->batcher == this) {
      running_batch_->computed = absl::Now();
    }
  }

  // Runs fn(context) once on every worker thread, each with its own Context, and
  // returns when all have: the warm-up before serving (server/rpc/warm_up.h), which
  // must reach every worker's thread-local state. A worker takes it before its next
  // batch. fn must not throw. Call from one thread at a time, before Stop().
  void RunOnEachWorker(const std::function<void(Context&)>& fn) {
    absl::MutexLock lock(&mu_);
    each_ = &fn;
    ++each_round_;
    each_left_ = static_cast<int>(threads_.size());
    wake_.SignalAll();
    // A CondVar wait, as the workers' own (an absl::Condition here was a data race
    // under TSan: Debian's absl evaluates it outside what TSan sees of the lock).
    while (each_left_ > 0) wake_.Wait(&mu_);
    each_ = nullptr;
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

  // A loop one batch shares (Run): indices go to whoever asks next.
  struct SharedLoop {
    SharedLoop(int64_t n, const std::function<void(int64_t)>& body) : n(n), body(body) {}
    void Take() {
      for (int64_t i = next++; i < n; i = next++) body(i);
    }
    bool Exhausted() const { return next.load() >= n; }

    const int64_t n;
    const std::function<void(int64_t)>& body;
    std::atomic<int64_t> next{0};
    std::atomic<int> helpers{0};  // Workers in Take(); the owner waits for 0.
  };

  // The batch a worker thread is running, for Run() to hold its key.
  struct RunningBatch {
    const Batcher* batcher;
    std::string key;
    bool holds = false;
    absl::Time computed = absl::InfiniteFuture();  // When its last loop ended.
  };
  static inline thread_local RunningBatch* running_batch_ = nullptr;

  // How long a worker that just helped watches for the batch's next loop before it
  // sleeps: a decode step shares ~5 loops per layer, microseconds apart, and a
  // wake-up from sleep costs 15-25 µs.
  static constexpr std::chrono::microseconds kHelperWatch{50};

  void RunWorker() {
    Context context;
    int64_t each_seen = 0;  // The last RunOnEachWorker round this worker ran.
    absl::MutexLock lock(&mu_);
    while (true) {
      if (each_ != nullptr && each_seen != each_round_) {
        each_seen = each_round_;
        const std::function<void(Context&)>* fn = each_;
        mu_.Unlock();
        (*fn)(context);
        mu_.Lock();
        if (--each_left_ == 0) wake_.SignalAll();  // The caller waits on wake_.
        continue;
      }
      if (stopping_ && queues_.size() == 0) return;
      // Every place taken (inline runs and helpers hold some): wait for one.
      if (running_ + helping_ >= num_threads_) {
        wake_.Wait(&mu_);
        continue;
      }
      std::optional<BatchQueues::Closed> closed =
          queues_.TakeClosed(absl::Now(), stopping_);
      if (closed) {
        ObserveDepth();
        ++running_;
        ++busy_workers_;
        // Another batch may be closed too: let another worker look.
        if (queues_.size() > 0) wake_.Signal();
        RunningBatch batch{this, closed->key};
        const int64_t tasks = static_cast<int64_t>(closed->tasks.size());
        // Asked now: process_ answers the tasks, and may destroy them.
        const bool gather = closed->tasks.front()->gathers();
        // Work that gathers streams its weights in every batch: its key is held
        // from the start, not from the first shared loop, or in between another
        // worker would take a second batch of it (a prefill's part that waited)
        // and the two would each read the weights on one core, twice as long.
        if (gather) {
          queues_.Hold(batch.key);
          batch.holds = true;
        }
        running_batch_ = &batch;
        const absl::Time started = absl::Now();
        mu_.Unlock();
        process_(context, closed->tasks);
        mu_.Lock();
        running_batch_ = nullptr;
        --running_;
        --busy_workers_;
        if (batch.holds) {
          const absl::Time now = absl::Now();
          queues_.Release(batch.key, tasks, now - started, now, gather, batch.computed);
          wake_.Signal();  // What waited for it may be closed now.
        }
        continue;
      }
      if (shared_ != nullptr && !shared_->Exhausted()) {
        Help(*shared_);
        continue;
      }
      wake_.WaitWithDeadline(&mu_, queues_.NextClose());
    }
  }

  // Takes indices of `loop` until none are left, then watches briefly for the next
  // shared loop or task.
  void Help(SharedLoop& loop) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++loop.helpers;
    ++helping_;
    ++busy_workers_;
    mu_.Unlock();
    loop.Take();
    --loop.helpers;  // `loop` may be gone from here on.
    mu_.Lock();
    --helping_;
    --busy_workers_;
    if (running_ == 0) return;
    const int64_t seen = events_.load();
    mu_.Unlock();
    const auto until = std::chrono::steady_clock::now() + kHelperWatch;
    while (events_.load() == seen && std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
    mu_.Lock();
  }

  absl::Mutex mu_;
  absl::CondVar wake_;
  BatchQueues queues_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  const int num_threads_;
  // Batches being processed, by workers and inline.
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  // Workers taking indices of a shared loop; each holds a place as a batch does.
  int helping_ ABSL_GUARDED_BY(mu_) = 0;
  // Workers running a batch or helping (the others are idle).
  int busy_workers_ ABSL_GUARDED_BY(mu_) = 0;
  // RunOnEachWorker's function (owned by its caller, which waits), its round, and
  // the workers that have not run it yet.
  const std::function<void(Context&)>* each_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t each_round_ ABSL_GUARDED_BY(mu_) = 0;
  int each_left_ ABSL_GUARDED_BY(mu_) = 0;
  // The loop idle workers may help with (one at a time), owned by Run()'s caller.
  SharedLoop* shared_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Bumped when a loop is shared or a task is queued: a worker watching after it
  // helped leaves its watch.
  std::atomic<int64_t> events_{0};
  const ProcessBatch process_;
  const DepthObserver depth_observer_;
  std::vector<std::thread> threads_;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_BATCHING_BATCHER_H_
