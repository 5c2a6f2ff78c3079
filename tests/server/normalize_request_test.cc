// Validation rules of Normalize requests (exact code, field named) and the
// request -> kernel -> response path for both norms.
#include <cmath>
#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/ops/normalize.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wire_tensors.h"

namespace layerserve {
namespace {

using ::layerserve::testing::MakeTensor;
using ::layerserve::testing::TensorValues;

using ::layerserve::testing::StatusIs;
using ::testing::HasSubstr;

// A valid LayerNorm request on a [2, 4] input.
v1::NormalizeRequest ValidRequest() {
  v1::NormalizeRequest request;
  request.set_kind(v1::LAYER_NORM);
  *request.mutable_input() = MakeTensor({2, 4}, {1, 2, 3, 4, -1, 0, 1, 2});
  return request;
}

TEST(NormalizeRequestTest, ValidRequestParsesWithDefaults) {
  const v1::NormalizeRequest request = ValidRequest();  // Outlives the job.
  absl::StatusOr<NormalizeJob> job = ParseNormalizeRequest(request);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->epsilon, 1e-5f);
  EXPECT_EQ(job->output_type, ElementType::kFloat32);

  v1::NormalizeRequest rms = ValidRequest();
  rms.set_kind(v1::RMS_NORM);
  EXPECT_EQ(ParseNormalizeRequest(rms)->epsilon, 1e-6f);
}

TEST(NormalizeRequestTest, RejectsUnspecifiedAndUnknownKind) {
  v1::NormalizeRequest request = ValidRequest();
  request.set_kind(v1::NORM_KIND_UNSPECIFIED);
  EXPECT_THAT(ParseNormalizeRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "kind: NORM_KIND_UNSPECIFIED; set LAYER_NORM or RMS_NORM"));
  request.set_kind(static_cast<v1::NormKind>(42));
  EXPECT_THAT(ParseNormalizeRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument, "kind: unknown NormKind 42"));
}

TEST(NormalizeRequestTest, RejectsMissingInput) {
  v1::NormalizeRequest request = ValidRequest();
  request.clear_input();
  EXPECT_THAT(ParseNormalizeRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument, "input: required"));
}

TEST(NormalizeRequestTest, RejectsScalarInput) {
  v1::NormalizeRequest request = ValidRequest();
  *request.mutable_input() = MakeTensor({}, {1});
  EXPECT_THAT(ParseNormalizeRequest(request), StatusIs(absl::StatusCode::kInvalidArgument,
                                                       HasSubstr("input.shape: rank 0")));
}

TEST(NormalizeRequestTest, RejectsInputByteCountMismatch) {
  v1::NormalizeRequest request = ValidRequest();
  request.mutable_input()->mutable_data()->resize(28);
  EXPECT_THAT(ParseNormalizeRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "input.data: shape [2,4] FLOAT32 needs 32 bytes, got 28"));
}

TEST(NormalizeRequestTest, RejectsWeightLengthNotEqualLastDim) {
  v1::NormalizeRequest request = ValidRequest();
  *request.mutable_weight() = MakeTensor({5}, {1, 1, 1, 1, 1});
  EXPECT_THAT(ParseNormalizeRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "weight.shape: length 5 does not match input's last dimension 4"));
}

TEST(NormalizeRequestTest, RejectsWeightOfRankTwo) {
  v1::NormalizeRequest request = ValidRequest();
  *request.mutable_weight() = MakeTensor({1, 4}, {1, 1, 1, 1});
  EXPECT_THAT(
      ParseNormalizeRequest(request),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("weight.shape: rank 2")));
}

TEST(NormalizeRequestTest, RejectsBiasLengthNotEqualLastDim) {
  v1::NormalizeRequest request = ValidRequest();
  *request.mutable_bias() = MakeTensor({3}, {0, 0, 0});
  EXPECT_THAT(ParseNormalizeRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "bias.shape: length 3 does not match input's last dimension 4"));
}

TEST(NormalizeRequestTest, RejectsBiasWithRmsNorm) {
  v1::NormalizeRequest request = ValidRequest();
  request.set_kind(v1::RMS_NORM);
  *request.mutable_bias() = MakeTensor({4}, {0, 0, 0, 0});
  EXPECT_THAT(ParseNormalizeRequest(request), StatusIs(absl::StatusCode::kInvalidArgument,
                                                       "bias: RMS_NORM takes no bias"));
}

TEST(NormalizeRequestTest, RejectsBadWeightDtype) {
  v1::NormalizeRequest request = ValidRequest();
  *request.mutable_weight() = MakeTensor({4}, {1, 1, 1, 1});
  request.mutable_weight()->set_dtype(v1::DATA_TYPE_UNSPECIFIED);
  EXPECT_THAT(ParseNormalizeRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("weight.dtype: dtype is DATA_TYPE_UNSPECIFIED")));
}

TEST(NormalizeRequestTest, RejectsWeightOffsetWithoutWeight) {
  v1::NormalizeRequest request = ValidRequest();
  request.set_weight_offset(true);
  EXPECT_THAT(ParseNormalizeRequest(request), StatusIs(absl::StatusCode::kInvalidArgument,
                                                       "weight_offset: requires weight"));
}

TEST(NormalizeRequestTest, RejectsNegativeOrNonFiniteEpsilon) {
  for (float eps : {-1e-5f, std::nanf(""), INFINITY}) {
    v1::NormalizeRequest request = ValidRequest();
    request.set_epsilon(eps);
    EXPECT_THAT(ParseNormalizeRequest(request),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("must be finite and >= 0")))
        << eps;
  }
  v1::NormalizeRequest zero = ValidRequest();
  zero.set_epsilon(0);
  EXPECT_EQ(ParseNormalizeRequest(zero)->epsilon, 0.0f);
}

TEST(NormalizeRequestTest, RejectsResidualOfOtherShape) {
  v1::NormalizeRequest request = ValidRequest();
  *request.mutable_residual() = MakeTensor({4, 2}, {0, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_THAT(ParseNormalizeRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "residual.shape: [4,2] must equal input.shape [2,4]"));
}

TEST(NormalizeRequestTest, RejectsUnknownOutputDtype) {
  v1::NormalizeRequest request = ValidRequest();
  request.set_output_dtype(static_cast<v1::DataType>(5));
  EXPECT_THAT(ParseNormalizeRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("output_dtype: unknown dtype 5")));
}

// The whole path on a case small enough to check by hand.
TEST(NormalizeRequestTest, RunsLayerNormWithResidualAndOutputDtype) {
  v1::NormalizeRequest request;
  request.set_kind(v1::LAYER_NORM);
  *request.mutable_input() = MakeTensor({1, 4}, {0, 1, 2, 3});
  *request.mutable_residual() = MakeTensor({1, 4}, {1, 1, 1, 1});
  *request.mutable_weight() = MakeTensor({4}, {2, 2, 2, 2});
  *request.mutable_bias() = MakeTensor({4}, {1, 1, 1, 1});
  request.set_epsilon(0);
  absl::StatusOr<NormalizeJob> job = ParseNormalizeRequest(request);
  ASSERT_TRUE(job.ok()) << job.status();
  v1::NormalizeResponse response;
  EXPECT_EQ(RunNormalize(*job, &response).saturated, 0);

  // sum = [1,2,3,4]: mean 2.5, var 1.25.
  const float inv = 1.0f / std::sqrt(1.25f);
  const std::vector<float> y = TensorValues(response.output());
  ASSERT_EQ(y.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(y[i], (i + 1 - 2.5f) * inv * 2 + 1, 1e-5f) << i;
  }
  EXPECT_THAT(TensorValues(response.residual_out()),
              ::testing::ElementsAre(1.0f, 2.0f, 3.0f, 4.0f));
  EXPECT_THAT(response.output().shape(), ::testing::ElementsAre(1, 4));

  request.set_output_dtype(v1::BFLOAT16);
  job = ParseNormalizeRequest(request);
  ASSERT_TRUE(job.ok());
  RunNormalize(*job, &response);
  EXPECT_EQ(response.output().dtype(), v1::BFLOAT16);
  EXPECT_EQ(response.output().data().size(), 8u);
}

TEST(NormalizeRequestTest, RunsGemmaRmsNorm) {
  v1::NormalizeRequest request;
  request.set_kind(v1::RMS_NORM);
  *request.mutable_input() = MakeTensor({2}, {3, 4});
  *request.mutable_weight() = MakeTensor({2}, {0, 1});
  request.set_weight_offset(true);
  request.set_epsilon(0);
  absl::StatusOr<NormalizeJob> job = ParseNormalizeRequest(request);
  ASSERT_TRUE(job.ok()) << job.status();
  v1::NormalizeResponse response;
  RunNormalize(*job, &response);
  // rms = sqrt((9 + 16) / 2); scale = (1 + w) = [1, 2].
  const float rms = std::sqrt(12.5f);
  EXPECT_THAT(TensorValues(response.output()),
              ::testing::ElementsAre(::testing::FloatNear(3 / rms, 1e-6f),
                                     ::testing::FloatNear(8 / rms, 1e-6f)));
  EXPECT_FALSE(response.has_residual_out());
}

}  // namespace
}  // namespace layerserve
