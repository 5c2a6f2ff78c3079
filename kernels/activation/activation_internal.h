// Internal to the activation kernels, not part of the API: the Highway loops behind
// Activate() and GatedActivate(), exposed so that tests hold them to the reference,
// the benchmark times them, and the oneDNN baseline (bench/baseline/) hands them
// the tail of its chunks.
#ifndef LAYERSERVE_KERNELS_ACTIVATION_INTERNAL_H_
#define LAYERSERVE_KERNELS_ACTIVATION_INTERNAL_H_

#include <cstdint>

#include "kernels/activation/activation.h"

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

// True when the fast kernels write an output of n values with streaming stores
// (8 MiB or more: chosen because streaming won from there, see
// docs/perf/2026-11-30-activation-kernels.md).
bool UsesStreamingStores(int64_t n);

}  // namespace layerserve::kernels::internal

#endif  // LAYERSERVE_KERNELS_ACTIVATION_INTERNAL_H_
