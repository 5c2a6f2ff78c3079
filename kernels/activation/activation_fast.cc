// Highway loops for the activations: compiled once per x86 level (SSSE3, SSE4,
// AVX2, AVX-512...) by hwy/foreach_target.h and picked for the running CPU by
// HWY_DYNAMIC_DISPATCH, so the binary needs no -march flag. No -ffast-math: IEEE
// arithmetic, subnormals kept; NaN and Inf follow PyTorch (see activation.h).
//
// Math: sigmoid, SiLU, QuickGELU and tanh-GELU divide by 1 + exp, computed by
// OnePlusExp below (Cephes' expf, ~1 ulp); tanh is a rational fit (Tanh below);
// GELU is exp(-x^2/2) times a rational fit of Mills' ratio (Gelu below), accurate
// relative to its output down to the subnormals.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/activation/activation_fast.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; the includes below are
// the per-target ones.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/activation/activation.h"
#include "kernels/activation/activation_internal.h"
#include "kernels/value_stats/value_stats.h"
#include "kernels/value_stats/value_tally-inl.h"

HWY_BEFORE_NAMESPACE();
namespace layerserve::kernels::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using ::layerserve::kernels::HWY_NAMESPACE::ValueTally;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DI = hn::RebindToSigned<DF>;

// Bound on lanes per vector for the partial-vector buffers (512-bit x86: 16).
constexpr size_t kMaxLanes = 64;

// Cephes' range reduction for exp: y = n ln2 + r, |r| <= ln2/2, ln2 in two parts
// (the first, 9 bits, makes n * part exact). n is rounded by adding `magic`, 1.5 *
// 2^23 plus an exponent bias b: the sum's low mantissa bits are then n + b, and
// Pow2Of(sum) is the float 2^(n + b - 127), with no range checks (callers keep
// n + b in [1, 254]). Returns r; `sum` gets the rounding sum.
HWY_INLINE VF ReduceByLn2(DF d, VF y, float magic, VF& sum) {
  const VF m = hn::Set(d, magic);
  sum = hn::MulAdd(y, hn::Set(d, 1.44269504088896341f), m);
  const VF n = hn::Sub(sum, m);
  const VF r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), y);
  return hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
}

HWY_INLINE VF Pow2Of(DF d, VF sum) {
  return hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(DI(), sum)));
}

// 1 + exp(y) for every float y: the denominator of sigmoid, SiLU, QuickGELU and
// tanh-GELU. exp is Cephes' expf (Moshier, as SinCos in positional_fast.cc):
// ReduceByLn2, then exp(r) = 1 + r + r^2 P(r) with P of degree 5, ~1 ulp. The sum
// needs no subnormal exp: below y = -17 it is 1 either way. So y is clamped to
// [-86, 89], and 2^n is the bits of the rounding sum shifted into the exponent
// field, with no range checks: hwy's Exp (two scalings, a range test) and the NaN fix-up
// around it took about a third more instructions. Above 88.72 the product overflows to
// +inf as float32's exp does. NaN comes out finite: callers whose numerator is not y's
// NaN itself must put it back (Sigmoid).
HWY_INLINE VF OnePlusExp(DF d, VF y) {
  y = hn::Min(hn::Max(y, hn::Set(d, -86.0f)), hn::Set(d, 89.0f));
  // Bias 126 (magic 1.5 * 2^23 + 126): the float 2^(n-1); n - 1 keeps n = 128 (y
  // up to 89) inside the exponent field, and p + p makes up the 2.
  VF shifted;
  const VF r = ReduceByLn2(d, y, 12583038.0f, shifted);
  VF p = hn::MulAdd(hn::Set(d, 1.9875691500e-4f), r, hn::Set(d, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 5.0000001201e-1f));
  p = hn::Add(hn::MulAdd(p, hn::Mul(r, r), r), hn::Set(d, 1.0f));
  return hn::MulAdd(hn::Add(p, p), Pow2Of(d, shifted), hn::Set(d, 1.0f));
}

struct Relu {
  // Lt is false for NaN and -0: both pass through, as torch.relu.
  HWY_INLINE VF operator()(DF d, VF x) const {
    return hn::IfThenZeroElse(hn::Lt(x, hn::Zero(d)), x);
  }
};

struct Sigmoid {
  HWY_INLINE VF operator()(DF d, VF x) const {
    const VF y = hn::Div(hn::Set(d, 1.0f), OnePlusExp(d, hn::Neg(x)));
    return hn::IfThenElse(hn::IsNaN(x), x, y);
  }
};

// x * sigmoid(k x) as x / (1 + exp(-k x)): one rounding fewer than a separate
// product, and the same non-finite results as PyTorch's x * sigmoid(k x)
// (-inf / inf = NaN; finite x / inf = -0).
template <int kNumerator, int kDenominator>
struct XSigmoid {
  HWY_INLINE VF operator()(DF d, VF x) const {
    const VF minus_k = hn::Set(d, -static_cast<float>(kNumerator) / kDenominator);
    return hn::Div(x, OnePlusExp(d, hn::Mul(x, minus_k)));
  }
};
using Silu = XSigmoid<1, 1>;
using QuickGelu = XSigmoid<1702, 1000>;

// x/2 * (1 + tanh(z)) = x / (1 + exp(-2z)), z = sqrt(2/pi) (x + 0.044715 x^3):
// the same value without the cancellation of 1 + tanh(z) for x < 0, and one exp
// instead of tanh's expm1 and division. z is computed as x (1 + 0.044715 x^2),
// which overflows to +-inf exactly when PyTorch's x + 0.044715 x^3 does (|x| >~
// 2e12 would give inf in both: the outputs are then x and -0 alike).
struct GeluTanh {
  HWY_INLINE VF operator()(DF d, VF x) const {
    const VF one = hn::Set(d, 1.0f);
    const VF inner = hn::Mul(x, hn::MulAdd(hn::Mul(x, x), hn::Set(d, 0.044715f), one));
    const VF minus_two_k = hn::Set(d, -1.5957691216057308f);  // -2 sqrt(2/pi)
    return hn::Div(x, OnePlusExp(d, hn::Mul(inner, minus_two_k)));
  }
};

// GELU(x) = x Phi(x). With t = |x| and q(t) = Phi(-t), the normal tail:
//   GELU(x) = (x + t) / 2 - t q(t),  q(t) = exp(-t^2 / 2) M(t).
// (x + t) / 2 is exactly 0 for x < 0 and x for x >= 0, so the last FMA rounds once
// either way and there is no cancellation of 1 + erf. M(t) = q(t) exp(t^2 / 2) is
// smooth, 1/2 at 0 and ~1 / (t sqrt(2 pi)) far out; P / Q of degree 3 over 4 fits
// it (tests/kernels/activation/gelu_erfc_fit.py, which also checks this evaluation in
// float32: at most 0.82 of activation_test.cc's (10 + x^2) 2^-24 relative bound, 7 2^-24
// below |x| = 1). exp is reduced as in OnePlusExp, with a degree-5 polynomial
// fitted by the same script. The rounding of t^2 / 2 moves the exponent by up to
// t^2 / 2 2^-24, a relative error where GELU is already tiny (1e-6 at x = -6,
// |GELU| 6e-9).
// About 30 operations: the erfc-based version it replaces (Numerical Recipes'
// erfcc, a degree-9 polynomial inside hwy's Exp) took half as many again.
struct Gelu {
  HWY_INLINE VF operator()(DF d, VF x) const {
    const VF t = hn::Abs(x);
    // Past 14.5, t q(t) < 2^-150 rounds to 0; the clamp keeps t = inf finite here
    // (inf: inf/2 + inf/2 - 14.5 * 0 = inf; -inf: -inf/2 + inf/2 = NaN, as
    // PyTorch). NaN flows through (x + t) / 2 whatever Min makes of it.
    const VF tc = hn::Min(t, hn::Set(d, 14.5f));
    const VF y = hn::Mul(hn::Mul(tc, tc), hn::Set(d, -0.5f));
    // y = n ln2 + r, n >= -152. Bias 153 (magic 1.5 * 2^23 + 127 + 26): the float
    // 2^(n + 26), normal for every n; P's coefficients carry the 2^-26 back
    // (exact), so the last product alone rounds into the subnormals.
    VF shifted;
    const VF r = ReduceByLn2(d, y, 12583065.0f, shifted);
    VF e = hn::MulAdd(hn::Set(d, 0.008312682621181011f), r,
                      hn::Set(d, 0.04190663993358612f));
    e = hn::MulAdd(e, r, hn::Set(d, 0.1666734218597412f));
    e = hn::MulAdd(e, r, hn::Set(d, 0.499990850687027f));
    e = hn::MulAdd(e, r, hn::Set(d, 0.9999998211860657f));
    e = hn::MulAdd(e, r, hn::Set(d, 1.0f));
    const VF scale = Pow2Of(d, shifted);
    constexpr float k2m26 = 1.0f / (1 << 26);
    VF p = hn::MulAdd(hn::Set(d, 0.01463969238102436f * k2m26), tc,
                      hn::Set(d, 0.10927111655473709f * k2m26));
    p = hn::MulAdd(p, tc, hn::Set(d, 0.34395724534988403f * k2m26));
    p = hn::MulAdd(p, tc, hn::Set(d, 0.5f * k2m26));
    VF q = hn::MulAdd(hn::Set(d, 0.036707520484924316f), tc,
                      hn::Set(d, 0.2735288441181183f));
    q = hn::MulAdd(q, tc, hn::Set(d, 0.904076874256134f));
    q = hn::MulAdd(q, tc, hn::Set(d, 1.4857951402664185f));
    q = hn::MulAdd(q, tc, hn::Set(d, 1.0f));
    const VF tail = hn::Mul(hn::Mul(e, scale), hn::Div(p, q));
    // x/2 + t/2 rather than (x + t)/2: x + t overflows for x near the float max.
    const VF half = hn::Set(d, 0.5f);
    return hn::NegMulAdd(tc, tail, hn::MulAdd(x, half, hn::Mul(t, half)));
  }
};

// tanh(x) = x P(x^2) / Q(x^2), P and Q of degree 4, for |x| <= 9; beyond, tanh is
// +-1 in float32 (1 - tanh(9) = 3e-8 < 2^-25). The coefficients were fitted for
// this kernel (tests/kernels/activation/tanh_rational_fit.py: reweighted least squares on
// [0, 9], relative error 2.7e-8 in double); in float32 the worst error over a
// dense sweep is 3.1 eps32. Near 0 the quotient is 1 to the last bit, so tiny and
// subnormal x come back unchanged, -0 included. The result is clamped to
// [-1, 1], which rounding would otherwise leave by an ulp; NaN is put back (the
// clamps would turn it into a number). hwy's Tanh (expm1, 4 ulp) took twice the
// operations.
struct Tanh {
  HWY_INLINE VF operator()(DF d, VF x) const {
    const VF one = hn::Set(d, 1.0f);
    const VF limit = hn::Set(d, 9.0f);
    const VF xc = hn::Min(hn::Max(x, hn::Neg(limit)), limit);
    const VF s = hn::Mul(xc, xc);
    VF p = hn::MulAdd(hn::Set(d, 1.3337774440458361e-08f), s,
                      hn::Set(d, 2.0593231965904124e-05f));
    p = hn::MulAdd(p, s, hn::Set(d, 0.003494454547762871f));
    p = hn::MulAdd(p, s, hn::Set(d, 0.13380014896392822f));
    p = hn::MulAdd(p, s, one);
    VF q = hn::MulAdd(hn::Set(d, 7.768593377477373e-07f), s,
                      hn::Set(d, 0.00032839016057550907f));
    q = hn::MulAdd(q, s, hn::Set(d, 0.025872495025396347f));
    q = hn::MulAdd(q, s, hn::Set(d, 0.4671332836151123f));
    q = hn::MulAdd(q, s, one);
    const VF y = hn::Min(hn::Max(hn::Div(hn::Mul(xc, p), q), hn::Neg(one)), one);
    return hn::IfThenElse(hn::IsNaN(x), x, y);
  }
};

// Runs op on `count` < one vector of values through an aligned buffer, so no load
// or store touches memory past the arrays.
template <class Op>
HWY_INLINE void UnaryPartial(const Op& op, const float* x, size_t count, float* y) {
  const DF d;
  HWY_ALIGN float buf[kMaxLanes] = {};
  std::copy(x, x + count, buf);
  hn::Store(op(d, hn::Load(d, buf)), d, buf);
  std::copy(buf, buf + count, y);
}

template <class Op>
HWY_INLINE void GatedPartial(const Op& op, const float* g, const float* u, size_t count,
                             float* y) {
  const DF d;
  HWY_ALIGN float gbuf[kMaxLanes] = {};
  HWY_ALIGN float ubuf[kMaxLanes] = {};
  std::copy(g, g + count, gbuf);
  std::copy(u, u + count, ubuf);
  hn::Store(hn::Mul(op(d, hn::Load(d, gbuf)), hn::Load(d, ubuf)), d, gbuf);
  std::copy(gbuf, gbuf + count, y);
}

// How many values to run before y + i is vector-aligned, as hn::Stream requires;
// `n` (all of them) if y is not even float-aligned.
HWY_INLINE size_t HeadToAlign(const float* y, size_t n) {
  const size_t lanes = hn::Lanes(DF());
  const uintptr_t address = reinterpret_cast<uintptr_t>(y);
  if (address % sizeof(float) != 0) return n;
  const size_t misaligned = (address / sizeof(float)) % lanes;
  return misaligned == 0 ? 0 : std::min(n, lanes - misaligned);
}

// With output statistics the tally is folded every kStatsChunk values (see
// value_tally-inl.h).
constexpr size_t kStatsChunk = 4096;

// Writes y[0, n): `vector(i)` makes the output vector at index i, `partial(i, m)`
// writes the m < one vector of values from i (an unaligned head, the tail). With
// kStats, adds the statistics of what it wrote to *stats as it writes it. With
// `stream` (and y float-aligned), vector stores are non-temporal; the caller
// fences.
template <bool kStats, class Vector, class Partial>
HWY_INLINE void WriteOutput(size_t n, float* y, bool stream, ValueStats* stats,
                            const Vector& vector, const Partial& partial) {
  const DF d;
  const size_t lanes = hn::Lanes(d);
  // Values written by `partial`: few, counted one by one.
  const auto partial_with_stats = [&](size_t i, size_t m) {
    partial(i, m);
    if constexpr (kStats)
      stats->Merge(ValueStatsReference(y + i, static_cast<int64_t>(m)));
  };
  size_t i = 0;
  if (stream) {
    const size_t head = HeadToAlign(y, n);
    if (head >= lanes) {  // Unaligned floats: plain stores.
      stream = false;
    } else if (head > 0) {
      partial_with_stats(0, head);
      i = head;
    }
  }
  if constexpr (kStats) {
    ValueTally tally;
    while (i + lanes <= n) {
      const size_t start = i;
      const size_t end = std::min(n, i + kStatsChunk);
      if (stream) {
        for (; i + lanes <= end; i += lanes) hn::Stream(tally.Add(vector(i)), d, y + i);
      } else {
        for (; i + lanes <= end; i += lanes) hn::StoreU(tally.Add(vector(i)), d, y + i);
      }
      tally.Fold(y + start, i - start, *stats);
    }
  } else if (stream) {
    for (; i + lanes <= n; i += lanes) hn::Stream(vector(i), d, y + i);
  } else {
    for (; i + lanes <= n; i += lanes) hn::StoreU(vector(i), d, y + i);
  }
  while (i < n) {  // The tail; also the whole of an unaligned head.
    const size_t m = std::min(lanes, n - i);
    partial_with_stats(i, m);
    i += m;
  }
}

// With statistics the loops also check their inputs as they read them, for the
// caller's input health: a NaN or Inf in x makes x * 0 NaN, so a sum of x * 0
// over the vectors read (one fused multiply-add each) stays finite exactly when
// every x was. InputsFinite gives the verdict; EndsFinite checks in scalar what
// partial vectors read.
HWY_INLINE VF AddNonFinite(DF d, VF x, VF seen) {
  return hn::MulAdd(x, hn::Zero(d), seen);
}
HWY_INLINE bool InputsFinite(DF d, VF seen) {
  return std::isfinite(hn::GetLane(hn::SumOfLanes(d, seen)));
}
HWY_INLINE bool AllFinite(const float* x, size_t n) {
  return std::all_of(x, x + n, [](float v) { return std::isfinite(v); });
}
// The values WriteOutput may hand to `partial` (an unaligned head, the tail: each
// under one vector) lie within one vector of either end: checked before the loop
// (y may be x), which keeps the check out of the vector loop's lambdas.
HWY_INLINE bool EndsFinite(const float* x, size_t n) {
  const size_t lanes = hn::Lanes(DF());
  if (n <= 2 * lanes) return AllFinite(x, n);
  return AllFinite(x, lanes) && AllFinite(x + n - lanes, lanes);
}

// y[i] = op(x[i]). Loads are unaligned; y == x is fine (same index read first).
template <class Op, bool kStats>
void UnaryLoop(const float* x, size_t n, float* y, bool stream, ValueStats* stats,
               bool* inputs_finite) {
  const Op op;
  const DF d;
  VF seen = hn::Zero(d);
  bool ends_finite = true;
  if constexpr (kStats) ends_finite = EndsFinite(x, n);
  WriteOutput<kStats>(
      n, y, stream, stats,
      [&](size_t i) HWY_ATTR {
        const VF v = hn::LoadU(d, x + i);
        if constexpr (kStats) seen = AddNonFinite(d, v, seen);
        return op(d, v);
      },
      [&](size_t i, size_t m) { UnaryPartial(op, x + i, m, y + i); });
  if constexpr (kStats) *inputs_finite = ends_finite && InputsFinite(d, seen);
  if (stream) hwy::FlushStream();  // Order the non-temporal stores before later writes.
}

// y[i] = op(g[i]) * u[i]. No fence: GatedRows fences once after all rows (one
// per row cost ~25% on packed [2048, 2 x 4096]). With kStats, clears
// *inputs_finite if g or u holds a NaN or Inf.
template <class Op, bool kStats>
void GatedLoop(const float* g, const float* u, size_t n, float* y, bool stream,
               ValueStats* stats, bool* inputs_finite) {
  const Op op;
  const DF d;
  VF seen = hn::Zero(d);
  bool ends_finite = true;
  if constexpr (kStats) ends_finite = EndsFinite(g, n) && EndsFinite(u, n);
  WriteOutput<kStats>(
      n, y, stream, stats,
      [&](size_t i) HWY_ATTR {
        const VF gv = hn::LoadU(d, g + i);
        const VF uv = hn::LoadU(d, u + i);
        if constexpr (kStats) seen = AddNonFinite(d, uv, AddNonFinite(d, gv, seen));
        return hn::Mul(op(d, gv), uv);
      },
      [&](size_t i, size_t m) { GatedPartial(op, g + i, u + i, m, y + i); });
  if constexpr (kStats) {
    if (!ends_finite || !InputsFinite(d, seen)) *inputs_finite = false;
  }
}

template <class Op, bool kStats>
void GatedRowsT(const float* gate, const float* up, int64_t rows, int64_t dim,
                int64_t stride, float* y, bool stream, ValueStats* stats,
                bool* inputs_finite) {
  if constexpr (kStats) *inputs_finite = true;
  if (stride == dim) {  // Two contiguous tensors: one run over all of them.
    GatedLoop<Op, kStats>(gate, up, static_cast<size_t>(rows * dim), y, stream, stats,
                          inputs_finite);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      GatedLoop<Op, kStats>(gate + r * stride, up + r * stride, static_cast<size_t>(dim),
                            y + r * dim, stream, stats, inputs_finite);
    }
  }
  if (stream) hwy::FlushStream();  // Order the non-temporal stores before later writes.
}

// The loops with or without output statistics (and the input check): each its
// own instantiation, so the plain one is the loop it was.
template <class Op>
void Unary(const float* x, size_t n, float* y, bool stream, ValueStats* stats,
           bool* inputs_finite) {
  if (stats != nullptr) return UnaryLoop<Op, true>(x, n, y, stream, stats, inputs_finite);
  UnaryLoop<Op, false>(x, n, y, stream, nullptr, nullptr);
}

template <class Op>
void GatedRows(const float* gate, const float* up, int64_t rows, int64_t dim,
               int64_t stride, float* y, bool stream, ValueStats* stats,
               bool* inputs_finite) {
  if (stats != nullptr) {
    return GatedRowsT<Op, true>(gate, up, rows, dim, stride, y, stream, stats,
                                inputs_finite);
  }
  GatedRowsT<Op, false>(gate, up, rows, dim, stride, y, stream, nullptr, nullptr);
}

// `inputs_finite` is set with `stats` (it must then be non-null).
void ActivateImpl(Activation act, const float* x, int64_t n, float* y, bool stream,
                  ValueStats* stats, bool* inputs_finite) {
  const size_t count = static_cast<size_t>(n);
  switch (act) {
    case Activation::kRelu:
      return Unary<Relu>(x, count, y, stream, stats, inputs_finite);
    case Activation::kGelu:
      return Unary<Gelu>(x, count, y, stream, stats, inputs_finite);
    case Activation::kGeluTanh:
      return Unary<GeluTanh>(x, count, y, stream, stats, inputs_finite);
    case Activation::kSilu:
      return Unary<Silu>(x, count, y, stream, stats, inputs_finite);
    case Activation::kSigmoid:
      return Unary<Sigmoid>(x, count, y, stream, stats, inputs_finite);
    case Activation::kTanh:
      return Unary<Tanh>(x, count, y, stream, stats, inputs_finite);
    case Activation::kQuickGelu:
      return Unary<QuickGelu>(x, count, y, stream, stats, inputs_finite);
  }
}

void GatedActivateImpl(Activation act, const float* gate, const float* up, int64_t rows,
                       int64_t dim, int64_t stride, float* y, bool stream,
                       ValueStats* stats, bool* inputs_finite) {
  switch (act) {
    case Activation::kRelu:
      return GatedRows<Relu>(gate, up, rows, dim, stride, y, stream, stats,
                             inputs_finite);
    case Activation::kGelu:
      return GatedRows<Gelu>(gate, up, rows, dim, stride, y, stream, stats,
                             inputs_finite);
    case Activation::kGeluTanh:
      return GatedRows<GeluTanh>(gate, up, rows, dim, stride, y, stream, stats,
                                 inputs_finite);
    case Activation::kSilu:
      return GatedRows<Silu>(gate, up, rows, dim, stride, y, stream, stats,
                             inputs_finite);
    case Activation::kSigmoid:
      return GatedRows<Sigmoid>(gate, up, rows, dim, stride, y, stream, stats,
                                inputs_finite);
    case Activation::kTanh:
      return GatedRows<Tanh>(gate, up, rows, dim, stride, y, stream, stats,
                             inputs_finite);
    case Activation::kQuickGelu:
      return GatedRows<QuickGelu>(gate, up, rows, dim, stride, y, stream, stats,
                                  inputs_finite);
  }
}

const char* LoopTargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace layerserve::kernels::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace layerserve::kernels::internal {

HWY_EXPORT(ActivateImpl);
HWY_EXPORT(GatedActivateImpl);
HWY_EXPORT(LoopTargetName);

void ActivateHighway(Activation act, const float* x, int64_t n, float* y, bool stream,
                     ValueStats* stats, bool* inputs_finite) {
  bool unused;
  if (stats != nullptr) *stats = ValueStats();
  HWY_DYNAMIC_DISPATCH(ActivateImpl)
  (act, x, n, y, stream, stats, inputs_finite != nullptr ? inputs_finite : &unused);
}

void GatedActivateHighway(Activation act, const float* gate, const float* up,
                          int64_t rows, int64_t dim, int64_t stride, float* y,
                          bool stream, ValueStats* stats, bool* inputs_finite) {
  bool unused;
  if (stats != nullptr) *stats = ValueStats();
  HWY_DYNAMIC_DISPATCH(GatedActivateImpl)
  (act, gate, up, rows, dim, stride, y, stream, stats,
   inputs_finite != nullptr ? inputs_finite : &unused);
}

const char* ActivationHighwayTarget() { return HWY_DYNAMIC_DISPATCH(LoopTargetName)(); }

}  // namespace layerserve::kernels::internal
#endif  // HWY_ONCE
