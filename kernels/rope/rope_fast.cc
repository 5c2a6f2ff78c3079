// Fast RoPE kernels in Google Highway, compiled once per x86 target and dispatched
// at run time (no -march, no -ffast-math, no FTZ): the cos/sin tables
// (ComputeRopeTables) and the rotation of head rows (ApplyRope).
//
// ApplyRope is memory-bound: it reads each element once and writes it once, in
// near address order (BHTD: two heads' tokens side by side; BTHD: each token's
// heads). The tables are reused by every head; see kHeadGroup. Products and sums are
// separate float32 operations, as PyTorch's q * cos + rotate(q) * sin (this file is
// built with -std=c++17, so the compiler does not contract them into FMAs).
//
// This file includes itself once per target (hwy/foreach_target.h), as Highway's
// hwy/examples/skeleton.cc does; the dispatching entry points are at the end.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/rope/rope_fast.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway must come after foreach_target.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/rope/rope.h"
#include "kernels/value_stats/value_tally-inl.h"

HWY_BEFORE_NAMESPACE();
namespace layerserve::kernels {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// Highway's Sin and Cos are accurate (<= 3 ulp) for |angle| <= 39000; beyond it
// (positions past ~39000 at the fastest frequencies) libm takes over.
constexpr float kMaxSimdAngle = 39000.0f;

// c[i] = cos(a_i), s[i] = sin(a_i) for a_i = float32(position * inv_freq[i]), both
// times `scaling`, i in [0, half).
void CosSinRow(const float* inv_freq, int64_t half, float position, float scaling,
               float* c, float* s) {
  const D d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const V pos = hn::Set(d, position);
  const V scale = hn::Set(d, scaling);
  int64_t i = 0;
  for (; i + n <= half; i += n) {
    const V angle = hn::Mul(pos, hn::LoadU(d, inv_freq + i));
    if (hn::AllTrue(d, hn::Le(hn::Abs(angle), hn::Set(d, kMaxSimdAngle)))) {
      hn::StoreU(hn::Mul(hn::Cos(d, angle), scale), d, c + i);
      hn::StoreU(hn::Mul(hn::Sin(d, angle), scale), d, s + i);
      continue;
    }
    for (int64_t j = i; j < i + n; ++j) {
      const double a = position * inv_freq[j];  // The float32 product, widened.
      c[j] = static_cast<float>(std::cos(a)) * scaling;
      s[j] = static_cast<float>(std::sin(a)) * scaling;
    }
  }
  for (; i < half; ++i) {
    const double a = position * inv_freq[i];
    c[i] = static_cast<float>(std::cos(a)) * scaling;
    s[i] = static_cast<float>(std::sin(a)) * scaling;
  }
}

// The rotations take a Tally (value_tally-inl.h): every vector they store goes
// through tally.Add, every value they write one by one through tally.AddWritten.
// They are inlined into ApplyRopeStyled, whose local copy of the tally then stays
// in registers (see there).

// y[i] = x[i] for i in [from, to): the dims past rotary_dim. Without statistics a
// memcpy, or nothing in place.
HWY_INLINE void CopyPassThrough(const float* x, float* y, int64_t from, int64_t to,
                                NoTally&) {
  if (x != y && to > from) std::memcpy(y + from, x + from, (to - from) * sizeof(float));
}
// With statistics the values are tallied as they are copied (in place too: they
// are part of the output).
HWY_INLINE void CopyPassThrough(const float* x, float* y, int64_t from, int64_t to,
                                OutputTally& tally) {
  const D d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = from;
  for (; i + n <= to; i += n) hn::StoreU(tally.Add(hn::LoadU(d, x + i)), d, y + i);
  for (int64_t j = i; j < to; ++j) y[j] = x[j];
  tally.AddWritten(y + i, static_cast<size_t>(to - i));
}

// HALF: y_a = x_a c - x_b s, y_b = x_b c + x_a s with a = i, b = i + h. Reads
// cos[0, h) (= c) and sin[h, 2h) (= +s) of the table row.
template <class Tally>
HWY_INLINE void RotateRowHalf(const float* x, float* y, int64_t head_dim,
                              int64_t rotary_dim, const float* cos, const float* sin,
                              Tally& tally) {
  const D d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const int64_t h = rotary_dim / 2;
  const float* s = sin + h;
  int64_t i = 0;
  for (; i + n <= h; i += n) {
    const V xa = hn::LoadU(d, x + i);
    const V xb = hn::LoadU(d, x + h + i);
    const V c = hn::LoadU(d, cos + i);
    const V sv = hn::LoadU(d, s + i);
    hn::StoreU(tally.Add(hn::Sub(hn::Mul(xa, c), hn::Mul(xb, sv))), d, y + i);
    hn::StoreU(tally.Add(hn::Add(hn::Mul(xb, c), hn::Mul(xa, sv))), d, y + h + i);
  }
  const int64_t tail = i;
  for (; i < h; ++i) {
    const float xa = x[i], xb = x[h + i];
    y[i] = xa * cos[i] - xb * s[i];
    y[h + i] = xb * cos[i] + xa * s[i];
  }
  tally.AddWritten(y + tail, static_cast<size_t>(h - tail));
  tally.AddWritten(y + h + tail, static_cast<size_t>(h - tail));
  CopyPassThrough(x, y, rotary_dim, head_dim, tally);
}

// INTERLEAVED: y = x * cos + swap_pairs(x) * sin, the signs being in the table.
template <class Tally>
HWY_INLINE void RotateRowInterleaved(const float* x, float* y, int64_t head_dim,
                                     int64_t rotary_dim, const float* cos,
                                     const float* sin, Tally& tally) {
  const D d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  if (n >= 2) {  // A one-lane target has no pair to swap.
    for (; i + n <= rotary_dim; i += n) {
      const V xv = hn::LoadU(d, x + i);
      const V swapped = hn::Reverse2(d, xv);
      hn::StoreU(tally.Add(hn::Add(hn::Mul(xv, hn::LoadU(d, cos + i)),
                                   hn::Mul(swapped, hn::LoadU(d, sin + i)))),
                 d, y + i);
    }
  }
  const int64_t tail = i;
  for (; i < rotary_dim; i += 2) {
    const float x0 = x[i], x1 = x[i + 1];
    y[i] = x0 * cos[i] + x1 * sin[i];
    y[i + 1] = x1 * cos[i + 1] + x0 * sin[i + 1];
  }
  tally.AddWritten(y + tail, static_cast<size_t>(rotary_dim - tail));
  CopyPassThrough(x, y, rotary_dim, head_dim, tally);
}

// BHTD order: pairs of heads walk their tokens side by side, so each table row,
// read once from the last-level cache, serves two heads from L1, while x and y
// stream through memory (4 streams). Token blocks of up to kTableBlockBytes of
// table (cos + sin) keep the re-read rows in the last-level cache for any T.
// Chosen because pairs beat one head at a time and smaller blocks, see
// docs/perf/2026-12-06-kernel-choices.md.
constexpr int64_t kHeadGroup = 2;
constexpr int64_t kTableBlockBytes = 4 * 1024 * 1024;

template <RopeStyle kStyle, class Tally>
void ApplyRopeStyled(const float* x, float* y, const RopeGeometry& g, const float* cos,
                     const float* sin, Tally& tally_out) {
  // A local copy, stored back at the end (see OutputTally); the lambda is forced
  // inline, as a call would take the local's address.
  Tally tally = tally_out;
  const auto rotate = [&](int64_t b, int64_t h, int64_t t)
      __attribute__((always_inline)) {
    const int64_t offset = b * g.batch_stride + h * g.head_stride + t * g.token_stride;
    const int64_t table = b * g.table_batch_stride + t * g.rotary_dim;
    if (kStyle == RopeStyle::kHalf) {
      RotateRowHalf(x + offset, y + offset, g.head_dim, g.rotary_dim, cos + table,
                    sin + table, tally);
    } else {
      RotateRowInterleaved(x + offset, y + offset, g.head_dim, g.rotary_dim, cos + table,
                           sin + table, tally);
    }
  };
  const int64_t block = std::max<int64_t>(
      1, kTableBlockBytes / static_cast<int64_t>(2 * std::max<int64_t>(g.rotary_dim, 1) *
                                                 sizeof(float)));
  // Memory order: BHTD walks each head's tokens contiguously, BTHD each token's heads.
  const bool heads_outer = g.head_stride >= g.token_stride;
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t t0 = 0; t0 < g.tokens; t0 += block) {
      const int64_t t1 = std::min(g.tokens, t0 + block);
      if (heads_outer) {
        for (int64_t h0 = 0; h0 < g.heads; h0 += kHeadGroup) {
          const int64_t h1 = std::min(g.heads, h0 + kHeadGroup);
          for (int64_t t = t0; t < t1; ++t) {
            for (int64_t h = h0; h < h1; ++h) rotate(b, h, t);
          }
        }
      } else {
        for (int64_t t = t0; t < t1; ++t) {
          for (int64_t h = 0; h < g.heads; ++h) rotate(b, h, t);
        }
      }
    }
  }
  tally_out = tally;
}

}  // namespace

// The per-target entry points HWY_EXPORT collects.
void RopeTables(const RopeFrequencies& frequencies, RopeStyle style,
                const int64_t* positions, int64_t count, float* cos, float* sin) {
  const int64_t half = static_cast<int64_t>(frequencies.inv_freq.size());
  const int64_t rotary_dim = 2 * half;
  std::vector<float> c(half), s(half);
  for (int64_t p = 0; p < count; ++p) {
    CosSinRow(frequencies.inv_freq.data(), half, static_cast<float>(positions[p]),
              frequencies.attention_scaling, c.data(), s.data());
    float* cos_row = cos + p * rotary_dim;
    float* sin_row = sin + p * rotary_dim;
    for (int64_t i = 0; i < half; ++i) {
      if (style == RopeStyle::kHalf) {
        cos_row[i] = cos_row[half + i] = c[i];
        sin_row[i] = -s[i];
        sin_row[half + i] = s[i];
      } else {
        cos_row[2 * i] = cos_row[2 * i + 1] = c[i];
        sin_row[2 * i] = -s[i];
        sin_row[2 * i + 1] = s[i];
      }
    }
  }
}

// With `stats`, the statistics of y[0, B * H * T * head_dim): a contiguous tensor's
// (the geometry's strides then cover it exactly).
void RopeRows(const float* x, float* y, const RopeGeometry& g, RopeStyle style,
              const float* cos, const float* sin, ValueStats* stats) {
  WithOutputTally(y, g.batch * g.heads * g.tokens * g.head_dim, stats,
                  [&](auto& tally) HWY_ATTR {
                    if (style == RopeStyle::kHalf) {
                      ApplyRopeStyled<RopeStyle::kHalf>(x, y, g, cos, sin, tally);
                    } else {
                      ApplyRopeStyled<RopeStyle::kInterleaved>(x, y, g, cos, sin, tally);
                    }
                  });
}

}  // namespace HWY_NAMESPACE
}  // namespace layerserve::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace layerserve::kernels {

HWY_EXPORT(RopeTables);
HWY_EXPORT(RopeRows);

void ComputeRopeTables(const RopeFrequencies& frequencies, RopeStyle style,
                       const int64_t* positions, int64_t count, float* cos, float* sin) {
  HWY_DYNAMIC_DISPATCH(RopeTables)(frequencies, style, positions, count, cos, sin);
}

void ApplyRope(const float* x, float* y, const RopeGeometry& g, RopeStyle style,
               const float* cos, const float* sin, ValueStats* output_stats) {
  HWY_DYNAMIC_DISPATCH(RopeRows)(x, y, g, style, cos, sin, output_stats);
}

}  // namespace layerserve::kernels
#endif  // HWY_ONCE
