// Holds the normalization kernels -- the references and every fast strategy -- to
// the PyTorch golden cases at the FLOAT32 tolerance of make_norm_golden.py, and
// checks the cases' premise for the BFLOAT16 wire: inputs survive bfloat16 exactly,
// and outputs rounded to bfloat16 stay within the BFLOAT16 tolerance.
#include "tests/golden/norm_golden.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/norm.h"
#include "kernels/norm_internal.h"

namespace layerserve {
namespace {

using golden::NormGoldenCase;
using kernels::NormContext;
using kernels::NormParams;

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
      ln ? kernels::LayerNorm(ctx, x, rows, dim, p, r.y.data())
         : kernels::RmsNorm(ctx, x, rows, dim, p, r.y.data());
      break;
    case Impl::kLayerNormOneDnn:
      kernels::internal::LayerNormOneDnn(ctx, x, rows, dim, p, r.y.data());
      break;
    case Impl::kLayerNormLoop:
      kernels::internal::LayerNormLoop(x, rows, dim, p, r.y.data());
      break;
  }
  return r;
}

void ExpectWithin(const std::vector<float>& got, const std::vector<float>& expected,
                  double tol, const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double limit = tol * std::max(1.0, std::fabs(static_cast<double>(expected[i])));
    const double err = std::fabs(static_cast<double>(got[i]) - expected[i]);
    if (!(err <= limit) && reported++ < 5) {
      ADD_FAILURE() << what << " at " << i << ": got " << got[i] << " expected "
                    << expected[i] << " err " << err << " limit " << limit;
    }
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
      EXPECT_EQ(r.residual_out, c.expected_residual_out) << "float32 add is exact";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Impls, NormGoldenTest,
                         ::testing::Values(Impl::kReference, Impl::kFast,
                                           Impl::kLayerNormOneDnn, Impl::kLayerNormLoop),
                         [](const ::testing::TestParamInfo<Impl>& info) {
                           return std::string(Name(info.param));
                         });

std::vector<float> ThroughBfloat16(const std::vector<float>& v) {
  std::vector<uint16_t> wire(v.size());
  kernels::ConvertFromFloat32(kernels::ElementType::kBfloat16, v.data(), v.size(),
                              wire.data());
  std::vector<float> back(v.size());
  kernels::ConvertToFloat32(kernels::ElementType::kBfloat16, wire.data(), v.size(),
                            back.data());
  return back;
}

TEST(NormGoldenBfloat16Test, InputsAreExactInBfloat16AndOutputsWithinTolerance) {
  NormContext ctx;
  for (const NormGoldenCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(ThroughBfloat16(c.input), c.input);
    EXPECT_EQ(ThroughBfloat16(c.weight), c.weight);
    EXPECT_EQ(ThroughBfloat16(c.bias), c.bias);
    EXPECT_EQ(ThroughBfloat16(c.residual), c.residual);
    const Result r = RunCase(Impl::kFast, ctx, c);
    ExpectWithin(ThroughBfloat16(r.y), c.expected, golden::kBfloat16Tolerance, "bf16 y");
  }
}

TEST(NormGoldenLoaderTest, ReadsShapesAndOptionalFields) {
  const std::vector<NormGoldenCase>& cases = Cases();
  bool saw_null_weight = false, saw_residual = false, saw_offset = false, saw_3d = false;
  for (const NormGoldenCase& c : cases) {
    saw_null_weight |= c.weight.empty();
    saw_residual |= !c.residual.empty();
    saw_offset |= c.weight_offset;
    saw_3d |= c.shape.size() == 3;
  }
  EXPECT_TRUE(saw_null_weight && saw_residual && saw_offset && saw_3d);
  EXPECT_THROW(golden::LoadNormGolden(LAYERSERVE_SOURCE_DIR "/no/such/file.json"),
               std::runtime_error);
}

}  // namespace
}  // namespace layerserve
