// Activate() and GatedActivate(): the Highway loops
// (kernels/activation/activation_fast.cc) at every size, with streaming stores for large
// outputs. oneDNN's eltwise primitive, the alternative they were measured against, is
// kept as a baseline outside the server (bench/baseline/activate_onednn.h).
#include "kernels/activation/activation.h"

#include "kernels/activation/activation_internal.h"

namespace layerserve::kernels {
namespace {

// Outputs of at least this many bytes are written with streaming stores: far past
// the L2, where y would be evicted before anyone reads it anyway and skipping the
// read-for-ownership of y pays. Chosen because streaming won from there, see
// docs/perf/2026-11-30-activation-kernels.md.
constexpr int64_t kStreamMinBytes = int64_t{8} << 20;

}  // namespace

namespace internal {

bool UsesStreamingStores(int64_t n) {
  return n * static_cast<int64_t>(sizeof(float)) >= kStreamMinBytes;
}

}  // namespace internal

// Highway at every size: chosen because it beat oneDNN's eltwise for every activation
// (oneDNN's ReLU is as fast but maps NaN to 0, where PyTorch keeps NaN), see
// docs/perf/2026-11-30-activation-kernels.md. ActivateOneDnn stays, in
// bench/baseline/, as the peer those measurements take and a second implementation
// the tests hold the loops to.
void Activate(Activation act, const float* x, int64_t n, float* y,
              ValueStats* output_stats, bool* inputs_finite) {
  internal::ActivateHighway(act, x, n, y, internal::UsesStreamingStores(n), output_stats,
                            inputs_finite);
}

void GatedActivate(Activation act, const float* gate, const float* up, int64_t rows,
                   int64_t dim, int64_t stride, float* y, ValueStats* output_stats,
                   bool* inputs_finite) {
  // oneDNN 2.6 has no GLU primitive. The nearest, eltwise with a binary-multiply
  // post-op, was not tried: the Highway loop already makes one pass, and for SiLU
  // (SwiGLU's gate, the common case) Highway beats oneDNN's eltwise alone.
  internal::GatedActivateHighway(act, gate, up, rows, dim, stride, y,
                                 internal::UsesStreamingStores(rows * dim), output_stats,
                                 inputs_finite);
}

}  // namespace layerserve::kernels
