// The command line of layerserve-bench.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tools/loadgen/options.h"

namespace layerserve::client {
namespace {

using ::layerserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(BenchOptionsTest, DefaultsAreABoundedClosedLoop) {
  absl::StatusOr<BenchOptions> o = ParseBenchArgs({});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->method, "normalize");
  EXPECT_THAT(o->shape, ElementsAre(8, 768));
  EXPECT_THAT(o->concurrency, ElementsAre(1));
  EXPECT_TRUE(o->rates.empty());
  EXPECT_EQ(o->duration, absl::Seconds(10));
  EXPECT_EQ(o->requests, 0);
  EXPECT_EQ(o->warmup, absl::Seconds(1));
  EXPECT_EQ(o->channels, 0);
  EXPECT_EQ(o->wire_dtype, v1::FLOAT32);
  EXPECT_FALSE(o->json);
}

TEST(BenchOptionsTest, DecodeThroughAPipeline) {
  absl::StatusOr<BenchOptions> o =
      ParseBenchArgs({"--method", "decode", "--pipeline", "10.0.0.1:1,10.0.0.2:2"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_THAT(o->pipeline, ElementsAre("10.0.0.1:1", "10.0.0.2:2"));
  EXPECT_TRUE(ParseBenchArgs({"--method", "decode"})->pipeline.empty());
  EXPECT_THAT(
      ParseBenchArgs({"--method", "block-forward", "--pipeline", "a:1"}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("--pipeline is for --method decode, not block-forward")));
  EXPECT_THAT(ParseBenchArgs({"--method", "decode", "--pipeline", ","}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--pipeline needs HOST:PORT,HOST:PORT,...")));
}

TEST(BenchOptionsTest, DecodeSessionsPerCall) {
  absl::StatusOr<BenchOptions> o =
      ParseBenchArgs({"--method", "decode", "--sessions-per-call", "8"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->sessions_per_call, 8);
  EXPECT_EQ(ParseBenchArgs({"--method", "decode"})->sessions_per_call, 1);
  EXPECT_THAT(ParseBenchArgs({"--method", "decode", "--sessions-per-call=0"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--sessions-per-call must be >= 1, got 0"));
  EXPECT_THAT(
      ParseBenchArgs({"--method", "block-forward", "--sessions-per-call", "2"}),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("--sessions-per-call is for --method decode, not block-forward")));
}

TEST(BenchOptionsTest, ClosedLoopSweep) {
  absl::StatusOr<BenchOptions> o = ParseBenchArgs(
      {"--concurrency=1,8,64", "--method", "activate", "--activation", "swiglu",
       "--shape=4,2816", "--wire-dtype=bfloat16", "--requests", "500", "--warmup=0s",
       "--channels", "2", "--metrics-url", "http://127.0.0.1:9/metrics", "--json"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_THAT(o->concurrency, ElementsAre(1, 8, 64));
  EXPECT_EQ(o->method, "activate");
  EXPECT_EQ(o->activation, v1::SWIGLU);
  EXPECT_THAT(o->shape, ElementsAre(4, 2816));
  EXPECT_EQ(o->wire_dtype, v1::BFLOAT16);
  EXPECT_EQ(o->requests, 500);
  EXPECT_EQ(o->warmup, absl::ZeroDuration());
  EXPECT_EQ(o->channels, 2);
  EXPECT_EQ(o->metrics_url, "http://127.0.0.1:9/metrics");
  EXPECT_TRUE(o->json);
}

TEST(BenchOptionsTest, OpenLoopSweep) {
  absl::StatusOr<BenchOptions> o =
      ParseBenchArgs({"--rate=100,250.5", "--distribution=constant", "--duration=30s",
                      "--max-threads=8", "--method=block-forward", "--batch=2",
                      "--tokens=128", "--layers=4", "--model=tiny"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_THAT(o->rates, ElementsAre(100, 250.5));
  EXPECT_TRUE(o->concurrency.empty());
  EXPECT_FALSE(o->poisson);
  EXPECT_EQ(o->duration, absl::Seconds(30));
  EXPECT_EQ(o->max_threads, 8);
  EXPECT_EQ(o->batch, 2);
  EXPECT_EQ(o->tokens, 128);
  EXPECT_EQ(o->layers, 4);
  EXPECT_EQ(o->model, "tiny");
}

TEST(BenchOptionsTest, KeepsTheSecurityFlagsForTheClient) {
  absl::StatusOr<BenchOptions> o =
      ParseBenchArgs({"--tls-ca", "ca.pem", "--tls-cert=c.pem", "--tls-key", "k.pem",
                      "--token-file", "token", "--requests", "5"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->security, (FlagValues{{"tls-ca", "ca.pem"},
                                     {"tls-cert", "c.pem"},
                                     {"tls-key", "k.pem"},
                                     {"token-file", "token"}}));
  EXPECT_THAT(ParseBenchArgs({"--tls-cert", "c.pem"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--tls-cert needs --tls-key")));
}

TEST(BenchOptionsTest, RejectsContradictionsAndBadValues) {
  auto error = [](std::vector<std::string> args) {
    return ParseBenchArgs(args).status();
  };
  EXPECT_THAT(
      error({"--rate=10", "--concurrency=2"}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("exclude each other")));
  EXPECT_THAT(
      error({"--duration=1s", "--requests=5"}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("exclude each other")));
  EXPECT_THAT(error({"--distribution=poisson"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs --rate")));
  EXPECT_THAT(error({"--concurrency=0"}), StatusIs(absl::StatusCode::kInvalidArgument,
                                                   "--concurrency must be >= 1, got 0"));
  EXPECT_THAT(error({"--rate=0"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("> 0 requests/s")));
  EXPECT_THAT(error({"--shape=8,0"}), StatusIs(absl::StatusCode::kInvalidArgument,
                                               "--shape must be >= 1, got 0"));
  EXPECT_THAT(error({"--requests=0"}), StatusIs(absl::StatusCode::kInvalidArgument,
                                                "--requests must be >= 1, got 0"));
  EXPECT_THAT(error({"--duration=0s"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "--duration must be > 0"));
  EXPECT_THAT(error({"--method=train"}), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  HasSubstr("--method must be one of")));
  EXPECT_THAT(error({"--kind=batch"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--kind")));
  EXPECT_THAT(error({"--wire-dtype=int8"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--wire-dtype")));
  EXPECT_THAT(error({"stray"}), StatusIs(absl::StatusCode::kInvalidArgument,
                                         "unexpected argument 'stray'"));
  EXPECT_THAT(error({"--help"}), StatusIs(absl::StatusCode::kCancelled, "help"));
}

}  // namespace
}  // namespace layerserve::client
