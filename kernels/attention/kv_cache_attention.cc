// AttentionOverCache in Google Highway, one copy per x86 target, dispatched at run
// time. Three passes: scores (a vector of keys at a time from the transposed key
// blocks, so no horizontal sums), the shared masked softmax, and the weighted sum of
// the value rows. Both read the cache in address order (it comes from memory).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention/kv_cache_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway must come after foreach_target.h.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/attention/kv_cache_attention.h"

HWY_BEFORE_NAMESPACE();
namespace layerserve::kernels {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// Lanes floats starting at element i of float32 or bfloat16 storage.
template <bool kBf16>
V LoadAt(const void* p, int64_t i) {
  const D d;
  if constexpr (kBf16) {
    const hn::Rebind<hwy::bfloat16_t, D> dbf;
    return hn::PromoteTo(d, hn::LoadU(dbf, static_cast<const hwy::bfloat16_t*>(p) + i));
  } else {
    return hn::LoadU(d, static_cast<const float*>(p) + i);
  }
}

template <bool kBf16>
float ValueAt(const void* p, int64_t i) {
  if constexpr (kBf16) return hwy::F32FromBF16(static_cast<const hwy::bfloat16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

template <bool kBf16>
const void* Advance(const void* p, int64_t elements) {
  return static_cast<const char*>(p) + elements * (kBf16 ? 2 : 4);
}

// Vectors across one 64-token row of a transposed key block.
constexpr int64_t kRowVecs = kKvBlockTokens / static_cast<int64_t>(hn::MaxLanes(D()));

// Query heads of one KV group that share each key or value vector loaded (and
// converted from bfloat16): GQA models have 4 to 8 query heads per KV head, and
// one load per head made both passes four times the loads they need. Four rows of
// sums (16 accumulators) fit AVX-512's 32 registers; narrower targets keep one.
constexpr int64_t kGroupRows = kRowVecs <= 4 ? 4 : 1;

// Scores of `kRows` query rows q[r] (same KV group) against the n keys of one
// transposed key block k, into out[r][0, n).
template <bool kBf16, int64_t kRows>
void ScoreRows(const void* k, int64_t dh, int64_t n, const float* const* q,
               float* const* out) {
  const D d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  V acc[kRows][kRowVecs];
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kRowVecs; ++c) acc[r][c] = hn::Zero(d);
  }
  if constexpr (kRows == 1) {
    // Even and odd dimensions in separate sums: two independent chains per vector
    // hide the FMA latency (several rows already give enough chains).
    V odd[kRowVecs];
    for (int64_t c = 0; c < kRowVecs; ++c) odd[c] = hn::Zero(d);
    const float* q0 = q[0];
    int64_t i = 0;
    for (; i + 2 <= dh; i += 2) {
      const V even_q = hn::Set(d, q0[i]), odd_q = hn::Set(d, q0[i + 1]);
      for (int64_t c = 0; c < kRowVecs; ++c) {
        acc[0][c] = hn::MulAdd(even_q, LoadAt<kBf16>(k, i * kKvBlockTokens + c * lanes),
                               acc[0][c]);
        odd[c] = hn::MulAdd(odd_q, LoadAt<kBf16>(k, (i + 1) * kKvBlockTokens + c * lanes),
                            odd[c]);
      }
    }
    for (; i < dh; ++i) {
      const V qi = hn::Set(d, q0[i]);
      for (int64_t c = 0; c < kRowVecs; ++c) {
        acc[0][c] =
            hn::MulAdd(qi, LoadAt<kBf16>(k, i * kKvBlockTokens + c * lanes), acc[0][c]);
      }
    }
    for (int64_t c = 0; c < kRowVecs; ++c) acc[0][c] = hn::Add(acc[0][c], odd[c]);
  } else {
    for (int64_t i = 0; i < dh; ++i) {
      V qi[kRows];
      for (int64_t r = 0; r < kRows; ++r) qi[r] = hn::Set(d, q[r][i]);
      for (int64_t c = 0; c < kRowVecs; ++c) {
        const V key = LoadAt<kBf16>(k, i * kKvBlockTokens + c * lanes);
        for (int64_t r = 0; r < kRows; ++r) acc[r][c] = hn::MulAdd(qi[r], key, acc[r][c]);
      }
    }
  }
  for (int64_t r = 0; r < kRows; ++r) {
    if (n == kKvBlockTokens) {
      for (int64_t c = 0; c < kRowVecs; ++c) hn::StoreU(acc[r][c], d, out[r] + c * lanes);
    } else {  // The last block: the row ends inside it.
      HWY_ALIGN float row[kKvBlockTokens];
      for (int64_t c = 0; c < kRowVecs; ++c) hn::Store(acc[r][c], d, row + c * lanes);
      std::copy(row, row + n, out[r]);
    }
  }
}

// Calls f(first, count) for the query heads of KV group g in runs of at most
// kGroupRows.
template <typename F>
void ForGroupRuns(int64_t g, int64_t group, F f) {
  for (int64_t h = g * group; h < (g + 1) * group; h += kGroupRows) {
    f(h, std::min(kGroupRows, (g + 1) * group - h));
  }
}

// Calls f(std::integral_constant<int64_t, count>()) for 1 <= count <= 4: a run-time
// count of rows or vectors becomes a template constant, which keeps the sums in
// registers (with a run-time count GCC kept them on the stack: a third slower).
template <typename F>
void WithCount(int64_t count, F f) {
  switch (count) {
    case 4:
      return f(std::integral_constant<int64_t, 4>());
    case 3:
      return f(std::integral_constant<int64_t, 3>());
    case 2:
      return f(std::integral_constant<int64_t, 2>());
    default:
      return f(std::integral_constant<int64_t, 1>());
  }
}

// scores[(h * tokens + t) * keys + j] = q[t, h] . k[j, h's group] for every j below
// query t's limit (up to the end of its 64-token block too, which the softmax
// ignores). Each group's rows of a key block are read once, in address order: a
// decode step reads the cache from memory, and a sequential stream reads it twice
// as fast as the strided one of a loop over tokens first.
template <bool kBf16>
void Scores(const AttentionArgs& a, const KvCache& cache, int64_t layer, int64_t used,
            float* scores) {
  const int64_t group = a.q_heads / a.kv_heads, dh = a.head_dim;
  for (int64_t j0 = 0; j0 < used; j0 += kKvBlockTokens) {
    const void* block = cache.KeyBlock(layer, j0 / kKvBlockTokens);
    const int64_t n = std::min(kKvBlockTokens, used - j0);
    for (int64_t g = 0; g < a.kv_heads; ++g) {
      // Row i of this group's keys is dimension i of kKvBlockTokens keys.
      const void* k = Advance<kBf16>(block, g * dh * kKvBlockTokens);
      for (int64_t t = 0; t < a.tokens; ++t) {
        if (j0 >= a.key_limits[t]) continue;
        ForGroupRuns(g, group, [&](int64_t h0, int64_t rows) {
          const float* q[kGroupRows];
          float* out[kGroupRows];
          for (int64_t r = 0; r < rows; ++r) {
            q[r] = a.q + t * a.q_stride + (h0 + r) * dh;
            out[r] = scores + ((h0 + r) * a.tokens + t) * a.keys + j0;
          }
          WithCount(rows, [&](auto count) {
            ScoreRows<kBf16, decltype(count)::value>(k, dh, n, q, out);
          });
        });
      }
    }
  }
}

// out[r][offset, offset + kCount vectors) += sum over j < n of weights[r][j] *
// v[j] there, for `kRows` query rows of one KV group, v being that group's rows of
// one value block (row j at element j * dh). kCount is a constant: see WithCount.
template <bool kBf16, int64_t kRows, int64_t kCount>
void MixVectors(const void* v, int64_t dh, int64_t n, int64_t offset,
                const float* const* weights, float* const* out) {
  const D d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  V acc[kRows][kCount];
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCount; ++c)
      acc[r][c] = hn::LoadU(d, out[r] + offset + c * lanes);
  }
  for (int64_t j = 0; j < n; ++j) {
    V w[kRows];
    for (int64_t r = 0; r < kRows; ++r) w[r] = hn::Set(d, weights[r][j]);
    for (int64_t c = 0; c < kCount; ++c) {
      const V value = LoadAt<kBf16>(v, j * dh + offset + c * lanes);
      for (int64_t r = 0; r < kRows; ++r) acc[r][c] = hn::MulAdd(w[r], value, acc[r][c]);
    }
  }
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCount; ++c)
      hn::StoreU(acc[r][c], d, out[r] + offset + c * lanes);
  }
}

// out[r] += sum over j < n of weights[r][j] * v[j] for `kRows` query rows of one
// KV group. Each row's sums run in order of j whatever kRows is, so the bits do not
// depend on how a group's heads are split into runs.
template <bool kBf16, int64_t kRows>
void MixRows(const void* v, int64_t dh, int64_t n, const float* const* weights,
             float* const* out) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(D()));
  const int64_t vectors = dh / lanes;  // Head dims in whole vectors.
  constexpr int64_t kChunk = 4;        // Vectors of each row's sums in registers.
  int64_t c0 = 0;
  for (; c0 + kChunk <= vectors; c0 += kChunk) {
    MixVectors<kBf16, kRows, kChunk>(v, dh, n, c0 * lanes, weights, out);
  }
  if (c0 < vectors) {
    WithCount(vectors - c0, [&](auto count) {
      MixVectors<kBf16, kRows, decltype(count)::value>(v, dh, n, c0 * lanes, weights,
                                                       out);
    });
  }
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = vectors * lanes; c < dh; ++c) {  // Dims that fill no vector.
      for (int64_t j = 0; j < n; ++j)
        out[r][c] += weights[r][j] * ValueAt<kBf16>(v, j * dh + c);
    }
  }
}

// out[t, h] = sum over j below query t's limit of p[h, t, j] * v[j, h's group], in
// order of j. A value block holds each group's rows together, so every group's
// share is one sequential stream (the cache comes from memory).
template <bool kBf16>
void Mix(const AttentionArgs& a, const KvCache& cache, int64_t layer, const float* p) {
  const int64_t group = a.q_heads / a.kv_heads, dh = a.head_dim;
  for (int64_t t = 0; t < a.tokens; ++t) {
    float* out = a.out + t * a.out_stride;
    std::fill(out, out + a.q_heads * dh, 0.0f);
    const int64_t limit = a.key_limits[t];
    for (int64_t j0 = 0; j0 < limit; j0 += kKvBlockTokens) {
      const void* block = cache.ValueBlock(layer, j0 / kKvBlockTokens);
      const int64_t n = std::min(kKvBlockTokens, limit - j0);
      for (int64_t g = 0; g < a.kv_heads; ++g) {
        const void* v = Advance<kBf16>(block, g * kKvBlockTokens * dh);
        ForGroupRuns(g, group, [&](int64_t h0, int64_t rows) {
          const float* weights[kGroupRows];
          float* sums[kGroupRows];
          for (int64_t r = 0; r < rows; ++r) {
            weights[r] = p + ((h0 + r) * a.tokens + t) * a.keys + j0;
            sums[r] = out + (h0 + r) * dh;
          }
          WithCount(rows, [&](auto count) {
            MixRows<kBf16, decltype(count)::value>(v, dh, n, weights, sums);
          });
        });
      }
    }
  }
}

template <bool kBf16>
void Attend(const AttentionArgs& a, const KvCache& cache, int64_t layer,
            CacheAttentionScratch& s) {
  const int64_t rows = a.q_heads * a.tokens;
  s.scores.resize(rows * a.keys);
  s.limits.resize(rows);
  for (int64_t h = 0; h < a.q_heads; ++h) {
    std::copy(a.key_limits, a.key_limits + a.tokens, s.limits.data() + h * a.tokens);
  }
  const int64_t used = *std::max_element(a.key_limits, a.key_limits + a.tokens);
  Scores<kBf16>(a, cache, layer, used, s.scores.data());
  double* entropy = nullptr;
  if (a.head_entropy != nullptr) {
    s.entropy.assign(rows, 0.0);
    entropy = s.entropy.data();
  }
  MaskedSoftmaxRows(s.scores.data(), rows, a.keys, s.limits.data(), a.scale, entropy);
  if (entropy != nullptr) {
    for (int64_t h = 0; h < a.q_heads; ++h) {
      for (int64_t t = 0; t < a.tokens; ++t)
        a.head_entropy[h] += entropy[h * a.tokens + t];
    }
  }
  Mix<kBf16>(a, cache, layer, s.scores.data());
}

}  // namespace

void AttentionOverCacheImpl(const AttentionArgs& a, const KvCache& cache, int64_t layer,
                            CacheAttentionScratch& scratch) {
  if (cache.type() == KvCacheType::kBfloat16) {
    Attend<true>(a, cache, layer, scratch);
  } else {
    Attend<false>(a, cache, layer, scratch);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace layerserve::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace layerserve::kernels {

HWY_EXPORT(AttentionOverCacheImpl);

void AttentionOverCache(const AttentionArgs& args, const KvCache& cache, int64_t layer,
                        CacheAttentionScratch& scratch) {
  HWY_DYNAMIC_DISPATCH(AttentionOverCacheImpl)(args, cache, layer, scratch);
}

}  // namespace layerserve::kernels
#endif  // HWY_ONCE
