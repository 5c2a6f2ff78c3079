// The scalar twin of the int8 few-rows kernel (linear_int8_few_rows.cc): the same
// float32 operations in the same order, one value at a time, for the tests.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/dtype.h"
#include "kernels/linear_int8.h"

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
                                 float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < w.out; ++o) {
      double sum = w.bias[o];
      for (int64_t k = 0; k < w.in; ++k) {
        const float xk = Bfloat16ToFloat32(Float32ToBfloat16(x[r * w.in + k]));
        const float wk = Bfloat16ToFloat32(Float32ToBfloat16(w.Dequantized(o, k)));
        sum += double(xk) * wk;
      }
      y[r * w.out + o] = static_cast<float>(sum);
    }
  }
}

}  // namespace layerserve::kernels::internal
