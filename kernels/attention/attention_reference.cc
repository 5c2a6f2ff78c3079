#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention/attention.h"

namespace layerserve::kernels {

void AttentionReference(const AttentionArgs& a) {
  const int64_t group = a.q_heads / a.kv_heads;
  std::vector<double> p(a.keys);
  for (int64_t t = 0; t < a.tokens; ++t) {
    const int64_t limit = a.key_limits[t];
    for (int64_t h = 0; h < a.q_heads; ++h) {
      const int64_t g = h / group;
      const float* q = a.q + t * a.q_stride + h * a.head_dim;
      float* out = a.out + t * a.out_stride + h * a.head_dim;
      if (limit == 0) {
        for (int64_t d = 0; d < a.head_dim; ++d) out[d] = 0;
        continue;
      }
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < limit; ++j) {
        const float* k = a.k + j * a.kv_stride + g * a.head_dim;
        double dot = 0;
        for (int64_t d = 0; d < a.head_dim; ++d) dot += double(q[d]) * k[d];
        p[j] = dot * a.scale;
        max = std::max(max, p[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < limit; ++j) sum += (p[j] = std::exp(p[j] - max));
      double entropy = 0;
      for (int64_t j = 0; j < limit; ++j) {
        p[j] /= sum;
        if (p[j] > 0) entropy -= p[j] * std::log(p[j]);
      }
      if (a.head_entropy != nullptr) a.head_entropy[h] += entropy;
      for (int64_t d = 0; d < a.head_dim; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < limit; ++j) {
          acc += p[j] * a.v[j * a.kv_stride + g * a.head_dim + d];
        }
        out[d] = static_cast<float>(acc);
      }
    }
  }
}

}  // namespace layerserve::kernels
