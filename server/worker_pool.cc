#include "server/worker_pool.h"

#include <omp.h>

namespace layerserve {

WorkerPool::WorkerPool(int num_threads) {
  threads_.reserve(num_threads);
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { RunWorker(); });
}

WorkerPool::~WorkerPool() { Stop(); }

bool WorkerPool::Submit(Task& task) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  queue_.push_back(std::move(task));
  return true;
}

void WorkerPool::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
}

bool WorkerPool::HasTaskOrStopping() const { return stopping_ || !queue_.empty(); }

void WorkerPool::RunWorker() {
  // oneDNN runs on OpenMP here. The pool already keeps every core busy, and an
  // OpenMP team per worker would oversubscribe them (a 2-thread team's wake-up
  // alone costs more than a small kernel), so each worker computes on one thread.
  omp_set_num_threads(1);
  WorkerContext context;
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &WorkerPool::HasTaskOrStopping));
      if (queue_.empty()) return;  // Stopping, and nothing left to run.
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    std::move(task)(context);
  }
}

}  // namespace layerserve
