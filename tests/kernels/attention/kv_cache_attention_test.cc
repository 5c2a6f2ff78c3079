// AttentionOverCache (Highway, reading the cache's blocks in place) against its twin:
// AttentionReference (double precision) over the rows KvCache::Read() gathers. GQA
// groups of 1 to 8 query heads (run 4 at a time, with remainders),
// head dims 1 to 128, caches crossing block boundaries, float32 and bfloat16 blocks,
// padded queries, extreme magnitudes, NaN and Inf.
#include "kernels/attention/kv_cache_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"

namespace layerserve::kernels {
namespace {

struct Case {
  int64_t q_heads, kv_heads, head_dim;
  int64_t past;    // Tokens cached by earlier calls.
  int64_t tokens;  // This call's queries (and new keys).
  bool causal = true;
};

// As in attention_test: float32 dot products of Dh terms then softmax and the
// weighted sum of v stay far below this for unit-normal inputs.
constexpr float kTolerance = 2e-5f;

// What one call sees: a cache holding `past` committed rows plus this call's own.
struct CacheCall {
  CacheCall(const Case& c, KvCacheType type, float scale_values, uint32_t seed)
      : c(c), cache(/*layers=*/2, c.kv_heads, c.head_dim, type) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist;
    const int64_t qw = c.q_heads * c.head_dim, kw = c.kv_heads * c.head_dim;
    stride = qw + 2 * kw;
    // Earlier calls in uneven steps, so the rows cross 64-token blocks.
    for (int64_t done = 0; done < c.past;) {
      const int64_t step = std::min<int64_t>(c.past - done, 1 + done % 37);
      std::vector<float> rows(step * kw * 2);
      for (float& x : rows) x = dist(rng) * scale_values;
      for (int64_t layer = 0; layer < 2; ++layer) {
        cache.Append(layer, rows.data(), rows.data() + kw, 2 * kw, step);
      }
      cache.Commit(step);
      done += step;
    }
    fused.resize(c.tokens * stride);
    for (float& x : fused) x = dist(rng) * scale_values;
    cache.Append(kLayer, fused.data() + qw, fused.data() + qw + kw, stride, c.tokens);
    limits.resize(c.tokens);
    for (int64_t t = 0; t < c.tokens; ++t) {
      limits[t] = c.causal ? c.past + t + 1 : c.past + c.tokens;
    }
  }

  AttentionArgs Args(float* out, double* entropy) const {
    AttentionArgs a;
    a.q_heads = c.q_heads;
    a.kv_heads = c.kv_heads;
    a.head_dim = c.head_dim;
    a.tokens = c.tokens;
    a.keys = c.past + c.tokens;
    a.q = fused.data();
    a.q_stride = stride;
    a.out = out;
    a.out_stride = c.q_heads * c.head_dim + 3;  // A padded output row.
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    a.key_limits = limits.data();
    a.head_entropy = entropy;
    return a;
  }

  // Runs both and compares every output and each head's entropy.
  void Check(const char* what) const {
    const int64_t out_stride = c.q_heads * c.head_dim + 3;
    std::vector<float> got(c.tokens * out_stride, -7.0f), want = got;
    std::vector<double> got_entropy(c.q_heads), want_entropy(c.q_heads);
    CacheAttentionScratch scratch;
    AttentionOverCache(Args(got.data(), got_entropy.data()), cache, kLayer, scratch);
    const int64_t keys = c.past + c.tokens, width = cache.width();
    std::vector<float> k(keys * width), v(keys * width);
    cache.Read(kLayer, keys, k.data(), v.data());
    AttentionArgs ref = Args(want.data(), want_entropy.data());
    ref.k = k.data();
    ref.v = v.data();
    ref.kv_stride = width;
    AttentionReference(ref);
    for (size_t i = 0; i < got.size(); ++i) {
      const float w = want[i], g = got[i];
      if (std::isnan(w)) {
        ASSERT_TRUE(std::isnan(g)) << what << " at " << i << ": got " << g;
      } else if (std::isinf(w)) {
        ASSERT_EQ(g, w) << what << " at " << i;
      } else {
        ASSERT_NEAR(g, w, kTolerance * std::max(1.0f, std::fabs(w)))
            << what << " at " << i;
      }
    }
    for (int64_t h = 0; h < c.q_heads; ++h) {
      if (std::isfinite(want_entropy[h])) {
        ASSERT_NEAR(got_entropy[h], want_entropy[h],
                    1e-4 * std::max(1.0, want_entropy[h]))
            << what << " head " << h;
      }
    }
  }

  static constexpr int64_t kLayer = 1;
  Case c;
  KvCache cache;
  int64_t stride = 0;
  std::vector<float> fused;  // [tokens, q | k | v], as the QKV projection writes it.
  std::vector<int64_t> limits;
};

TEST(KvCacheAttentionTest, MatchesReferenceOverOddShapesAndBlockBoundaries) {
  const Case cases[] = {
      {1, 1, 1, 0, 1},     {1, 1, 7, 5, 1},      {8, 2, 64, 63, 1},   {8, 2, 64, 64, 1},
      {8, 2, 64, 65, 1},   {12, 12, 64, 200, 1}, {6, 3, 128, 130, 3}, {4, 1, 7, 1, 16},
      {8, 2, 64, 127, 16}, {2, 2, 33, 300, 5},   {10, 2, 64, 70, 1},  {8, 1, 48, 65, 2},
      {3, 1, 17, 64, 1},   {6, 1, 64, 129, 1},
  };
  for (const Case& c : cases) {
    for (KvCacheType type : {KvCacheType::kFloat32, KvCacheType::kBfloat16}) {
      for (bool causal : {true, false}) {
        Case run = c;
        run.causal = causal;
        CacheCall call(run, type, 1.0f, static_cast<uint32_t>(c.past * 13 + c.tokens));
        SCOPED_TRACE(testing::Message()
                     << "Hq " << c.q_heads << " Hkv " << c.kv_heads << " Dh "
                     << c.head_dim << " past " << c.past << " T " << c.tokens << " bf16 "
                     << (type == KvCacheType::kBfloat16) << " causal " << causal);
        call.Check("normal");
      }
    }
  }
}

TEST(KvCacheAttentionTest, PaddedQueriesGetZeros) {
  CacheCall call({4, 2, 16, 70, 3}, KvCacheType::kFloat32, 1.0f, 5);
  call.limits[2] = 0;  // A padding query attends to nothing.
  call.Check("padded");
  std::vector<float> out(3 * (4 * 16 + 3), -7.0f);
  CacheAttentionScratch scratch;
  AttentionOverCache(call.Args(out.data(), nullptr), call.cache, CacheCall::kLayer,
                     scratch);
  for (int64_t i = 0; i < 4 * 16; ++i) ASSERT_EQ(out[2 * (4 * 16 + 3) + i], 0.0f);
}

TEST(KvCacheAttentionTest, ExtremeMagnitudesSaturateLikeTheReference) {
  // Scores near 1e8: the softmax is one-hot, exactly as in double.
  CacheCall call({8, 2, 64, 90, 2}, KvCacheType::kFloat32, 1e4f, 9);
  call.Check("1e4");
}

TEST(KvCacheAttentionTest, NanAndInfPropagateLikeTheReference) {
  for (KvCacheType type : {KvCacheType::kFloat32, KvCacheType::kBfloat16}) {
    CacheCall call({4, 2, 8, 80, 2}, type, 1.0f, 11);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    // A NaN key (cached row 7, head group 0) and an Inf value (row 20, group 1),
    // written into the cache's blocks: every query attends to both, so those
    // groups' outputs become NaN as in the reference; and an Inf in a query.
    const auto set = [&](int64_t row, bool values, int64_t i, float x) {
      const int64_t block = row / kKvBlockTokens, column = row % kKvBlockTokens;
      // Keys are stored transposed per block, values head by head.
      const int64_t dh = call.c.head_dim;
      const int64_t at = values ? ((i / dh) * kKvBlockTokens + column) * dh + i % dh
                                : i * kKvBlockTokens + column;
      void* data =
          const_cast<void*>(values ? call.cache.ValueBlock(CacheCall::kLayer, block)
                                   : call.cache.KeyBlock(CacheCall::kLayer, block));
      if (type == KvCacheType::kFloat32) {
        static_cast<float*>(data)[at] = x;
      } else {
        static_cast<uint16_t*>(data)[at] = Float32ToBfloat16(x);
      }
    };
    set(7, /*values=*/false, 3, nan);
    set(70, /*values=*/false, 12, -inf);  // Group 1, second block: weight 0 only.
    set(20, /*values=*/true, 8 + 1, inf);
    call.fused[5] = inf;  // Query 0, head 0.
    call.Check(type == KvCacheType::kFloat32 ? "nan/inf f32" : "nan/inf bf16");
  }
}

}  // namespace
}  // namespace layerserve::kernels
