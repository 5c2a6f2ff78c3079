// Scalar reference twins of the RoPE table and apply kernels: one value at a time,
// in double where it matters, written to be obviously right rather than fast.
#include <cmath>
#include <cstring>

#include "kernels/rope/rope.h"

namespace layerserve::kernels {
namespace {

// Index of the dimension that dimension i (< rotary_dim) rotates with.
int64_t Partner(int64_t i, int64_t rotary_dim, RopeStyle style) {
  if (style == RopeStyle::kInterleaved) return i ^ 1;
  const int64_t half = rotary_dim / 2;
  return i < half ? i + half : i - half;
}

// Frequency used by dimension i (< rotary_dim).
int64_t FrequencyIndex(int64_t i, int64_t rotary_dim, RopeStyle style) {
  if (style == RopeStyle::kInterleaved) return i / 2;
  return i % (rotary_dim / 2);
}

}  // namespace

void ComputeRopeTablesReference(const RopeFrequencies& frequencies, RopeStyle style,
                                const int64_t* positions, int64_t count, float* cos,
                                float* sin) {
  const int64_t half = static_cast<int64_t>(frequencies.inv_freq.size());
  const int64_t rotary_dim = 2 * half;
  for (int64_t p = 0; p < count; ++p) {
    const float position = static_cast<float>(positions[p]);
    for (int64_t i = 0; i < rotary_dim; ++i) {
      const int64_t f = FrequencyIndex(i, rotary_dim, style);
      // The float32 angle as HF forms it, then cos/sin of exactly that angle,
      // correctly rounded to float32 (double libm, then one rounding).
      const float angle = position * frequencies.inv_freq[f];
      const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
      const float s = static_cast<float>(std::sin(static_cast<double>(angle)));
      // rotate(x) puts -x_b in front of x_a: sin carries that sign.
      const bool first_of_pair = i < Partner(i, rotary_dim, style);
      cos[p * rotary_dim + i] = c * frequencies.attention_scaling;
      sin[p * rotary_dim + i] = (first_of_pair ? -s : s) * frequencies.attention_scaling;
    }
  }
}

void ApplyRopeReference(const float* x, float* y, const RopeGeometry& g, RopeStyle style,
                        const float* cos, const float* sin) {
  std::vector<float> row(g.head_dim);  // x's row, so that y may alias x.
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t h = 0; h < g.heads; ++h) {
      for (int64_t t = 0; t < g.tokens; ++t) {
        const int64_t offset =
            b * g.batch_stride + h * g.head_stride + t * g.token_stride;
        std::memcpy(row.data(), x + offset, g.head_dim * sizeof(float));
        const int64_t table = b * g.table_batch_stride + t * g.rotary_dim;
        for (int64_t i = 0; i < g.rotary_dim; ++i) {
          const double rotated =
              static_cast<double>(row[i]) * cos[table + i] +
              static_cast<double>(row[Partner(i, g.rotary_dim, style)]) * sin[table + i];
          y[offset + i] = static_cast<float>(rotated);
        }
        for (int64_t i = g.rotary_dim; i < g.head_dim; ++i) y[offset + i] = row[i];
      }
    }
  }
}

}  // namespace layerserve::kernels
