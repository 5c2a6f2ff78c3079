// The edge of the server: absl::Status to grpc::Status with the standard error
// details (google.rpc.BadRequest, google.rpc.RetryInfo), code and message unchanged.
#include "server/rpc/grpc_status.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/retry_delay.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

namespace layerserve {
namespace {

using ::testing::ElementsAre;

google::rpc::Status DetailsOf(const grpc::Status& status) {
  google::rpc::Status details;
  EXPECT_TRUE(details.ParseFromString(status.error_details()));
  return details;
}

TEST(FieldPathsOfMessage, NamesTheFieldsBeforeTheColon) {
  EXPECT_THAT(FieldPathsOfMessage("hidden_states.shape: rank 1"),
              ElementsAre("hidden_states.shape"));
  EXPECT_THAT(FieldPathsOfMessage("positions[3]: position -1 must be >= 0"),
              ElementsAre("positions[3]"));
  EXPECT_THAT(FieldPathsOfMessage("t5_bias.table.shape[0]: 3"),
              ElementsAre("t5_bias.table.shape[0]"));
  EXPECT_THAT(FieldPathsOfMessage("layer_start, num_layers: 3..5 past 4"),
              ElementsAre("layer_start", "num_layers"));
  EXPECT_THAT(FieldPathsOfMessage("input: required"), ElementsAre("input"));
}

TEST(FieldPathsOfMessage, AMessageNamingNoFieldNamesTheRequest) {
  EXPECT_THAT(FieldPathsOfMessage("something went wrong"), ElementsAre(""));
  EXPECT_THAT(FieldPathsOfMessage("bad thing: here"), ElementsAre(""));
  EXPECT_THAT(FieldPathsOfMessage("x[: y"), ElementsAre(""));
}

TEST(ToGrpcStatus, InvalidArgumentCarriesBadRequest) {
  const std::string message =
      "weight.shape: length 3 does not match input's last dimension 4";
  const grpc::Status status = ToGrpcStatus(absl::InvalidArgumentError(message));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), message);
  const google::rpc::Status details = DetailsOf(status);
  EXPECT_EQ(details.code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(details.message(), message);
  ASSERT_EQ(details.details_size(), 1);
  google::rpc::BadRequest bad_request;
  ASSERT_TRUE(details.details(0).UnpackTo(&bad_request));
  ASSERT_EQ(bad_request.field_violations_size(), 1);
  EXPECT_EQ(bad_request.field_violations(0).field(), "weight.shape");
  EXPECT_EQ(bad_request.field_violations(0).description(), message);
}

TEST(ToGrpcStatus, ARetryDelayBecomesRetryInfo) {
  const grpc::Status status = ToGrpcStatus(WithRetryDelay(
      absl::ResourceExhaustedError("server busy"), absl::Milliseconds(1500)));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(status.error_message(), "server busy");
  const google::rpc::Status details = DetailsOf(status);
  ASSERT_EQ(details.details_size(), 1);
  google::rpc::RetryInfo retry_info;
  ASSERT_TRUE(details.details(0).UnpackTo(&retry_info));
  EXPECT_EQ(retry_info.retry_delay().seconds(), 1);
  EXPECT_EQ(retry_info.retry_delay().nanos(), 500000000);
}

TEST(ToGrpcStatus, OtherErrorsCarryNoDetails) {
  const grpc::Status status = ToGrpcStatus(absl::NotFoundError("model \"x\": unknown"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_details(), "");
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace layerserve
