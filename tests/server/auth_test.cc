// TokenAuthenticator: how a token file is read and which authorization values a
// call may carry. The wire (metadata, health exemption on a real server, refusals
// before the service) is tested end to end in tests/integration/test_security.py.
#include "server/security/auth.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace layerserve {
namespace {

using ::layerserve::testing::StatusIs;
using ::testing::Eq;

constexpr absl::string_view kCall = "/layerserve.v1.LayerService/Normalize";

std::unique_ptr<TokenAuthenticator> Tokens(absl::string_view text) {
  absl::StatusOr<std::unique_ptr<TokenAuthenticator>> auth =
      TokenAuthenticator::FromText(text, "tokens.txt");
  EXPECT_TRUE(auth.ok()) << auth.status();
  return auth.ok() ? *std::move(auth) : nullptr;
}

TEST(TokenAuthenticatorTest, ReadsOneTokenPerLineSkippingCommentsAndBlanks) {
  auto auth = Tokens("# rotation: new first\n\n  alpha-1 \r\n#beta-0\nbeta-2");
  ASSERT_NE(auth, nullptr);
  EXPECT_TRUE(auth->Check(kCall, {"Bearer alpha-1"}).ok());
  EXPECT_TRUE(auth->Check(kCall, {"Bearer beta-2"}).ok());
  // Commented out, and the comment marker is not part of a token.
  EXPECT_THAT(auth->Check(kCall, {"Bearer beta-0"}),
              StatusIs(absl::StatusCode::kUnauthenticated, Eq("invalid bearer token")));
  EXPECT_THAT(auth->Check(kCall, {"Bearer #beta-0"}),
              StatusIs(absl::StatusCode::kUnauthenticated, Eq("invalid bearer token")));
}

TEST(TokenAuthenticatorTest, RefusesFilesWithoutUsableTokens) {
  EXPECT_THAT(TokenAuthenticator::FromText("", "t"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("--auth-token-file: t holds no token")));
  EXPECT_THAT(TokenAuthenticator::FromText("# only a comment\n \n", "t"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("--auth-token-file: t holds no token")));
  EXPECT_THAT(TokenAuthenticator::FromText("good\nbad token\n", "t"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("--auth-token-file: t:2: a token must be printable ASCII "
                          "without spaces")));
  EXPECT_THAT(TokenAuthenticator::FromText("caf\xc3\xa9\n", "t"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("--auth-token-file: t:1: a token must be printable ASCII "
                          "without spaces")));
  EXPECT_THAT(TokenAuthenticator::FromFile("/nonexistent/tokens"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq("--auth-token-file: cannot read /nonexistent/tokens")));
}

TEST(TokenAuthenticatorTest, AcceptsOnlyExactlyOneBearerValueWithAnAcceptedToken) {
  auto auth = Tokens("s3cret");
  ASSERT_NE(auth, nullptr);
  EXPECT_TRUE(auth->Check(kCall, {"Bearer s3cret"}).ok());
  EXPECT_TRUE(auth->Check(kCall, {"bearer s3cret"}).ok());  // Scheme: any case.
  const std::string kMissing =
      "missing credentials: this server requires \"authorization: Bearer <token>\" "
      "metadata";
  const std::string kScheme = "authorization metadata must be \"Bearer <token>\"";
  const std::vector<std::pair<std::vector<absl::string_view>, std::string>> refused = {
      {{}, kMissing},
      {{"Bearer s3cre"}, "invalid bearer token"},
      {{"Bearer s3crett"}, "invalid bearer token"},
      {{"Bearer S3CRET"}, "invalid bearer token"},
      {{"Bearer  s3cret"},
       "invalid bearer token"},  // The token is what follows "Bearer ".
      {{"s3cret"}, kScheme},
      {{"Bearer"}, kScheme},
      {{"Bearer "}, kScheme},
      {{"Basic s3cret"}, kScheme},
      {{"Bearer s3cret", "Bearer s3cret"},
       "more than one authorization metadata entry (2); send exactly one"},
  };
  for (const auto& [values, message] : refused) {
    EXPECT_THAT(auth->Check(kCall, values),
                StatusIs(absl::StatusCode::kUnauthenticated, Eq(message)))
        << ::testing::PrintToString(values);
  }
}

TEST(TokenAuthenticatorTest, OnlyTheHealthServiceIsExempt) {
  auto auth = Tokens("s3cret");
  ASSERT_NE(auth, nullptr);
  EXPECT_TRUE(auth->Check("/grpc.health.v1.Health/Check", {}).ok());
  EXPECT_TRUE(auth->Check("/grpc.health.v1.Health/Watch", {"Bearer wrong"}).ok());
  for (absl::string_view path :
       {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        "/layerserve.v1.LayerService/ListModels", "/grpc.health.v1.HealthX/Check",
        "/grpc.health.v2.Health/Check", "grpc.health.v1.Health/Check", ""}) {
    EXPECT_THAT(auth->Check(path, {}),
                StatusIs(absl::StatusCode::kUnauthenticated, ::testing::_))
        << path;
  }
}

}  // namespace
}  // namespace layerserve
