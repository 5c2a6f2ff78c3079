// LayerNorm through oneDNN's layer_normalization primitive: the baseline the fast
// kernel (kernels/norm/norm.h LayerNorm(), a Highway hand loop) was measured against and
// that benchmarks and tests still compare it to. Never linked into the server.
//
// Same contract as LayerNormReference (kernels/norm/norm.h), except that it ignores
// NormParams::output_stats. A shape oneDNN cannot make a primitive for falls back
// to the reference.
//
// Threads: nothing here starts threads or OpenMP regions itself, but oneDNN (built
// with the OpenMP runtime) parallelizes a primitive over omp_get_max_threads() of
// the calling thread: callers that run it on their own worker threads call
// omp_set_num_threads(1) on each worker first.
#ifndef LAYERSERVE_KERNELS_BASELINE_LAYER_NORM_ONEDNN_H_
#define LAYERSERVE_KERNELS_BASELINE_LAYER_NORM_ONEDNN_H_

#include <cstdint>
#include <memory>

#include "kernels/norm/norm.h"

namespace layerserve::kernels::baseline {

// Per-thread state of LayerNormOneDnn (oneDNN engine, stream, cached primitives,
// scratch buffers). Not thread-safe; cheap to keep one per worker thread.
class NormContext {
 public:
  NormContext();
  ~NormContext();
  NormContext(const NormContext&) = delete;
  NormContext& operator=(const NormContext&) = delete;

  struct Impl;
  Impl& impl() { return *impl_; }

  // How many oneDNN primitives this context holds (bounded; for tests).
  int64_t CachedPrimitiveCount() const;

 private:
  std::unique_ptr<Impl> impl_;
};

// x, y: [rows, dim], row-major, as LayerNormReference. Primitives are cached in ctx.
void LayerNormOneDnn(NormContext& ctx, const float* x, int64_t rows, int64_t dim,
                     const NormParams& p, float* y);

}  // namespace layerserve::kernels::baseline

#endif  // LAYERSERVE_KERNELS_BASELINE_LAYER_NORM_ONEDNN_H_
