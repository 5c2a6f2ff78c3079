// RoPE frequencies (scalar, once per request) and tensor geometry. Each scaling
// repeats Hugging Face's modeling_rope_utils.py op by op: a float32 tensor op is a
// float32 operation here (Python scalars taking part are rounded to float32 first,
// as PyTorch does for a wrapped scalar), Python float arithmetic is double. This file
// is built for the baseline ISA without FMA, so nothing is contracted.
#include "kernels/rope/rope.h"

#include <algorithm>
#include <cmath>

namespace layerserve::kernels {
namespace {

constexpr double kPi = 3.14159265358979323846;

// HF: base ** (torch.arange(0, dim, 2).float() / dim), a float32 tensor. The
// exponent is a float32 division; the power is rounded correctly from double.
std::vector<float> BasePowers(float base, int64_t dim) {
  std::vector<float> powers(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    powers[i] = static_cast<float>(
        std::pow(static_cast<double>(base), static_cast<double>(exponent)));
  }
  return powers;
}

// HF _compute_default_rope_parameters: inv_freq = 1.0 / base ** (2i / dim).
std::vector<float> DefaultInvFreq(float base, int64_t dim) {
  std::vector<float> inv_freq = BasePowers(base, dim);
  for (float& f : inv_freq) f = 1.0f / f;
  return inv_freq;
}

// HF _compute_dynamic_ntk_parameters: the base grows once the sequence is longer
// than the original context. All Python floats (double) until the base meets the
// float32 tensor.
float DynamicNtkBase(float theta, int64_t dim, const RopeScaling& s, int64_t seq_len) {
  const double max_positions = static_cast<double>(s.original_max_position_embeddings);
  if (static_cast<double>(seq_len) <= max_positions) return theta;
  const double factor = s.factor;
  const double d = static_cast<double>(dim);
  const double base =
      static_cast<double>(theta) *
      std::pow(factor * static_cast<double>(seq_len) / max_positions - (factor - 1),
               d / (d - 2));
  return static_cast<float>(base);
}

// HF _compute_yarn_parameters, find_correction_dim: the dimension whose wavelength
// makes `rotations` turns over the original context.
double CorrectionDim(double rotations, int64_t dim, float base, int64_t max_positions) {
  return (static_cast<double>(dim) *
          std::log(static_cast<double>(max_positions) / (rotations * 2 * kPi))) /
         (2 * std::log(static_cast<double>(base)));
}

RopeFrequencies Yarn(float base, int64_t dim, const RopeScaling& s) {
  const int64_t half = dim / 2;
  RopeFrequencies out;
  out.attention_scaling =
      s.has_attention_factor
          ? s.attention_factor
          : static_cast<float>(0.1 * std::log(static_cast<double>(s.factor)) + 1.0);

  // find_correction_range with floor/ceil, clamped to [0, dim - 1]. fmax/fmin also
  // turn the NaN of a degenerate base (theta = 1: log(base) = 0) into the clamp
  // bounds instead of undefined conversions.
  const int64_t m = s.original_max_position_embeddings;
  const double low = std::fmax(std::floor(CorrectionDim(s.beta_fast, dim, base, m)), 0.0);
  double high = std::fmin(std::ceil(CorrectionDim(s.beta_slow, dim, base, m)),
                          static_cast<double>(dim - 1));
  // linear_ramp_factor(low, high, dim // 2): "if min == max: max += 0.001".
  if (low == high) high += 0.001;
  const float ramp_min = static_cast<float>(low);
  const float ramp_range = static_cast<float>(high - low);

  const std::vector<float> pos_freqs = BasePowers(base, dim);
  out.inv_freq.resize(half);
  for (int64_t i = 0; i < half; ++i) {
    const float extrapolation = 1.0f / pos_freqs[i];
    const float interpolation = 1.0f / (s.factor * pos_freqs[i]);
    const float ramp =
        std::clamp((static_cast<float>(i) - ramp_min) / ramp_range, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    out.inv_freq[i] = interpolation * (1.0f - extrapolation_factor) +
                      extrapolation * extrapolation_factor;
  }
  return out;
}

// HF _compute_llama3_parameters. `2 * math.pi / inv_freq` is Tensor.__rtruediv__,
// which PyTorch computes as inv_freq.reciprocal() * (2 * pi); likewise
// old_context_len / wavelen.
std::vector<float> Llama3InvFreq(float base, int64_t dim, const RopeScaling& s) {
  std::vector<float> inv_freq = DefaultInvFreq(base, dim);
  const double old_context_len = static_cast<double>(s.original_max_position_embeddings);
  const float low_freq_wavelen = static_cast<float>(old_context_len / s.low_freq_factor);
  const float high_freq_wavelen =
      static_cast<float>(old_context_len / s.high_freq_factor);
  const float two_pi = static_cast<float>(2 * kPi);
  const float context = static_cast<float>(old_context_len);
  const float factor_range = static_cast<float>(static_cast<double>(s.high_freq_factor) -
                                                static_cast<double>(s.low_freq_factor));
  for (float& f : inv_freq) {
    const float wavelen = (1.0f / f) * two_pi;
    const float llama = wavelen > low_freq_wavelen ? f / s.factor : f;
    const float smooth = ((1.0f / wavelen) * context - s.low_freq_factor) / factor_range;
    const float smoothed = (1.0f - smooth) * llama / s.factor + smooth * llama;
    const bool is_medium =
        !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    f = is_medium ? smoothed : llama;
  }
  return inv_freq;
}

}  // namespace

RopeFrequencies ComputeRopeFrequencies(float theta, int64_t rotary_dim,
                                       const RopeScaling& scaling, int64_t seq_len) {
  RopeFrequencies out;
  switch (scaling.type) {
    case RopeScalingType::kNone:
      out.inv_freq = DefaultInvFreq(theta, rotary_dim);
      break;
    case RopeScalingType::kLinear:
      // HF divides inv_freq (not the positions) by the factor: `inv_freq /= factor`.
      out.inv_freq = DefaultInvFreq(theta, rotary_dim);
      for (float& f : out.inv_freq) f /= scaling.factor;
      break;
    case RopeScalingType::kDynamicNtk:
      out.inv_freq =
          DefaultInvFreq(DynamicNtkBase(theta, rotary_dim, scaling, seq_len), rotary_dim);
      break;
    case RopeScalingType::kYarn:
      out = Yarn(theta, rotary_dim, scaling);
      break;
    case RopeScalingType::kLlama3:
      out.inv_freq = Llama3InvFreq(theta, rotary_dim, scaling);
      break;
  }
  return out;
}

RopeGeometry ContiguousRopeGeometry(bool bhtd, int64_t batch, int64_t heads,
                                    int64_t tokens, int64_t head_dim, int64_t rotary_dim,
                                    bool shared_positions) {
  RopeGeometry g;
  g.batch = batch;
  g.heads = heads;
  g.tokens = tokens;
  g.head_dim = head_dim;
  g.rotary_dim = rotary_dim;
  g.batch_stride = heads * tokens * head_dim;
  g.head_stride = bhtd ? tokens * head_dim : head_dim;
  g.token_stride = bhtd ? head_dim : heads * head_dim;
  g.table_batch_stride = shared_positions ? 0 : tokens * rotary_dim;
  return g;
}

}  // namespace layerserve::kernels
