// layerserve::Client::StepSessions against the real server (tests/testing/
// server_child.h, the demo model): many sessions in one call equal each session's
// own session_id calls bit for bit over a ragged prefill and steps, and a call
// that fails names the row and advances no session.
#include <stdlib.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "client/cpp/client.h"
#include "client/cpp/tensor_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_child.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/tensor_rows.h"

namespace layerserve::client {
namespace {

using ::layerserve::testing::RowTokens;
using ::layerserve::testing::ServerChild;
using ::layerserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::StartsWith;

constexpr int64_t kHidden = 512;  // The demo model's.
constexpr int kSessions = 3;

// [rows, tokens, kHidden] standard normal values.
v1::Tensor Hidden(int64_t rows, int64_t tokens, int seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> values(rows * tokens * kHidden);
  for (float& v : values) v = normal(rng);
  return TensorFromFloats(values, {rows, tokens, kHidden}, v1::FLOAT32).value();
}

class StepSessionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir = ::testing::TempDir() + "/step_sessions_test.XXXXXX";
    ASSERT_NE(mkdtemp(dir.data()), nullptr);
    server_ = std::make_unique<ServerChild>(dir, "server", std::vector<std::string>{});
    ASSERT_FALSE(server_->target().empty()) << server_->output();
    ClientOptions options;
    options.target = server_->target();
    options.timeout = absl::Seconds(60);
    client_ = Client::Create(options).value();
  }

  std::string Open(int64_t max_length = 0) {
    v1::OpenSessionRequest open;
    open.set_num_layers(2);
    open.set_max_length(max_length);
    return client_->OpenSession(open).value().session_id();
  }

  std::unique_ptr<ServerChild> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(StepSessionsTest, EqualsEachSessionsOwnCallsBitForBit) {
  std::vector<std::string> alone, together;
  for (int b = 0; b < kSessions; ++b) {
    alone.push_back(Open());
    together.push_back(Open());
  }
  struct Call {
    v1::Tensor rows;
    std::vector<int64_t> lengths;
  };
  // A ragged prefill, three one-token steps, a ragged two-token step.
  std::vector<Call> calls = {{Hidden(kSessions, 5, 1), {5, 2, 4}}};
  for (int i = 0; i < 3; ++i) calls.push_back({Hidden(kSessions, 1, 2 + i), {1, 1, 1}});
  calls.push_back({Hidden(kSessions, 2, 5), {2, 1, 2}});
  std::vector<int64_t> want_lengths(kSessions, 0);
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& call = calls[i];
    absl::StatusOr<SessionsStepResult> got =
        client_->StepSessions(together, call.rows, call.lengths);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->hidden_states.data().size(), call.rows.data().size());
    const int64_t row_bytes = call.rows.shape(1) * kHidden * 4;
    for (int b = 0; b < kSessions; ++b) {
      v1::BlockForwardRequest request;
      request.set_session_id(alone[b]);
      *request.mutable_hidden_states() = RowTokens(call.rows, b, call.lengths[b]);
      absl::StatusOr<v1::BlockForwardResponse> want = client_->BlockForward(request);
      ASSERT_TRUE(want.ok()) << want.status();
      const std::string row = got->hidden_states.data().substr(b * row_bytes, row_bytes);
      const std::string& real = want->hidden_states().data();
      EXPECT_EQ(row.substr(0, real.size()), real) << "call " << i << " row " << b;
      EXPECT_EQ(row.substr(real.size()), std::string(row_bytes - real.size(), '\0'))
          << "padding of call " << i << " row " << b;
      want_lengths[b] = want->session_length();
    }
    EXPECT_EQ(got->lengths, want_lengths) << "call " << i;
  }
  for (const std::string& id : alone) EXPECT_TRUE(client_->CloseSession(id).ok());
  for (const std::string& id : together) EXPECT_TRUE(client_->CloseSession(id).ok());
}

TEST_F(StepSessionsTest, AFailedCallNamesTheRowAndAdvancesNoSession) {
  const std::string a = Open(), short_one = Open(/*max_length=*/2), closed = Open();
  ASSERT_TRUE(client_->CloseSession(closed).ok());
  ASSERT_TRUE(client_->StepSessions({a, short_one}, Hidden(2, 1, 10)).ok());
  EXPECT_THAT(
      client_->StepSessions({a, closed, short_one}, Hidden(3, 1, 11)),
      StatusIs(absl::StatusCode::kNotFound,
               StartsWith("session_ids[1]: session \"" + closed + "\" was closed")));
  EXPECT_THAT(
      client_->StepSessions({a, short_one}, Hidden(2, 2, 12)),
      StatusIs(absl::StatusCode::kOutOfRange,
               StartsWith("session_ids[1]: session \"" + short_one +
                          "\" holds 1 tokens; 2 more would pass its max_length 2")));
  absl::StatusOr<SessionsStepResult> next =
      client_->StepSessions({a, short_one}, Hidden(2, 1, 13));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_THAT(next->lengths, ElementsAre(2, 2));
}

}  // namespace
}  // namespace layerserve::client
