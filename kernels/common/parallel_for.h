// Loops a kernel may split across threads that would otherwise sit idle. The
// kernels own no threads: whoever runs them (the server's batcher) lends its idle
// workers through this interface, and with none to lend a loop runs on the calling
// thread. Splitting never changes a result: every index is computed by the same code
// whichever thread takes it.
#ifndef LAYERSERVE_KERNELS_PARALLEL_FOR_H_
#define LAYERSERVE_KERNELS_PARALLEL_FOR_H_

#include <cstdint>
#include <functional>

namespace layerserve::kernels {

class ParallelFor {
 public:
  virtual ~ParallelFor() = default;
  // Calls body(i) exactly once for every i in [0, n), on the calling thread and
  // possibly on others at the same time, and returns when every call has returned.
  // body must be safe to run concurrently for different i, and should not throw:
  // this interface does not say what becomes of the other indices if it does.
  virtual void Run(int64_t n, const std::function<void(int64_t)>& body) = 0;
};

// body(i) for i in [0, n): through `parallel` when there is one (and n > 1), else in
// order on this thread, where an exception from body propagates at once.
inline void RunParallel(ParallelFor* parallel, int64_t n,
                        const std::function<void(int64_t)>& body) {
  if (parallel != nullptr && n > 1) return parallel->Run(n, body);
  for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace layerserve::kernels

#endif  // LAYERSERVE_KERNELS_PARALLEL_FOR_H_
