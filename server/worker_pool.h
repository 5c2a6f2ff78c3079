// A fixed set of compute threads that run tasks handed over by RPC handlers.
// Handlers never compute: they validate, Submit() and return, and the worker that
// runs a task finishes its RPC. Thread-safe: Submit() and Stop() may be called from
// any thread.
#ifndef LAYERSERVE_SERVER_WORKER_POOL_H_
#define LAYERSERVE_SERVER_WORKER_POOL_H_

#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "kernels/activation.h"
#include "kernels/block.h"
#include "kernels/norm.h"
#include "kernels/positional.h"

namespace layerserve {

// State one worker thread owns and hands to each task it runs: kernel contexts whose
// oneDNN primitives must not run on two threads at once.
struct WorkerContext {
  kernels::NormContext norm;
  kernels::BlockKernels block;
  kernels::PositionalContext positional;
  kernels::ActivationContext activation;
};

class WorkerPool {
 public:
  using Task = absl::AnyInvocable<void(WorkerContext&) &&>;

  // REQUIRES: num_threads >= 1.
  explicit WorkerPool(int num_threads);
  // Stop()s.
  ~WorkerPool();

  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task`; never blocks. Returns false (and drops nothing: `task` is left
  // untouched) once Stop() has begun.
  bool Submit(Task& task);

  // Runs every task already queued, then joins the threads. Idempotent; call from
  // one thread (the owner).
  void Stop();

 private:
  void RunWorker();
  bool HasTaskOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_WORKER_POOL_H_
