// A ParallelFor for kernel tests: every Run starts `threads` - 1 threads besides the
// caller, all taking indices from one counter, so a test sees the same index order
// races the server's shared loops can produce. Each thread computes on itself
// alone (one OpenMP thread), as the server's workers do: a oneDNN call would
// otherwise start a team per thread and oversubscribe the cores many times over.
#ifndef LAYERSERVE_TESTS_TESTING_THREADS_PARALLEL_FOR_H_
#define LAYERSERVE_TESTS_TESTING_THREADS_PARALLEL_FOR_H_

#include <omp.h>

#include <atomic>
#include <thread>
#include <vector>

#include "kernels/common/parallel_for.h"

namespace layerserve::testing {

class ThreadsParallelFor : public kernels::ParallelFor {
 public:
  explicit ThreadsParallelFor(int threads) : threads_(threads) {}

  void Run(int64_t n, const std::function<void(int64_t)>& body) override {
    std::atomic<int64_t> next{0};
    auto take = [&] {
      for (int64_t i = next++; i < n; i = next++) body(i);
    };
    std::vector<std::thread> others;
    for (int t = 1; t < threads_; ++t) {
      others.emplace_back([&] {
        omp_set_num_threads(1);
        take();
      });
    }
    take();
    for (std::thread& thread : others) thread.join();
  }

 private:
  const int threads_;
};

}  // namespace layerserve::testing

#endif  // LAYERSERVE_TESTS_TESTING_THREADS_PARALLEL_FOR_H_
