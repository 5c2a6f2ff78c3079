// RoPE kernels: the fast tables and rotation held to their scalar references across
// head dims, token counts, styles, layouts, strides, misalignment, aliasing, large
// magnitudes and non-finite values; the frequencies of every scaling checked
// against formulas evaluated here in double.
#include "kernels/rope/rope.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "tests/testing/highway_target_scope.h"
#include "tests/testing/output_stats.h"

namespace layerserve::kernels {
namespace {

using testing::TargetScope;

constexpr double kPi = 3.14159265358979323846;
constexpr double kU = 1.0 / (1 << 24);  // Unit roundoff of float32, 2^-24.
constexpr double kMinSubnormal = std::numeric_limits<float>::denorm_min();

// Partner of dimension i < rotary_dim and its frequency index, written out
// independently of the kernels.
int64_t PartnerOf(int64_t i, int64_t rotary_dim, RopeStyle style) {
  if (style == RopeStyle::kInterleaved) return i % 2 == 0 ? i + 1 : i - 1;
  return i < rotary_dim / 2 ? i + rotary_dim / 2 : i - rotary_dim / 2;
}

std::vector<float> RandomValues(int64_t n, float scale, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// Every Highway target the CPU supports and this binary was compiled for.
std::vector<int64_t> Targets() { return hwy::SupportedAndGeneratedTargets(); }

struct Tables {
  std::vector<float> cos, sin;
};

Tables MakeTables(const RopeFrequencies& f, RopeStyle style,
                  const std::vector<int64_t>& positions) {
  const int64_t rotary_dim = 2 * static_cast<int64_t>(f.inv_freq.size());
  Tables t;
  t.cos.resize(positions.size() * rotary_dim);
  t.sin.resize(positions.size() * rotary_dim);
  ComputeRopeTablesReference(f, style, positions.data(), positions.size(), t.cos.data(),
                             t.sin.data());
  return t;
}

// fast and reference outputs of one element. The fast kernel rounds two products
// and a sum in float32 (<= 2u (|x_a c| + |x_b s|) from exact); the reference rounds
// the exact value once (<= u |y| <= u (|x_a c| + |x_b s|)). Each of the three
// roundings may also lose up to one subnormal spacing when products underflow.
// Non-finite outputs must match exactly (NaN where PyTorch gets NaN).
bool Close(float fast, float ref, double bound) {
  if (std::isnan(ref) || std::isnan(fast)) return std::isnan(ref) && std::isnan(fast);
  if (std::isinf(ref) || std::isinf(fast)) return fast == ref;
  return std::fabs(static_cast<double>(fast) - ref) <= bound;
}

// Compares y_fast with y_ref on every row element named by the geometry.
void CompareRows(const float* x, const float* y_fast, const float* y_ref,
                 const RopeGeometry& g, RopeStyle style, const Tables& t,
                 const std::string& label) {
  int failures = 0;
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t h = 0; h < g.heads; ++h) {
      for (int64_t tok = 0; tok < g.tokens; ++tok) {
        const int64_t row = b * g.batch_stride + h * g.head_stride + tok * g.token_stride;
        const int64_t table = b * g.table_batch_stride + tok * g.rotary_dim;
        for (int64_t i = 0; i < g.head_dim; ++i) {
          double bound = 0;  // Pass-through dims are copied exactly.
          if (i < g.rotary_dim) {
            const double terms =
                std::fabs(static_cast<double>(x[row + i]) * t.cos[table + i]) +
                std::fabs(
                    static_cast<double>(x[row + PartnerOf(i, g.rotary_dim, style)]) *
                    t.sin[table + i]);
            bound = 3 * kU * terms + 3 * kMinSubnormal;
          }
          if (!Close(y_fast[row + i], y_ref[row + i], bound) && failures++ < 5) {
            ADD_FAILURE() << label << " b" << b << " h" << h << " t" << tok << " i" << i
                          << ": fast " << y_fast[row + i] << " reference "
                          << y_ref[row + i] << " bound " << bound;
          }
        }
      }
    }
  }
}

struct SweepCase {
  int64_t head_dim;
  int64_t tokens;
  RopeStyle style;
  bool bhtd;
  bool per_batch_positions;
};

std::ostream& operator<<(std::ostream& os, const SweepCase& c) {
  return os << "D" << c.head_dim << "_T" << c.tokens
            << (c.style == RopeStyle::kHalf ? "_Half" : "_Interleaved")
            << (c.bhtd ? "_BHTD" : "_BTHD") << (c.per_batch_positions ? "_PerBatch" : "");
}

class RopeSweepTest : public ::testing::TestWithParam<SweepCase> {};

// Every (D, T, style, layout): full and partial rotary, out of place on aligned and
// misaligned (one float off) buffers, and in place.
TEST_P(RopeSweepTest, FastMatchesReference) {
  const SweepCase c = GetParam();
  const int64_t batch = c.per_batch_positions ? 2 : 1;
  const int64_t heads = c.head_dim >= 4096 && c.tokens >= 512 ? 1 : 3;
  const int64_t full = c.head_dim - c.head_dim % 2;  // D = 1 rotates nothing.
  for (int64_t rotary_dim : {full, full / 4 * 2}) {  // Full and about half.
    SCOPED_TRACE("rotary_dim " + std::to_string(rotary_dim));
    std::vector<int64_t> positions(batch * c.tokens);
    for (int64_t i = 0; i < static_cast<int64_t>(positions.size()); ++i) {
      positions[i] = (i * 7919) % 100003;  // Spread up to ~1e5: large angles too.
    }
    const RopeGeometry g = ContiguousRopeGeometry(
        c.bhtd, batch, heads, c.tokens, c.head_dim, rotary_dim, !c.per_batch_positions);
    if (!c.per_batch_positions) positions.resize(c.tokens);
    RopeScaling scaling;
    RopeFrequencies f =
        ComputeRopeFrequencies(10000.0f, std::max<int64_t>(rotary_dim, 2), scaling, 1);
    if (rotary_dim == 0) f.inv_freq.clear();
    const Tables t = MakeTables(f, c.style, positions);
    const int64_t n = batch * heads * c.tokens * c.head_dim;
    for (int misalign = 0; misalign <= 1; ++misalign) {
      SCOPED_TRACE("misalign " + std::to_string(misalign));
      std::vector<float> x_buf = RandomValues(n + misalign, 1.5f, 17 + misalign);
      std::vector<float> ref_buf(n + misalign), fast_buf(n + misalign);
      const float* x = x_buf.data() + misalign;
      float* y_ref = ref_buf.data() + misalign;
      float* y_fast = fast_buf.data() + misalign;
      ApplyRopeReference(x, y_ref, g, c.style, t.cos.data(), t.sin.data());
      for (int64_t target : Targets()) {
        SCOPED_TRACE(hwy::TargetName(target));
        TargetScope scope(target);
        ApplyRope(x, y_fast, g, c.style, t.cos.data(), t.sin.data());
        CompareRows(x, y_fast, y_ref, g, c.style, t, "out of place");

        std::vector<float> in_place(x_buf);
        ApplyRope(in_place.data() + misalign, in_place.data() + misalign, g, c.style,
                  t.cos.data(), t.sin.data());
        EXPECT_EQ(std::vector<float>(in_place.begin() + misalign, in_place.end()),
                  std::vector<float>(y_fast, y_fast + n))
            << "in place must equal out of place bit for bit";

        // With output statistics, out of place and in place: the same output,
        // and the statistics of it.
        std::vector<float> with_stats_buf(n + misalign);
        ValueStats stats;
        ApplyRope(x, with_stats_buf.data() + misalign, g, c.style, t.cos.data(),
                  t.sin.data(), &stats);
        testing::ExpectSameOutput(with_stats_buf.data() + misalign, y_fast, n);
        testing::ExpectStatsOf(stats, y_fast, n, "out of place");
        std::vector<float> in_place_stats(x_buf);
        ApplyRope(in_place_stats.data() + misalign, in_place_stats.data() + misalign, g,
                  c.style, t.cos.data(), t.sin.data(), &stats);
        testing::ExpectSameOutput(in_place_stats.data() + misalign, y_fast, n);
        testing::ExpectStatsOf(stats, y_fast, n, "in place");
      }
    }
  }
}

std::vector<SweepCase> SweepCases() {
  std::vector<SweepCase> cases;
  for (int64_t d : {1, 7, 64, 4096, 4097}) {
    for (int64_t tokens : {1, 3, 512}) {
      for (RopeStyle style : {RopeStyle::kHalf, RopeStyle::kInterleaved}) {
        for (bool bhtd : {true, false}) {
          cases.push_back({d, tokens, style, bhtd, tokens == 3});
        }
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeSweepTest, ::testing::ValuesIn(SweepCases()),
                         [](const ::testing::TestParamInfo<SweepCase>& info) {
                           std::ostringstream os;
                           os << info.param;
                           return os.str();
                         });

// Large magnitudes (near 1e4 and 1e20), then NaN and Inf in a few places.
class RopeValuesTest : public ::testing::TestWithParam<RopeStyle> {};

TEST_P(RopeValuesTest, LargeMagnitudesAndNonFiniteValues) {
  const RopeStyle style = GetParam();
  const int64_t heads = 2, tokens = 5, head_dim = 68, rotary_dim = 64;
  const std::vector<int64_t> positions = {0, 1, 39001, 100000, 123456789};
  const RopeFrequencies f =
      ComputeRopeFrequencies(10000.0f, rotary_dim, RopeScaling(), 1);
  const Tables t = MakeTables(f, style, positions);
  const RopeGeometry g =
      ContiguousRopeGeometry(true, 1, heads, tokens, head_dim, rotary_dim, true);
  for (float scale : {1e4f, 1e20f}) {
    SCOPED_TRACE("scale " + std::to_string(scale));
    std::vector<float> x = RandomValues(heads * tokens * head_dim, scale, 5);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    x[3] = nan;
    x[head_dim + 40] = inf;
    x[2 * head_dim + 1] = -inf;
    x[heads * tokens * head_dim - 1] = nan;  // A pass-through dim.
    std::vector<float> y_ref(x.size()), y_fast(x.size());
    ApplyRopeReference(x.data(), y_ref.data(), g, style, t.cos.data(), t.sin.data());
    for (int64_t target : Targets()) {
      SCOPED_TRACE(hwy::TargetName(target));
      TargetScope scope(target);
      ApplyRope(x.data(), y_fast.data(), g, style, t.cos.data(), t.sin.data());
      CompareRows(x.data(), y_fast.data(), y_ref.data(), g, style, t, "values");
      std::vector<float> with_stats(x.size());
      ValueStats stats;
      ApplyRope(x.data(), with_stats.data(), g, style, t.cos.data(), t.sin.data(),
                &stats);
      testing::ExpectSameOutput(with_stats.data(), y_fast.data(),
                                static_cast<int64_t>(x.size()));
      testing::ExpectStatsOf(stats, y_fast.data(), static_cast<int64_t>(x.size()));
      // NaN where a NaN meets its rotation partner (position 0: NaN * 0), and the
      // pass-through NaN kept.
      EXPECT_TRUE(std::isnan(y_fast[3]));
      EXPECT_TRUE(std::isnan(y_fast[PartnerOf(3, rotary_dim, style)]));
      EXPECT_TRUE(std::isnan(y_fast.back()));
    }
  }
}

// HF at position 0: cos = 1, sin = 0, so q * cos + rotate_half(q) * sin sends an
// infinite x_b to Inf * 0 = NaN in x_a's output (PyTorch does the same).
TEST_P(RopeValuesTest, InfinityAtPositionZeroBecomesNaNInItsPartner) {
  const RopeStyle style = GetParam();
  const int64_t head_dim = 8;
  const RopeFrequencies f = ComputeRopeFrequencies(10000.0f, head_dim, RopeScaling(), 1);
  const Tables t = MakeTables(f, style, {0});
  const RopeGeometry g = ContiguousRopeGeometry(true, 1, 1, 1, head_dim, head_dim, true);
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};
  x[1] = std::numeric_limits<float>::infinity();
  std::vector<float> y(head_dim);
  ApplyRope(x.data(), y.data(), g, style, t.cos.data(), t.sin.data());
  const int64_t partner = PartnerOf(1, head_dim, style);
  EXPECT_EQ(y[1], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(y[partner])) << y[partner];
  for (int64_t i = 0; i < head_dim; ++i) {
    if (i != 1 && i != partner) {
      EXPECT_EQ(y[i], x[i]) << i;  // Identity at position 0.
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Styles, RopeValuesTest,
                         ::testing::Values(RopeStyle::kHalf, RopeStyle::kInterleaved),
                         [](const ::testing::TestParamInfo<RopeStyle>& info) {
                           return std::string(
                               info.param == RopeStyle::kHalf ? "Half" : "Interleaved");
                         });

// BlockForward's use: q inside a fused projection row [T, (Hq + 2 Hkv) * Dh],
// rotated in place through strides, everything else untouched.
TEST(RopeStridedTest, RotatesInPlaceInsideAWiderRow) {
  const int64_t tokens = 9, heads = 4, head_dim = 40, row_width = 3 * heads * head_dim;
  std::vector<float> fused = RandomValues(tokens * row_width, 1.0f, 3);
  const std::vector<float> original = fused;
  std::vector<int64_t> positions(tokens);
  for (int64_t t = 0; t < tokens; ++t) positions[t] = 30 + t;
  const RopeFrequencies f = ComputeRopeFrequencies(10000.0f, 32, RopeScaling(), 1);
  const Tables t = MakeTables(f, RopeStyle::kHalf, positions);
  RopeGeometry g;
  g.batch = 1;
  g.heads = heads;
  g.tokens = tokens;
  g.head_dim = head_dim;
  g.rotary_dim = 32;
  g.batch_stride = tokens * row_width;
  g.head_stride = head_dim;
  g.token_stride = row_width;
  std::vector<float> expected = fused;
  ApplyRopeReference(fused.data(), expected.data(), g, RopeStyle::kHalf, t.cos.data(),
                     t.sin.data());
  ApplyRope(fused.data(), fused.data(), g, RopeStyle::kHalf, t.cos.data(), t.sin.data());
  CompareRows(original.data(), fused.data(), expected.data(), g, RopeStyle::kHalf, t,
              "strided");
  for (int64_t tok = 0; tok < tokens; ++tok) {
    for (int64_t i = heads * head_dim; i < row_width; ++i) {
      ASSERT_EQ(fused[tok * row_width + i], original[tok * row_width + i]);
    }
  }
}

// Highway's Sin/Cos are within 3 ulp of the correctly rounded value for |angle| <=
// 39000, and libm (what the reference uses) beyond; for |v| <= 1 an ulp is at most
// 2^-24, and scaling by the attention factor adds one float32 rounding of the
// product on both sides: |fast - ref| <= (3 + 1) * 2^-24 * scale.
TEST(RopeTablesTest, FastMatchesReference) {
  for (RopeStyle style : {RopeStyle::kHalf, RopeStyle::kInterleaved}) {
    for (float scale : {1.0f, 1.2772589f}) {
      for (int64_t rotary_dim : {2, 6, 64, 128, 130}) {
        RopeFrequencies f =
            ComputeRopeFrequencies(500000.0f, rotary_dim, RopeScaling(), 1);
        f.attention_scaling = scale;
        const std::vector<int64_t> positions = {
            0, 1, 2, 17, 38999, 39001, 65535, 100000, (1 << 24) + 1, 1000000000};
        Tables ref = MakeTables(f, style, positions);
        for (int64_t target : Targets()) {
          SCOPED_TRACE(hwy::TargetName(target));
          TargetScope scope(target);
          Tables fast;
          fast.cos.resize(ref.cos.size());
          fast.sin.resize(ref.sin.size());
          ComputeRopeTables(f, style, positions.data(), positions.size(), fast.cos.data(),
                            fast.sin.data());
          const double bound = 4 * kU * scale;
          for (size_t i = 0; i < ref.cos.size(); ++i) {
            ASSERT_LE(std::fabs(static_cast<double>(fast.cos[i]) - ref.cos[i]), bound)
                << i;
            ASSERT_LE(std::fabs(static_cast<double>(fast.sin[i]) - ref.sin[i]), bound)
                << i;
          }
        }
      }
    }
  }
}

// The table layout of the contract, at a position where the values are known.
TEST(RopeTablesTest, LayoutAndSignsPerStyle) {
  RopeFrequencies f;
  f.inv_freq = {1.0f, 0.5f};
  const int64_t position = 1;
  std::vector<float> cos(4), sin(4);
  ComputeRopeTablesReference(f, RopeStyle::kHalf, &position, 1, cos.data(), sin.data());
  EXPECT_EQ(cos, (std::vector<float>{std::cos(1.0f), std::cos(0.5f), std::cos(1.0f),
                                     std::cos(0.5f)}));
  EXPECT_EQ(sin, (std::vector<float>{-std::sin(1.0f), -std::sin(0.5f), std::sin(1.0f),
                                     std::sin(0.5f)}));
  ComputeRopeTablesReference(f, RopeStyle::kInterleaved, &position, 1, cos.data(),
                             sin.data());
  EXPECT_EQ(cos, (std::vector<float>{std::cos(1.0f), std::cos(1.0f), std::cos(0.5f),
                                     std::cos(0.5f)}));
  EXPECT_EQ(sin, (std::vector<float>{-std::sin(1.0f), std::sin(1.0f), -std::sin(0.5f),
                                     std::sin(0.5f)}));
}

// The reference rotation written as the textbook formula on one pair.
TEST(RopeApplyTest, ReferenceRotatesEachPairByItsAngle) {
  RopeFrequencies f;
  f.inv_freq = {0.25f};
  const int64_t position = 2;  // angle 0.5
  std::vector<float> cos(2), sin(2);
  for (RopeStyle style : {RopeStyle::kHalf, RopeStyle::kInterleaved}) {
    ComputeRopeTablesReference(f, style, &position, 1, cos.data(), sin.data());
    const RopeGeometry g = ContiguousRopeGeometry(true, 1, 1, 1, 3, 2, true);
    const std::vector<float> x = {3.0f, 4.0f, 9.0f};
    std::vector<float> y(3);
    ApplyRopeReference(x.data(), y.data(), g, style, cos.data(), sin.data());
    const double c = std::cos(0.5), s = std::sin(0.5);
    EXPECT_NEAR(y[0], 3 * c - 4 * s, 1e-6);
    EXPECT_NEAR(y[1], 4 * c + 3 * s, 1e-6);
    EXPECT_EQ(y[2], 9.0f);  // Past rotary_dim.
  }
}

TEST(RopeGeometryTest, ContiguousStrides) {
  const RopeGeometry bhtd = ContiguousRopeGeometry(true, 2, 3, 5, 8, 6, false);
  EXPECT_EQ(bhtd.batch_stride, 3 * 5 * 8);
  EXPECT_EQ(bhtd.head_stride, 5 * 8);
  EXPECT_EQ(bhtd.token_stride, 8);
  EXPECT_EQ(bhtd.table_batch_stride, 5 * 6);
  const RopeGeometry bthd = ContiguousRopeGeometry(false, 2, 3, 5, 8, 6, true);
  EXPECT_EQ(bthd.batch_stride, 3 * 5 * 8);
  EXPECT_EQ(bthd.head_stride, 8);
  EXPECT_EQ(bthd.token_stride, 3 * 8);
  EXPECT_EQ(bthd.table_batch_stride, 0);
}

// ---------------------------------------------------------------------------------
// Frequencies, against the formulas of modeling_rope_utils.py evaluated in double.
// float32 results are within a few ulp of these (relative 1e-6 is ~8 ulp); the
// golden test holds them to PyTorch's float32 bits.
// ---------------------------------------------------------------------------------

constexpr double kFreqTol = 1e-6;

double DefaultInv(double base, int64_t dim, int64_t i) {
  return 1.0 / std::pow(base, 2.0 * i / dim);
}

TEST(RopeFrequencyTest, DefaultAndLinear) {
  RopeScaling s;
  RopeFrequencies f = ComputeRopeFrequencies(10000.0f, 4, s, 1);
  ASSERT_EQ(f.inv_freq.size(), 2u);
  EXPECT_EQ(f.inv_freq[0], 1.0f);
  EXPECT_EQ(f.inv_freq[1], 0.01f);
  EXPECT_EQ(f.attention_scaling, 1.0f);
  s.type = RopeScalingType::kLinear;
  s.factor = 4;
  f = ComputeRopeFrequencies(10000.0f, 4, s, 1);
  EXPECT_EQ(f.inv_freq[0], 0.25f);
  EXPECT_EQ(f.inv_freq[1], 0.0025f);
}

TEST(RopeFrequencyTest, DynamicNtkGrowsTheBaseOnlyPastTheOriginalContext) {
  RopeScaling s;
  s.type = RopeScalingType::kDynamicNtk;
  s.factor = 2;
  s.original_max_position_embeddings = 100;
  const int64_t dim = 16;
  const RopeFrequencies plain = ComputeRopeFrequencies(10000.0f, dim, RopeScaling(), 1);
  EXPECT_EQ(ComputeRopeFrequencies(10000.0f, dim, s, 100).inv_freq, plain.inv_freq);
  const RopeFrequencies grown = ComputeRopeFrequencies(10000.0f, dim, s, 300);
  // base = theta * ((factor * L / M) - (factor - 1)) ^ (dim / (dim - 2)).
  const double base = 10000.0 * std::pow(2.0 * 300 / 100 - 1, 16.0 / 14.0);
  for (int64_t i = 0; i < dim / 2; ++i) {
    EXPECT_NEAR(grown.inv_freq[i], DefaultInv(base, dim, i),
                kFreqTol * DefaultInv(base, dim, i))
        << i;
  }
}

TEST(RopeFrequencyTest, YarnRampsFromExtrapolationToInterpolation) {
  RopeScaling s;
  s.type = RopeScalingType::kYarn;
  s.factor = 4;
  s.original_max_position_embeddings = 4096;
  const int64_t dim = 16;
  const RopeFrequencies f = ComputeRopeFrequencies(10000.0f, dim, s, 1);
  EXPECT_FLOAT_EQ(f.attention_scaling, static_cast<float>(0.1 * std::log(4.0) + 1));
  // find_correction_range(32, 1, 16, 10000, 4096): floor(2.6) = 2, ceil(5.6) = 6.
  auto correction_dim = [&](double rotations) {
    return dim * std::log(4096 / (rotations * 2 * kPi)) / (2 * std::log(10000.0));
  };
  const double low = std::floor(correction_dim(32)), high = std::ceil(correction_dim(1));
  ASSERT_EQ(low, 2);
  ASSERT_EQ(high, 6);
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double extrapolation_factor = 1 - ramp;
    const double expected = DefaultInv(10000, dim, i) / 4 * (1 - extrapolation_factor) +
                            DefaultInv(10000, dim, i) * extrapolation_factor;
    EXPECT_NEAR(f.inv_freq[i], expected, kFreqTol * expected) << i;
  }
  s.has_attention_factor = true;
  s.attention_factor = 1.5f;
  EXPECT_EQ(ComputeRopeFrequencies(10000.0f, dim, s, 1).attention_scaling, 1.5f);
}

TEST(RopeFrequencyTest, Llama3KeepsHighDividesLowAndBlendsTheMiddle) {
  RopeScaling s;
  s.type = RopeScalingType::kLlama3;
  s.factor = 8;
  s.original_max_position_embeddings = 8192;
  const int64_t dim = 16;
  const RopeFrequencies f = ComputeRopeFrequencies(500000.0f, dim, s, 1);
  int seen_high = 0, seen_low = 0, seen_medium = 0;
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double inv = DefaultInv(500000, dim, i);
    const double wavelen = 2 * kPi / inv;
    double expected;
    if (wavelen < 8192 / 4.0) {
      expected = inv;
      ++seen_high;
    } else if (wavelen > 8192 / 1.0) {
      expected = inv / 8;
      ++seen_low;
    } else {
      const double smooth = (8192 / wavelen - 1) / (4 - 1);
      expected = (1 - smooth) * inv / 8 + smooth * inv;
      ++seen_medium;
    }
    EXPECT_NEAR(f.inv_freq[i], expected, kFreqTol * expected) << i;
  }
  EXPECT_GT(seen_high, 0);
  EXPECT_GT(seen_low, 0);
  EXPECT_GT(seen_medium, 0);
  EXPECT_EQ(f.attention_scaling, 1.0f);
}

}  // namespace
}  // namespace layerserve::kernels
