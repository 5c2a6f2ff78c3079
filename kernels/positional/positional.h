// Additive and bias-style position encodings: sinusoidal (Vaswani et al.), learned
// absolute tables (BERT, GPT-2), ALiBi (Press et al.) and T5's bucketed relative
// bias (Raffel et al.). RoPE lives in kernels/rope/rope.h.
//
// Three kinds of functions:
//   - Definitions (SinusoidalInverseFrequencies, AlibiSlopes, T5RelativePositionBucket):
//     the scalar formulas both twins share, so that a fast kernel and its reference
//     can only differ in how they compute, never in what.
//   - Scalar *Reference kernels: simple, obviously right, trigonometry in double.
//   - Fast kernels (Highway SIMD with run-time dispatch; per-caller caches in a
//     PositionalContext), same contract as their references.
// The fast kernels take an optional `output_stats`: when set, they also set it to
// the numeric health of y (value_stats.h), taken in the pass that writes y.
// Every function is pure on plain memory. References and Learned/Alibi are safe
// from any thread; a PositionalContext is not thread-safe: one per worker thread.
// No pointer needs alignment; y must not overlap the other inputs except where a
// kernel says it may equal one. Bad sizes are not checked (REQUIRES). Only the
// functions taking a PositionalContext allocate (std::bad_alloc); nothing else
// throws.
//
// Numerics (float32 throughout, as PyTorch float32 implementations):
//   sinusoidal  inv_freq[i] = float32(base^(-2i/D)) (rounded once from double);
//               angle = float32(float32(p) * inv_freq[i]); pe = sin, cos of that
//               float32 angle; y = x + pe (one float32 add). This is the float32
//               formula of the PyTorch tutorial and Transformer-XL, with inv_freq
//               pinned to the correctly rounded value: their float32 exp / pow land
//               up to 7 / 1 ulp away (D = 512), which moves pe by up to 8e-3 at
//               position 1e5, so float32 implementations disagree by that much
//               there. See tests/golden/make_positional_golden.py.
//   learned     y = x + table[p] (one float32 add).
//   alibi       bias = slope[h] * float32(j - (query_offset + i)), or
//               (-slope[h]) * |that| when symmetric; y = scores + bias.
//   t5          bias = table[bucket(j - (query_offset + i)), h] (a copy).
// NaN and Inf propagate as PyTorch's adds and products propagate them.
#ifndef LAYERSERVE_KERNELS_POSITIONAL_H_
#define LAYERSERVE_KERNELS_POSITIONAL_H_

#include <cstdint>
#include <memory>

#include "kernels/value_stats/value_stats.h"

namespace layerserve::kernels {

// ---------------------------------------------------------------------------
// Definitions shared by the fast kernels and their references.
// ---------------------------------------------------------------------------

enum class SinusoidalLayout {
  kInterleaved,   // pe[2i] = sin(angle_i), pe[2i+1] = cos(angle_i).
  kConcatenated,  // pe[i] = sin(angle_i), pe[D/2 + i] = cos(angle_i).
};

// inv_freq[i] = base^(-2i / dim) for i in [0, dim/2), each the float32 nearest to
// the exact value (computed in double, rounded once).
// REQUIRES: dim >= 2 and even; base > 0 and finite.
void SinusoidalInverseFrequencies(int64_t dim, float base, float* inv_freq);

// ALiBi slopes for any head count, slopes[h] for h in [0, num_heads): with n the
// largest power of two <= num_heads, 2^(-8 (h + 1) / n) for h < n, then every other
// slope of 2n heads, 2^(-4 (2k + 1) / n) for the k-th extra head (the paper's
// get_slopes and Hugging Face's BLOOM build_alibi_tensor). Each is the float32
// nearest to the exact power of two. REQUIRES: num_heads >= 1.
void AlibiSlopes(int64_t num_heads, float* slopes);

// Hugging Face's T5Attention._relative_position_bucket for one relative position
// (memory position - query position), op by op in float32 as PyTorch computes it:
// the bucket index in [0, num_buckets). REQUIRES: num_buckets >= 2 (>= 4 when
// bidirectional) and max_distance > the exact-bucket count (num_buckets / 2, or
// num_buckets / 4 when bidirectional): the log-spaced buckets divide by
// log(max_distance / max_exact), and outside this domain HF's formula divides by
// zero or yields buckets out of range.
int64_t T5RelativePositionBucket(int64_t relative_position, bool bidirectional,
                                 int64_t num_buckets, int64_t max_distance);

// ---------------------------------------------------------------------------
// Per-thread state of the fast kernels.
// ---------------------------------------------------------------------------

// Caches the sinusoidal inverse frequencies per (dim, base) (computing them takes a
// pow per pair: more than the whole kernel for a decode step), tables of sinusoidal
// encodings for adds whose rows fit in a few MiB (reading a cached row is faster
// than computing it; the sum is the same to the bit), and scratch buffers reused
// across calls (fresh pages are slow to touch; these costs:
// docs/perf/2026-12-06-kernel-choices.md). Bounded: at most kMaxCachedFrequencies
// entries and kMaxTablesBytes of tables (positional_fast.cc). Not thread-safe.
class PositionalContext {
 public:
  PositionalContext();
  ~PositionalContext();
  PositionalContext(const PositionalContext&) = delete;
  PositionalContext& operator=(const PositionalContext&) = delete;

  struct Impl;
  Impl& impl() { return *impl_; }

  // How many inverse-frequency vectors are cached, and the bytes of encoding
  // tables (for tests).
  int64_t CachedFrequencyCount() const;
  int64_t CachedTableBytes() const;

 private:
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------
// Sinusoidal. x: [rows, dim] or null; positions: [rows]; y: [rows, dim].
// y[r] = x[r] + pe(positions[r]), or pe(positions[r]) when x is null (the table).
// y may equal x. REQUIRES: rows >= 0, dim >= 2 and even, base > 0 and finite,
// positions[r] >= 0.
// ---------------------------------------------------------------------------
void SinusoidalReference(const float* x, const int64_t* positions, int64_t rows,
                         int64_t dim, float base, SinusoidalLayout layout, float* y);
void Sinusoidal(PositionalContext& ctx, const float* x, const int64_t* positions,
                int64_t rows, int64_t dim, float base, SinusoidalLayout layout, float* y,
                ValueStats* output_stats = nullptr);

// ---------------------------------------------------------------------------
// Learned. x, y: [rows, dim]; table: [table_rows, dim]; positions: [rows].
// y[r] = x[r] + table[positions[r]]. y may equal x.
// REQUIRES: 0 <= positions[r] < table_rows (the caller validates).
// ---------------------------------------------------------------------------
void LearnedReference(const float* x, const int64_t* positions, int64_t rows, int64_t dim,
                      const float* table, float* y);
void Learned(const float* x, const int64_t* positions, int64_t rows, int64_t dim,
             const float* table, float* y, ValueStats* output_stats = nullptr);

// ---------------------------------------------------------------------------
// ALiBi. slopes: [heads] (AlibiSlopes, or any); scores: [batch, heads, Tq, Tk] or
// null; y: [batch, heads, Tq, Tk]. y = scores + bias, or the bias when scores is
// null (then batch is 1). y may equal scores.
// REQUIRES: heads, query_length, key_length, batch >= 1; query_offset >= 0 and
// query_offset + query_length does not overflow.
// ---------------------------------------------------------------------------
struct AlibiShape {
  int64_t heads = 1;
  int64_t query_length = 1;
  int64_t key_length = 1;
  int64_t query_offset = 0;
  bool symmetric = false;
};
void AlibiReference(const float* slopes, const AlibiShape& shape, const float* scores,
                    int64_t batch, float* y);
void Alibi(const float* slopes, const AlibiShape& shape, const float* scores,
           int64_t batch, float* y, ValueStats* output_stats = nullptr);

// ---------------------------------------------------------------------------
// T5 bias. table: [num_buckets, heads] (relative_attention_bias.weight);
// y: [heads, Tq, Tk], y[h, i, j] = table[bucket(j - (query_offset + i)), h].
// REQUIRES: the T5RelativePositionBucket domain; heads, query_length, key_length
// >= 1; query_offset >= 0 and query_offset + query_length does not overflow.
// ---------------------------------------------------------------------------
struct T5BiasShape {
  int64_t num_buckets = 32;
  int64_t heads = 1;
  bool bidirectional = true;
  int64_t max_distance = 128;
  int64_t query_length = 1;
  int64_t key_length = 1;
  int64_t query_offset = 0;
};
void T5BiasReference(const float* table, const T5BiasShape& shape, float* y);
void T5Bias(PositionalContext& ctx, const float* table, const T5BiasShape& shape,
            float* y, ValueStats* output_stats = nullptr);

}  // namespace layerserve::kernels

#endif  // LAYERSERVE_KERNELS_POSITIONAL_H_
