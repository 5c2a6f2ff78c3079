// The formulas both twins of every positional kernel share
// (kernels/positional/positional.h): sinusoidal inverse frequencies, ALiBi slopes and
// T5's relative-position buckets. Scalar, computed once per request (or cached per
// worker), never per element.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "kernels/positional/positional.h"

namespace layerserve::kernels {

void SinusoidalInverseFrequencies(int64_t dim, float base, float* inv_freq) {
  // pow in double is within ~0.5 ulp of double; one rounding to float32 then gives
  // the nearest float32 (a tie within 1e-16 is never met in practice).
  const double b = base;
  for (int64_t i = 0; i < dim / 2; ++i) {
    inv_freq[i] = static_cast<float>(std::pow(b, -2.0 * static_cast<double>(i) / dim));
  }
}

void AlibiSlopes(int64_t num_heads, float* slopes) {
  int64_t n = 1;  // The largest power of two <= num_heads.
  while (n * 2 <= num_heads) n *= 2;
  for (int64_t h = 0; h < n; ++h) {
    slopes[h] = static_cast<float>(std::exp2(-8.0 * static_cast<double>(h + 1) / n));
  }
  // Every other slope of 2n heads: 2^(-8 (2k + 1) / (2n)) = 2^(-4 (2k + 1) / n).
  for (int64_t k = 0; n + k < num_heads; ++k) {
    slopes[n + k] =
        static_cast<float>(std::exp2(-4.0 * static_cast<double>(2 * k + 1) / n));
  }
}

int64_t T5RelativePositionBucket(int64_t relative_position, bool bidirectional,
                                 int64_t num_buckets, int64_t max_distance) {
  // Hugging Face's code, line by line (transformers T5Attention.
  // _relative_position_bucket); tensors there are int64 except where .float().
  int64_t bucket = 0;
  int64_t n = num_buckets;
  int64_t distance;  // >= 0 from here on.
  if (bidirectional) {
    n /= 2;
    if (relative_position > 0) bucket += n;
    // j - (query_offset + i) >= -INT64_MAX: never INT64_MIN, so |.| exists.
    distance = std::llabs(relative_position);
  } else {
    distance = -std::min<int64_t>(relative_position, 0);
  }
  const int64_t max_exact = n / 2;
  if (distance < max_exact) return bucket + distance;
  // max_exact + (torch.log(distance.float() / max_exact)
  //              / math.log(max_distance / max_exact) * (n - max_exact)).to(long)
  // Python's scalars meet a float32 tensor, so each enters as float32.
  const float ratio = static_cast<float>(distance) / static_cast<float>(max_exact);
  const float log_scale = static_cast<float>(
      std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float scaled = std::log(ratio) / log_scale * static_cast<float>(n - max_exact);
  const int64_t large =
      max_exact + static_cast<int64_t>(scaled);  // Truncates, as .to(long).
  return bucket + std::min(large, n - 1);
}

}  // namespace layerserve::kernels
