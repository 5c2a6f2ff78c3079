// Holds the activation kernels -- the references and every fast strategy -- to the
// PyTorch golden cases at the FLOAT32 tolerance of make_activation_golden.py,
// non-finite values included (NaN where PyTorch gives NaN, the same infinities),
// and checks the cases' premise for the BFLOAT16 wire: inputs survive bfloat16
// exactly, and outputs rounded to bfloat16 stay within the BFLOAT16 tolerance.
#include "tests/golden/activation_golden.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench/baseline/activate_onednn.h"
#include "common/dtype.h"
#include "kernels/activation/activation.h"
#include "kernels/activation/activation_internal.h"
#include "tests/golden/golden_expect.h"

namespace layerserve {
namespace {

using golden::ActivationGoldenCase;
using golden::ExpectWithin;
using golden::ThroughBfloat16;
using kernels::Activation;
using kernels::baseline::ActivationContext;  // The oneDNN baseline's primitives.

const char kGoldenPath[] = LAYERSERVE_SOURCE_DIR "/tests/golden/activation_golden.json";

const std::vector<ActivationGoldenCase>& Cases() {
  static const auto* cases =
      new std::vector<ActivationGoldenCase>(golden::LoadActivationGolden(kGoldenPath));
  return *cases;
}

// The kernel activation of a proto name; for the gated kinds, the gate's.
Activation KernelActivation(const std::string& name) {
  static const auto* table =
      new std::map<std::string, Activation>{{"RELU", Activation::kRelu},
                                            {"GELU", Activation::kGelu},
                                            {"GELU_TANH", Activation::kGeluTanh},
                                            {"SILU", Activation::kSilu},
                                            {"SIGMOID", Activation::kSigmoid},
                                            {"TANH", Activation::kTanh},
                                            {"QUICK_GELU", Activation::kQuickGelu},
                                            {"SWIGLU", Activation::kSilu},
                                            {"GEGLU", Activation::kGelu},
                                            {"GEGLU_TANH", Activation::kGeluTanh},
                                            {"REGLU", Activation::kRelu}};
  return table->at(name);
}

enum class Impl { kReference, kFast, kHighway, kOneDnn };

const char* Name(Impl impl) {
  switch (impl) {
    case Impl::kReference:
      return "Reference";
    case Impl::kFast:
      return "Fast";
    case Impl::kHighway:
      return "Highway";
    case Impl::kOneDnn:
      return "OneDnn";
  }
  return "?";
}

// Element-wise: x tiled to at least one oneDNN chunk, so that the oneDNN strategy
// computes (not its Highway tail); the first c.elements() outputs are returned.
std::vector<float> RunElementwise(Impl impl, ActivationContext& ctx,
                                  const ActivationGoldenCase& c) {
  const Activation act = KernelActivation(c.activation);
  const int64_t n = c.elements();
  std::vector<float> x;
  while (static_cast<int64_t>(x.size()) < kernels::baseline::kOneDnnChunk) {
    x.insert(x.end(), c.input.begin(), c.input.end());
  }
  const int64_t total = static_cast<int64_t>(x.size());
  std::vector<float> y(total);
  switch (impl) {
    case Impl::kReference:
      kernels::ActivateReference(act, x.data(), total, y.data());
      break;
    case Impl::kFast:
      kernels::Activate(act, x.data(), n, y.data());  // The case's own size.
      break;
    case Impl::kHighway:
      kernels::internal::ActivateHighway(act, x.data(), n, y.data(), false);
      break;
    case Impl::kOneDnn:
      kernels::baseline::ActivateOneDnn(ctx, act, x.data(), total, y.data());
      break;
  }
  y.resize(n);
  return y;
}

std::vector<float> RunGated(Impl impl, const ActivationGoldenCase& c) {
  const Activation act = KernelActivation(c.activation);
  const int64_t dim = c.expected_shape.back();
  const int64_t rows = static_cast<int64_t>(c.expected.size()) / dim;
  const bool packed = c.form == "packed";
  const float* gate = packed ? c.input.data() : c.gate.data();
  const float* up = packed ? c.input.data() + dim : c.input.data();
  const int64_t stride = packed ? 2 * dim : dim;
  std::vector<float> y(rows * dim);
  switch (impl) {
    case Impl::kReference:
      kernels::GatedActivateReference(act, gate, up, rows, dim, stride, y.data());
      break;
    case Impl::kFast:
    case Impl::kOneDnn:  // No oneDNN strategy for gated forms.
      kernels::GatedActivate(act, gate, up, rows, dim, stride, y.data());
      break;
    case Impl::kHighway:
      kernels::internal::GatedActivateHighway(act, gate, up, rows, dim, stride, y.data(),
                                              false);
      break;
  }
  return y;
}

std::vector<float> RunCase(Impl impl, ActivationContext& ctx,
                           const ActivationGoldenCase& c) {
  return c.form == "elementwise" ? RunElementwise(impl, ctx, c) : RunGated(impl, c);
}

class ActivationGoldenTest : public ::testing::TestWithParam<Impl> {
 protected:
  void SetUp() override { omp_set_num_threads(1); }  // As the server's workers.
};

TEST_P(ActivationGoldenTest, MatchesPyTorchAtFloat32Tolerance) {
  const Impl impl = GetParam();
  ASSERT_GE(Cases().size(), 30u);
  ActivationContext ctx;
  for (const ActivationGoldenCase& c : Cases()) {
    // oneDNN's ReLU maps NaN to 0 (PyTorch keeps NaN).
    if (impl == Impl::kOneDnn && c.activation == "RELU") continue;
    SCOPED_TRACE(c.name + " via " + Name(impl));
    ExpectWithin(RunCase(impl, ctx, c), c.expected, golden::kActivationFloat32Tolerance,
                 "y");
  }
}

INSTANTIATE_TEST_SUITE_P(Impls, ActivationGoldenTest,
                         ::testing::Values(Impl::kReference, Impl::kFast, Impl::kHighway,
                                           Impl::kOneDnn),
                         [](const ::testing::TestParamInfo<Impl>& info) {
                           return std::string(Name(info.param));
                         });

// Bitwise, so that NaN compares equal to NaN.
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(),
                    [](float x, float y) { return std::memcmp(&x, &y, sizeof x) == 0; });
}

TEST(ActivationGoldenBfloat16Test, InputsAreExactInBfloat16AndOutputsWithinTolerance) {
  ActivationContext ctx;
  for (const ActivationGoldenCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(SameBits(ThroughBfloat16(c.input), c.input));
    EXPECT_TRUE(SameBits(ThroughBfloat16(c.gate), c.gate));
    ExpectWithin(ThroughBfloat16(RunCase(Impl::kFast, ctx, c)), c.expected,
                 golden::kActivationBfloat16Tolerance, "bf16 y");
  }
}

TEST(ActivationGoldenLoaderTest, ReadsEveryFormAndNonFiniteValues) {
  bool saw_gated = false, saw_packed = false, saw_nan = false, saw_inf = false;
  for (const ActivationGoldenCase& c : Cases()) {
    saw_gated |= c.form == "gated" && !c.gate.empty();
    saw_packed |= c.form == "packed" && c.expected_shape.back() * 2 == c.shape.back();
    for (float v : c.expected) {
      saw_nan |= std::isnan(v);
      saw_inf |= std::isinf(v);
    }
  }
  EXPECT_TRUE(saw_gated && saw_packed && saw_nan && saw_inf);
  EXPECT_THROW(golden::LoadActivationGolden(LAYERSERVE_SOURCE_DIR "/no/such/file.json"),
               std::runtime_error);
}

}  // namespace
}  // namespace layerserve
