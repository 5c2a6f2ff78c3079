// KvCache: appends land after the committed tokens, reads return every token in
// order, storage grows in whole blocks, bfloat16 rounds on store.
#include "kernels/attention/kv_cache.h"

#include <random>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"

namespace layerserve::kernels {
namespace {

TEST(KvCacheTest, AppendsInStepsReadBackEverythingInOrder) {
  const int64_t width = 6, stride = 20;  // Rows are slices of wider fused rows.
  for (KvCacheType type : {KvCacheType::kFloat32, KvCacheType::kBfloat16}) {
    KvCache cache(/*layers=*/2, /*kv_heads=*/2, /*head_dim=*/3, type);
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    std::vector<std::vector<float>> want_k(2), want_v(2);
    for (int64_t step : {5, 1, 1, 70, 1, 60}) {  // Crosses block boundaries.
      for (int64_t layer = 0; layer < 2; ++layer) {
        std::vector<float> fused(step * stride);
        for (float& x : fused) x = normal(rng);
        const float* k = fused.data() + 3;
        const float* v = fused.data() + 3 + width;
        for (int64_t t = 0; t < step; ++t) {
          for (int64_t i = 0; i < width; ++i) {
            const auto keep = [&](float x) {
              return type == KvCacheType::kFloat32
                         ? x
                         : Bfloat16ToFloat32(Float32ToBfloat16(x));
            };
            want_k[layer].push_back(keep(k[t * stride + i]));
            want_v[layer].push_back(keep(v[t * stride + i]));
          }
        }
        const int64_t total = cache.length() + step;
        std::vector<float> got_k(total * width), got_v(total * width);
        cache.Append(layer, k, v, stride, step);
        cache.Read(layer, total, got_k.data(), got_v.data());
        ASSERT_EQ(got_k, want_k[layer]) << "layer " << layer << " after " << total;
        ASSERT_EQ(got_v, want_v[layer]);
      }
      cache.Commit(step);
    }
    EXPECT_EQ(cache.length(), 138);
    // 138 tokens = 3 blocks of 64 per layer, keys and values.
    const int64_t element = type == KvCacheType::kFloat32 ? 4 : 2;
    EXPECT_EQ(cache.bytes(), 2 * 3 * 2 * kKvBlockTokens * width * element);
  }
}

TEST(KvCacheTest, BytesToGrowCountsOnlyNewBlocks) {
  KvCache cache(/*layers=*/3, /*kv_heads=*/2, /*head_dim=*/4, KvCacheType::kFloat32);
  const int64_t block = 2 * kKvBlockTokens * 8 * 4;
  EXPECT_EQ(cache.BytesToGrow(1), 3 * block);
  EXPECT_EQ(cache.BytesToGrow(kKvBlockTokens), 3 * block);
  EXPECT_EQ(cache.BytesToGrow(kKvBlockTokens + 1), 6 * block);
  std::vector<float> rows(10 * 8);
  for (int64_t layer = 0; layer < 3; ++layer)
    cache.Append(layer, rows.data(), rows.data(), 8, 10);
  cache.Commit(10);
  EXPECT_EQ(cache.bytes(), 3 * block);
  EXPECT_EQ(cache.BytesToGrow(kKvBlockTokens - 10), 0);
  EXPECT_EQ(cache.BytesToGrow(kKvBlockTokens - 9), 3 * block);
}

// A call stopped between its parts: the cache goes back to its length before the
// call, with the blocks it had then, and the next append lands where it did.
TEST(KvCacheTest, TruncateForgetsTokensAndFreesTheirBlocks) {
  const int64_t width = 8;
  KvCache cache(/*layers=*/2, /*kv_heads=*/2, /*head_dim=*/4, KvCacheType::kFloat32);
  const int64_t block = 2 * kKvBlockTokens * width * 4;
  const auto append = [&](int64_t tokens, float value) {
    std::vector<float> rows(tokens * width, value);
    for (int64_t layer = 0; layer < 2; ++layer)
      cache.Append(layer, rows.data(), rows.data(), width, tokens);
    cache.Commit(tokens);
  };
  append(60, 1.0f);
  const int64_t before = cache.bytes();
  EXPECT_EQ(before, 2 * block);
  append(5, 2.0f);  // Into a second block.
  append(70, 3.0f);
  EXPECT_EQ(cache.bytes(), 2 * 3 * block);
  cache.Truncate(60);
  EXPECT_EQ(cache.length(), 60);
  EXPECT_EQ(cache.bytes(), before);
  EXPECT_EQ(cache.BytesToGrow(kKvBlockTokens - 60 + 1), 2 * block);
  append(6, 4.0f);
  std::vector<float> k(66 * width), v(66 * width);
  cache.Read(1, 66, k.data(), v.data());
  for (int64_t t = 0; t < 66; ++t) {
    ASSERT_EQ(k[t * width], t < 60 ? 1.0f : 4.0f) << t;
    ASSERT_EQ(v[t * width + width - 1], t < 60 ? 1.0f : 4.0f) << t;
  }
  cache.Truncate(0);
  EXPECT_EQ(cache.bytes(), 0);
  EXPECT_EQ(cache.length(), 0);
}

}  // namespace
}  // namespace layerserve::kernels
