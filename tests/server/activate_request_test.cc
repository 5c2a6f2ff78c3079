// Validation rules of Activate requests (exact code and message, field named) and
// the request -> kernel -> response path for the element-wise, two-tensor gated
// and packed gated forms.
#include <cmath>
#include <cstring>

#include "common/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/ops/activate.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wire_tensors.h"

namespace layerserve {
namespace {

using ::layerserve::testing::MakeTensor;
using ::layerserve::testing::TensorValues;

using ::layerserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;

// A valid SiLU request on a [2, 4] input.
v1::ActivateRequest ValidRequest() {
  v1::ActivateRequest request;
  request.set_activation(v1::SILU);
  *request.mutable_input() = MakeTensor({2, 4}, {1, 2, 3, 4, -1, 0, 1, 2});
  return request;
}

// A valid SwiGLU request with a [2, 4] gate and up.
v1::ActivateRequest ValidGatedRequest() {
  v1::ActivateRequest request;
  request.set_activation(v1::SWIGLU);
  *request.mutable_input() = MakeTensor({2, 4}, {1, 2, 3, 4, -1, 0, 1, 2});
  *request.mutable_gate() = MakeTensor({2, 4}, {0, 1, -1, 2, 3, -2, 0.5, 4});
  return request;
}

v1::ActivateResponse ParseAndRun(const v1::ActivateRequest& request) {
  absl::StatusOr<ActivateJob> job = ParseActivateRequest(request);
  EXPECT_TRUE(job.ok()) << job.status();
  v1::ActivateResponse response;
  if (job.ok()) RunActivate(*job, &response);
  return response;
}

double Silu(double x) { return x / (1 + std::exp(-x)); }

TEST(ActivateRequestTest, ValidRequestsParse) {
  const v1::ActivateRequest request = ValidRequest();  // Outlives the job.
  absl::StatusOr<ActivateJob> job = ParseActivateRequest(request);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->form, ActivateJob::Form::kElementwise);
  EXPECT_EQ(job->activation, kernels::Activation::kSilu);
  EXPECT_EQ(job->output_type, ElementType::kFloat32);
  EXPECT_THAT(job->output_shape, ElementsAre(2, 4));

  const v1::ActivateRequest gated = ValidGatedRequest();
  job = ParseActivateRequest(gated);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->form, ActivateJob::Form::kGatedTwoTensors);
  EXPECT_THAT(job->output_shape, ElementsAre(2, 4));

  v1::ActivateRequest packed = ValidGatedRequest();
  packed.clear_gate();
  packed.set_activation(v1::GEGLU_TANH);
  job = ParseActivateRequest(packed);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->form, ActivateJob::Form::kGatedPacked);
  EXPECT_EQ(job->activation, kernels::Activation::kGeluTanh);
  EXPECT_THAT(job->output_shape, ElementsAre(2, 2));
}

TEST(ActivateRequestTest, EveryActivationMapsToItsKernel) {
  const std::pair<v1::Activation, kernels::Activation> table[] = {
      {v1::RELU, kernels::Activation::kRelu},
      {v1::GELU, kernels::Activation::kGelu},
      {v1::GELU_TANH, kernels::Activation::kGeluTanh},
      {v1::SILU, kernels::Activation::kSilu},
      {v1::SIGMOID, kernels::Activation::kSigmoid},
      {v1::TANH, kernels::Activation::kTanh},
      {v1::QUICK_GELU, kernels::Activation::kQuickGelu},
      {v1::SWIGLU, kernels::Activation::kSilu},
      {v1::GEGLU, kernels::Activation::kGelu},
      {v1::GEGLU_TANH, kernels::Activation::kGeluTanh},
      {v1::REGLU, kernels::Activation::kRelu},
  };
  for (const auto& [wire, kernel] : table) {
    v1::ActivateRequest request = ValidRequest();
    request.set_activation(wire);
    absl::StatusOr<ActivateJob> job = ParseActivateRequest(request);
    ASSERT_TRUE(job.ok()) << v1::Activation_Name(wire) << ": " << job.status();
    EXPECT_EQ(job->activation, kernel) << v1::Activation_Name(wire);
    EXPECT_EQ(job->form == ActivateJob::Form::kElementwise, wire < v1::SWIGLU)
        << v1::Activation_Name(wire);
  }
}

TEST(ActivateRequestTest, RejectsUnspecifiedAndUnknownActivation) {
  v1::ActivateRequest request = ValidRequest();
  request.set_activation(v1::ACTIVATION_UNSPECIFIED);
  EXPECT_THAT(ParseActivateRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "activation: ACTIVATION_UNSPECIFIED; set RELU, GELU, GELU_TANH, "
                       "SILU, SIGMOID, TANH, QUICK_GELU, SWIGLU, GEGLU, GEGLU_TANH or "
                       "REGLU"));
  request.set_activation(static_cast<v1::Activation>(42));
  EXPECT_THAT(
      ParseActivateRequest(request),
      StatusIs(absl::StatusCode::kInvalidArgument, "activation: unknown Activation 42"));
}

TEST(ActivateRequestTest, RejectsMissingInput) {
  v1::ActivateRequest request = ValidRequest();
  request.clear_input();
  EXPECT_THAT(ParseActivateRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument, "input: required"));
  v1::ActivateRequest gated = ValidGatedRequest();
  gated.clear_input();
  EXPECT_THAT(ParseActivateRequest(gated),
              StatusIs(absl::StatusCode::kInvalidArgument, "input: required"));
}

TEST(ActivateRequestTest, RejectsGateWithElementwiseActivation) {
  v1::ActivateRequest request = ValidGatedRequest();
  request.set_activation(v1::GELU);
  EXPECT_THAT(ParseActivateRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "gate: GELU is element-wise and takes no gate; only SWIGLU, "
                       "GEGLU, GEGLU_TANH and REGLU do"));
}

TEST(ActivateRequestTest, RejectsGateOfOtherShape) {
  v1::ActivateRequest request = ValidGatedRequest();
  *request.mutable_gate() = MakeTensor({2, 3}, {0, 0, 0, 0, 0, 0});
  EXPECT_THAT(ParseActivateRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "gate.shape: [2,3] must equal input.shape [2,4]"));
  // Same element count, other shape: still rejected.
  *request.mutable_gate() = MakeTensor({4, 2}, {0, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_THAT(ParseActivateRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "gate.shape: [4,2] must equal input.shape [2,4]"));
}

TEST(ActivateRequestTest, RejectsPackedInputWithOddLastDim) {
  v1::ActivateRequest request;
  request.set_activation(v1::REGLU);
  *request.mutable_input() = MakeTensor({1, 7}, {1, 2, 3, 4, 5, 6, 7});
  EXPECT_THAT(ParseActivateRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "input.shape: packed gate+up needs an even last dim, got 7"));
  // Odd is fine for element-wise activations and for two-tensor gated ones.
  request.set_activation(v1::RELU);
  EXPECT_TRUE(ParseActivateRequest(request).ok());
  request.set_activation(v1::REGLU);
  *request.mutable_gate() = request.input();
  EXPECT_TRUE(ParseActivateRequest(request).ok());
}

TEST(ActivateRequestTest, RejectsBadInputTensor) {
  v1::ActivateRequest request = ValidRequest();
  request.mutable_input()->mutable_data()->resize(28);
  EXPECT_THAT(ParseActivateRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "input.data: shape [2,4] FLOAT32 needs 32 bytes, got 28"));
  request = ValidRequest();
  request.mutable_input()->set_dtype(v1::DATA_TYPE_UNSPECIFIED);
  EXPECT_THAT(ParseActivateRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("input.dtype: dtype is DATA_TYPE_UNSPECIFIED")));
  request = ValidRequest();
  request.mutable_input()->set_dtype(static_cast<v1::DataType>(9));
  EXPECT_THAT(ParseActivateRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("input.dtype: unknown dtype 9")));
  request = ValidRequest();
  *request.mutable_input() = MakeTensor({}, {1});
  EXPECT_THAT(ParseActivateRequest(request), StatusIs(absl::StatusCode::kInvalidArgument,
                                                      HasSubstr("input.shape: rank 0")));
  request = ValidRequest();
  *request.mutable_input() = MakeTensor({2, 0}, {});
  EXPECT_THAT(ParseActivateRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "input.shape[1]: dimension 0 in shape [2,0] must be >= 1"));
}

TEST(ActivateRequestTest, RejectsBadGateTensor) {
  v1::ActivateRequest request = ValidGatedRequest();
  request.mutable_gate()->mutable_data()->resize(30);
  EXPECT_THAT(ParseActivateRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "gate.data: shape [2,4] FLOAT32 needs 32 bytes, got 30"));
  request = ValidGatedRequest();
  request.mutable_gate()->set_dtype(v1::DATA_TYPE_UNSPECIFIED);
  EXPECT_THAT(ParseActivateRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("gate.dtype: dtype is DATA_TYPE_UNSPECIFIED")));
}

TEST(ActivateRequestTest, RejectsUnknownOutputDtype) {
  v1::ActivateRequest request = ValidRequest();
  request.set_output_dtype(static_cast<v1::DataType>(5));
  EXPECT_THAT(ParseActivateRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("output_dtype: unknown dtype 5")));
}

// The whole path on cases small enough to check by hand.
TEST(ActivateRequestTest, RunsElementwise) {
  const v1::ActivateResponse response = ParseAndRun(ValidRequest());
  EXPECT_EQ(response.output().dtype(), v1::FLOAT32);
  EXPECT_THAT(response.output().shape(), ElementsAre(2, 4));
  const std::vector<float> y = TensorValues(response.output());
  const float x[] = {1, 2, 3, 4, -1, 0, 1, 2};
  ASSERT_EQ(y.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[i], Silu(x[i]), 1e-6) << i;
}

TEST(ActivateRequestTest, RunsGatedFromTwoTensors) {
  const v1::ActivateResponse response = ParseAndRun(ValidGatedRequest());
  EXPECT_THAT(response.output().shape(), ElementsAre(2, 4));
  const std::vector<float> y = TensorValues(response.output());
  const float up[] = {1, 2, 3, 4, -1, 0, 1, 2};
  const float gate[] = {0, 1, -1, 2, 3, -2, 0.5, 4};
  ASSERT_EQ(y.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[i], Silu(gate[i]) * up[i], 1e-5) << i;
}

TEST(ActivateRequestTest, RunsGatedPackedGateFirst) {
  v1::ActivateRequest request;
  request.set_activation(v1::REGLU);
  // Rows [gate | up]: relu([-1, 2]) * [10, 20] and relu([3, -4]) * [30, 40].
  *request.mutable_input() = MakeTensor({2, 1, 4}, {-1, 2, 10, 20, 3, -4, 30, 40});
  const v1::ActivateResponse response = ParseAndRun(request);
  EXPECT_THAT(response.output().shape(), ElementsAre(2, 1, 2));
  EXPECT_THAT(TensorValues(response.output()), ElementsAre(0, 40, 90, 0));
}

TEST(ActivateRequestTest, OutputDtypeAndSaturation) {
  v1::ActivateRequest request;
  request.set_activation(v1::RELU);
  *request.mutable_input() = MakeTensor({3}, {1.5f, 1e5f, -2});
  request.set_output_dtype(v1::FLOAT16);
  absl::StatusOr<ActivateJob> job = ParseActivateRequest(request);
  ASSERT_TRUE(job.ok()) << job.status();
  v1::ActivateResponse response;
  // 1e5 is beyond float16's 65504: +inf, counted.
  EXPECT_EQ(RunActivate(*job, &response).saturated, 1);
  EXPECT_EQ(response.output().dtype(), v1::FLOAT16);
  ASSERT_EQ(response.output().data().size(), 6u);
  std::vector<float> y(3);
  ConvertToFloat32(ElementType::kFloat16, response.output().data().data(), 3, y.data());
  EXPECT_THAT(y, ElementsAre(1.5f, INFINITY, 0.0f));

  // BFLOAT16 input: the output is BFLOAT16 too unless output_dtype says otherwise.
  v1::ActivateRequest bf16;
  bf16.set_activation(v1::TANH);
  bf16.mutable_input()->add_shape(2);
  bf16.mutable_input()->set_dtype(v1::BFLOAT16);
  const uint16_t bits[] = {Float32ToBfloat16(0.5f), Float32ToBfloat16(-1.0f)};
  bf16.mutable_input()->set_data(std::string(reinterpret_cast<const char*>(bits), 4));
  response = ParseAndRun(bf16);
  EXPECT_EQ(response.output().dtype(), v1::BFLOAT16);
  ConvertToFloat32(ElementType::kBfloat16, response.output().data().data(), 2, y.data());
  EXPECT_THAT(
      std::vector<float>(y.begin(), y.begin() + 2),
      ElementsAre(FloatNear(std::tanh(0.5f), 2e-3f), FloatNear(std::tanh(-1.0f), 4e-3f)));
}

}  // namespace
}  // namespace layerserve
