// The fast positional kernels (kernels/positional/positional.h) in Google Highway,
// compiled once per x86 target (AVX-512, AVX2, SSE4, SSSE3 and portable C++) and
// dispatched at run time to the best the CPU has: no -march, no -ffast-math, no FTZ/DAZ.
//
// Sinusoidal computes the encoding on the fly, fused with the add: each row reads
// x once and writes y once, so the kernel runs at memory speed as long as its
// sine/cosine is cheaper than moving the bytes. That sine/cosine (SinCos below)
// shares one argument reduction between sin and cos of the same angle:
//   q = nearest(a * 2/pi), r = a - q * pi/2 (four-part pi/2, see kPiOver2Part*),
//   sin(a), cos(a) from sin(r), cos(r) (Cephes' sinf/cosf minimax polynomials on
//   [-pi/4, pi/4], Moshier, "Methods and Programs for Mathematical Functions"),
//   swapped and negated by the quadrant q mod 4.
// The first three parts of pi/2 have at most 7 significant bits, so q * part is
// exact in float32 for q < 2^17 and the reduction loses nothing even without FMA;
// the fourth carries the rest (pi/2 - sum of parts = 6.1e-17). Rows whose angles
// exceed internal::kFastAngleLimit fall back to the scalar row (sin/cos in double).
//
// Learned and ALiBi are one load, one add (ALiBi: a multiply first) and one store
// per element; their results are bit-identical to the references. T5's bias is
// row copies out of a per-head vector indexed by relative position.
//
// This file includes itself once per target (hwy/foreach_target.h), as Highway's
// hwy/examples/skeleton.cc does; the dispatching entry points are at the end.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/positional/positional_fast.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway must come after foreach_target.h.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/positional/positional.h"
#include "kernels/positional/positional_internal.h"
#include "kernels/value_stats/value_tally-inl.h"

HWY_BEFORE_NAMESPACE();
namespace layerserve::kernels {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
using DI = hn::RebindToSigned<D>;
using VI = hn::Vec<DI>;
constexpr size_t kMaxLanes = hn::MaxLanes(D());

constexpr float kTwoOverPi = 0.636619746685028076171875f;  // float32(2/pi).
constexpr float kRoundMagic = 12582912.0f;                 // 1.5 * 2^23.
// pi/2 in four parts (their sum is pi/2 to 6.1e-17); the first three have 7, 4 and
// 7 significant bits.
constexpr float kPiOver2Part0 = 1.578125f;
constexpr float kPiOver2Part1 = -0.00732421875f;
constexpr float kPiOver2Part2 = -4.470348358154296875e-06f;
constexpr float kPiOver2Part3 = 1.5893254712295857e-08f;
// Cephes sinf / cosf on [-pi/4, pi/4].
constexpr float kSin1 = -1.9515295891e-4f;
constexpr float kSin2 = 8.3321608736e-3f;
constexpr float kSin3 = -1.6666654611e-1f;
constexpr float kCos1 = 2.443315711809948e-5f;
constexpr float kCos2 = -1.388731625493765e-3f;
constexpr float kCos3 = 4.166664568298827e-2f;

// sin(a) and cos(a) for |a| <= kFastAngleLimit (finite).
HWY_INLINE void SinCos(D d, V a, V& sin_a, V& cos_a) {
  const DI di;
  // q = nearest(a * 2/pi) by the 1.5 * 2^23 trick: adding it rounds to an integer
  // (|q| < 2^22), and the sum's low mantissa bits are q + 0x400000, so its bit
  // pattern is q mod 4 in its two low bits. One fused op instead of round + convert.
  const V magic = hn::Set(d, kRoundMagic);
  const V shifted = hn::MulAdd(a, hn::Set(d, kTwoOverPi), magic);
  const V q_float = hn::Sub(shifted, magic);
  const VI q = hn::BitCast(di, shifted);  // Only q mod 4 is used.
  // q * part is exact for the first three parts (q < 2^17), so a fused
  // multiply-add and the separate multiply and subtract of targets without FMA give
  // the same bits; only the last part's product rounds (less with FMA).
  V r = hn::NegMulAdd(q_float, hn::Set(d, kPiOver2Part0), a);
  r = hn::NegMulAdd(q_float, hn::Set(d, kPiOver2Part1), r);
  r = hn::NegMulAdd(q_float, hn::Set(d, kPiOver2Part2), r);
  r = hn::NegMulAdd(q_float, hn::Set(d, kPiOver2Part3), r);

  const V z = hn::Mul(r, r);
  // sin(r) = r + r z (S3 + z (S2 + z S1)).
  V ps = hn::MulAdd(hn::Set(d, kSin1), z, hn::Set(d, kSin2));
  ps = hn::MulAdd(ps, z, hn::Set(d, kSin3));
  const V s = hn::MulAdd(hn::Mul(ps, z), r, r);
  // cos(r) = 1 + z (-1/2 + z (C3 + z (C2 + z C1))), Horner: the last step adds a
  // term of at most 0.31 to 1 and rounds once.
  V pc = hn::MulAdd(hn::Set(d, kCos1), z, hn::Set(d, kCos2));
  pc = hn::MulAdd(pc, z, hn::Set(d, kCos3));
  pc = hn::MulAdd(pc, z, hn::Set(d, -0.5f));
  const V c = hn::MulAdd(pc, z, hn::Set(d, 1.0f));

  // sin(r + q pi/2) = [s, c, -s, -c][q mod 4]; cos(r + q pi/2) = [c, -s, -c, s].
  const VI one = hn::Set(di, 1);
  const VI two = hn::Set(di, 2);
  const auto odd = hn::RebindMask(d, hn::Eq(hn::And(q, one), one));
  // (q & 2) << 30 is the sign bit exactly when the quadrant negates.
  const V sin_sign = hn::BitCast(d, hn::ShiftLeft<30>(hn::And(q, two)));
  const V cos_sign = hn::BitCast(d, hn::ShiftLeft<30>(hn::And(hn::Add(q, one), two)));
  sin_a = hn::Xor(hn::IfThenElse(odd, c, s), sin_sign);
  cos_a = hn::Xor(hn::IfThenElse(odd, s, c), cos_sign);
}

#if HWY_TARGET != HWY_SCALAR
// The interleaved layout wants sin and cos of pair k side by side. Rather than
// computing pairs in order and interleaving across the whole vector (Highway's
// StoreInterleaved2: six shuffles per two vectors on AVX-512), lane L computes
// pair PairOfLane(L), chosen so that the cheap per-128-bit-block
// InterleaveLower/Upper(sin, cos) come out as the row's next 2N values in order:
// block b of InterleaveLower holds lanes 4b, 4b + 1 -> pairs 2b, 2b + 1; of
// InterleaveUpper lanes 4b + 2, 4b + 3 -> pairs N/2 + 2b, N/2 + 2b + 1.
HWY_INLINE auto InterleavedPairOrder(D d) {
  HWY_ALIGN int32_t pair_of_lane[kMaxLanes];
  const size_t n = hn::Lanes(d);
  for (size_t lane = 0; lane < n; ++lane) {
    const size_t block = lane / 4, k = lane % 4;
    pair_of_lane[lane] =
        static_cast<int32_t>(k < 2 ? 2 * block + k : n / 2 + 2 * block + k - 2);
  }
  return hn::SetTableIndices(d, pair_of_lane);
}
#endif

// The row loops below take a Tally (value_tally-inl.h): every vector they store
// goes through tally.Add, every value they write one by one through
// tally.AddWritten, so with an OutputTally they take the output's statistics in
// the pass that writes it and with a NoTally they are plain loops. Each works on
// a local copy of the tally, stored back at the end (see OutputTally).

// inv_freq is padded with zeros to a whole number of vectors (see the context).
template <class Tally>
void SinusoidalRowsT(const float* x, const int64_t* positions, int64_t rows, int64_t dim,
                     const float* inv_freq, float max_inv_freq, bool interleaved,
                     float* y, Tally& tally_out) {
  Tally tally = tally_out;
  const D d;
  const size_t lanes = hn::Lanes(d);
  const size_t half = static_cast<size_t>(dim / 2);
#if HWY_TARGET != HWY_SCALAR
  const auto pair_order = InterleavedPairOrder(d);
#endif
  for (int64_t r = 0; r < rows; ++r) {
    const float position = static_cast<float>(positions[r]);
    const float* x_row = x != nullptr ? x + r * dim : nullptr;
    float* y_row = y + r * dim;
    // Every angle of the row is <= position * max_inv_freq (rounding is monotone).
    // The negated test also sends NaN (0 * Inf) to the scalar row.
    if (!(position * max_inv_freq <= internal::kFastAngleLimit)) {
      internal::SinusoidalRowScalar(
          x_row, position, inv_freq, dim,
          interleaved ? SinusoidalLayout::kInterleaved : SinusoidalLayout::kConcatenated,
          y_row);
      tally.AddWritten(y_row, static_cast<size_t>(dim));
      continue;
    }
    const V p = hn::Set(d, position);
    size_t i = 0;
    // Angles are float32(position * inv_freq[k]) in every branch: the reference's.
    for (; i + lanes <= half; i += lanes) {
      V s, c;
      if (interleaved) {
#if HWY_TARGET != HWY_SCALAR
        const V inv = hn::TableLookupLanes(hn::LoadU(d, inv_freq + i), pair_order);
        SinCos(d, hn::Mul(p, inv), s, c);
        V lo = hn::InterleaveLower(d, s, c);
        V hi = hn::InterleaveUpper(d, s, c);
        if (x_row != nullptr) {
          lo = hn::Add(hn::LoadU(d, x_row + 2 * i), lo);
          hi = hn::Add(hn::LoadU(d, x_row + 2 * i + lanes), hi);
        }
        hn::StoreU(tally.Add(lo), d, y_row + 2 * i);
        hn::StoreU(tally.Add(hi), d, y_row + 2 * i + lanes);
#else
        SinCos(d, hn::Mul(p, hn::LoadU(d, inv_freq + i)), s, c);
        if (x_row != nullptr) {
          V xs, xc;
          hn::LoadInterleaved2(d, x_row + 2 * i, xs, xc);
          s = hn::Add(xs, s);
          c = hn::Add(xc, c);
        }
        hn::StoreInterleaved2(tally.Add(s), tally.Add(c), d, y_row + 2 * i);
#endif
      } else {
        SinCos(d, hn::Mul(p, hn::LoadU(d, inv_freq + i)), s, c);
        if (x_row != nullptr) {
          s = hn::Add(hn::LoadU(d, x_row + i), s);
          c = hn::Add(hn::LoadU(d, x_row + half + i), c);
        }
        hn::StoreU(tally.Add(s), d, y_row + i);
        hn::StoreU(tally.Add(c), d, y_row + half + i);
      }
    }
    if (i == half) continue;
    // The last partial vector, in pair order: no access past the row.
    V s, c;
    SinCos(d, hn::Mul(p, hn::LoadU(d, inv_freq + i)), s, c);
    HWY_ALIGN float sin_buf[kMaxLanes];
    HWY_ALIGN float cos_buf[kMaxLanes];
    hn::Store(s, d, sin_buf);
    hn::Store(c, d, cos_buf);
    for (size_t k = 0; i + k < half; ++k) {
      const size_t si = interleaved ? 2 * (i + k) : i + k;
      const size_t ci = interleaved ? si + 1 : half + i + k;
      y_row[si] = x_row != nullptr ? x_row[si] + sin_buf[k] : sin_buf[k];
      y_row[ci] = x_row != nullptr ? x_row[ci] + cos_buf[k] : cos_buf[k];
    }
    if (interleaved) {
      tally.AddWritten(y_row + 2 * i, 2 * (half - i));
    } else {
      tally.AddWritten(y_row + i, half - i);
      tally.AddWritten(y_row + half + i, half - i);
    }
  }
  tally_out = tally;
}

template <class Tally>
void LearnedRowsT(const float* x, const int64_t* positions, int64_t rows, int64_t dim,
                  const float* table, float* y, Tally& tally_out) {
  Tally tally = tally_out;
  const D d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t r = 0; r < rows; ++r) {
    const float* x_row = x + r * dim;
    const float* t_row = table + positions[r] * dim;
    float* y_row = y + r * dim;
    int64_t i = 0;
    for (; i + lanes <= dim; i += lanes) {
      hn::StoreU(tally.Add(hn::Add(hn::LoadU(d, x_row + i), hn::LoadU(d, t_row + i))), d,
                 y_row + i);
    }
    const int64_t tail = i;
    for (; i < dim; ++i) y_row[i] = x_row[i] + t_row[i];
    tally.AddWritten(y_row + tail, static_cast<size_t>(dim - tail));
  }
  tally_out = tally;
}

// Integers up to 2^24 are exact in float32: distances computed in float32 from
// such j and query positions are exact, as the reference's int64 ones.
constexpr int64_t kExactFloatInteger = int64_t{1} << 24;

template <class Tally>
void AlibiRowsT(const float* slopes, const AlibiShape& shape, const float* scores,
                int64_t batch, float* y, Tally& tally_out) {
  Tally tally = tally_out;
  const D d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t tq = shape.query_length, tk = shape.key_length;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      const float slope = shape.symmetric ? -slopes[h] : slopes[h];
      const V v_slope = hn::Set(d, slope);
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t row = ((b * shape.heads + h) * tq + i) * tk;
        const float* s_row = scores != nullptr ? scores + row : nullptr;
        float* y_row = y + row;
        const int64_t query_position = shape.query_offset + i;
        int64_t j = 0;
        if (query_position <= kExactFloatInteger && tk <= kExactFloatInteger) {
          const V v_query = hn::Set(d, static_cast<float>(query_position));
          for (; j + lanes <= tk; j += lanes) {
            V distance = hn::Sub(hn::Iota(d, static_cast<float>(j)), v_query);
            if (shape.symmetric) distance = hn::Abs(distance);
            V bias = hn::Mul(v_slope, distance);
            if (s_row != nullptr) bias = hn::Add(hn::LoadU(d, s_row + j), bias);
            hn::StoreU(tally.Add(bias), d, y_row + j);
          }
        }
        // The tail (or a whole row of huge positions): the scalar row from j on.
        internal::AlibiRowScalar(s_row != nullptr ? s_row + j : nullptr, slopes[h],
                                 query_position - j, tk - j, shape.symmetric, y_row + j);
        tally.AddWritten(y_row + j, static_cast<size_t>(tk - j));
      }
    }
  }
  tally_out = tally;
}

// y[h, i, :] = by_distance[h, tq - 1 - i : tq - 1 - i + tk]: T5's bias rows as
// windows of the per-head vector (see T5Bias). A vector loop rather than memcpy:
// glibc's memcpy takes `rep movsb` at these sizes, which is ~2x slower here on the
// windows' arbitrary alignment.
template <class Tally>
void T5BiasRowsT(const float* by_distance, int64_t heads, int64_t tq, int64_t tk,
                 float* y, Tally& tally_out) {
  Tally tally = tally_out;
  const D d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t span = tq + tk - 1;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < tq; ++i) {
      const float* src = by_distance + h * span + (tq - 1 - i);
      float* dst = y + (h * tq + i) * tk;
      int64_t j = 0;
      for (; j + lanes <= tk; j += lanes) {
        hn::StoreU(tally.Add(hn::LoadU(d, src + j)), d, dst + j);
      }
      const int64_t tail = j;
      for (; j < tk; ++j) dst[j] = src[j];
      tally.AddWritten(dst + tail, static_cast<size_t>(tk - tail));
    }
  }
  tally_out = tally;
}

// The per-target entry points HWY_EXPORT collects: the loops above, with the
// output's statistics in *stats when it is set.
void SinusoidalRows(const float* x, const int64_t* positions, int64_t rows, int64_t dim,
                    const float* inv_freq, float max_inv_freq, bool interleaved, float* y,
                    ValueStats* stats) {
  WithOutputTally(y, rows * dim, stats, [&](auto& tally) HWY_ATTR {
    SinusoidalRowsT(x, positions, rows, dim, inv_freq, max_inv_freq, interleaved, y,
                    tally);
  });
}

void LearnedRows(const float* x, const int64_t* positions, int64_t rows, int64_t dim,
                 const float* table, float* y, ValueStats* stats) {
  WithOutputTally(y, rows * dim, stats, [&](auto& tally) HWY_ATTR {
    LearnedRowsT(x, positions, rows, dim, table, y, tally);
  });
}

void AlibiRows(const float* slopes, const AlibiShape& shape, const float* scores,
               int64_t batch, float* y, ValueStats* stats) {
  const int64_t count = batch * shape.heads * shape.query_length * shape.key_length;
  WithOutputTally(y, count, stats, [&](auto& tally) HWY_ATTR {
    AlibiRowsT(slopes, shape, scores, batch, y, tally);
  });
}

void T5BiasRows(const float* by_distance, int64_t heads, int64_t tq, int64_t tk, float* y,
                ValueStats* stats) {
  WithOutputTally(y, heads * tq * tk, stats, [&](auto& tally) HWY_ATTR {
    T5BiasRowsT(by_distance, heads, tq, tk, y, tally);
  });
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace layerserve::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <unordered_map>
#include <vector>

namespace layerserve::kernels {
namespace {

HWY_EXPORT(SinusoidalRows);
HWY_EXPORT(LearnedRows);
HWY_EXPORT(AlibiRows);
HWY_EXPORT(T5BiasRows);

// Past this many (dim, base) pairs the frequency cache is cleared rather than
// grown: a server sees a handful of model widths.
constexpr size_t kMaxCachedFrequencies = 16;
// Frequencies are padded to a multiple of this many floats (the widest vector
// Highway may use, 2048 bits), so full-vector loads never leave the array.
constexpr int64_t kFrequencyPadding = 64;
// Scratch above this is released after the call that needed it, so one huge
// request does not pin memory in every worker forever.
constexpr size_t kMaxRetainedScratchFloats = size_t{4} << 20;  // 16 MiB.
// The sinusoidal add reads a cached table of encodings when the rows it needs fit
// in this many bytes: such a table stays in the caches, and adding a row read from
// them took half the time of computing its sines and cosines (64 x 1024, one
// thread: docs/perf/2026-11-30-positional-kernels.md). Larger requests stream from
// memory, where the on-the-fly kernel moves two streams and a table add three, so they
// compute.
constexpr int64_t kMaxTableBytes = int64_t{2} << 20;  // 2 MiB.
// All tables of one context together; past it every table is dropped.
constexpr int64_t kMaxTablesBytes = int64_t{8} << 20;  // 8 MiB.

struct FrequencyKey {
  int64_t dim;
  uint32_t base_bits;  // Bits, not value: keys compare exactly.
  bool operator==(const FrequencyKey& o) const {
    return dim == o.dim && base_bits == o.base_bits;
  }
};

struct FrequencyKeyHash {
  size_t operator()(const FrequencyKey& k) const {
    return std::hash<int64_t>()(k.dim) * 31 + k.base_bits;
  }
};

struct Frequencies {
  std::vector<float> inv_freq;  // [dim / 2] then zeros.
  float max_inv_freq = 0;
  // Encodings of positions 0, 1, ... per layout (interleaved, concatenated), rows
  // of dim, written by SinusoidalRows itself: x + row is the on-the-fly sum.
  std::vector<float> tables[2];
};

}  // namespace

struct PositionalContext::Impl {
  std::unordered_map<FrequencyKey, Frequencies, FrequencyKeyHash> frequencies;
  std::vector<float> scratch;
  int64_t table_bytes = 0;  // Over every Frequencies::tables.

  Frequencies& GetFrequencies(int64_t dim, float base) {
    uint32_t bits;
    std::memcpy(&bits, &base, sizeof bits);
    const FrequencyKey key{dim, bits};
    auto it = frequencies.find(key);
    if (it != frequencies.end()) return it->second;
    if (frequencies.size() >= kMaxCachedFrequencies) {
      frequencies.clear();
      table_bytes = 0;
    }
    Frequencies f;
    const int64_t half = dim / 2;
    f.inv_freq.assign(
        (half + kFrequencyPadding - 1) / kFrequencyPadding * kFrequencyPadding, 0.0f);
    SinusoidalInverseFrequencies(dim, base, f.inv_freq.data());
    for (int64_t i = 0; i < half; ++i) {
      f.max_inv_freq = std::max(f.max_inv_freq, f.inv_freq[i]);
    }
    return frequencies.emplace(key, std::move(f)).first->second;
  }

  // The table of `f` for `layout` covering every one of `positions`, grown to
  // cover them; null if that needs more than kMaxTableBytes.
  const float* TableCovering(Frequencies& f, const int64_t* positions, int64_t rows,
                             int64_t dim, bool interleaved) {
    const int64_t max_rows = kMaxTableBytes / (dim * static_cast<int64_t>(sizeof(float)));
    int64_t need = 0;
    for (int64_t r = 0; r < rows; ++r) {
      if (positions[r] >= max_rows) return nullptr;
      need = std::max(need, positions[r] + 1);
    }
    std::vector<float>* table = &f.tables[interleaved ? 0 : 1];
    const int64_t have = static_cast<int64_t>(table->size()) / dim;
    if (need <= have) return table->data();
    const int64_t added_bytes = (need - have) * dim * static_cast<int64_t>(sizeof(float));
    if (table_bytes + added_bytes > kMaxTablesBytes) {
      for (auto& entry : frequencies) {
        for (std::vector<float>& t : entry.second.tables) std::vector<float>().swap(t);
      }
      table_bytes = 0;
      return TableCovering(f, positions, rows, dim, interleaved);
    }
    std::vector<int64_t> added(need - have);
    for (int64_t p = have; p < need; ++p) added[p - have] = p;
    table->resize(need * dim);
    HWY_DYNAMIC_DISPATCH(SinusoidalRows)
    (nullptr, added.data(), need - have, dim, f.inv_freq.data(), f.max_inv_freq,
     interleaved, table->data() + have * dim, /*stats=*/nullptr);
    table_bytes += added_bytes;
    return table->data();
  }
};

PositionalContext::PositionalContext() : impl_(std::make_unique<Impl>()) {}
PositionalContext::~PositionalContext() = default;

int64_t PositionalContext::CachedFrequencyCount() const {
  return static_cast<int64_t>(impl_->frequencies.size());
}

int64_t PositionalContext::CachedTableBytes() const { return impl_->table_bytes; }

void Sinusoidal(PositionalContext& ctx, const float* x, const int64_t* positions,
                int64_t rows, int64_t dim, float base, SinusoidalLayout layout, float* y,
                ValueStats* output_stats) {
  Frequencies& f = ctx.impl().GetFrequencies(dim, base);
  const bool interleaved = layout == SinusoidalLayout::kInterleaved;
  if (x != nullptr) {
    if (const float* table =
            ctx.impl().TableCovering(f, positions, rows, dim, interleaved)) {
      HWY_DYNAMIC_DISPATCH(LearnedRows)(x, positions, rows, dim, table, y, output_stats);
      return;
    }
  }
  HWY_DYNAMIC_DISPATCH(SinusoidalRows)
  (x, positions, rows, dim, f.inv_freq.data(), f.max_inv_freq, interleaved, y,
   output_stats);
}

void Learned(const float* x, const int64_t* positions, int64_t rows, int64_t dim,
             const float* table, float* y, ValueStats* output_stats) {
  HWY_DYNAMIC_DISPATCH(LearnedRows)(x, positions, rows, dim, table, y, output_stats);
}

void Alibi(const float* slopes, const AlibiShape& shape, const float* scores,
           int64_t batch, float* y, ValueStats* output_stats) {
  HWY_DYNAMIC_DISPATCH(AlibiRows)(slopes, shape, scores, batch, y, output_stats);
}

void T5Bias(PositionalContext& ctx, const float* table, const T5BiasShape& shape,
            float* y, ValueStats* output_stats) {
  // The bias depends on j - i only: along a row it is a window of the per-head
  // vector by_distance[h][k] = table[bucket(k - (tq - 1) - query_offset), h],
  // k in [0, tq + tk - 1). Row (h, i) starts at k = tq - 1 - i.
  const int64_t tq = shape.query_length, tk = shape.key_length, heads = shape.heads;
  const int64_t span = tq + tk - 1;
  std::vector<float>& by_distance = ctx.impl().scratch;
  by_distance.resize(static_cast<size_t>(heads * span));
  for (int64_t k = 0; k < span; ++k) {
    const int64_t bucket =
        T5RelativePositionBucket(k - (tq - 1) - shape.query_offset, shape.bidirectional,
                                 shape.num_buckets, shape.max_distance);
    const float* t_row = table + bucket * heads;
    for (int64_t h = 0; h < heads; ++h) by_distance[h * span + k] = t_row[h];
  }
  HWY_DYNAMIC_DISPATCH(T5BiasRows)(by_distance.data(), heads, tq, tk, y, output_stats);
  if (by_distance.size() > kMaxRetainedScratchFloats) {
    std::vector<float>().swap(by_distance);
  }
}

}  // namespace layerserve::kernels
#endif  // HWY_ONCE
