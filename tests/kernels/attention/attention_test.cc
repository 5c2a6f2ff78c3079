// Attention (oneDNN matmuls + Highway softmax) against the double-precision
// reference: GQA, causal with a cache offset, bidirectional, right padding, strided
// q/k/v slices of one fused projection, query blocks, entropy.
#include "kernels/attention/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/threads_parallel_for.h"

namespace layerserve::kernels {
namespace {

struct Case {
  int64_t q_heads, kv_heads, head_dim, tokens, keys;
  bool causal;
  int64_t valid_keys;  // Keys past this are padding.
};

// Score errors of a float32 dot product of Dh terms are ~Dh * 2^-24 * |q||k|; after
// softmax and the weighted sum of v they stay far below 2e-5 * max(1, |ref|) for
// unit-normal inputs at these sizes.
constexpr float kTolerance = 2e-5f;

void Check(const Case& c) {
  std::mt19937 rng(c.tokens * 31 + c.keys * 7 + c.q_heads);
  std::normal_distribution<float> dist;
  // One fused [rows, q | k | v] buffer, as a QKV projection writes it.
  const int64_t qw = c.q_heads * c.head_dim, kw = c.kv_heads * c.head_dim;
  const int64_t stride = qw + 2 * kw;
  const int64_t rows = std::max(c.tokens, c.keys);
  std::vector<float> fused(rows * stride);
  for (float& x : fused) x = dist(rng);
  std::vector<int64_t> limits(c.tokens);
  const int64_t offset = c.keys - c.tokens;  // Queries are the last T keys.
  for (int64_t t = 0; t < c.tokens; ++t) {
    limits[t] = c.causal ? std::min(offset + t + 1, c.valid_keys) : c.valid_keys;
    limits[t] = std::max<int64_t>(limits[t], 0);
  }
  AttentionArgs a;
  a.q_heads = c.q_heads;
  a.kv_heads = c.kv_heads;
  a.head_dim = c.head_dim;
  a.tokens = c.tokens;
  a.keys = c.keys;
  a.q = fused.data();
  a.q_stride = stride;
  a.k = fused.data() + qw;
  a.v = fused.data() + qw + kw;
  a.kv_stride = stride;
  a.out_stride = qw + 3;  // A padded output row.
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  a.key_limits = limits.data();
  std::vector<float> got(c.tokens * a.out_stride, -7.0f),
      want(c.tokens * a.out_stride, -7.0f);
  std::vector<double> got_entropy(c.q_heads), want_entropy(c.q_heads);
  AttentionContext context;
  a.out = got.data();
  a.head_entropy = got_entropy.data();
  Attention(context, a);
  a.out = want.data();
  a.head_entropy = want_entropy.data();
  AttentionReference(a);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t i = 0; i < a.out_stride; ++i) {
      const float w = want[t * a.out_stride + i], g = got[t * a.out_stride + i];
      if (i >= qw) {
        ASSERT_EQ(g, -7.0f) << "wrote past the row at t=" << t;  // Untouched padding.
        continue;
      }
      ASSERT_LE(std::fabs(g - w), kTolerance * std::max(1.0f, std::fabs(w)))
          << "t=" << t << " i=" << i << " got " << g << " want " << w;
    }
  }
  for (int64_t h = 0; h < c.q_heads; ++h) {
    EXPECT_NEAR(got_entropy[h], want_entropy[h], 1e-4 * std::max(1.0, want_entropy[h]));
  }

  // Split by KV head: the same tolerance, and the same bits whether the heads run
  // here in order or on three threads at once.
  testing::ThreadsParallelFor threads(3);
  std::vector<float> serial(got.size(), -7.0f), split(got.size(), -7.0f);
  std::vector<double> serial_entropy(c.q_heads), split_entropy(c.q_heads);
  a.out = serial.data();
  a.head_entropy = serial_entropy.data();
  AttentionByKvHead(a, nullptr);
  a.out = split.data();
  a.head_entropy = split_entropy.data();
  AttentionByKvHead(a, &threads);
  ASSERT_EQ(split, serial);
  ASSERT_EQ(split_entropy, serial_entropy);
  for (size_t i = 0; i < split.size(); ++i) {
    ASSERT_LE(std::fabs(split[i] - want[i]),
              kTolerance * std::max(1.0f, std::fabs(want[i])))
        << "split at " << i;
  }
  for (int64_t h = 0; h < c.q_heads; ++h) {
    EXPECT_NEAR(split_entropy[h], want_entropy[h], 1e-4 * std::max(1.0, want_entropy[h]));
  }
}

class AttentionTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { omp_set_num_threads(1); }
};

TEST_P(AttentionTest, MatchesReference) { Check(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionTest,
    ::testing::Values(Case{1, 1, 1, 1, 1, true, 1},         // smallest
                      Case{8, 2, 16, 1, 1, true, 1},        // one token
                      Case{8, 2, 16, 1, 37, true, 37},      // decode step with cache
                      Case{4, 4, 7, 3, 3, true, 3},         // odd head dim, MHA
                      Case{8, 2, 16, 5, 12, true, 12},      // chunk with cache offset
                      Case{6, 3, 8, 9, 9, false, 9},        // bidirectional
                      Case{8, 2, 16, 9, 9, true, 6},        // right padding
                      Case{8, 2, 16, 9, 9, false, 4},       // padding, bidirectional
                      Case{4, 1, 32, 300, 300, true, 300},  // query blocks
                      Case{2, 2, 64, 513, 513, true, 500},
                      Case{4, 2, 16, 200, 450, true, 450},   // long chunk after a cache
                      Case{2, 1, 16, 260, 260, false, 260},  // blocks see every key
                      Case{2, 1, 16, 130, 130, true, 0}));   // blocks that see no key

TEST(MaskedSoftmaxTest, ZeroLimitRowsAreZeroAndEntropyMatchesFormula) {
  std::vector<float> scores = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const int64_t limits[] = {0, 3, 4};
  double entropy[3];
  MaskedSoftmaxRows(scores.data(), 3, 4, limits, 0.5f, entropy);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(scores[i], 0.0f);
  EXPECT_EQ(entropy[0], 0.0);
  // Row 1: softmax of 0.5 * {5, 6, 7}, then a zero.
  double z = 0, h = 0, p[3];
  for (int j = 0; j < 3; ++j) z += std::exp(0.5 * (5 + j));
  for (int j = 0; j < 3; ++j) {
    p[j] = std::exp(0.5 * (5 + j)) / z;
    h -= p[j] * std::log(p[j]);
    EXPECT_NEAR(scores[4 + j], p[j], 1e-6);
  }
  EXPECT_EQ(scores[7], 0.0f);
  EXPECT_NEAR(entropy[1], h, 1e-6);
  // Large scores do not overflow: the max is subtracted first.
  std::vector<float> big = {1e30f, 1e30f};
  const int64_t two[] = {2};
  MaskedSoftmaxRows(big.data(), 1, 2, two, 1.0f, nullptr);
  EXPECT_FLOAT_EQ(big[0], 0.5f);
}

// As torch.softmax: a NaN or +Inf anywhere in a row, or a row of only -Inf, makes
// the row NaN; -Inf beside finite scores is weight 0. Rows are 37 wide so the odd
// values sit in full vectors and in the scalar tail, first and last.
TEST(MaskedSoftmaxTest, NanAndInfFollowPytorch) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t n = 37;
  for (int64_t at : {int64_t{0}, int64_t{5}, int64_t{17}, n - 1}) {
    for (float odd : {nan, inf}) {
      std::vector<float> row(n + 3, 1.0f);
      row[at] = odd;
      const int64_t limit[] = {n};
      double entropy = -1;
      MaskedSoftmaxRows(row.data(), 1, n + 3, limit, 0.5f, &entropy);
      for (int64_t j = 0; j < n; ++j) ASSERT_TRUE(std::isnan(row[j])) << at << " " << j;
      for (int64_t j = n; j < n + 3; ++j) ASSERT_EQ(row[j], 0.0f);
      EXPECT_EQ(entropy, 0.0);  // Not NaN: it would poison the entropy histogram.
    }
    std::vector<float> row(n, 1.0f);
    row[at] = -inf;
    const int64_t limit[] = {n};
    double entropy = 0;
    MaskedSoftmaxRows(row.data(), 1, n, limit, 1.0f, &entropy);
    EXPECT_EQ(row[at], 0.0f);
    EXPECT_FLOAT_EQ(row[(at + 1) % n], 1.0f / (n - 1));
    EXPECT_NEAR(entropy, std::log(n - 1.0), 1e-6);  // Uniform over the others.
  }
  std::vector<float> all(n, -inf);
  const int64_t limit[] = {n};
  MaskedSoftmaxRows(all.data(), 1, n, limit, 1.0f, nullptr);
  for (float p : all) ASSERT_TRUE(std::isnan(p));
}

}  // namespace
}  // namespace layerserve::kernels
