// Activate() and GatedActivate(): the Highway loops
// (kernels/activation/activation_fast.cc) at every size, with streaming stores for large
// outputs. oneDNN's eltwise primitive, the alternative they were measured against, is
// kept as a baseline outside the server (bench/baseline/activate_onednn.h).
#include "kernels/activation/activation.h"

#include "kernels/activation/activation_internal.h"

namespace layerserve::kernels {
namespace {

// Outputs of at least this many bytes are written with streaming stores: far past
// the 1 MiB L2, where y would be evicted before anyone reads it anyway and skipping
// the read-for-ownership of y pays. Measured (BM_PathHighway*, ReLU, one thread,
// plain vs streaming stores): 1M values (4 MiB out, in + out fit the 32 MiB L3)
// 80 vs 45 GB/s; 4M values (16 MiB) 20-25 vs 35-43 GB/s; 16M 19-24 vs 29-31.
// Compute-bound activations are indifferent (SiLU at 4M: 14.3 vs 14.6).
constexpr int64_t kStreamMinBytes = int64_t{8} << 20;

}  // namespace

namespace internal {

bool UsesStreamingStores(int64_t n) {
  return n * static_cast<int64_t>(sizeof(float)) >= kStreamMinBytes;
}

}  // namespace internal

// Highway at every size: measured against oneDNN's eltwise
// (bench/kernels/activation/activation_bench.cc BM_Path*, AVX-512, one thread, GB/s of
// CPU time, Highway vs oneDNN, chunked as baseline::ActivateOneDnn does) it is faster for
// every activation:
//   GELU      8K: 17.2 vs 11.2, 256K: 16.9 vs 11.5, 16M: 14.1 vs 9.6 since it is
//             exp times a rational (kernels/activation/activation_fast.cc); it was 8.9
//             vs 10.9 at 256K with the erfc form, and went to oneDNN from 8K;
//   sigmoid   8K: 25.3 vs 18.0, 256K: 25.6 vs 17.6, 16M: 20.3 vs 13.4 since its
//             exp is OnePlusExp; it was 16.2 vs 18.0 at 256K with hwy's Exp;
//   tanh      8K: 31.6 vs 14.9, 256K: 31.5 vs 15.1, 16M: 22.3 vs 11.2 since it is
//             a rational function; it was 13.2 vs 15.5 at 256K with hwy's Tanh.
// SiLU, GELU-tanh and QuickGELU were faster in Highway already. oneDNN's ReLU is as
// fast as Highway's but maps NaN to 0 (PyTorch keeps NaN). ActivateOneDnn stays, in
// bench/baseline/, as the peer those measurements take and a second
// implementation the tests hold the loops to.
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
