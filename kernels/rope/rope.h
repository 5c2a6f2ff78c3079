// Rotary position embedding (RoPE, Su et al.) in three separate steps:
//   1. ComputeRopeFrequencies: inv_freq [rotary_dim / 2] and the attention factor,
//      with every Hugging Face scaling (scalar, once per request or per model).
//   2. ComputeRopeTables: cos and sin rows [count, rotary_dim] for a position set
//      (once per request; shared by query and key and by every head).
//   3. ApplyRope: rotates head rows given by pointer + strides, in place or out of
//      place. Memory-bound; Highway SIMD with runtime dispatch.
// Steps 2 and 3 have scalar *Reference twins with the same contract.
//
// Numerics follow Hugging Face transformers (modeling_rope_utils.py and
// LlamaRotaryEmbedding): inv_freq is float32; angle = float32(position) * inv_freq[i]
// rounded to float32; cos and sin of that float32 angle, multiplied by the attention
// factor in float32. The rotation is HF's q * cos + rotate(q) * sin: dimension i
// pairs with i + rotary_dim/2 (HALF, rotate_half) or 2i with 2i + 1 (INTERLEAVED,
// GPT-J's rotate_every_two):
//   y_a = x_a * cos_i - x_b * sin_i,   y_b = x_b * cos_i + x_a * sin_i.
// Dimensions at and past rotary_dim are copied unchanged. NaN and Inf propagate as
// PyTorch's products and sums propagate them (Inf * 0 = NaN).
//
// All functions are pure on plain memory and safe to call from any thread. Bad
// sizes are not checked (REQUIRES). ComputeRopeFrequencies and ComputeRopeTables
// allocate (std::bad_alloc); nothing else throws.
#ifndef LAYERSERVE_KERNELS_ROPE_H_
#define LAYERSERVE_KERNELS_ROPE_H_

#include <cstdint>
#include <vector>

#include "kernels/value_stats/value_stats.h"

namespace layerserve::kernels {

enum class RopeStyle { kHalf, kInterleaved };

enum class RopeScalingType { kNone, kLinear, kDynamicNtk, kYarn, kLlama3 };

// The `rope_scaling` entry of a Hugging Face config, defaults filled in.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  float factor = 1;
  int64_t original_max_position_embeddings = 0;
  // YaRN.
  float beta_fast = 32;
  float beta_slow = 1;
  bool has_attention_factor = false;  // false: 0.1 * ln(factor) + 1.
  float attention_factor = 1;
  // Llama 3.
  float low_freq_factor = 1;
  float high_freq_factor = 4;
};

struct RopeFrequencies {
  std::vector<float> inv_freq;  // [rotary_dim / 2]
  float attention_scaling = 1;  // Multiplies cos and sin (YaRN; 1 otherwise).
};

// Hugging Face's _compute_{default_rope,linear_scaling_rope,dynamic_ntk,yarn,llama3}
// _parameters, op by op in the same precision (float32 tensors, double Python
// scalars). The one difference: base ** exponent is rounded correctly from double,
// where PyTorch's float32 pow is within 1 ulp (SLEEF u10 / libm), so inv_freq may
// differ from a given PyTorch build's by 1 ulp. `seq_len` is the longest sequence of
// the request (max position + 1); only dynamic NTK reads it. REQUIRES: theta > 0 and
// finite, rotary_dim even and >= 2, scaling parameters valid (factor >= 1,
// original_max_position_embeddings >= 1 where used, 0 < low_freq_factor <
// high_freq_factor, 0 < beta_slow < beta_fast).
RopeFrequencies ComputeRopeFrequencies(float theta, int64_t rotary_dim,
                                       const RopeScaling& scaling, int64_t seq_len);

// Fills cos and sin, each [count, rotary_dim], row p for positions[p], in the form
// the apply kernels take (HF's emb = cat(freqs, freqs) for HALF; each frequency
// twice in a row for INTERLEAVED), with the sign of rotate(x) folded into sin:
//   HALF:        cos[p, i] = cos[p, i + h] = c_i;  sin[p, i] = -s_i, sin[p, i + h] = s_i
//   INTERLEAVED: cos[p, 2i] = cos[p, 2i + 1] = c_i; sin[p, 2i] = -s_i, sin[p, 2i+1] = s_i
// where h = rotary_dim / 2, c_i = float32(cos(a)) * attention_scaling, s_i likewise,
// a = float32(float32(positions[p]) * inv_freq[i]). The fast version computes
// cos/sin with Highway (<= 3 ulp) where |a| <= 39000 and with libm beyond.
// REQUIRES: count >= 0.
void ComputeRopeTablesReference(const RopeFrequencies& frequencies, RopeStyle style,
                                const int64_t* positions, int64_t count, float* cos,
                                float* sin);
void ComputeRopeTables(const RopeFrequencies& frequencies, RopeStyle style,
                       const int64_t* positions, int64_t count, float* cos, float* sin);

// Where the head rows of a rank-4 tensor are. Row (b, h, t) of x starts at
// x + b * batch_stride + h * head_stride + t * token_stride and holds head_dim
// contiguous floats; y has the same strides. Its cos/sin row is
// table + b * table_batch_stride + t * rotary_dim: table_batch_stride is 0 when
// every batch row has the same positions, tokens * rotary_dim otherwise.
//   BHTD [B,H,T,Dh]: batch_stride H*T*Dh, head_stride T*Dh, token_stride Dh.
//   BTHD [B,T,H,Dh]: batch_stride T*H*Dh, head_stride Dh,   token_stride H*Dh.
// A projection output [T, H*Dh] is BTHD with B = 1.
struct RopeGeometry {
  int64_t batch = 1;
  int64_t heads = 1;
  int64_t tokens = 1;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;  // Even, 0 <= rotary_dim <= head_dim (0: copy only).
  int64_t batch_stride = 0;
  int64_t head_stride = 0;
  int64_t token_stride = 0;
  int64_t table_batch_stride = 0;
};

// The geometry of a contiguous [B,H,T,Dh] (bhtd = true) or [B,T,H,Dh] tensor.
RopeGeometry ContiguousRopeGeometry(bool bhtd, int64_t batch, int64_t heads,
                                    int64_t tokens, int64_t head_dim, int64_t rotary_dim,
                                    bool shared_positions);

// Rotates every head row of x into y: y = x * cos + rotate(x) * sin on the first
// rotary_dim dims, y = x past them. y may equal x (in place); otherwise they must not
// overlap. x, y, cos and sin need no alignment. The reference computes each output in
// double and rounds once; the fast kernel rounds each product and the sum in float32
// as PyTorch does. REQUIRES: the geometry as documented, tables from
// ComputeRopeTables with the same style and rotary_dim.
void ApplyRopeReference(const float* x, float* y, const RopeGeometry& g, RopeStyle style,
                        const float* cos, const float* sin);
// With `output_stats` (only for a contiguous y: ContiguousRopeGeometry), also sets
// it to the numeric health of y (value_stats.h), taken in the pass that writes y.
void ApplyRope(const float* x, float* y, const RopeGeometry& g, RopeStyle style,
               const float* cos, const float* sin, ValueStats* output_stats = nullptr);

}  // namespace layerserve::kernels

#endif  // LAYERSERVE_KERNELS_ROPE_H_
