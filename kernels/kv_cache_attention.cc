// AttentionOverCache in Google Highway, one copy per x86 target, dispatched at run
// time. Three passes: scores (a vector of keys at a time from the transposed key
// blocks, so no horizontal sums), the shared masked softmax, and the weighted sum of
// the value rows. Both read the cache in address order (it comes from memory).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kv_cache_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway must come after foreach_target.h.
#include <algorithm>
#include <cstdint>

#include "hwy/highway.h"
#include "kernels/kv_cache_attention.h"

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

// scores[(h * tokens + t) * keys + j] = q[t, h] . k[j, h's group] for every j below
// query t's limit (up to the end of its 64-token block too, which the softmax
// ignores). Each head's rows of a key block are read once, in address order: a
// decode step reads the cache from memory, and a sequential stream reads it twice
// as fast as the strided one of a loop over tokens first.
template <bool kBf16>
void Scores(const AttentionArgs& a, const KvCache& cache, int64_t layer, int64_t used,
            float* scores) {
  const D d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t group = a.q_heads / a.kv_heads, dh = a.head_dim;
  for (int64_t j0 = 0; j0 < used; j0 += kKvBlockTokens) {
    const void* block = cache.KeyBlock(layer, j0 / kKvBlockTokens);
    const int64_t n = std::min(kKvBlockTokens, used - j0);
    for (int64_t h = 0; h < a.q_heads; ++h) {
      // Row i of this head's keys is dimension i of kKvBlockTokens keys.
      const void* k = Advance<kBf16>(block, (h / group) * dh * kKvBlockTokens);
      for (int64_t t = 0; t < a.tokens; ++t) {
        if (j0 >= a.key_limits[t]) continue;
        const float* q = a.q + t * a.q_stride + h * dh;
        // Even and odd dimensions in separate sums: two independent chains per
        // vector hide the FMA latency.
        V acc[kRowVecs], odd[kRowVecs];
        for (int64_t c = 0; c < kRowVecs; ++c) acc[c] = odd[c] = hn::Zero(d);
        int64_t i = 0;
        for (; i + 2 <= dh; i += 2) {
          const V q0 = hn::Set(d, q[i]), q1 = hn::Set(d, q[i + 1]);
          for (int64_t c = 0; c < kRowVecs; ++c) {
            acc[c] = hn::MulAdd(q0, LoadAt<kBf16>(k, i * kKvBlockTokens + c * lanes), acc[c]);
            odd[c] = hn::MulAdd(q1, LoadAt<kBf16>(k, (i + 1) * kKvBlockTokens + c * lanes),
                                odd[c]);
          }
        }
        for (; i < dh; ++i) {
          const V qi = hn::Set(d, q[i]);
          for (int64_t c = 0; c < kRowVecs; ++c) {
            acc[c] = hn::MulAdd(qi, LoadAt<kBf16>(k, i * kKvBlockTokens + c * lanes), acc[c]);
          }
        }
        for (int64_t c = 0; c < kRowVecs; ++c) acc[c] = hn::Add(acc[c], odd[c]);
        float* out = scores + (h * a.tokens + t) * a.keys + j0;
        if (n == kKvBlockTokens) {
          for (int64_t c = 0; c < kRowVecs; ++c) hn::StoreU(acc[c], d, out + c * lanes);
        } else {  // The last block: the row ends inside it.
          HWY_ALIGN float row[kKvBlockTokens];
          for (int64_t c = 0; c < kRowVecs; ++c) hn::Store(acc[c], d, row + c * lanes);
          std::copy(row, row + n, out);
        }
      }
    }
  }
}

// out[t, h] = sum over j below query t's limit of p[h, t, j] * v[j, h's group], in
// order of j. A value block holds each head's rows together, so every head's share
// is one sequential stream (the cache comes from memory), and up to four vectors of
// a head's sums stay in registers across the block's rows.
template <bool kBf16>
void Mix(const AttentionArgs& a, const KvCache& cache, int64_t layer, const float* p) {
  const D d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t group = a.q_heads / a.kv_heads, dh = a.head_dim;
  const int64_t vectors = dh / lanes;  // Head dims in whole vectors.
  constexpr int64_t kChunk = 4;        // Vectors of sums in registers at once.
  for (int64_t t = 0; t < a.tokens; ++t) {
    float* out = a.out + t * a.out_stride;
    std::fill(out, out + a.q_heads * dh, 0.0f);
    const int64_t limit = a.key_limits[t];
    for (int64_t j0 = 0; j0 < limit; j0 += kKvBlockTokens) {
      const void* block = cache.ValueBlock(layer, j0 / kKvBlockTokens);
      const int64_t n = std::min(kKvBlockTokens, limit - j0);
      for (int64_t h = 0; h < a.q_heads; ++h) {
        const float* weights = p + (h * a.tokens + t) * a.keys + j0;
        // Row r of this head's values in the block: element r * dh.
        const void* v = Advance<kBf16>(block, (h / group) * kKvBlockTokens * dh);
        float* oh = out + h * dh;
        for (int64_t c0 = 0; c0 < vectors; c0 += kChunk) {
          const int64_t count = std::min(kChunk, vectors - c0);
          V acc[kChunk];
          for (int64_t c = 0; c < count; ++c) acc[c] = hn::LoadU(d, oh + (c0 + c) * lanes);
          for (int64_t r = 0; r < n; ++r) {
            const V w = hn::Set(d, weights[r]);
            for (int64_t c = 0; c < count; ++c) {
              acc[c] = hn::MulAdd(w, LoadAt<kBf16>(v, r * dh + (c0 + c) * lanes), acc[c]);
            }
          }
          for (int64_t c = 0; c < count; ++c) hn::StoreU(acc[c], d, oh + (c0 + c) * lanes);
        }
        for (int64_t c = vectors * lanes; c < dh; ++c) {  // Dims that fill no vector.
          for (int64_t r = 0; r < n; ++r) oh[c] += weights[r] * ValueAt<kBf16>(v, r * dh + c);
        }
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
      for (int64_t t = 0; t < a.tokens; ++t) a.head_entropy[h] += entropy[h * a.tokens + t];
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
