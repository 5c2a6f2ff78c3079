// One batch's block split across threads (kernels::ParallelFor: the column ranges of
// its linear layers, its attention's KV heads, decode steps' output blocks and
// sequences over their caches) against the same batch on one thread, bit for bit:
// the split is fixed by the weights and never by who helps, as the server's
// batcher promises. A Llama-shaped block large enough (hidden 1024, d_ff 2816) that
// its projections run as several column ranges.
#include <omp.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/block/block.h"
#include "kernels/rope/rope.h"
#include "tests/testing/threads_parallel_for.h"

namespace layerserve::kernels {
namespace {

constexpr int64_t kHidden = 1024, kHeads = 16, kKvHeads = 4, kFfn = 2816;

std::vector<float> Random(int64_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

BlockConfig Config() {
  BlockConfig c;
  c.hidden_size = kHidden;
  c.num_heads = kHeads;
  c.num_kv_heads = kKvHeads;
  c.head_dim = kHidden / kHeads;
  c.intermediate_size = kFfn;
  c.rotary_dim = c.head_dim;
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  return c;
}

std::unique_ptr<BlockWeights> Weights(const BlockConfig& c, WeightType type) {
  std::mt19937 rng(7);
  auto w = std::make_unique<BlockWeights>();
  w->attn_norm_weight.assign(kHidden, 1.0f);
  w->mlp_norm_weight.assign(kHidden, 1.0f);
  auto linear = [&](int64_t out, int64_t in) {
    const std::vector<float> values = Random(out * in, rng, 0.03f);
    return std::make_unique<LinearWeights>(values.data(), out, in, false, nullptr, type);
  };
  w->qkv = linear((c.num_heads + 2 * c.num_kv_heads) * c.head_dim, kHidden);
  w->output = linear(kHidden, c.num_heads * c.head_dim);
  w->up = linear(2 * kFfn, kHidden);
  w->down = linear(kHidden, kFfn);
  return w;
}

// Sequences of `tokens[b]` tokens (real: lengths[b]), each with a cache holding
// `cached` earlier tokens when `cached` >= 0, through the block; returns x.
std::vector<float> RunBlock(const BlockConfig& c, const BlockWeights& w,
                            const std::vector<int64_t>& tokens,
                            const std::vector<int64_t>& lengths, int64_t cached,
                            ParallelFor* parallel) {
  std::mt19937 rng(3);
  BlockBatch batch;
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<int64_t> positions;
  for (size_t b = 0; b < tokens.size(); ++b) {
    batch.starts.push_back(batch.rows);
    batch.tokens.push_back(tokens[b]);
    batch.lengths.push_back(lengths[b]);
    batch.rows += tokens[b];
    const int64_t past = cached < 0 ? 0 : cached;
    for (int64_t t = 0; t < tokens[b]; ++t) positions.push_back(past + t);
    if (cached >= 0) {
      caches.push_back(std::make_unique<KvCache>(1, c.num_kv_heads, c.head_dim,
                                                 KvCacheType::kBfloat16));
      const int64_t width = c.num_kv_heads * c.head_dim;
      const std::vector<float> k = Random(cached * width, rng, 1.0f);
      const std::vector<float> v = Random(cached * width, rng, 1.0f);
      caches.back()->Append(0, k.data(), v.data(), width, cached);
      caches.back()->Commit(cached);
      batch.caches.push_back(caches.back().get());
    }
  }
  const RopeFrequencies frequencies =
      ComputeRopeFrequencies(c.rope_theta, c.rotary_dim, {}, positions.back() + 1);
  std::vector<float> cos(batch.rows * c.rotary_dim), sin(batch.rows * c.rotary_dim);
  ComputeRopeTables(frequencies, RopeStyle::kHalf, positions.data(), batch.rows,
                    cos.data(), sin.data());
  batch.cos = cos.data();
  batch.sin = sin.data();
  std::vector<float> x = Random(batch.rows * kHidden, rng, 1.0f);
  std::vector<double> entropy(tokens.size() * c.num_heads);
  BlockKernels kernels;
  kernels.parallel = parallel;
  BlockForward(c, w, batch, kernels, x.data(), entropy.data());
  // The entropy sums come from the split attention too.
  for (double e : entropy) x.push_back(static_cast<float>(e));
  return x;
}

class BlockSplitTest : public ::testing::TestWithParam<WeightType> {
 protected:
  void SetUp() override { omp_set_num_threads(1); }
};

TEST_P(BlockSplitTest, SplitAcrossThreadsEqualsOneThreadBitForBit) {
  const BlockConfig c = Config();
  const std::unique_ptr<BlockWeights> w = Weights(c, GetParam());
  ASSERT_GT(w->up->chunks(), 1) << "the layer is too small to test the split";
  testing::ThreadsParallelFor threads(3);
  struct Case {
    const char* what;
    std::vector<int64_t> tokens, lengths;
    int64_t cached;
  };
  const Case cases[] = {
      {"one token, no cache", {1}, {1}, -1},
      {"a 37-token prefill", {37}, {37}, -1},
      {"a 400-token prefill (its activation split by rows)", {400}, {400}, -1},
      {"two padded sequences", {9, 9}, {9, 5}, -1},
      {"decode steps of 5 sessions", {1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}, 70},
      {"a 9-token continuation of a session", {9}, {9}, 70},
  };
  for (const Case& k : cases) {
    const std::vector<float> one =
        RunBlock(c, *w, k.tokens, k.lengths, k.cached, nullptr);
    const std::vector<float> split =
        RunBlock(c, *w, k.tokens, k.lengths, k.cached, &threads);
    ASSERT_EQ(one.size(), split.size());
    for (size_t i = 0; i < one.size(); ++i) {
      ASSERT_EQ(std::isnan(one[i]), std::isnan(split[i])) << k.what << " at " << i;
      if (!std::isnan(one[i])) {
        ASSERT_EQ(one[i], split[i]) << k.what << " at " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Weights, BlockSplitTest,
                         ::testing::Values(WeightType::kFloat32, WeightType::kBfloat16));

}  // namespace
}  // namespace layerserve::kernels
