// Scalar reference positional kernels: one element at a time, straight from the
// definitions in kernels/positional/positional.h, trigonometry in double. The fast
// kernels (positional_fast.cc) are held to these by tests/kernels/positional_test.cc.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/positional/positional.h"
#include "kernels/positional/positional_internal.h"

namespace layerserve::kernels {
namespace internal {

void SinusoidalRowScalar(const float* x_row, float position, const float* inv_freq,
                         int64_t dim, SinusoidalLayout layout, float* y_row) {
  const int64_t half = dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float angle = position * inv_freq[i];  // float32 product, as PyTorch.
    // sin and cos of that float32 angle, correctly rounded in practice: double's
    // sin/cos are within an ulp of double for every argument (full range
    // reduction in glibc).
    const float s = static_cast<float>(std::sin(static_cast<double>(angle)));
    const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
    const int64_t si = layout == SinusoidalLayout::kInterleaved ? 2 * i : i;
    const int64_t ci = layout == SinusoidalLayout::kInterleaved ? 2 * i + 1 : half + i;
    y_row[si] = x_row != nullptr ? x_row[si] + s : s;
    y_row[ci] = x_row != nullptr ? x_row[ci] + c : c;
  }
}

void AlibiRowScalar(const float* scores_row, float slope, int64_t query_position,
                    int64_t key_length, bool symmetric, float* y_row) {
  for (int64_t j = 0; j < key_length; ++j) {
    const float distance = static_cast<float>(j - query_position);
    const float bias = symmetric ? -slope * std::fabs(distance) : slope * distance;
    y_row[j] = scores_row != nullptr ? scores_row[j] + bias : bias;
  }
}

}  // namespace internal

void SinusoidalReference(const float* x, const int64_t* positions, int64_t rows,
                         int64_t dim, float base, SinusoidalLayout layout, float* y) {
  std::vector<float> inv_freq(dim / 2);
  SinusoidalInverseFrequencies(dim, base, inv_freq.data());
  for (int64_t r = 0; r < rows; ++r) {
    internal::SinusoidalRowScalar(x != nullptr ? x + r * dim : nullptr,
                                  static_cast<float>(positions[r]), inv_freq.data(), dim,
                                  layout, y + r * dim);
  }
}

void LearnedReference(const float* x, const int64_t* positions, int64_t rows, int64_t dim,
                      const float* table, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* t = table + positions[r] * dim;
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = x[r * dim + i] + t[i];
  }
}

void AlibiReference(const float* slopes, const AlibiShape& shape, const float* scores,
                    int64_t batch, float* y) {
  const int64_t tq = shape.query_length, tk = shape.key_length;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t row = ((b * shape.heads + h) * tq + i) * tk;
        internal::AlibiRowScalar(scores != nullptr ? scores + row : nullptr, slopes[h],
                                 shape.query_offset + i, tk, shape.symmetric, y + row);
      }
    }
  }
}

void T5BiasReference(const float* table, const T5BiasShape& shape, float* y) {
  const int64_t tq = shape.query_length, tk = shape.key_length;
  for (int64_t h = 0; h < shape.heads; ++h) {
    for (int64_t i = 0; i < tq; ++i) {
      for (int64_t j = 0; j < tk; ++j) {
        // relative_position = memory_position - context_position.
        const int64_t bucket =
            T5RelativePositionBucket(j - (shape.query_offset + i), shape.bidirectional,
                                     shape.num_buckets, shape.max_distance);
        y[(h * tq + i) * tk + j] = table[bucket * shape.heads + h];
      }
    }
  }
}

}  // namespace layerserve::kernels
