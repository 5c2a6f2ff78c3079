// Internal to the norm kernels, not part of the API: the LayerNorm hand loop that
// LayerNorm() runs on every shape (chosen over oneDNN's, see
// docs/perf/2026-11-30-norm-kernels.md), exposed so that tests hold it to the
// reference and the benchmark times it, and the hand loops' tuning constants.
#ifndef LAYERSERVE_KERNELS_NORM_INTERNAL_H_
#define LAYERSERVE_KERNELS_NORM_INTERNAL_H_

#include <cstdint>

#include "kernels/norm/norm.h"

namespace layerserve::kernels::internal {

// LayerNorm as a Highway hand loop, one row at a time; no state. What LayerNorm()
// runs; same contract (norm.h).
void LayerNormLoop(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                   float* y);

// The hand loops store a call's output with non-temporal (streaming) stores when
// it is at least this many bytes, and with plain stores below. Streaming stores
// skip reading each destination line before overwriting it (1.5x less memory
// traffic) but evict the output from the caches, where a caller reading it next
// might have found it; from 8 MiB the output would not stay in cache long anyway.
// The activation kernels switch at the same size. Chosen because streaming won from
// 8 MiB on, see docs/perf/2026-12-06-kernel-choices.md.
inline constexpr int64_t kNormStreamMinBytes = int64_t{8} << 20;

// The Highway target (instruction set, e.g. "AVX3" for AVX-512) that the hand
// loops, LayerNormLoop and RmsNorm, dispatch to now: for tests, which run them on
// every target (hwy::SetSupportedTargetsForTest), and for benchmark reports.
// Thread-safe.
const char* HandLoopTarget();

}  // namespace layerserve::kernels::internal

#endif  // LAYERSERVE_KERNELS_NORM_INTERNAL_H_
