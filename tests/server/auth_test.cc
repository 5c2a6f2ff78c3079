// TokenAuthenticator: how a token file is read (and read again when it changes) and
// which authorization values a call may carry. The wire (metadata, health exemption on a
// real server, refusals before the service) is tested end to end in
// tests/integration/test_security.py.
#include "server/security/auth.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

TEST(TokenAuthenticatorTest, OnlyTheHealthChecksAreExempt) {
  auto auth = Tokens("s3cret");
  ASSERT_NE(auth, nullptr);
  EXPECT_TRUE(auth->Check("/grpc.health.v1.Health/Check", {}).ok());
  EXPECT_TRUE(auth->Check("/grpc.health.v1.Health/Watch", {"Bearer wrong"}).ok());
  for (absl::string_view rpc : {"ServerLive", "ServerReady", "ModelReady"}) {
    EXPECT_TRUE(
        auth->Check(absl::StrCat("/inference.GRPCInferenceService/", rpc), {}).ok())
        << rpc;
  }
  for (absl::string_view path :
       {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        "/layerserve.v1.LayerService/ListModels", "/grpc.health.v1.HealthX/Check",
        "/grpc.health.v2.Health/Check", "grpc.health.v1.Health/Check",
        "/inference.GRPCInferenceService/ModelInfer",
        "/inference.GRPCInferenceService/ModelMetadata",
        "/inference.GRPCInferenceService/ServerLiveX",
        "/inference.GRPCInferenceService/ServerLive/", ""}) {
    EXPECT_THAT(auth->Check(path, {}),
                StatusIs(absl::StatusCode::kUnauthenticated, ::testing::_))
        << path;
  }
}

// A token file in the test's temporary directory, replaced as operators rotate it
// (written beside, renamed over).
class TokenFile {
 public:
  explicit TokenFile(const std::string& name)
      : path_(std::string(::testing::TempDir()) + "/" + name) {}
  ~TokenFile() { std::remove(path_.c_str()); }
  void Write(absl::string_view text) const {
    const std::string next = path_ + ".new";
    std::ofstream(next, std::ios::binary) << text;
    ASSERT_EQ(std::rename(next.c_str(), path_.c_str()), 0);
  }
  const std::string& path() const { return path_; }

 private:
  const std::string path_;
};

TEST(TokenAuthenticatorTest, ReadsTheFileAgainWhenItChanges) {
  TokenFile file("rotating-tokens");
  file.Write("old-token\n");
  absl::StatusOr<std::unique_ptr<TokenAuthenticator>> auth =
      TokenAuthenticator::FromFile(file.path(), absl::ZeroDuration());
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE((*auth)->Check(kCall, {"Bearer old-token"}).ok());
  EXPECT_FALSE((*auth)->Check(kCall, {"Bearer new-token"}).ok());
  // Rotation: both, then only the new one.
  file.Write("old-token\nnew-token\n");
  EXPECT_TRUE((*auth)->Check(kCall, {"Bearer new-token"}).ok());
  EXPECT_TRUE((*auth)->Check(kCall, {"Bearer old-token"}).ok());
  file.Write("new-token\n");
  EXPECT_THAT((*auth)->Check(kCall, {"Bearer old-token"}),
              StatusIs(absl::StatusCode::kUnauthenticated, Eq("invalid bearer token")));
  EXPECT_TRUE((*auth)->Check(kCall, {"Bearer new-token"}).ok());
}

TEST(TokenAuthenticatorTest, KeepsTheTokensItHasWhenTheChangedFileCannotBeUsed) {
  TokenFile file("broken-tokens");
  file.Write("kept-token\n");
  absl::StatusOr<std::unique_ptr<TokenAuthenticator>> auth =
      TokenAuthenticator::FromFile(file.path(), absl::ZeroDuration());
  ASSERT_TRUE(auth.ok()) << auth.status();
  for (absl::string_view broken : {"", "# emptied\n", "two tokens\n"}) {
    file.Write(broken);
    EXPECT_TRUE((*auth)->Check(kCall, {"Bearer kept-token"}).ok()) << broken;
  }
  std::remove(file.path().c_str());
  EXPECT_TRUE((*auth)->Check(kCall, {"Bearer kept-token"}).ok());
  // A usable file again is taken.
  file.Write("next-token\n");
  EXPECT_TRUE((*auth)->Check(kCall, {"Bearer next-token"}).ok());
  EXPECT_FALSE((*auth)->Check(kCall, {"Bearer kept-token"}).ok());
}

TEST(TokenAuthenticatorTest, LooksAtTheFileAtMostOncePerRecheck) {
  TokenFile file("slow-tokens");
  file.Write("first-token\n");
  absl::StatusOr<std::unique_ptr<TokenAuthenticator>> auth =
      TokenAuthenticator::FromFile(file.path(), absl::Hours(1));
  ASSERT_TRUE(auth.ok()) << auth.status();
  file.Write("second-token\n");
  EXPECT_TRUE((*auth)->Check(kCall, {"Bearer first-token"}).ok());
  EXPECT_FALSE((*auth)->Check(kCall, {"Bearer second-token"}).ok());
}

}  // namespace
}  // namespace layerserve
