// Normalization over the last dimension: LayerNorm and RMSNorm, with an optional
// scale (plain or Gemma's 1 + weight), shift (LayerNorm) and fused residual add.
//
// Every fast kernel here has a scalar *Reference twin with the same contract; tests
// hold one to the other. All functions are pure on plain memory and keep no state.
// The fast ones are Highway loops dispatched at run time to the best instruction
// set of the CPU (AVX-512, AVX2, SSE4, ...). (oneDNN's LayerNorm, which they were
// measured against, is a baseline in bench/baseline/layer_norm_onednn.h.)
//
// Semantics are PyTorch's in float32: LayerNorm y = (x - mean) / sqrt(var + eps) * w
// + b with the biased variance (torch.nn.functional.layer_norm); RMSNorm
// y = x / sqrt(mean(x^2) + eps) * w (Llama's, in float32). NaN and Inf propagate
// as in PyTorch's float32 formulas: a row holding NaN comes out all NaN; a
// LayerNorm row holding +-Inf too (its mean and variance are NaN); an RMSNorm row
// holding +-Inf (and no NaN) has mean(x^2) = +Inf and rsqrt(+Inf) = 0, so
// y = x * 0 * w: NaN at each Inf, +-0 elsewhere (x * rsqrt(x.pow(2).mean() + eps)
// in torch). A finite row so large (|x| >~ 1e17 to 1e19, by dim) that its float32
// statistics overflow has no float32 answer (PyTorch silently gives zeros for
// RMSNorm): it comes out all NaN, never half-finite. (The s = x + residual of the
// fused add is what counts: finite x and residual may sum to Inf.) A zero-variance
// row comes out as the bias (up to the float32 rounding of its mean). With
// epsilon = 0, rows of |x| <~ 1e-19 lose their variance to float32 underflow (as
// in PyTorch); use epsilon > 0.
//
// Threads: the kernels never start threads; each call runs on its caller's thread,
// and calls on different outputs may run at once. No pointer needs alignment. The
// kernels allocate nothing and never throw; bad sizes are not checked (REQUIRES).
//
// Outputs of 8 MiB or more are written with non-temporal stores (they bypass the
// caches; the kernel orders them with a store fence before returning), so a caller
// that reads y right away finds it in memory, not in cache.
#ifndef LAYERSERVE_KERNELS_NORM_H_
#define LAYERSERVE_KERNELS_NORM_H_

#include <cstdint>

#include "kernels/value_stats/value_stats.h"

namespace layerserve::kernels {

struct NormParams {
  float epsilon = 1e-5f;
  const float* weight = nullptr;  // [dim] or null (scale 1).
  const float* bias = nullptr;    // [dim] or null (shift 0). LayerNorm only:
                                  // the RmsNorm kernels ignore it.
  bool weight_offset = false;     // Scale is 1 + weight. REQUIRES: weight != null.
  // Fused residual add: when non-null, the kernel normalizes s = x + residual and
  // writes s to residual_out. Both [rows, dim].
  const float* residual = nullptr;
  float* residual_out = nullptr;
  // When non-null, receives the statistics of y (ValueStats), taken from the
  // values as the output pass writes them rather than by a second read: the same
  // counts and abs-max as ComputeValueStats(y), squares summed per row in float
  // lanes (RowSums' precision) and across rows in double. LayerNorm() and
  // RmsNorm() only: the references and baseline::LayerNormOneDnn ignore it.
  ValueStats* output_stats = nullptr;
};

// x, y: [rows, dim], row-major. y may equal x. REQUIRES: rows >= 1, dim >= 1.
// residual_out may equal x or residual, but not y.
void LayerNormReference(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                        float* y);
void RmsNormReference(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                      float* y);

// Fast kernels, same contract as the references.
void LayerNorm(const float* x, int64_t rows, int64_t dim, const NormParams& p, float* y);
void RmsNorm(const float* x, int64_t rows, int64_t dim, const NormParams& p, float* y);

}  // namespace layerserve::kernels

#endif  // LAYERSERVE_KERNELS_NORM_H_
