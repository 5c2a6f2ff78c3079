// The standard error details through layerserve::Client from the real server
// (tests/testing/server_child.h): FieldViolations of an INVALID_ARGUMENT, neither
// detail on other errors; code and message as before. FromGrpcStatus and
// RetryDelay on a hand-made google.rpc.Status.
#include "client/cpp/error_details.h"

#include <stdlib.h>

#include <string>
#include <vector>

#include "client/cpp/client.h"
#include "client/cpp/tensor_util.h"
#include "gmock/gmock.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/server_child.h"

namespace layerserve::client {
namespace {

using ::layerserve::testing::ServerChild;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

constexpr int kHidden = 512;  // The demo model's.

v1::Tensor Ones(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return TensorFromFloats(std::vector<float>(n, 1.0f), shape, v1::FLOAT32).value();
}

std::string TempDir() {
  std::string dir = ::testing::TempDir() + "/error_details_test.XXXXXX";
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  return dir;
}

std::unique_ptr<Client> ClientOn(const ServerChild& server) {
  ClientOptions options;
  options.target = server.target();
  options.timeout = absl::Seconds(60);
  return Client::Create(options).value();
}

TEST(ErrorDetailsTest, InvalidArgumentNamesTheFields) {
  ServerChild server(TempDir(), "demo", {});
  ASSERT_FALSE(server.target().empty());
  std::unique_ptr<Client> client = ClientOn(server);

  v1::NormalizeRequest normalize;
  normalize.set_kind(v1::RMS_NORM);
  *normalize.mutable_input() = Ones({2, 4});
  *normalize.mutable_weight() = Ones({3});
  absl::Status status = client->Normalize(normalize).status();
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("weight.shape: length 3 does not match"));
  std::vector<FieldViolation> violations = FieldViolations(status);
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_EQ(violations[0].field, "weight.shape");
  EXPECT_EQ(violations[0].description, status.message());
  EXPECT_EQ(RetryDelay(status), std::nullopt);

  v1::BlockForwardRequest forward;
  *forward.mutable_hidden_states() = Ones({2, kHidden});
  forward.add_positions(0);
  forward.add_positions(-1);
  status = client->BlockForward(forward).status();
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  violations = FieldViolations(status);
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_EQ(violations[0].field, "positions[1]");

  status = client->GetModel("nope").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(FieldViolations(status), IsEmpty());
  EXPECT_EQ(RetryDelay(status), std::nullopt);
}

TEST(ErrorDetailsTest, StepBiggerThanTheKvCacheHasNoRetryDelay) {
  ServerChild server(TempDir(), "small-cache", {"--max-kv-cache-bytes=4096"});
  ASSERT_FALSE(server.target().empty());
  std::unique_ptr<Client> client = ClientOn(server);
  const std::string session_id =
      client->OpenSession(v1::OpenSessionRequest()).value().session_id();
  v1::BlockForwardRequest forward;
  forward.set_session_id(session_id);
  *forward.mutable_hidden_states() = Ones({8, kHidden});
  const absl::Status status = client->BlockForward(forward).status();
  ASSERT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()), HasSubstr("KV cache full"));
  // No wait makes it fit: no RetryInfo (the server sends one when busy sessions
  // hold the room; the decoding is tested below).
  EXPECT_EQ(RetryDelay(status), std::nullopt);
  EXPECT_THAT(FieldViolations(status), IsEmpty());
}

TEST(FromGrpcStatusTest, KeepsEachDetailForTheAccessors) {
  google::rpc::Status details;
  google::rpc::RetryInfo retry_info;
  retry_info.mutable_retry_delay()->set_seconds(2);
  retry_info.mutable_retry_delay()->set_nanos(250000000);
  details.add_details()->PackFrom(retry_info);
  google::rpc::BadRequest bad_request;
  auto* violation = bad_request.add_field_violations();
  violation->set_field("a.b");
  violation->set_description("a.b: no");
  details.add_details()->PackFrom(bad_request);
  const absl::Status status = FromGrpcStatus(grpc::Status(
      grpc::StatusCode::INVALID_ARGUMENT, "a.b: no", details.SerializeAsString()));
  EXPECT_EQ(status.message(), "a.b: no");
  EXPECT_EQ(RetryDelay(status), absl::Milliseconds(2250));
  const std::vector<FieldViolation> violations = FieldViolations(status);
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_EQ(violations[0].field, "a.b");
  // Details that do not parse are ignored, not an error.
  EXPECT_THAT(FieldViolations(FromGrpcStatus(
                  grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "x", "\xff garbage"))),
              IsEmpty());
}

}  // namespace
}  // namespace layerserve::client
