// Holds the normalization kernels -- the references and every fast strategy -- to
// the PyTorch golden cases at the FLOAT32 tolerance of make_norm_golden.py (NaN and
// Inf rows included: NaN where PyTorch gives NaN, zeros of the same sign), and
// checks the cases' premise for the BFLOAT16 wire: inputs survive bfloat16 exactly,
// and outputs rounded to bfloat16 stay within the BFLOAT16 tolerance.
#include "tests/golden/norm_golden.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "bench/baseline/layer_norm_onednn.h"
#include "common/dtype.h"
#include "kernels/norm/norm.h"
#include "kernels/norm/norm_internal.h"
#include "tests/golden/golden_expect.h"
#include "tests/golden/golden_json.h"

namespace layerserve {
namespace {

using golden::NormGoldenCase;
using golden::ThroughBfloat16;
using kernels::NormParams;
using kernels::baseline::NormContext;  // The oneDNN baseline's primitives.

const char kGoldenPath[] = LAYERSERVE_SOURCE_DIR "/tests/golden/norm_golden.json";

const std::vector<NormGoldenCase>& Cases() {
  static const auto* cases =
      new std::vector<NormGoldenCase>(golden::LoadNormGolden(kGoldenPath));
  return *cases;
}

enum class Impl { kReference, kFast, kLayerNormOneDnn, kLayerNormLoop };

const char* Name(Impl impl) {
  switch (impl) {
    case Impl::kReference:
      return "Reference";
    case Impl::kFast:
      return "Fast";
    case Impl::kLayerNormOneDnn:
      return "LayerNormOneDnn";
    case Impl::kLayerNormLoop:
      return "LayerNormLoop";
  }
  return "?";
}

struct Result {
  std::vector<float> y, residual_out;
};

Result RunCase(Impl impl, NormContext& ctx, const NormGoldenCase& c) {
  const int64_t rows = c.rows(), dim = c.dim();
  NormParams p;
  p.epsilon = c.epsilon;
  p.weight_offset = c.weight_offset;
  if (!c.weight.empty()) p.weight = c.weight.data();
  if (!c.bias.empty()) p.bias = c.bias.data();
  Result r;
  r.y.resize(c.input.size());
  if (!c.residual.empty()) {
    r.residual_out.resize(c.input.size());
    p.residual = c.residual.data();
    p.residual_out = r.residual_out.data();
  }
  const float* x = c.input.data();
  const bool ln = c.kind == "layer_norm";
  switch (impl) {
    case Impl::kReference:
      ln ? kernels::LayerNormReference(x, rows, dim, p, r.y.data())
         : kernels::RmsNormReference(x, rows, dim, p, r.y.data());
      break;
    case Impl::kFast:
      ln ? kernels::LayerNorm(x, rows, dim, p, r.y.data())
         : kernels::RmsNorm(x, rows, dim, p, r.y.data());
      break;
    case Impl::kLayerNormOneDnn:
      kernels::baseline::LayerNormOneDnn(ctx, x, rows, dim, p, r.y.data());
      break;
    case Impl::kLayerNormLoop:
      kernels::internal::LayerNormLoop(x, rows, dim, p, r.y.data());
      break;
  }
  return r;
}

// The tolerance of make_norm_golden.py (golden::WithinTolerance: NaN where PyTorch
// gives NaN, the same infinities), and an expected zero is a zero of the same sign:
// the zeros PyTorch gives here are exact products (s = 0, or s * rsqrt(Inf) = s * 0
// in an RMSNorm row holding Inf), whose sign every order of evaluation keeps.
void ExpectWithin(const std::vector<float>& got, const std::vector<float>& expected,
                  double tol, const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    bool ok = golden::WithinTolerance(got[i], expected[i], tol);
    if (expected[i] == 0.0f) {
      ok = got[i] == 0.0f && std::signbit(got[i]) == std::signbit(expected[i]);
    }
    if (!ok && reported++ < 5) {
      ADD_FAILURE() << what << " at " << i << ": got " << got[i] << " expected "
                    << expected[i] << " (tolerance " << tol << " * max(1, |expected|))";
    }
  }
}

// Bit for bit where both are numbers; any NaN matches any NaN (x86 makes Inf - Inf
// the negative default NaN, the file's "nan" reads as the positive one).
void ExpectSameValues(const std::vector<float>& got, const std::vector<float>& expected,
                      const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << what << " at " << i;
      continue;
    }
    ASSERT_EQ(std::memcmp(&got[i], &expected[i], sizeof(float)), 0)
        << what << " at " << i << ": got " << got[i] << " expected " << expected[i];
  }
}

class NormGoldenTest : public ::testing::TestWithParam<Impl> {
 protected:
  void SetUp() override { omp_set_num_threads(1); }  // As the server's workers.
};

TEST_P(NormGoldenTest, MatchesPyTorchAtFloat32Tolerance) {
  const Impl impl = GetParam();
  ASSERT_GE(Cases().size(), 12u);
  NormContext ctx;
  for (const NormGoldenCase& c : Cases()) {
    const bool ln = c.kind == "layer_norm";
    if (!ln && (impl == Impl::kLayerNormOneDnn || impl == Impl::kLayerNormLoop)) continue;
    SCOPED_TRACE(c.name + " via " + Name(impl));
    const Result r = RunCase(impl, ctx, c);
    ExpectWithin(r.y, c.expected, golden::kFloat32Tolerance, "y");
    if (!c.residual.empty()) {
      ExpectSameValues(r.residual_out, c.expected_residual_out,
                       "residual_out (a float32 add is exact)");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Impls, NormGoldenTest,
                         ::testing::Values(Impl::kReference, Impl::kFast,
                                           Impl::kLayerNormOneDnn, Impl::kLayerNormLoop),
                         [](const ::testing::TestParamInfo<Impl>& info) {
                           return std::string(Name(info.param));
                         });

TEST(NormGoldenBfloat16Test, InputsAreExactInBfloat16AndOutputsWithinTolerance) {
  NormContext ctx;
  for (const NormGoldenCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    ExpectSameValues(ThroughBfloat16(c.input), c.input, "input");
    ExpectSameValues(ThroughBfloat16(c.weight), c.weight, "weight");
    ExpectSameValues(ThroughBfloat16(c.bias), c.bias, "bias");
    ExpectSameValues(ThroughBfloat16(c.residual), c.residual, "residual");
    const Result r = RunCase(Impl::kFast, ctx, c);
    ExpectWithin(ThroughBfloat16(r.y), c.expected, golden::kBfloat16Tolerance, "bf16 y");
  }
}

TEST(NormGoldenLoaderTest, ReadsShapesAndOptionalFields) {
  const std::vector<NormGoldenCase>& cases = Cases();
  bool saw_null_weight = false, saw_residual = false, saw_offset = false, saw_3d = false;
  bool saw_nan = false, saw_inf = false, saw_negative_zero = false;
  for (const NormGoldenCase& c : cases) {
    saw_null_weight |= c.weight.empty();
    saw_residual |= !c.residual.empty();
    saw_offset |= c.weight_offset;
    saw_3d |= c.shape.size() == 3;
    for (float v : c.input) saw_inf |= v == std::numeric_limits<float>::infinity();
    for (float v : c.residual) saw_inf |= v == -std::numeric_limits<float>::infinity();
    for (float v : c.expected) {
      saw_nan |= std::isnan(v);
      saw_negative_zero |= v == 0.0f && std::signbit(v);
    }
  }
  EXPECT_TRUE(saw_null_weight && saw_residual && saw_offset && saw_3d);
  EXPECT_TRUE(saw_nan && saw_inf && saw_negative_zero)
      << "the non-finite cases were read";
  EXPECT_THROW(golden::LoadNormGolden(LAYERSERVE_SOURCE_DIR "/no/such/file.json"),
               std::runtime_error);
}

}  // namespace
}  // namespace layerserve
