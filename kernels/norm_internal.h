// Internal to the norm kernels, not part of the API: the two LayerNorm strategies
// behind LayerNorm() and the shape rule that picks one, exposed so that tests hold
// each strategy to the reference on every shape and the benchmark times each.
#ifndef LAYERSERVE_KERNELS_NORM_INTERNAL_H_
#define LAYERSERVE_KERNELS_NORM_INTERNAL_H_

#include <cstdint>

#include "kernels/norm.h"

namespace layerserve::kernels::internal {

// LayerNorm through oneDNN's layer_normalization primitive (cached in ctx).
void LayerNormOneDnn(NormContext& ctx, const float* x, int64_t rows, int64_t dim,
                     const NormParams& p, float* y);

// LayerNorm as a hand loop, one row at a time; no state.
void LayerNormLoop(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                   float* y);

// True when LayerNorm() takes LayerNormLoop for this shape.
bool LayerNormUsesLoop(int64_t rows, int64_t dim);

}  // namespace layerserve::kernels::internal

#endif  // LAYERSERVE_KERNELS_NORM_INTERNAL_H_
