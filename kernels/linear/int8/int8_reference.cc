// The scalar twins of the int8 kernels, for the tests: the few-rows kernel
// (kernels/linear/int8/few_rows.cc), the same float32 operations in the same order, one
// value at a time, and the blocked dequantization (kernels/linear/int8/dequantize.cc).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/dtype.h"
#include "kernels/linear/int8/int8_weights.h"

namespace layerserve::kernels::internal {

void LinearInt8FewRowsBlocksReference(const Int8Weights& w, const float* x, int64_t rows,
                                      int64_t nb_begin, int64_t nb_end, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t nb = nb_begin; nb < nb_end; ++nb) {
      for (int64_t o = nb * kInt8BlockOut; o < std::min(w.out, (nb + 1) * kInt8BlockOut);
           ++o) {
        float acc = w.bias[o];
        for (int64_t k = 0; k < w.in; ++k) {
          acc = std::fma(x[r * w.in + k], w.Dequantized(o, k), acc);
        }
        y[r * w.out + o] = acc;
      }
    }
  }
}

void LinearInt8Bfloat16Reference(const Int8Weights& w, const float* x, int64_t rows,
                                 bool exact_weights, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < w.out; ++o) {
      double sum = w.bias[o];
      for (int64_t k = 0; k < w.in; ++k) {
        const float xk = Bfloat16ToFloat32(Float32ToBfloat16(x[r * w.in + k]));
        const double wk = exact_weights
                              ? double(w.Q(o, k)) * w.Scale(o, k)
                              : Bfloat16ToFloat32(Float32ToBfloat16(w.Dequantized(o, k)));
        sum += double(xk) * wk;
      }
      y[r * w.out + o] = static_cast<float>(sum);
    }
  }
}

void DequantizeInt8BlockedReference(const Int8Weights& w, int64_t nb_begin,
                                    int64_t nb_end, int64_t k_block_stride,
                                    int64_t n_block_stride, uint16_t* dst) {
  for (int64_t nb = nb_begin; nb < nb_end; ++nb) {
    uint16_t* column = dst + (nb - nb_begin) * n_block_stride;
    for (int64_t k = 0; k < w.in; ++k) {
      uint16_t* to = column + (k / 32) * k_block_stride + ((k % 32) / 2) * 128 + k % 2;
      for (int64_t n = 0; n < kInt8BlockOut; ++n) {
        to[n * 2] = FiniteToBfloat16(w.Dequantized(nb * kInt8BlockOut + n, k));
      }
    }
  }
}

}  // namespace layerserve::kernels::internal
