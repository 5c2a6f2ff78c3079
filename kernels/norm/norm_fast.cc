// Hand-written normalization row loops: RmsNorm (oneDNN 2.6 has no RMSNorm
// primitive) and LayerNormLoop, in Google Highway, compiled once per x86 target
// (AVX-512, AVX2, SSE4, SSSE3, and portable C++) and dispatched at run time to the
// best one the CPU has: the binary stays baseline x86-64 (no -march, no
// -ffast-math, no FTZ/DAZ: subnormals are kept).
//
// Every row takes two passes: one reads it for its statistics, one writes the
// output (and the fused residual sum). A row of up to 4096 floats (16 KiB; with a
// residual, 32) is still in L1/L2 for the second pass, so memory sees each element
// once.
//
// This file includes itself once per target (hwy/foreach_target.h), as Highway's
// hwy/examples/skeleton.cc does; the dispatching entry points are at the end.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/norm/norm_fast.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway must come after foreach_target.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/norm/norm.h"
#include "kernels/norm/norm_internal.h"
#include "kernels/value_stats/value_tally-inl.h"

HWY_BEFORE_NAMESPACE();
namespace layerserve::kernels {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
constexpr size_t kMaxLanes = hn::MaxLanes(D());

// n < Lanes(d) elements at p, through a stack buffer: no load or store past the
// end of the caller's arrays (masked loads are not fault-free on every target).
// Loaded lanes past n are zero.
HWY_INLINE V LoadPart(D d, const float* p, size_t n) {
  HWY_ALIGN float buf[kMaxLanes] = {};
  std::memcpy(buf, p, n * sizeof(float));
  return hn::Load(d, buf);
}

HWY_INLINE void StorePart(D d, V v, float* p, size_t n) {
  HWY_ALIGN float buf[kMaxLanes];
  hn::Store(v, d, buf);
  std::memcpy(p, buf, n * sizeof(float));
}

// The row to normalize at i: x itself, or s = x + residual (one float32 add, as
// PyTorch and the reference do).
template <bool kResidual>
HWY_INLINE V SourceAt(D d, const float* x, const float* r, size_t i) {
  const V v = hn::LoadU(d, x + i);
  if constexpr (!kResidual) return v;
  return hn::Add(v, hn::LoadU(d, r + i));
}

template <bool kResidual>
HWY_INLINE V SourcePart(D d, const float* x, const float* r, size_t i, size_t n) {
  const V v = LoadPart(d, x + i, n);
  if constexpr (!kResidual) return v;
  return hn::Add(v, LoadPart(d, r + i, n));
}

// Statistics pass: sum(t) and sum(t^2) over a row, t = s - pivot, where s is x
// or x + residual. (RMSNorm: no pivot, and only sum(s^2).)
//
// The sums are kept in 4 vectors of independent partial sums (four chains hide
// the add latency) over blocks of kBlock elements, whose sums are then added up:
// every float32 addition chain is at most kBlock / (4 * lanes) + dim / kBlock
// long (20 at dim 4096 on AVX-512, 80 on the 1-lane scalar target), so the
// rounding error barely grows with dim and is about the same on every target.
constexpr size_t kBlock = 256;  // A multiple of 4 * lanes on every target.

struct RowSums {
  float sum, sum_sq;
};

template <bool kResidual, bool kShifted>
RowSums SumRow(const float* x, const float* r, size_t n, float pivot) {
  const D d;
  const size_t N = hn::Lanes(d);
  const V p = hn::Set(d, pivot);
  const auto shift = [&](V s) HWY_ATTR { return kShifted ? hn::Sub(s, p) : s; };
  V total = hn::Zero(d), total_sq = hn::Zero(d);
  size_t i = 0;
  while (i < n) {
    const size_t end = std::min(n, i + kBlock);
    V a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    V q0 = hn::Zero(d), q1 = hn::Zero(d), q2 = hn::Zero(d), q3 = hn::Zero(d);
    for (; i + 4 * N <= end; i += 4 * N) {
      const V t0 = shift(SourceAt<kResidual>(d, x, r, i));
      const V t1 = shift(SourceAt<kResidual>(d, x, r, i + N));
      const V t2 = shift(SourceAt<kResidual>(d, x, r, i + 2 * N));
      const V t3 = shift(SourceAt<kResidual>(d, x, r, i + 3 * N));
      if constexpr (kShifted) {
        a0 = hn::Add(a0, t0);
        a1 = hn::Add(a1, t1);
        a2 = hn::Add(a2, t2);
        a3 = hn::Add(a3, t3);
      }
      q0 = hn::MulAdd(t0, t0, q0);
      q1 = hn::MulAdd(t1, t1, q1);
      q2 = hn::MulAdd(t2, t2, q2);
      q3 = hn::MulAdd(t3, t3, q3);
    }
    for (; i + N <= end; i += N) {
      const V t = shift(SourceAt<kResidual>(d, x, r, i));
      if constexpr (kShifted) a0 = hn::Add(a0, t);
      q0 = hn::MulAdd(t, t, q0);
    }
    if (i < end) {  // The row's last, partial vector.
      const V s = SourcePart<kResidual>(d, x, r, i, end - i);
      // Padding lanes must add nothing: zero them after the shift.
      const V t = hn::IfThenElseZero(hn::FirstN(d, end - i), shift(s));
      if constexpr (kShifted) a1 = hn::Add(a1, t);
      q1 = hn::MulAdd(t, t, q1);
      i = end;
    }
    if constexpr (kShifted) {
      total = hn::Add(total, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)));
    }
    total_sq = hn::Add(total_sq, hn::Add(hn::Add(q0, q1), hn::Add(q2, q3)));
  }
  return {hn::GetLane(hn::SumOfLanes(d, total)),
          hn::GetLane(hn::SumOfLanes(d, total_sq))};
}

enum class Scale { kNone, kWeight, kOffsetWeight };

// Output pass over one row: y = ((s - pivot) - offset) * rstd * scale + shift,
// or for RMSNorm (kCentered false) y = s * rstd * scale; with kResidual, s =
// x + residual is also stored to s_out. Each variant is its own instantiation,
// so the inner loop has no branches. Every index is read before it is written,
// so y may equal x, and s_out x or residual.
// What an output pass has written so far, for NormParams::output_stats, is a
// ValueTally (value_tally-inl.h), folded after every row.
template <bool kCentered, Scale kScale, bool kShift, bool kResidual, bool kStream,
          bool kStats>
struct Output {
  float pivot, offset, rstd;
  const float* w;     // [n], or null when kScale is kNone.
  const float* b;     // [n], or null when kShift is false.
  ValueTally* tally;  // Tallies every value written when kStats; else unused.

  void Row(const float* x, const float* r, float* s_out, size_t n, float* y) const {
    const D d;
    const size_t N = hn::Lanes(d);
    const V vp = hn::Set(d, pivot), vo = hn::Set(d, offset), vr = hn::Set(d, rstd);
    const V one = hn::Set(d, 1.0f);
    // Locals, not members: stores through y could alias *this as far as the
    // compiler knows, and it would reload the members after every store.
    const float* const w_row = w;
    const float* const b_row = b;
    // One vector of output from s, with weight w_at[i] and bias b_at[i].
    const auto out = [&](V v, const float* w_at, const float* b_at, size_t i) HWY_ATTR {
      if constexpr (kCentered) v = hn::Sub(hn::Sub(v, vp), vo);
      v = hn::Mul(v, vr);
      V scale = one;
      if constexpr (kScale == Scale::kWeight) scale = hn::LoadU(d, w_at + i);
      if constexpr (kScale == Scale::kOffsetWeight) {
        scale = hn::Add(one, hn::LoadU(d, w_at + i));
      }
      if constexpr (kShift) return hn::MulAdd(v, scale, hn::LoadU(d, b_at + i));
      if constexpr (kScale != Scale::kNone) return hn::Mul(v, scale);
      return v;
    };
    // The tally in registers for the row (stores through y could alias it, as
    // above), written back at the end.
    ValueTally t = kStats ? *tally : ValueTally();
    const auto track = [&](V v) HWY_ATTR {
      if constexpr (kStats) t.Add(v);
      return v;
    };
    // m < N elements from i, through buffers (weight and bias too: they are
    // only n long). Lanes from m on are not written, nor tallied.
    const auto part = [&](size_t i, size_t m) HWY_ATTR {
      HWY_ALIGN float wb[kMaxLanes] = {}, bb[kMaxLanes] = {};
      if constexpr (kScale != Scale::kNone) std::memcpy(wb, w_row + i, m * sizeof(float));
      if constexpr (kShift) std::memcpy(bb, b_row + i, m * sizeof(float));
      const V s = SourcePart<kResidual>(d, x, r, i, m);
      if constexpr (kResidual) StorePart(d, s, s_out + i, m);
      V v = out(s, wb, bb, 0);
      if constexpr (kStats) v = track(hn::IfThenElseZero(hn::FirstN(d, m), v));
      StorePart(d, v, y + i, m);
    };

    size_t i = 0;
    bool stream_s = false;
    if constexpr (kStream) {
      // Streaming stores need whole aligned vectors: plain-store the first few
      // elements, up to where y is aligned. s_out streams too if it is aligned
      // there as well (it usually is, when both come from the same allocator).
      const size_t misaligned = reinterpret_cast<uintptr_t>(y) / sizeof(float) % N;
      if (misaligned != 0) {
        i = std::min(n, N - misaligned);
        part(0, i);
      }
      if constexpr (kResidual) {
        stream_s = reinterpret_cast<uintptr_t>(s_out + i) % (N * sizeof(float)) == 0;
      }
    }
    const auto store = [&](V v, float* p) HWY_ATTR {
      if constexpr (kStream) {
        hn::Stream(v, d, p);
      } else {
        hn::StoreU(v, d, p);
      }
    };
    const auto store_s = [&](V v, float* p) HWY_ATTR {
      if (kStream && stream_s) {
        hn::Stream(v, d, p);
      } else {
        hn::StoreU(v, d, p);
      }
    };
    for (; i + 2 * N <= n; i += 2 * N) {
      const V s0 = SourceAt<kResidual>(d, x, r, i);
      const V s1 = SourceAt<kResidual>(d, x, r, i + N);
      if constexpr (kResidual) {
        store_s(s0, s_out + i);
        store_s(s1, s_out + i + N);
      }
      store(track(out(s0, w_row, b_row, i)), y + i);
      store(track(out(s1, w_row, b_row, i + N)), y + i + N);
    }
    for (; i + N <= n; i += N) {
      const V s = SourceAt<kResidual>(d, x, r, i);
      if constexpr (kResidual) store_s(s, s_out + i);
      store(track(out(s, w_row, b_row, i)), y + i);
    }
    if (i < n) part(i, n - i);
    if constexpr (kStats) *tally = t;
  }
};

// A row without finite float32 statistics (it holds NaN, or it is finite and its
// sums overflow; LayerNorm: or it holds Inf) becomes all NaN, as the reference
// does: never half-finite. The fused residual sum is still written: it is the
// next layer's residual stream.
template <bool kResidual, bool kStats>
void NanRow(const float* x, const float* r, float* s_out, size_t n, float* y,
            ValueStats& stats) {
  for (size_t i = 0; i < n; ++i) {
    if constexpr (kResidual) s_out[i] = x[i] + r[i];
    y[i] = std::numeric_limits<float>::quiet_NaN();
  }
  if constexpr (kStats) {
    stats.count += static_cast<int64_t>(n);
    stats.nan += static_cast<int64_t>(n);
  }
}

// Whether the row to normalize (x, or s = x + residual) holds +Inf or -Inf. Only
// asked of a row whose sum of squares is +Inf, so a scalar loop will do.
template <bool kResidual>
bool RowHasInf(const float* x, const float* r, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float s = kResidual ? x[i] + r[i] : x[i];
    if (std::isinf(s)) return true;
  }
  return false;
}

// The rows of a call: x, y, residual, residual_out: [rows, dim]; weight: [dim].
template <Scale kScale, bool kResidual, bool kStream, bool kStats>
void RmsNormRowsT(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                  float* y) {
  const size_t n = static_cast<size_t>(dim);
  ValueTally tally;
  ValueStats stats;
  for (int64_t row = 0; row < rows; ++row) {
    const float* x_row = x + row * dim;
    const float* r_row = kResidual ? p.residual + row * dim : nullptr;
    float* s_row = kResidual ? p.residual_out + row * dim : nullptr;
    float* y_row = y + row * dim;
    const float sum_sq = SumRow<kResidual, /*kShifted=*/false>(x_row, r_row, n, 0).sum_sq;
    float rstd;
    if (std::isfinite(sum_sq)) {
      rstd = 1.0f / std::sqrt(sum_sq / static_cast<float>(dim) + p.epsilon);
    } else if (sum_sq > 0 && RowHasInf<kResidual>(x_row, r_row, n)) {
      // +-Inf and no NaN (a NaN makes the sum NaN): PyTorch's rsqrt(Inf) is 0, so
      // y = s * 0 * scale is NaN at each Inf and +-0 elsewhere. The output pass
      // computes exactly that with rstd = 0.
      rstd = 0.0f;
    } else {
      // A NaN (all NaN in PyTorch too), or finite values whose sum of squares
      // overflows float32 (PyTorch silently gives zeros): no float32 answer.
      NanRow<kResidual, kStats>(x_row, r_row, s_row, n, y_row, stats);
      continue;
    }
    const Output</*kCentered=*/false, kScale, /*kShift=*/false, kResidual, kStream,
                 kStats>
        out{0.0f, 0.0f, rstd, p.weight, nullptr, &tally};
    out.Row(x_row, r_row, s_row, n, y_row);
    if constexpr (kStats) tally.Fold(y_row, n, stats);
  }
  if constexpr (kStream) hwy::FlushStream();  // Order the streaming stores.
  if constexpr (kStats) {
    *p.output_stats = stats;
  }
}

// weight, bias: [dim].
template <Scale kScale, bool kShift, bool kResidual, bool kStream, bool kStats>
void LayerNormRowsT(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                    float* y) {
  const size_t n = static_cast<size_t>(dim);
  const float count = static_cast<float>(dim);
  ValueTally tally;
  ValueStats stats;
  for (int64_t row = 0; row < rows; ++row) {
    const float* x_row = x + row * dim;
    const float* r_row = kResidual ? p.residual + row * dim : nullptr;
    float* s_row = kResidual ? p.residual_out + row * dim : nullptr;
    float* y_row = y + row * dim;
    // The shifted-data algorithm: one pass sums t = s - pivot and t^2, with the
    // row's first value as pivot. t is small and mostly exact (Sterbenz: exact
    // when s and pivot are within a factor 2), so a row far from zero (mean 1e4,
    // std 1) keeps its precision, and a constant row gives t = 0 exactly, hence
    // exactly the bias.
    float pivot = kResidual ? x_row[0] + r_row[0] : x_row[0];
    const RowSums sums = SumRow<kResidual, /*kShifted=*/true>(x_row, r_row, n, pivot);
    // NaN or Inf anywhere in the row makes the sum NaN or Inf (so does an
    // overflowing s - pivot).
    if (!std::isfinite(sums.sum)) {
      NanRow<kResidual, kStats>(x_row, r_row, s_row, n, y_row, stats);
      continue;
    }
    float mean_offset = sums.sum / count;  // mean - pivot.
    // sum((t - mean_offset)^2) = sum(t^2) - sum(t) * mean_offset. While the
    // subtracted part is at most half of sum(t^2), i.e. |mean - pivot| <= std,
    // this loses at most one bit to cancellation, and s - pivot rounds no worse
    // than s - mean would: the usual case, since the pivot is a value of the row.
    const float centered = sums.sum * mean_offset;
    float m2 = sums.sum_sq - centered;
    if (!(std::isfinite(sums.sum_sq) && centered <= 0.5f * sums.sum_sq)) {
      // The first value is far from the rest (or sum(t^2) overflowed while the
      // variance may not): pivot again on the mean just estimated. Its error is
      // a few ulps of max|t| <= 2 sqrt(dim) std, a small fraction of a std, so
      // this pass cannot cancel, and t rounds like s - mean: the classic two-pass
      // algorithm. The row is still in L1/L2.
      pivot += mean_offset;
      const RowSums again = SumRow<kResidual, true>(x_row, r_row, n, pivot);
      mean_offset = again.sum / count;
      m2 = again.sum_sq - again.sum * mean_offset;
      if (!std::isfinite(m2)) {  // The variance itself overflows float32.
        NanRow<kResidual, kStats>(x_row, r_row, s_row, n, y_row, stats);
        continue;
      }
      m2 = std::max(m2, 0.0f);  // Rounding must not make it negative.
    }
    const float rstd = 1.0f / std::sqrt(m2 / count + p.epsilon);
    const Output</*kCentered=*/true, kScale, kShift, kResidual, kStream, kStats> out{
        pivot, mean_offset, rstd, p.weight, p.bias, &tally};
    out.Row(x_row, r_row, s_row, n, y_row);
    if constexpr (kStats) tally.Fold(y_row, n, stats);
  }
  if constexpr (kStream) hwy::FlushStream();  // Order the streaming stores.
  if constexpr (kStats) {
    *p.output_stats = stats;
  }
}

// Run-time options to template arguments, one at a time.
template <Scale kScale, bool kResidual, bool kStream>
void RmsNormPickStats(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                      float* y) {
  if (p.output_stats != nullptr) {
    return RmsNormRowsT<kScale, kResidual, kStream, true>(x, rows, dim, p, y);
  }
  RmsNormRowsT<kScale, kResidual, kStream, false>(x, rows, dim, p, y);
}

template <Scale kScale, bool kResidual>
void RmsNormPickStream(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                       float* y) {
  if (rows * dim * static_cast<int64_t>(sizeof(float)) >= internal::kNormStreamMinBytes) {
    return RmsNormPickStats<kScale, kResidual, true>(x, rows, dim, p, y);
  }
  RmsNormPickStats<kScale, kResidual, false>(x, rows, dim, p, y);
}

template <Scale kScale>
void RmsNormPickResidual(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                         float* y) {
  if (p.residual != nullptr) return RmsNormPickStream<kScale, true>(x, rows, dim, p, y);
  RmsNormPickStream<kScale, false>(x, rows, dim, p, y);
}

template <Scale kScale, bool kShift, bool kResidual, bool kStream>
void LayerNormPickStats(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                        float* y) {
  if (p.output_stats != nullptr) {
    return LayerNormRowsT<kScale, kShift, kResidual, kStream, true>(x, rows, dim, p, y);
  }
  LayerNormRowsT<kScale, kShift, kResidual, kStream, false>(x, rows, dim, p, y);
}

template <Scale kScale, bool kShift, bool kResidual>
void LayerNormPickStream(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                         float* y) {
  if (rows * dim * static_cast<int64_t>(sizeof(float)) >= internal::kNormStreamMinBytes) {
    return LayerNormPickStats<kScale, kShift, kResidual, true>(x, rows, dim, p, y);
  }
  LayerNormPickStats<kScale, kShift, kResidual, false>(x, rows, dim, p, y);
}

template <Scale kScale, bool kShift>
void LayerNormPickResidual(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                           float* y) {
  if (p.residual != nullptr) {
    return LayerNormPickStream<kScale, kShift, true>(x, rows, dim, p, y);
  }
  LayerNormPickStream<kScale, kShift, false>(x, rows, dim, p, y);
}

template <Scale kScale>
void LayerNormPickShift(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                        float* y) {
  if (p.bias != nullptr) return LayerNormPickResidual<kScale, true>(x, rows, dim, p, y);
  LayerNormPickResidual<kScale, false>(x, rows, dim, p, y);
}

}  // namespace

// The per-target entry points HWY_EXPORT collects.
void RmsNormRows(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                 float* y) {
  if (p.weight == nullptr) return RmsNormPickResidual<Scale::kNone>(x, rows, dim, p, y);
  if (p.weight_offset) {
    return RmsNormPickResidual<Scale::kOffsetWeight>(x, rows, dim, p, y);
  }
  RmsNormPickResidual<Scale::kWeight>(x, rows, dim, p, y);
}

void LayerNormRows(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                   float* y) {
  if (p.weight == nullptr) return LayerNormPickShift<Scale::kNone>(x, rows, dim, p, y);
  if (p.weight_offset) {
    return LayerNormPickShift<Scale::kOffsetWeight>(x, rows, dim, p, y);
  }
  LayerNormPickShift<Scale::kWeight>(x, rows, dim, p, y);
}

const char* LoopTargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace layerserve::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace layerserve::kernels {

HWY_EXPORT(RmsNormRows);
HWY_EXPORT(LayerNormRows);
HWY_EXPORT(LoopTargetName);

void RmsNorm(const float* x, int64_t rows, int64_t dim, const NormParams& p, float* y) {
  HWY_DYNAMIC_DISPATCH(RmsNormRows)(x, rows, dim, p, y);
}

// The hand loop on every shape: oneDNN's layer_normalization won on none
// (docs/perf/2026-11-30-norm-kernels.md), so it is only a baseline for benches.
void LayerNorm(const float* x, int64_t rows, int64_t dim, const NormParams& p, float* y) {
  HWY_DYNAMIC_DISPATCH(LayerNormRows)(x, rows, dim, p, y);
}

namespace internal {

void LayerNormLoop(const float* x, int64_t rows, int64_t dim, const NormParams& p,
                   float* y) {
  HWY_DYNAMIC_DISPATCH(LayerNormRows)(x, rows, dim, p, y);
}

const char* HandLoopTarget() { return HWY_DYNAMIC_DISPATCH(LoopTargetName)(); }

}  // namespace internal
}  // namespace layerserve::kernels
#endif  // HWY_ONCE
