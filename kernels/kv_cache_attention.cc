// AttentionOverCache in Google Highway, one copy per x86 target, dispatched at run
// time. Three passes: scores (a vector of keys at a time from the transposed key
// blocks, so no horizontal sums), the shared masked softmax, and the weighted sum of
// the value rows. Independent accumulators hide the FMA latency in both loops.
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

// scores[(h * tokens + t) * keys + j] = q[t, h] . k[j, h's group] for every j below
// query t's limit (a few past it too, which the softmax ignores).
template <bool kBf16>
void Scores(const AttentionArgs& a, const KvCache& cache, int64_t layer, int64_t used,
            float* scores) {
  const D d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));  // Divides kKvBlockTokens.
  const int64_t group = a.q_heads / a.kv_heads, dh = a.head_dim;
  HWY_ALIGN float last[hn::MaxLanes(d)];
  for (int64_t j0 = 0; j0 < used; j0 += kKvBlockTokens) {
    const void* block = cache.KeyBlock(layer, j0 / kKvBlockTokens);
    const int64_t n = std::min(kKvBlockTokens, used - j0);
    for (int64_t c = 0; c < n; c += lanes) {
      for (int64_t h = 0; h < a.q_heads; ++h) {
        // Row i of this head's keys is dimension i of kKvBlockTokens keys.
        const void* k = Advance<kBf16>(block, (h / group) * dh * kKvBlockTokens + c);
        for (int64_t t = 0; t < a.tokens; ++t) {
          if (j0 + c >= a.key_limits[t]) continue;
          const float* q = a.q + t * a.q_stride + h * dh;
          V acc0 = hn::Zero(d), acc1 = hn::Zero(d), acc2 = hn::Zero(d), acc3 = hn::Zero(d);
          int64_t i = 0;
          for (; i + 4 <= dh; i += 4) {
            acc0 = hn::MulAdd(hn::Set(d, q[i]), LoadAt<kBf16>(k, i * kKvBlockTokens), acc0);
            acc1 = hn::MulAdd(hn::Set(d, q[i + 1]),
                              LoadAt<kBf16>(k, (i + 1) * kKvBlockTokens), acc1);
            acc2 = hn::MulAdd(hn::Set(d, q[i + 2]),
                              LoadAt<kBf16>(k, (i + 2) * kKvBlockTokens), acc2);
            acc3 = hn::MulAdd(hn::Set(d, q[i + 3]),
                              LoadAt<kBf16>(k, (i + 3) * kKvBlockTokens), acc3);
          }
          for (; i < dh; ++i) {
            acc0 = hn::MulAdd(hn::Set(d, q[i]), LoadAt<kBf16>(k, i * kKvBlockTokens), acc0);
          }
          const V sum = hn::Add(hn::Add(acc0, acc1), hn::Add(acc2, acc3));
          float* out = scores + (h * a.tokens + t) * a.keys + j0 + c;
          if (c + lanes <= n) {
            hn::StoreU(sum, d, out);
          } else {  // The block's last, partly written columns: keep the row's end.
            hn::Store(sum, d, last);
            std::copy(last, last + (n - c), out);
          }
        }
      }
    }
  }
}

// out[t, h] = sum over j below query t's limit of p[h, t, j] * v[j, h's group].
template <bool kBf16>
void Mix(const AttentionArgs& a, const KvCache& cache, int64_t layer, const float* p) {
  const D d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t group = a.q_heads / a.kv_heads, dh = a.head_dim, width = cache.width();
  for (int64_t h = 0; h < a.q_heads; ++h) {
    const int64_t offset = (h / group) * dh;
    for (int64_t t = 0; t < a.tokens; ++t) {
      const float* weights = p + (h * a.tokens + t) * a.keys;
      const int64_t limit = a.key_limits[t];
      float* out = a.out + t * a.out_stride + h * dh;
      int64_t c = 0;
      for (; c + lanes <= dh; c += lanes) {
        V acc0 = hn::Zero(d), acc1 = hn::Zero(d), acc2 = hn::Zero(d), acc3 = hn::Zero(d);
        for (int64_t j0 = 0; j0 < limit; j0 += kKvBlockTokens) {
          const void* v = Advance<kBf16>(cache.ValueRow(layer, j0), offset + c);
          const int64_t n = std::min(kKvBlockTokens, limit - j0);
          const float* w = weights + j0;
          int64_t r = 0;
          for (; r + 4 <= n; r += 4) {
            acc0 = hn::MulAdd(hn::Set(d, w[r]), LoadAt<kBf16>(v, r * width), acc0);
            acc1 = hn::MulAdd(hn::Set(d, w[r + 1]), LoadAt<kBf16>(v, (r + 1) * width), acc1);
            acc2 = hn::MulAdd(hn::Set(d, w[r + 2]), LoadAt<kBf16>(v, (r + 2) * width), acc2);
            acc3 = hn::MulAdd(hn::Set(d, w[r + 3]), LoadAt<kBf16>(v, (r + 3) * width), acc3);
          }
          for (; r < n; ++r) {
            acc0 = hn::MulAdd(hn::Set(d, w[r]), LoadAt<kBf16>(v, r * width), acc0);
          }
        }
        hn::StoreU(hn::Add(hn::Add(acc0, acc1), hn::Add(acc2, acc3)), d, out + c);
      }
      for (; c < dh; ++c) {  // Head dims that do not fill a vector.
        float sum = 0;
        for (int64_t j = 0; j < limit; ++j) {
          sum += weights[j] * ValueAt<kBf16>(cache.ValueRow(layer, j), offset + c);
        }
        out[c] = sum;
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
