// int8 weights (kernels/linear/int8/int8_weights.h): the packing's exact round trip, the
// few-rows kernel on every Highway target against its scalar twin (odd sizes, extreme
// values, zero, NaN and Inf, misaligned pointers), and Linear / LinearFewRows with kInt8
// weights against the dequantized weights' double-precision reference.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "kernels/linear/int8/int8_weights.h"
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_internal.h"
#include "tests/testing/highway_target_scope.h"
#include "tests/testing/threads_parallel_for.h"

namespace layerserve::kernels {
namespace {

using internal::Int8Weights;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

float RoundBf16(float x) { return Bfloat16ToFloat32(Float32ToBfloat16(x)); }

std::vector<float> Random(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Weights [out, in] that int8 represents exactly: q * scale with q in [-127, 127],
// each group holding a +-127 (so its scale is recovered) and a power-of-two scale
// per output and group (so q * scale and max / 127 are exact).
std::vector<float> Representable(int64_t out, int64_t in, int64_t group,
                                 std::mt19937& rng) {
  std::uniform_int_distribution<int> q(-127, 127), exponent(-20, 20);
  std::vector<float> w(out * in);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t k0 = 0; k0 < in; k0 += group) {
      const float scale = std::ldexp(1.0f, exponent(rng));
      for (int64_t k = k0; k < std::min(in, k0 + group); ++k) {
        w[o * in + k] =
            static_cast<float>(k == k0 ? (o % 2 ? 127 : -127) : q(rng)) * scale;
      }
    }
  }
  return w;
}

TEST(Int8QuantizeTest, RoundTripIsExactOnRepresentableWeights) {
  std::mt19937 rng(23);
  struct Case {
    int64_t out, in, group;
  };
  // K not a multiple of the group; outputs not a multiple of the 64-output block
  // nor of a vector; one scale per output (group 0 and group >= in).
  for (const Case& c :
       {Case{1, 1, 0}, Case{5, 7, 4}, Case{65, 70, 32}, Case{130, 100, 64},
        Case{7, 4097, 128}, Case{3, 33, 0}, Case{2, 10, 1000}}) {
    const int64_t group = c.group == 0 || c.group > c.in ? c.in : c.group;
    const std::vector<float> w = Representable(c.out, c.in, group, rng);
    for (bool in_by_out : {false, true}) {
      std::vector<float> storage = w;
      if (in_by_out) {
        for (int64_t o = 0; o < c.out; ++o)
          for (int64_t k = 0; k < c.in; ++k) storage[k * c.out + o] = w[o * c.in + k];
      }
      const Int8Weights q = internal::QuantizeInt8(storage.data(), c.out, c.in, in_by_out,
                                                   nullptr, c.group);
      EXPECT_EQ(q.group, group);
      EXPECT_EQ(q.groups, (c.in + group - 1) / group);
      EXPECT_EQ(q.bias, std::vector<float>(c.out, 0.0f));
      ASSERT_EQ(internal::DequantizeInt8(q), w)
          << "out " << c.out << " in " << c.in << " group " << c.group;
      // Padding past the last output holds zeros.
      for (int64_t o = c.out; o < q.out_blocks * internal::kInt8BlockOut; ++o) {
        for (int64_t k = 0; k < c.in; ++k) ASSERT_EQ(q.Q(o, k), 0);
        ASSERT_EQ(q.Scale(o, 0), 0.0f);
      }
    }
  }
}

// Any weights: within half a step of their group's scale, the group's largest at
// +-127 exactly, all-zero groups all zero.
TEST(Int8QuantizeTest, ErrorIsAtMostHalfAStep) {
  std::mt19937 rng(7);
  const int64_t out = 67, in = 150, group = 32;
  std::vector<float> w = Random(out * in, rng);
  for (int64_t k = 32; k < 64; ++k) w[3 * in + k] = 0.0f;  // One all-zero group.
  w[5 * in + 7] = 1e30f;                                   // One huge weight.
  const Int8Weights q = internal::QuantizeInt8(w.data(), out, in, false, nullptr, group);
  const std::vector<float> back = internal::DequantizeInt8(q);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t k = 0; k < in; ++k) {
      const float scale = q.Scale(o, k);
      ASSERT_LE(std::fabs(back[o * in + k] - w[o * in + k]), 0.5f * scale * (1 + 1e-6f))
          << o << "," << k;
      ASSERT_LE(std::abs(int{q.Q(o, k)}), 127);
    }
  }
  for (int64_t k = 32; k < 64; ++k) EXPECT_EQ(back[3 * in + k], 0.0f);
  EXPECT_EQ(q.Scale(3, 32), 0.0f);
  EXPECT_EQ(q.Q(5, 7), 127);
}

// A NaN or Inf weight makes its group NaN, so its output is NaN (as float32 weights
// would make it NaN or Inf) and no other output changes.
TEST(Int8QuantizeTest, NonFiniteWeightsMakeTheirGroupNan) {
  std::mt19937 rng(17);
  const int64_t out = 3, in = 40, group = 16;
  std::vector<float> w = Random(out * in, rng);
  w[0 * in + 20] = kNan;
  w[2 * in + 3] = -kInf;
  const Int8Weights q = internal::QuantizeInt8(w.data(), out, in, false, nullptr, group);
  const std::vector<float> back = internal::DequantizeInt8(q);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t k = 0; k < in; ++k) {
      const bool poisoned = (o == 0 && k / group == 1) || (o == 2 && k / group == 0);
      ASSERT_EQ(std::isnan(back[o * in + k]), poisoned) << o << "," << k;
    }
  }
  const std::vector<float> x = Random(in, rng);
  std::vector<float> y(out);
  internal::LinearInt8FewRowsBlocks(q, x.data(), 1, 0, q.out_blocks, y.data());
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_TRUE(std::isfinite(y[1]));
  EXPECT_TRUE(std::isnan(y[2]));
}

// The few-rows kernel on one Highway target against the scalar twin. Targets with
// FMA (AVX2 and better) compute the same operations: bit for bit (NaN as NaN);
// the others round each product too: within the FMA's extra rounding (and the same
// Inf where the twin overflows).
void ExpectMatchesTwin(const Int8Weights& w, const float* x, int64_t rows, int64_t target,
                       const char* what) {
  std::vector<float> got(rows * w.out + 1, -1.0f), want(rows * w.out);
  // y one float past an aligned address: the kernel must not need alignment.
  float* y = got.data() + 1;
  internal::LinearInt8FewRowsBlocks(w, x, rows, 0, w.out_blocks, y);
  internal::LinearInt8FewRowsBlocksReference(w, x, rows, 0, w.out_blocks, want.data());
  const bool fused = target <= HWY_AVX2;
  for (int64_t i = 0; i < rows * w.out; ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(y[i])) << what << " at " << i;
      continue;
    }
    if (fused || std::isinf(want[i])) {
      ASSERT_EQ(y[i], want[i]) << what << " " << hwy::TargetName(target) << " at " << i;
    } else {
      double magnitude = std::fabs(w.bias[i % w.out]);
      for (int64_t k = 0; k < w.in; ++k) {
        magnitude += std::fabs(x[(i / w.out) * w.in + k] * w.Dequantized(i % w.out, k));
      }
      ASSERT_NEAR(y[i], want[i], (w.in + 2) * 0x1p-23 * magnitude)
          << what << " " << hwy::TargetName(target) << " at " << i;
    }
  }
}

TEST(Int8FewRowsTest, EveryTargetMatchesTheScalarTwinOnOddSizes) {
  std::mt19937 rng(11);
  struct Size {
    int64_t in, out, group;
  };
  for (const Size& s :
       {Size{1, 1, 0}, Size{7, 5, 4}, Size{9, 3, 1}, Size{4097, 7, 64}, Size{96, 130, 32},
        Size{100, 65, 33}, Size{64, 200, 0}, Size{33, 4097, 128}, Size{1, 4097, 0}}) {
    const std::vector<float> weight = Random(s.out * s.in, rng),
                             bias = Random(s.out, rng);
    const Int8Weights w =
        internal::QuantizeInt8(weight.data(), s.out, s.in, false, bias.data(), s.group);
    for (int64_t rows : {1, 2, 3, 4, 5, 7, 8, 16, 17, 32, 64}) {
      // x one float past an aligned address.
      std::vector<float> storage = Random(rows * s.in + 1, rng);
      for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
        testing::TargetScope scope(target);
        ExpectMatchesTwin(w, storage.data() + 1, rows, target, "odd sizes");
      }
    }
  }
}

// Extreme values: zero and huge activations, huge and all-zero weight groups, NaN
// and Inf in some rows (they must stay in their rows, as in the twin), among 6 rows
// and, in the first of 8, 32 and 64 (several row tiles; a last NaN row too).
TEST(Int8FewRowsTest, EveryTargetMatchesTheScalarTwinOnExtremeValues) {
  std::mt19937 rng(13);
  const int64_t in = 70, out = 130;
  std::vector<float> weight = Random(out * in, rng);
  for (int64_t k = 0; k < 32; ++k) weight[2 * in + k] = 0.0f;
  weight[9 * in + 40] = 3e38f;
  weight[10 * in + 1] = -1e-38f;
  const Int8Weights w =
      internal::QuantizeInt8(weight.data(), out, in, false, nullptr, 32);
  // The first 6 rows are the same at every row count.
  const std::vector<float> values = Random(64 * in, rng);
  for (int64_t rows : {6, 8, 32, 64}) {
    std::vector<float> x(values.begin(), values.begin() + rows * in);
    for (int64_t k = 0; k < in; ++k) x[0 * in + k] = 0.0f;  // Row 0: zeros.
    x[1 * in + 3] = kNan;
    x[2 * in + 69] = kInf;
    x[3 * in + 0] = -kInf;
    x[4 * in + 5] = 3e38f;   // Overflows to Inf against the huge weight.
    x[5 * in + 6] = 1e-40f;  // Subnormal.
    if (rows > 6) x[(rows - 1) * in + 33] = kNan;
    for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
      testing::TargetScope scope(target);
      ExpectMatchesTwin(w, x.data(), rows, target, "extreme values");
      std::vector<float> y(rows * out);
      internal::LinearInt8FewRowsBlocks(w, x.data(), rows, 0, w.out_blocks, y.data());
      for (int64_t o = 0; o < out; ++o) {
        ASSERT_EQ(y[o], 0.0f) << o;  // No bias, zero inputs.
        ASSERT_TRUE(std::isnan(y[1 * out + o])) << o;
        ASSERT_TRUE(std::isfinite(y[5 * out + o])) << o;
        if (rows > 6) {
          ASSERT_TRUE(std::isnan(y[(rows - 1) * out + o])) << rows << " " << o;
        }
      }
    }
  }
}

// The prefill's blocked bfloat16 tiles (Highway, every target) against the scalar
// twin, bit for bit, over the whole buffer: odd inputs (the last k pair's zero
// partner), groups that split a k pair, outputs past the last block's real ones, a
// NaN, an Inf, a huge and a subnormal weight, and a destination 4 bytes past an
// aligned address. Words the layout does not fill keep the caller's fill.
TEST(Int8DequantizeTest, EveryTargetMatchesTheScalarTwinInTheBlockedLayout) {
  std::mt19937 rng(17);
  struct Size {
    int64_t in, out, group;
  };
  for (const Size& s : {Size{1, 1, 0}, Size{2, 64, 1}, Size{7, 5, 3}, Size{33, 130, 32},
                        Size{64, 200, 0}, Size{100, 65, 33}, Size{4097, 7, 64}}) {
    std::vector<float> weight = Random(s.out * s.in, rng);
    weight[0] = 3e38f;
    if (weight.size() > 3) weight[3] = 1e-41f;
    if (s.out > 2) weight[2 * s.in] = kNan;
    if (s.out > 4) weight[4 * s.in + s.in - 1] = -kInf;
    const Int8Weights w =
        internal::QuantizeInt8(weight.data(), s.out, s.in, false, nullptr, s.group);
    const int64_t k_blocks = (s.in + 31) / 32;
    // oneDNN's strides for {in, 64 * nb} bfloat16 weights: n blocks outermost.
    const int64_t k_block_stride = 32 * internal::kInt8BlockOut,
                  n_block_stride = k_blocks * k_block_stride;
    const size_t size = w.out_blocks * n_block_stride + 2;
    std::vector<uint16_t> want(size, 0xABCD);
    internal::DequantizeInt8BlockedReference(w, 0, w.out_blocks, k_block_stride,
                                             n_block_stride, want.data() + 2);
    if (s.in % 2 == 1) {  // The twin leaves the odd k's partner to the caller.
      for (int64_t nb = 0; nb < w.out_blocks; ++nb) {
        uint16_t* pair = want.data() + 2 + nb * n_block_stride +
                         (s.in / 32) * k_block_stride + (s.in % 32 / 2) * 128 + 1;
        for (int64_t n = 0; n < internal::kInt8BlockOut; ++n) pair[2 * n] = 0;
      }
    }
    for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
      testing::TargetScope scope(target);
      std::vector<uint16_t> got(size, 0xABCD);
      internal::DequantizeInt8Blocked(w, 0, w.out_blocks, k_block_stride, n_block_stride,
                                      got.data() + 2);
      for (size_t i = 0; i < size; ++i) {
        ASSERT_EQ(got[i], want[i]) << hwy::TargetName(target) << " in " << s.in << " out "
                                   << s.out << " group " << s.group << " at " << i;
      }
    }
  }
}

// The kernels on bfloat16 operands (VDPBF16PS, AMX) against their reference (the
// same bfloat16 operands, double sums; the weights unrounded where the kernels scale
// group sums): products of bfloat16 values are exact in float32, only the sums round. Odd
// sizes: outputs not a multiple of a vector or block, groups not dividing the inputs and
// odd (a k pair straddles two groups), rows across the 6-row and 16-row tiles; x and y
// misaligned; NaN, Inf and zero rows.
using Bfloat16OperandKernel = void (*)(const Int8Weights&, const uint32_t*, int64_t,
                                       int64_t, int64_t, float*);
struct Int8Size {
  int64_t in, out, group;
};

void CheckInt8Bfloat16Kernel(Bfloat16OperandKernel kernel,
                             const std::vector<Int8Size>& sizes,
                             const std::vector<int64_t>& row_counts) {
  std::mt19937 rng(29);
  for (const Int8Size& s : sizes) {
    const std::vector<float> weight = Random(s.out * s.in, rng),
                             bias = Random(s.out, rng);
    const Int8Weights w =
        internal::QuantizeInt8(weight.data(), s.out, s.in, false, bias.data(), s.group);
    const bool exact_weights = internal::Int8ScalesGroupSums(w);
    auto weight_operand = [&](int64_t o, int64_t k) {
      return exact_weights ? double(w.Q(o, k)) * w.Scale(o, k)
                           : double(RoundBf16(w.Dequantized(o, k)));
    };
    for (int64_t rows : row_counts) {
      std::vector<float> x = Random(rows * s.in, rng);
      if (rows >= 5) {
        for (int64_t k = 0; k < s.in; ++k) x[1 * s.in + k] = 0.0f;
        x[2 * s.in + s.in / 2] = kNan;
        x[3 * s.in + s.in - 1] = kInf;
        x[4 * s.in] = -kInf;
      }
      std::vector<uint32_t> pairs;
      internal::PackBfloat16Pairs(x.data(), rows, s.in, pairs);
      pairs.insert(pairs.begin(), 0u);  // Misaligned by one word.
      std::vector<float> got(rows * s.out + 1), want(rows * s.out);
      float* y = got.data() + 1;
      kernel(w, pairs.data() + 1, rows, 0, w.out_blocks, y);
      internal::LinearInt8Bfloat16Reference(w, x.data(), rows, exact_weights,
                                            want.data());
      for (int64_t i = 0; i < rows * s.out; ++i) {
        if (!std::isfinite(want[i])) {
          ASSERT_EQ(std::isnan(y[i]), std::isnan(want[i])) << i;
          if (!std::isnan(want[i])) {
            ASSERT_EQ(y[i], want[i]) << i;
          }
          continue;
        }
        double magnitude = std::fabs(w.bias[i % s.out]);
        for (int64_t k = 0; k < s.in; ++k) {
          magnitude += std::fabs(RoundBf16(x[(i / s.out) * s.in + k]) *
                                 weight_operand(i % s.out, k));
        }
        ASSERT_LE(std::fabs(y[i] - want[i]), (s.in + 2) * 0x1p-24 * magnitude)
            << "in " << s.in << " out " << s.out << " rows " << rows << " at " << i;
      }
      if (rows >= 5) {
        for (int64_t o = 0; o < s.out; ++o) {
          ASSERT_TRUE(std::isnan(y[2 * s.out + o])) << o;
          ASSERT_FALSE(std::isfinite(y[3 * s.out + o])) << o;
          ASSERT_TRUE(std::isfinite(y[1 * s.out + o])) << o;
        }
      }
    }
  }
}

TEST(Int8FewRowsTest, Vdpbf16psKernelMatchesItsReference) {
  if (!internal::FewRowsDpbf16Supported()) {
    GTEST_SKIP() << "this CPU has no AVX512_BF16: LinearFewRows never runs the int8 "
                    "VDPBF16PS kernel";
  }
  // Groups of 1, 33 and 2, 70 (0: one per output) scale the weights; groups of
  // whole k blocks (32, 64, 96 = 0) scale the sums, also where the inputs end
  // inside a k block (100 and 70 inputs).
  CheckInt8Bfloat16Kernel(internal::LinearInt8FewRowsVdpbf16psBlocks,
                          {{2, 1, 0},
                           {10, 3, 1},
                           {70, 7, 33},
                           {70, 9, 0},
                           {70, 9, 64},
                           {100, 65, 32},
                           {4096, 130, 64},
                           {64, 200, 0},
                           {96, 4097, 128},
                           {2, 4097, 0}},
                          {1, 2, 4, 5, 6, 7, 8, 13, 16, 17, 32, 64});
}

TEST(Int8FewRowsTest, AmxKernelMatchesItsReference) {
  if (!internal::FewRowsAmxSupported()) {
    GTEST_SKIP() << "this CPU (or kernel) has no AMX-BF16: LinearFewRows never runs "
                    "the int8 AMX kernel";
  }
  // Inputs in whole k blocks of 32, as the kernel requires. Groups of 1 and 33 put
  // a k pair across two groups and a group across k blocks: weights scaled before
  // the tiles. Groups of whole k blocks (0, 32, 64, 128; 64 into 160 inputs leaves
  // a last group of 32): group sums scaled after them.
  CheckInt8Bfloat16Kernel(internal::LinearInt8FewRowsAmxBlocks,
                          {{32, 1, 0},
                           {64, 3, 1},
                           {96, 7, 33},
                           {160, 65, 32},
                           {160, 9, 64},
                           {4096, 130, 64},
                           {64, 200, 0},
                           {96, 4097, 128}},
                          {1, 2, 5, 15, 16, 17, 33});
}

// The choice between the two depends on the CPU and the inputs, never on the rows:
// a row computed alone has the bits it has among 1..33 rows, at sizes where each
// kernel runs.
TEST(Int8FewRowsTest, Bfloat16OperandKernelRowsAreIndependent) {
  if (!internal::FewRowsDpbf16Supported()) {
    GTEST_SKIP() << "this CPU has no AVX512_BF16: LinearFewRows never runs these kernels";
  }
  std::mt19937 rng(31);
  for (const int64_t in : {96, 4096, 70}) {
    const int64_t out = 130;
    const std::vector<float> weight = Random(out * in, rng), bias = Random(out, rng);
    const Int8Weights w =
        internal::QuantizeInt8(weight.data(), out, in, false, bias.data(), 64);
    const int64_t rows = 33;
    const std::vector<float> x = Random(rows * in, rng);
    std::vector<uint32_t> pairs;
    internal::PackBfloat16Pairs(x.data(), rows, in, pairs);
    std::vector<float> all(rows * out), alone(out);
    internal::LinearInt8FewRowsDpbf16Blocks(w, pairs.data(), rows, 0, w.out_blocks,
                                            all.data());
    for (int64_t r = 0; r < rows; ++r) {
      internal::LinearInt8FewRowsDpbf16Blocks(w, pairs.data() + r * (in / 2), 1, 0,
                                              w.out_blocks, alone.data());
      for (int64_t o = 0; o < out; ++o) {
        ASSERT_EQ(all[r * out + o], alone[o]) << "in " << in << " row " << r << " " << o;
      }
    }
  }
}

// Linear and LinearFewRows with kInt8 weights against the double-precision product
// of the dequantized weights: LinearFewRows within float32 accumulation error, Linear
// (x and the dequantized weights rounded to bfloat16 for oneDNN's matmul) within
// bfloat16's.
struct Shape {
  int64_t rows, in, out, group;
};

class LinearInt8Test : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override { omp_set_num_threads(1); }
};

TEST_P(LinearInt8Test, MatchesTheDequantizedReference) {
  const Shape s = GetParam();
  std::mt19937 rng(s.rows * 131 + s.in * 7 + s.out);
  const std::vector<float> weight = Random(s.out * s.in, rng), bias = Random(s.out, rng);
  const std::vector<float> x = Random(s.rows * s.in, rng);
  for (bool in_by_out : {false, true}) {
    std::vector<float> storage = weight;
    if (in_by_out) {
      for (int64_t o = 0; o < s.out; ++o)
        for (int64_t k = 0; k < s.in; ++k) storage[k * s.out + o] = weight[o * s.in + k];
    }
    LinearWeights w(storage.data(), s.out, s.in, in_by_out, bias.data(),
                    WeightFormat(WeightType::kInt8, s.group));
    EXPECT_EQ(w.type(), WeightType::kInt8);
    EXPECT_EQ(w.group_size(), s.group == 0 || s.group > s.in ? s.in : s.group);
    EXPECT_TRUE(w.few_rows_native());
    const Int8Weights& int8 = internal::Int8LayoutOf(w);
    // Linear multiplies the dequantized tiles with AMX tiles where bfloat16 weights
    // would be (in a multiple of 32 on an AMX CPU), else with oneDNN's matmul: the
    // shapes above hold both to the same bound.
    EXPECT_EQ(internal::Int8AmxRunsLinear(int8), s.in % 32 == 0 &&
                                                     internal::FewRowsDpbf16Supported() &&
                                                     internal::FewRowsAmxSupported());
    const std::vector<float> dequantized = internal::DequantizeInt8(int8);
    std::vector<float> want(s.rows * s.out), few(s.rows * s.out), many(s.rows * s.out);
    LinearReference(dequantized.data(), bias.data(), s.out, s.in, x.data(), s.rows,
                    want.data());
    LinearContext context;
    LinearFewRows(context, w, x.data(), s.rows, few.data());
    Linear(context, w, x.data(), s.rows, many.data());
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t o = 0; o < s.out; ++o) {
        double magnitude = std::fabs(bias[o]);
        for (int64_t k = 0; k < s.in; ++k)
          magnitude += std::fabs(x[r * s.in + k] * dequantized[o * s.in + k]);
        const int64_t i = r * s.out + o;
        // Both within bfloat16's rounding of x and the weights: Linear always,
        // LinearFewRows where it takes the VDPBF16PS kernel (its float32 kernel is
        // held to its twin bit for bit above).
        const double bound = (s.in + 2) * 0x1p-24 * magnitude + 2 * 0x1p-8 * magnitude;
        ASSERT_LE(std::fabs(few[i] - want[i]), bound) << "few rows " << r << "," << o;
        ASSERT_LE(std::fabs(many[i] - want[i]), bound) << "many rows " << r << "," << o;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearInt8Test,
                         ::testing::Values(Shape{1, 1, 1, 0}, Shape{1, 7, 5, 4},
                                           Shape{3, 64, 130, 32}, Shape{17, 65, 33, 64},
                                           Shape{128, 256, 96, 64}, Shape{1, 4097, 7, 64},
                                           Shape{5, 33, 4097, 128},
                                           Shape{9, 700, 4097, 0},
                                           Shape{130, 1100, 1000, 32},
                                           Shape{40, 512, 1000, 64},
                                           // Three of the AMX kernel's k chunks.
                                           Shape{33, 8288, 70, 64}));

// The batcher's promise (linear.h): a row's bits depend on that row only, for both
// products, and threads sharing a call's outputs change nothing.
TEST(LinearInt8RowsTest, EachRowIsBitIdenticalAtEveryRowCountAndThreadCount) {
  omp_set_num_threads(1);
  std::mt19937 rng(20261202);
  const int64_t in = 512, out = 1408;
  const std::vector<float> weight = Random(out * in, rng), bias = Random(out, rng);
  LinearWeights w(weight.data(), out, in, false, bias.data(), WeightType::kInt8);
  EXPECT_EQ(w.group_size(), kDefaultInt8GroupSize);
  LinearContext context;
  testing::ThreadsParallelFor threads(3);
  const std::vector<float> x = Random(140 * in, rng);
  for (bool few_rows : {true, false}) {
    auto product = [&](const float* rows_x, int64_t rows, float* y, ParallelFor* p) {
      (few_rows ? LinearFewRows : Linear)(context, w, rows_x, rows, y, p);
    };
    std::vector<float> alone(out);
    for (int64_t rows : {1, 2, 3, 4, 5, 8, 16, 17, 33, 64, 130}) {
      std::vector<float> y(rows * out), split(rows * out);
      product(x.data(), rows, y.data(), nullptr);
      product(x.data(), rows, split.data(), &threads);
      ASSERT_EQ(split, y) << "rows " << rows << (few_rows ? " few" : " many");
      for (int64_t r : {int64_t{0}, rows / 2, rows - 1}) {
        product(x.data() + r * in, 1, alone.data(), nullptr);
        for (int64_t o = 0; o < out; ++o) {
          ASSERT_EQ(y[r * out + o], alone[o])
              << "rows " << rows << " row " << r << (few_rows ? " few" : " many");
        }
      }
    }
  }
}

// The layer's bytes are the int8 weights, their scales and the bias: about half of
// bfloat16's at the default group size.
TEST(LinearInt8RowsTest, HoldsAboutHalfTheBytesOfBfloat16) {
  std::mt19937 rng(3);
  const int64_t in = 1024, out = 512;
  const std::vector<float> weight = Random(out * in, rng);
  LinearWeights int8(weight.data(), out, in, false, nullptr, WeightType::kInt8);
  LinearWeights bf16(weight.data(), out, in, false, nullptr, WeightType::kBfloat16);
  EXPECT_EQ(int8.bytes(), out * in + out * (in / kDefaultInt8GroupSize) * 4 + out * 4);
  EXPECT_LT(int8.bytes(), bf16.bytes() * 0.6);
}

}  // namespace
}  // namespace layerserve::kernels
