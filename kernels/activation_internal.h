// Internal to the activation kernels, not part of the API: the Highway loops behind
// Activate() and GatedActivate(), and oneDNN's eltwise, the alternative they were
// measured against (activation.cc), exposed so that tests hold each to the
// reference and the benchmark times each.
#ifndef LAYERSERVE_KERNELS_ACTIVATION_INTERNAL_H_
#define LAYERSERVE_KERNELS_ACTIVATION_INTERNAL_H_

#include <cstdint>

#include "kernels/activation.h"

namespace layerserve::kernels::internal {

// Highway loops, compiled for several x86 levels and picked at run time for the
// CPU (HWY_DYNAMIC_DISPATCH). Same contracts as the references. `stream` writes y
// with non-temporal stores: for outputs far larger than the caches, so the stores
// skip the read-for-ownership of y (only then; a cached reader of y would miss).
// With `stats`, also sets *stats to the statistics of y, taken as y is written,
// and *inputs_finite (if given) as Activate documents.
void ActivateHighway(Activation act, const float* x, int64_t n, float* y, bool stream,
                     ValueStats* stats = nullptr, bool* inputs_finite = nullptr);
void GatedActivateHighway(Activation act, const float* gate, const float* up,
                          int64_t rows, int64_t dim, int64_t stride, float* y,
                          bool stream, ValueStats* stats = nullptr,
                          bool* inputs_finite = nullptr);

// The Highway target the loops above dispatch to ("AVX3", "AVX2"...).
const char* ActivationHighwayTarget();

// oneDNN eltwise (forward_inference) run over fixed chunks: as many of
// kOneDnnChunk values as fit, then of kOneDnnSmallChunk, and the rest (fewer than
// kOneDnnSmallChunk values) goes to Highway. Two cached primitives per activation
// at most, whatever the sizes. Falls back to Highway if oneDNN cannot make a
// primitive.
inline constexpr int64_t kOneDnnChunk = 1 << 16;
inline constexpr int64_t kOneDnnSmallChunk = 1 << 13;
void ActivateOneDnn(ActivationContext& ctx, Activation act, const float* x, int64_t n,
                    float* y);

// True when the fast kernels write an output of n values with streaming stores.
bool UsesStreamingStores(int64_t n);

}  // namespace layerserve::kernels::internal

#endif  // LAYERSERVE_KERNELS_ACTIVATION_INTERNAL_H_
