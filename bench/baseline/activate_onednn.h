// Element-wise activations through oneDNN's eltwise primitive: the alternative the
// fast kernel (kernels/activation/activation.h Activate(), Highway loops) was measured
// against and that benchmarks and tests still compare it to. Never linked into the
// server.
//
// Same contract as ActivateReference (kernels/activation/activation.h), except for ReLU
// of NaN: oneDNN's eltwise ReLU maps NaN to 0 (PyTorch keeps NaN).
//
// Threads: nothing here starts threads or OpenMP regions itself, but oneDNN (built
// with the OpenMP runtime) parallelizes a primitive over omp_get_max_threads() of
// the calling thread: callers that run it on their own worker threads call
// omp_set_num_threads(1) on each worker first.
#ifndef LAYERSERVE_KERNELS_BASELINE_ACTIVATE_ONEDNN_H_
#define LAYERSERVE_KERNELS_BASELINE_ACTIVATE_ONEDNN_H_

#include <cstdint>
#include <memory>

#include "kernels/activation/activation.h"

namespace layerserve::kernels::baseline {

// Per-thread state of ActivateOneDnn (oneDNN engine, stream, cached eltwise
// primitives). Not thread-safe; cheap to keep one per worker thread.
class ActivationContext {
 public:
  ActivationContext();
  ~ActivationContext();
  ActivationContext(const ActivationContext&) = delete;
  ActivationContext& operator=(const ActivationContext&) = delete;

  struct Impl;
  Impl& impl() { return *impl_; }

  // How many oneDNN primitives this context holds (at most two per activation).
  int64_t CachedPrimitiveCount() const;

 private:
  std::unique_ptr<Impl> impl_;
};

// oneDNN eltwise (forward_inference) run over fixed chunks: as many of
// kOneDnnChunk values as fit, then of kOneDnnSmallChunk, and the rest (fewer than
// kOneDnnSmallChunk values) goes to the Highway loop. Two cached primitives per
// activation at most, whatever the sizes. Falls back to Highway if oneDNN cannot
// make a primitive.
inline constexpr int64_t kOneDnnChunk = 1 << 16;
inline constexpr int64_t kOneDnnSmallChunk = 1 << 13;
void ActivateOneDnn(ActivationContext& ctx, Activation act, const float* x, int64_t n,
                    float* y);

}  // namespace layerserve::kernels::baseline

#endif  // LAYERSERVE_KERNELS_BASELINE_ACTIVATE_ONEDNN_H_
