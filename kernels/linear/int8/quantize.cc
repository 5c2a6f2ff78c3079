// Quantization of weights to int8 at load, and their dequantization: the exact
// inverse the tests hold the packing to, and bfloat16 tiles for Linear's matmul.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/linear/int8/int8_weights.h"

namespace layerserve::kernels::internal {

Int8Weights QuantizeInt8(const float* weight, int64_t out, int64_t in, bool in_by_out,
                         const float* bias, int64_t group_size) {
  Int8Weights w;
  w.in = in;
  w.out = out;
  w.group = group_size <= 0 || group_size > in ? in : group_size;
  w.groups = (in + w.group - 1) / w.group;
  w.out_blocks = (out + kInt8BlockOut - 1) / kInt8BlockOut;
  w.q.assign(w.out_blocks * in * kInt8BlockOut, 0);
  w.scales.assign(w.out_blocks * w.groups * kInt8BlockOut, 0.0f);
  w.bias.assign(out, 0.0f);
  if (bias != nullptr) std::copy(bias, bias + out, w.bias.begin());
  auto at = [&](int64_t o, int64_t k) {
    return in_by_out ? weight[k * out + o] : weight[o * in + k];
  };
  for (int64_t o = 0; o < out; ++o) {
    const int64_t block = o / kInt8BlockOut, lane = o % kInt8BlockOut;
    for (int64_t g = 0; g < w.groups; ++g) {
      const int64_t k_begin = g * w.group, k_end = std::min(in, k_begin + w.group);
      float max_abs = 0.0f;
      bool finite = true;
      for (int64_t k = k_begin; k < k_end; ++k) {
        finite = finite && std::isfinite(at(o, k));
        max_abs = std::max(max_abs, std::fabs(at(o, k)));
      }
      // A NaN or Inf weight makes the whole group NaN (q stays 0, the scale NaN):
      // its outputs become NaN, as float32 weights would make them NaN or Inf.
      const float scale = finite ? max_abs / 127.0f : std::nanf("");
      w.scales[(block * w.groups + g) * kInt8BlockOut + lane] = scale;
      if (!finite || scale == 0.0f) continue;  // All zeros: q stays 0.
      for (int64_t k = k_begin; k < k_end; ++k) {
        // Round to nearest even; |w| <= max_abs keeps |q| <= 127 but for rounding of
        // the division, hence the clamp.
        const float q = std::clamp(std::nearbyint(at(o, k) / scale), -127.0f, 127.0f);
        w.q[(block * in + k) * kInt8BlockOut + lane] = static_cast<int8_t>(q);
      }
    }
  }
  return w;
}

std::vector<float> DequantizeInt8(const Int8Weights& w) {
  std::vector<float> weight(w.out * w.in);
  for (int64_t o = 0; o < w.out; ++o) {
    for (int64_t k = 0; k < w.in; ++k) weight[o * w.in + k] = w.Dequantized(o, k);
  }
  return weight;
}

void DequantizeInt8ToBfloat16(const Int8Weights& w, int64_t nb_begin, int64_t nb_end,
                              uint16_t* dst) {
  const int64_t columns = (nb_end - nb_begin) * kInt8BlockOut;
  for (int64_t nb = nb_begin; nb < nb_end; ++nb) {
    const int8_t* q = w.q.data() + nb * w.in * kInt8BlockOut;
    const float* scales = w.scales.data() + nb * w.groups * kInt8BlockOut;
    uint16_t* column = dst + (nb - nb_begin) * kInt8BlockOut;
    for (int64_t k = 0; k < w.in; ++k) {
      const float* scale = scales + (k / w.group) * kInt8BlockOut;
      const int8_t* row = q + k * kInt8BlockOut;
      uint16_t* to = column + k * columns;
      for (int64_t n = 0; n < kInt8BlockOut; ++n) {
        to[n] = FiniteToBfloat16(static_cast<float>(row[n]) * scale[n]);
      }
    }
  }
}

}  // namespace layerserve::kernels::internal
