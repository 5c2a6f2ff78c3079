// Holds the RoPE kernels to the PyTorch golden cases (make_rope_golden.py):
// - the frequencies of every scaling against PyTorch's float32 inv_freq, within the
//   ulps that PyTorch's float32 pow leaves open;
// - the tables and the rotation (reference and fast), fed PyTorch's inv_freq,
//   against HF's output at the FLOAT32 tolerance, large positions included;
// - the premise of the BFLOAT16 wire: inputs survive bfloat16 exactly and outputs
//   rounded to bfloat16 stay within the BFLOAT16 tolerance.
#include "tests/golden/rope_golden.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "kernels/rope/rope.h"
#include "tests/golden/golden_expect.h"

namespace layerserve {
namespace {

using golden::ExpectWithin;
using golden::RopeGoldenCase;
using golden::ThroughBfloat16;
using kernels::RopeScalingType;
using kernels::RopeStyle;

const char kGoldenPath[] = LAYERSERVE_SOURCE_DIR "/tests/golden/rope_golden.json";

const std::vector<RopeGoldenCase>& Cases() {
  static const auto* cases =
      new std::vector<RopeGoldenCase>(golden::LoadRopeGolden(kGoldenPath));
  return *cases;
}

RopeStyle StyleOf(const RopeGoldenCase& c) {
  return c.style == "HALF" ? RopeStyle::kHalf : RopeStyle::kInterleaved;
}

kernels::RopeScaling ScalingOf(const RopeGoldenCase& c) {
  kernels::RopeScaling s;
  const std::string& t = c.scaling.type;
  s.type = t == "LINEAR"        ? RopeScalingType::kLinear
           : t == "DYNAMIC_NTK" ? RopeScalingType::kDynamicNtk
           : t == "YARN"        ? RopeScalingType::kYarn
           : t == "LLAMA3"      ? RopeScalingType::kLlama3
                                : RopeScalingType::kNone;
  s.factor = c.scaling.factor;
  s.original_max_position_embeddings = c.scaling.original_max_position_embeddings;
  if (c.scaling.beta_fast) s.beta_fast = *c.scaling.beta_fast;
  if (c.scaling.beta_slow) s.beta_slow = *c.scaling.beta_slow;
  if (c.scaling.attention_factor) {
    s.has_attention_factor = true;
    s.attention_factor = *c.scaling.attention_factor;
  }
  if (c.scaling.low_freq_factor) s.low_freq_factor = *c.scaling.low_freq_factor;
  if (c.scaling.high_freq_factor) s.high_freq_factor = *c.scaling.high_freq_factor;
  return s;
}

// Distance in units in the last place between two finite floats of the same sign.
int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, sizeof(ia));
  std::memcpy(&ib, &b, sizeof(ib));
  return std::llabs(static_cast<int64_t>(ia) - ib);
}

// PyTorch's float32 pow (SLEEF u10 / libm) is within 1 ulp of the correctly rounded
// power ours computes. Default, linear and dynamic NTK take one more correctly
// rounded operation (reciprocal, division), which cannot widen a 1-ulp gap beyond
// 1 ulp + 1 rounding: 2 ulp. YaRN blends two such values with weights that sum to 1
// (<= 2 ulp each, + 2 roundings); Llama 3 divides, subtracts and blends in float32.
// 4 ulp covers both; any formula mistake (a wrong default, floor vs ceil, a missing
// factor) is off by far more.
constexpr int64_t kMaxFrequencyUlps = 4;

TEST(RopeGoldenFrequencyTest, EveryScalingMatchesPyTorchWithinUlps) {
  ASSERT_GE(Cases().size(), 20u);
  int64_t identical = 0, total = 0;
  for (const RopeGoldenCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    bool shared = false;
    const std::vector<int64_t> positions = c.ResolvedPositions(&shared);
    int64_t max_position = 0;
    for (int64_t p : positions) max_position = std::max(max_position, p);
    const kernels::RopeFrequencies f = kernels::ComputeRopeFrequencies(
        c.theta, c.resolved_rotary_dim(), ScalingOf(c), max_position + 1);
    ASSERT_EQ(f.inv_freq.size(), c.inv_freq.size());
    EXPECT_LE(UlpDistance(f.attention_scaling, c.attention_scaling), 1)
        << f.attention_scaling << " vs " << c.attention_scaling;
    for (size_t i = 0; i < f.inv_freq.size(); ++i) {
      const int64_t ulps = UlpDistance(f.inv_freq[i], c.inv_freq[i]);
      EXPECT_LE(ulps, kMaxFrequencyUlps) << "inv_freq[" << i << "]: " << f.inv_freq[i]
                                         << " vs PyTorch " << c.inv_freq[i];
      identical += ulps == 0;
      ++total;
    }
  }
  // Most entries are bit-identical; a few differ by PyTorch's pow rounding.
  EXPECT_GE(identical * 10, total * 9) << identical << " of " << total;
}

struct Rotated {
  std::vector<float> query, key;
};

// Tables from PyTorch's own inv_freq (the bits HF holds), then the rotation.
Rotated RotateWithPyTorchFrequencies(const RopeGoldenCase& c, bool fast) {
  bool shared = false;
  const std::vector<int64_t> positions = c.ResolvedPositions(&shared);
  const int64_t rotary_dim = c.resolved_rotary_dim();
  kernels::RopeFrequencies f;
  f.inv_freq = c.inv_freq;
  f.attention_scaling = c.attention_scaling;
  const int64_t rows = static_cast<int64_t>(positions.size());
  std::vector<float> cos(rows * rotary_dim), sin(rows * rotary_dim);
  (fast ? kernels::ComputeRopeTables : kernels::ComputeRopeTablesReference)(
      f, StyleOf(c), positions.data(), rows, cos.data(), sin.data());
  auto rotate = [&](const std::vector<float>& x, const std::vector<int64_t>& shape) {
    const kernels::RopeGeometry g =
        kernels::ContiguousRopeGeometry(c.bhtd(), c.batch(), c.heads(shape), c.tokens(),
                                        c.head_dim(), rotary_dim, shared);
    std::vector<float> y(x.size());
    if (fast) {
      kernels::ApplyRope(x.data(), y.data(), g, StyleOf(c), cos.data(), sin.data());
    } else {
      kernels::ApplyRopeReference(x.data(), y.data(), g, StyleOf(c), cos.data(),
                                  sin.data());
    }
    return y;
  };
  Rotated r;
  r.query = rotate(c.query, c.query_shape);
  if (!c.key.empty()) r.key = rotate(c.key, c.key_shape);
  return r;
}

class RopeGoldenRotationTest : public ::testing::TestWithParam<bool> {};

TEST_P(RopeGoldenRotationTest, MatchesHuggingFaceAtFloat32Tolerance) {
  for (const RopeGoldenCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    const Rotated r = RotateWithPyTorchFrequencies(c, GetParam());
    ExpectWithin(r.query, c.expected_query, golden::kRopeFloat32Tolerance, "query");
    ExpectWithin(r.key, c.expected_key, golden::kRopeFloat32Tolerance, "key");
  }
}

INSTANTIATE_TEST_SUITE_P(Impls, RopeGoldenRotationTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "Fast" : "Reference");
                         });

TEST(RopeGoldenBfloat16Test, InputsAreExactInBfloat16AndOutputsWithinTolerance) {
  for (const RopeGoldenCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(ThroughBfloat16(c.query), c.query);
    EXPECT_EQ(ThroughBfloat16(c.key), c.key);
    const Rotated r = RotateWithPyTorchFrequencies(c, /*fast=*/true);
    ExpectWithin(ThroughBfloat16(r.query), c.expected_query,
                 golden::kRopeBfloat16Tolerance, "bf16 query");
    ExpectWithin(ThroughBfloat16(r.key), c.expected_key, golden::kRopeBfloat16Tolerance,
                 "bf16 key");
  }
}

TEST(RopeGoldenLoaderTest, CoversTheBriefAndRejectsMissingFiles) {
  bool saw[8] = {};
  for (const RopeGoldenCase& c : Cases()) {
    saw[0] |= c.style == "INTERLEAVED";
    saw[1] |= c.layout == "BTHD";
    saw[2] |= c.rotary_dim != 0 && c.rotary_dim < c.head_dim();
    saw[3] |=
        !c.key_shape.empty() && c.heads(c.query_shape) == 8 && c.heads(c.key_shape) == 2;
    for (int64_t p : c.positions) saw[4] |= p >= 100000;
    saw[5] |= c.positions.empty() && c.position_offset > 0;
    saw[6] |= c.key_shape.empty();
    saw[7] |= c.positions.size() == static_cast<size_t>(c.batch() * c.tokens()) &&
              c.batch() > 1;
  }
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(saw[i]) << i;
  for (const char* type : {"NONE", "LINEAR", "DYNAMIC_NTK", "YARN", "LLAMA3"}) {
    bool found = false;
    for (const RopeGoldenCase& c : Cases()) found |= c.scaling.type == type;
    EXPECT_TRUE(found) << type;
  }
  EXPECT_THROW(golden::LoadRopeGolden(LAYERSERVE_SOURCE_DIR "/no/such/file.json"),
               std::runtime_error);
}

}  // namespace
}  // namespace layerserve
