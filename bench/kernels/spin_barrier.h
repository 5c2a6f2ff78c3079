// The barrier the threads of one multi-threaded kernel benchmark (norm, rope,
// activation) meet at after every call, so that each iteration times one call split
// across the threads, as torch.set_num_threads(2) splits one PyTorch call.
#ifndef LAYERSERVE_BENCH_SPIN_BARRIER_H_
#define LAYERSERVE_BENCH_SPIN_BARRIER_H_

#include <emmintrin.h>  // _mm_pause.

#include <atomic>
#include <cstdint>
#include <thread>

namespace layerserve::bench {

// Spins with pause for a while (waking a sleeping thread costs ~27 us on this
// machine, more than a whole call at 16 x 4096), then yields the core, so that on a
// busy machine a waiting thread does not keep its partner from running. OpenMP
// runtimes wait the same way between parallel regions.
class SpinBarrier {
 public:
  void Reset(int threads) {
    threads_ = threads;
    arrived_.store(0);
  }
  // generation: this thread's count of barriers passed so far.
  void Wait(int64_t& generation) {
    ++generation;
    arrived_.fetch_add(1, std::memory_order_acq_rel);
    for (int spins = 0; arrived_.load(std::memory_order_acquire) < generation * threads_;
         ++spins) {
      if (spins < kSpins) {
        _mm_pause();
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  static constexpr int kSpins = 20000;  // Some tens of microseconds.
  int threads_ = 1;
  std::atomic<int64_t> arrived_{0};
};

}  // namespace layerserve::bench

#endif  // LAYERSERVE_BENCH_SPIN_BARRIER_H_
