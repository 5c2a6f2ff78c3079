// ServerConfig::Validate (server/rpc/server_config.h): the defaults start, and each
// value the server cannot start with is refused naming its flag, without starting a
// server. The binary's exit code and message: tests/integration/test_server.py.
#include "server/rpc/server_config.h"

#include <cstdint>
#include <functional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace layerserve {
namespace {

using ::layerserve::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ServerConfigTest, DefaultsAreValid) { EXPECT_TRUE(ServerConfig().Validate().ok()); }

// A config that differs from the defaults by `change`.
ServerConfig With(const std::function<void(ServerConfig&)>& change) {
  ServerConfig config;
  change(config);
  return config;
}

void ExpectRefusedNaming(const ServerConfig& config, const std::string& flag) {
  EXPECT_THAT(config.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(flag)));
}

TEST(ServerConfigTest, MaxMessageBytesMustFitAnInt) {
  ExpectRefusedNaming(With([](ServerConfig& c) { c.max_message_bytes = 0; }),
                      "--max-message-bytes");
  ExpectRefusedNaming(
      With([](ServerConfig& c) { c.max_message_bytes = int64_t{INT32_MAX} + 1; }),
      "--max-message-bytes");
  EXPECT_TRUE(
      With([](ServerConfig& c) { c.max_message_bytes = INT32_MAX; }).Validate().ok());
}

TEST(ServerConfigTest, WeightDtypeMustBeKnown) {
  ExpectRefusedNaming(With([](ServerConfig& c) { c.weight_dtype = "int4"; }),
                      "--weight-dtype");
  for (const char* dtype : {"float32", "bfloat16", "int8"}) {
    EXPECT_TRUE(With([&](ServerConfig& c) { c.weight_dtype = dtype; }).Validate().ok())
        << dtype;
  }
}

TEST(ServerConfigTest, WeightGroupSizeMustFitModelInfo) {
  ExpectRefusedNaming(With([](ServerConfig& c) { c.weight_group_size = -1; }),
                      "--weight-group-size");
  ExpectRefusedNaming(
      With([](ServerConfig& c) { c.weight_group_size = int64_t{1} << 32; }),
      "--weight-group-size");
  EXPECT_TRUE(With([](ServerConfig& c) { c.weight_group_size = 0; }).Validate().ok());
}

TEST(ServerConfigTest, RepositoryPollIntervalMustNotBeNegative) {
  ExpectRefusedNaming(
      With([](ServerConfig& c) { c.repository_poll_interval = absl::Seconds(-1); }),
      "--repository-poll-interval");
}

TEST(ServerConfigTest, LayersMustBeASpan) {
  ExpectRefusedNaming(With([](ServerConfig& c) { c.layers = "3"; }), "--layers");
  ExpectRefusedNaming(With([](ServerConfig& c) { c.layers = "4:4"; }), "--layers");
  EXPECT_TRUE(With([](ServerConfig& c) { c.layers = "1:3"; }).Validate().ok());
}

TEST(ServerConfigTest, BatchingLimitsMustBePositive) {
  ExpectRefusedNaming(With([](ServerConfig& c) { c.max_batch_rows = 0; }),
                      "--max-batch-rows");
  ExpectRefusedNaming(With([](ServerConfig& c) { c.max_queue_size = 0; }),
                      "--max-queue-size");
  ExpectRefusedNaming(With([](ServerConfig& c) { c.max_request_elements = 0; }),
                      "--max-request-elements");
  ExpectRefusedNaming(With([](ServerConfig& c) { c.max_queue_delay_us = -1; }),
                      "--max-queue-delay-us");
  ExpectRefusedNaming(With([](ServerConfig& c) { c.max_gather_delay_us = -1; }),
                      "--max-gather-delay-us");
  EXPECT_TRUE(With([](ServerConfig& c) {
                c.max_batch_rows = 1;
                c.max_queue_delay_us = 0;
                c.max_gather_delay_us = 0;
              })
                  .Validate()
                  .ok());
}

TEST(ServerConfigTest, PrefillChunkTokensMustNotBeNegative) {
  ExpectRefusedNaming(With([](ServerConfig& c) { c.prefill_chunk_tokens = -1; }),
                      "--prefill-chunk-tokens");
  EXPECT_TRUE(With([](ServerConfig& c) { c.prefill_chunk_tokens = 0; }).Validate().ok());
}

TEST(ServerConfigTest, KvCacheDtypeMustBeKnown) {
  ExpectRefusedNaming(With([](ServerConfig& c) { c.kv_cache_dtype = "float16"; }),
                      "--kv-cache-dtype");
  EXPECT_TRUE(
      With([](ServerConfig& c) { c.kv_cache_dtype = "bfloat16"; }).Validate().ok());
}

}  // namespace
}  // namespace layerserve
