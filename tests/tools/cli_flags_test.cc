// Flag parsing of layerserve-cli and layerserve-bench, and the CLI's flag-to-option
// helpers.
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tools/cli/common.h"
#include "tools/cli/flags.h"
#include "tools/cli/security_flags.h"

namespace layerserve::client {
namespace {

using ::layerserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;

constexpr FlagSpec kSpecs[] = {{"input", true}, {"json", false}, {"eps", true}};

absl::StatusOr<FlagValues> Parse(std::vector<std::string> args, size_t* pos = nullptr) {
  size_t p = 0;
  absl::StatusOr<FlagValues> flags = ParseFlags(args, pos ? pos : &p, kSpecs);
  return flags;
}

TEST(ParseFlagsTest, TakesBothValueFormsAndBareBooleans) {
  size_t pos = 0;
  absl::StatusOr<FlagValues> flags =
      Parse({"--input", "x.npy", "--json", "--eps=1e-6", "rest"}, &pos);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_THAT(*flags, ElementsAre(Pair("eps", "1e-6"), Pair("input", "x.npy"),
                                  Pair("json", "true")));
  EXPECT_EQ(pos, 4u);  // Stops at the first non-flag.
}

TEST(ParseFlagsTest, RejectsUnknownRepeatedAndMalformedFlags) {
  EXPECT_THAT(Parse({"--nope"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown flag --nope"));
  EXPECT_THAT(Parse({"--json", "--json"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "--json is given twice"));
  EXPECT_THAT(Parse({"--json=yes"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "--json takes no value"));
  EXPECT_THAT(Parse({"--input"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "--input needs a value"));
}

TEST(TypedFlagsTest, ParseOrNameTheBadValue) {
  FlagValues flags = {
      {"n", "12"}, {"x", "2.5"}, {"b", "false"}, {"d", "1m30s"}, {"bad", "twelve"}};
  EXPECT_EQ(*Int64Flag(flags, "n", 0), 12);
  EXPECT_EQ(*Int64Flag(flags, "absent", 7), 7);
  EXPECT_DOUBLE_EQ(*DoubleFlag(flags, "x", 0), 2.5);
  EXPECT_FALSE(*BoolFlag(flags, "b", true));
  EXPECT_EQ(*DurationFlag(flags, "d", absl::ZeroDuration()), absl::Seconds(90));
  EXPECT_THAT(Int64Flag(flags, "bad", 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--bad must be an integer, not 'twelve'"));
  EXPECT_THAT(DoubleFlag(flags, "bad", 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("number")));
  EXPECT_THAT(BoolFlag(flags, "bad", false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("true or false")));
  EXPECT_THAT(DurationFlag(flags, "bad", absl::ZeroDuration()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("10s or 500ms")));
}

TEST(ListFlagsTest, ParseCommaLists) {
  EXPECT_THAT(*ParseInt64List("shape", "8, 768"), ElementsAre(8, 768));
  EXPECT_THAT(*ParseDoubleList("rate", "100,2.5e3"), ElementsAre(100, 2500));
  EXPECT_THAT(ParseInt64List("shape", "8,,768"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--shape must be a comma list of integers, not '8,,768'"));
  EXPECT_THAT(ParseInt64List("shape", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST(EnumFlagTest, AcceptsFlagSpellingsOfProtoNames) {
  EXPECT_EQ(*EnumFlag<v1::Activation>("activation", "gelu-tanh"), v1::GELU_TANH);
  EXPECT_EQ(*EnumFlag<v1::Activation>("activation", "QUICK_GELU"), v1::QUICK_GELU);
  EXPECT_EQ(*EnumFlag<v1::RopeScaling::Type>("scaling", "dynamic-ntk"),
            v1::RopeScaling::DYNAMIC_NTK);
  EXPECT_EQ(*EnumFlag<v1::RopeScaling::Type>("scaling", "none", /*allow_zero=*/true),
            v1::RopeScaling::NONE);
  EXPECT_THAT(
      EnumFlag<v1::Activation>("activation", "activation-unspecified"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "--activation must be one of relu, gelu, gelu-tanh, silu, sigmoid, tanh, "
               "quick-gelu, swiglu, geglu, geglu-tanh, reglu, not "
               "'activation-unspecified'"));
  EXPECT_EQ(FlagNameOfEnum("GEGLU_TANH"), "geglu-tanh");
}

TEST(ClientOptionsFromFlagsTest, MapsGlobalFlags) {
  absl::StatusOr<ClientOptions> options = ClientOptionsFromFlags(
      {{"target", "10.0.0.1:1,10.0.0.2:2"}, {"timeout-ms", "1500"}, {"retries", "0"}});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->target, "10.0.0.1:1,10.0.0.2:2");
  EXPECT_EQ(options->timeout, absl::Milliseconds(1500));
  EXPECT_EQ(options->retry.max_attempts, 1);
  EXPECT_EQ(options->credentials, nullptr);

  absl::StatusOr<ClientOptions> defaults = ClientOptionsFromFlags({});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->target, "127.0.0.1:50051");
  EXPECT_EQ(defaults->timeout, absl::Seconds(30));
  EXPECT_EQ(defaults->retry.max_attempts, 4);

  EXPECT_THAT(ClientOptionsFromFlags({{"timeout-ms", "0"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--timeout-ms")));
  EXPECT_THAT(ClientOptionsFromFlags({{"retries", "-1"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--retries")));
  EXPECT_THAT(ClientOptionsFromFlags({{"tls-ca", "/nonexistent/ca.pem"}}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/ca.pem")));
  absl::StatusOr<ClientOptions> tls = ClientOptionsFromFlags({{"tls", "true"}});
  ASSERT_TRUE(tls.ok());
  EXPECT_NE(tls->credentials, nullptr);
}

TEST(SecurityFlagsTest, TokenFromTheFlagElseTheEnvironment) {
  const std::string dir = ::testing::TempDir();
  const std::string file = dir + "/cli-token";
  std::ofstream(file) << "from-the-file\n";
  ClientOptions options;
  ASSERT_TRUE(ApplySecurityFlags({{"token-file", file}}, "from-the-env", &options).ok());
  EXPECT_EQ(options.token, "from-the-file");  // The flag wins over the variable.
  EXPECT_EQ(options.credentials, nullptr);

  ClientOptions env;
  ASSERT_TRUE(ApplySecurityFlags({}, "  from-the-env\n", &env).ok());
  EXPECT_EQ(env.token, "from-the-env");
  ClientOptions unset, empty;
  ASSERT_TRUE(ApplySecurityFlags({}, nullptr, &unset).ok());
  ASSERT_TRUE(ApplySecurityFlags({}, "", &empty).ok());
  EXPECT_EQ(unset.token, "");
  EXPECT_EQ(empty.token, "");

  // The errors name the flag or the variable, never the token.
  absl::Status spaced = ApplySecurityFlags({}, "two words", &env);
  EXPECT_THAT(spaced, StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("LAYERSERVE_TOKEN")));
  EXPECT_THAT(spaced.ToString(), Not(HasSubstr("two words")));
  EXPECT_THAT(ApplySecurityFlags({{"token-file", dir + "/none"}}, nullptr, &env),
              StatusIs(absl::StatusCode::kNotFound,
                       "--token-file: cannot read " + dir + "/none"));
}

TEST(SecurityFlagsTest, TlsFlags) {
  EXPECT_THAT(CheckSecurityFlags({{"tls-cert", "c.pem"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--tls-cert needs --tls-key")));
  EXPECT_THAT(CheckSecurityFlags({{"tls-key", "k.pem"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--tls-key needs --tls-cert")));
  ClientOptions options;
  EXPECT_THAT(ApplySecurityFlags(
                  {{"tls-cert", "/nonexistent/c.pem"}, {"tls-key", "/nonexistent/k.pem"}},
                  nullptr, &options),
              StatusIs(absl::StatusCode::kNotFound,
                       "--tls-cert: cannot read /nonexistent/c.pem"));
  const std::string pem = ::testing::TempDir() + "/cli-fake.pem";
  std::ofstream(pem) << "-----BEGIN CERTIFICATE-----\n";
  ASSERT_TRUE(
      ApplySecurityFlags({{"tls-cert", pem}, {"tls-key", pem}}, nullptr, &options).ok());
  EXPECT_NE(options.credentials, nullptr);  // A client certificate implies TLS.
  EXPECT_THAT(SecurityFlagsOf({{"target", "x:1"}, {"tls-ca", "ca"}, {"token-file", "t"}}),
              ElementsAre(Pair("tls-ca", "ca"), Pair("token-file", "t")));
}

TEST(TensorFormatsTest, WireAndOutputDtypes) {
  absl::StatusOr<TensorFormats> defaults = ParseTensorFormats({});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->wire, v1::DATA_TYPE_UNSPECIFIED);
  EXPECT_EQ(defaults->out, ElementType::kFloat32);
  absl::StatusOr<TensorFormats> f =
      ParseTensorFormats({{"wire-dtype", "bfloat16"}, {"out-dtype", "float16"}});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->wire, v1::BFLOAT16);
  EXPECT_EQ(f->out, ElementType::kFloat16);
  EXPECT_THAT(ParseTensorFormats({{"out-dtype", "bfloat16"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--out-dtype must be float32 or float16, not 'bfloat16'"));
  EXPECT_THAT(ParseTensorFormats({{"wire-dtype", "int8"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--wire-dtype")));
}

TEST(PositionsTest, OffsetOrList) {
  absl::StatusOr<Positions> offset = ParsePositions({{"position-offset", "5"}});
  ASSERT_TRUE(offset.ok());
  EXPECT_EQ(offset->offset, 5);
  EXPECT_TRUE(offset->positions.empty());
  absl::StatusOr<Positions> list = ParsePositions({{"positions", "3,1,4"}});
  ASSERT_TRUE(list.ok());
  EXPECT_THAT(list->positions, ElementsAre(3, 1, 4));
  EXPECT_THAT(ParsePositions({{"positions", "1"}, {"position-offset", "2"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("exclude")));
}

}  // namespace
}  // namespace layerserve::client
