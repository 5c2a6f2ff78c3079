// Activations: element-wise (ReLU, GELU erf and tanh forms, SiLU, sigmoid, tanh,
// QuickGELU) and gated, act(gate) * up, in one pass (SwiGLU, GeGLU, GeGLU-tanh,
// ReGLU).
//
// Every fast kernel has a scalar *Reference twin with the same contract; tests hold
// one to the other. All functions are pure on plain memory and keep no state. The
// fast ones are Highway loops dispatched at run time to the best instruction set of
// the CPU. (oneDNN's eltwise, which they were measured against, is a baseline in
// bench/baseline/activate_onednn.h.)
//
// Semantics are PyTorch's (1.13) in float32, formulas as torch writes them:
//   kRelu       max(x, 0); NaN stays NaN, -0 stays -0 (torch.relu).
//   kGelu       x * Phi(x) = x/2 * erfc(-x/sqrt(2)) (F.gelu, approximate='none').
//   kGeluTanh   x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
//               (F.gelu approximate='tanh'; HF gelu_new / gelu_pytorch_tanh).
//   kSilu       x / (1 + exp(-x)) (F.silu).
//   kSigmoid    1 / (1 + exp(-x)) (torch.sigmoid).
//   kTanh       tanh(x).
//   kQuickGelu  x * sigmoid(1.702 x) (HF QuickGELUActivation, CLIP).
// Non-finite inputs give what PyTorch gives: every function maps NaN to NaN;
// +Inf to +Inf (1 for sigmoid and tanh); -Inf to 0 for relu and sigmoid, -1 for
// tanh, and NaN for the x * gate forms (gelu, gelu_tanh, silu, quick_gelu: -inf * 0).
// Finite inputs of any magnitude give finite outputs (e.g. silu(-1e20) = -0); a
// gated product act(gate) * up may still overflow to +-inf, as in PyTorch.
//
// Threads: the kernels never start threads; each call runs on its caller's thread,
// and calls on different outputs may run at once. No pointer needs alignment. The
// kernels allocate nothing and never throw; bad sizes are not checked (REQUIRES).
// Outputs of 8 MiB or more are written with non-temporal stores
// (internal::UsesStreamingStores), fenced before the call returns.
#ifndef LAYERSERVE_KERNELS_ACTIVATION_H_
#define LAYERSERVE_KERNELS_ACTIVATION_H_

#include <cstdint>

#include "kernels/value_stats/value_stats.h"

namespace layerserve::kernels {

enum class Activation { kRelu, kGelu, kGeluTanh, kSilu, kSigmoid, kTanh, kQuickGelu };

inline constexpr int kNumActivations = 7;

// "Relu", "Gelu"...: for test names and benchmark labels.
const char* ActivationName(Activation act);

// Element-wise: y[i] = act(x[i]). x, y: [n]. REQUIRES: n >= 0. y may equal x
// (otherwise they must not overlap).
void ActivateReference(Activation act, const float* x, int64_t n, float* y);

// Gated: y[r][i] = act(gate[r * stride + i]) * up[r * stride + i] for r < rows,
// i < dim: gate and up are `rows` rows of `dim` values, `stride` values apart;
// y: [rows, dim], contiguous.
//   Two tensors [rows, dim]:         stride = dim.
//   Packed [rows, 2 * dim] (first half of each row the gate, second the up, as
//   vLLM's SiluAndMul):              up = gate + dim, stride = 2 * dim.
// act(gate) is rounded to float32 before the product, as PyTorch's
// F.silu(gate) * up is. REQUIRES: rows, dim >= 0, stride >= dim. y may equal gate
// (either layout); otherwise y must not overlap gate or up.
void GatedActivateReference(Activation act, const float* gate, const float* up,
                            int64_t rows, int64_t dim, int64_t stride, float* y);

// Fast kernels, same contracts as the references. With `output_stats`, also set
// *output_stats to the numeric health of y (value_stats.h), taken in the pass
// that writes y rather than by reading it again; and, with `inputs_finite` too,
// *inputs_finite to whether every input value read (x; gate and up) was finite,
// checked as it is read, so that a caller counting NaN and Inf on the input
// reads it again only when it holds some (an output does not tell: ReLU, sigmoid
// and tanh send -Inf to finite values).
void Activate(Activation act, const float* x, int64_t n, float* y,
              ValueStats* output_stats = nullptr, bool* inputs_finite = nullptr);
void GatedActivate(Activation act, const float* gate, const float* up, int64_t rows,
                   int64_t dim, int64_t stride, float* y,
                   ValueStats* output_stats = nullptr, bool* inputs_finite = nullptr);

}  // namespace layerserve::kernels

#endif  // LAYERSERVE_KERNELS_ACTIVATION_H_
