// Internal to the norm kernels, not part of the API: the LayerNorm hand loop that
// LayerNorm() runs on every shape (by measurement against oneDNN's:
// docs/perf/2026-11-30-norm-kernels.md),
// exposed so that tests hold it to the reference and the benchmark times it, and
// the hand loops' tuning constants.
#ifndef LAYERSERVE_KERNELS_NORM_INTERNAL_H_
#define LAYERSERVE_KERNELS_NORM_INTERNAL_H_

#include <cstdint>

#include "kernels/norm/norm.h"

namespace layerserve::kernels::internal {

// LayerNorm as a Highway hand loop, one row at a time; no state. What LayerNorm()
// runs.
void LayerNormLoop(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                   float* y);

// The hand loops store a call's output with non-temporal (streaming) stores when
// it is at least this many bytes, and with plain stores below. Streaming stores
// skip reading each destination line before overwriting it (1.5x less memory
// traffic) but evict the output from the caches, where a caller reading it next
// might have found it. Measured on the target machine (RMSNorm of rows of 4096,
// one thread, best of 30, plain vs streaming stores, GB/s of bytes read +
// written): 256 rows (4 MiB out) 47.6 vs 52.9, 512 rows (8 MiB) 35.6 vs 47.3,
// 1024 rows 23.4 vs 31.5, 4096 rows (64 MiB) 18.0 vs 25.0 (memcpy 54, 47, 38,
// 24). From 8 MiB, 8x the L2 and a quarter of the shared 32 MiB L3, the gain is
// large and the output would not stay in cache long anyway; it is also where the
// activation kernels switch.
inline constexpr int64_t kNormStreamMinBytes = int64_t{8} << 20;

// The Highway target (instruction set, e.g. "AVX3" for AVX-512) that the hand
// loops, LayerNormLoop and RmsNorm, dispatch to now: for tests, which run them on
// every target (hwy::SetSupportedTargetsForTest), and for benchmark reports.
const char* HandLoopTarget();

}  // namespace layerserve::kernels::internal

#endif  // LAYERSERVE_KERNELS_NORM_INTERNAL_H_
