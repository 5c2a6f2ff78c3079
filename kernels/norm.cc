// LayerNorm(), which takes the Highway hand loop (norm_loops.cc) on every shape.
// oneDNN's layer_normalization, the alternative it was measured against, is kept as
// a baseline outside the server (kernels/baseline/layer_norm_onednn.h).
#include "kernels/norm.h"

#include "kernels/norm_internal.h"

namespace layerserve::kernels {

// The Highway hand loop on every shape. Measured on the target machine (AVX-512,
// one thread, bench/norm_bench.cc BM_Path*, median CPU time of 5, loop vs
// oneDNN): one row of 768 0.11 vs 0.73 us (oneDNN costs ~0.5 us per execute
// before any work), 4 rows 2.1-2.3x faster, 16 to 128 rows of 768 1.2-1.3x, 512
// rows of 768 a tie (78 vs 81 us), rows of 4096 and 8192 1.3-2.1x, 4096x4096
// 6.4 vs 11.9 ms (the loop streams large outputs; oneDNN does not). oneDNN wins
// on no shape, so it stays only as baseline::LayerNormOneDnn, the baseline that
// benchmarks and tests compare to.
void LayerNorm(const float* x, int64_t rows, int64_t dim, const NormParams& p, float* y) {
  internal::LayerNormLoop(x, rows, dim, p, y);
}

}  // namespace layerserve::kernels
