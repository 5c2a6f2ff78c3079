// layerserve::client::Pipeline against real servers (tests/testing/server_child.h):
// the demo model's 4 layers split 0:1, 1:3 (two replicas) and 3:4 against one
// server with all of them. Forward and session steps equal the one server's bit
// for bit; a middle replica SIGKILLed mid-session is replaced by the other one
// (re-prefilled, steps equal to float32 rounding); Step (many sessions in one call
// per stage) equals each session's Forward bit for bit and recovers a lost row or
// a killed replica; FromServers orders the spans and refuses gaps; bad stages are
// INVALID_ARGUMENT; a wrong span OUT_OF_RANGE.
#include "client/cpp/pipeline.h"

#include <signal.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

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
using ::testing::HasSubstr;

constexpr int64_t kHidden = 512;  // The demo model's.

v1::Tensor Hidden(int64_t tokens, int seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> values(tokens * kHidden);
  for (float& v : values) v = normal(rng);
  return TensorFromFloats(values, {tokens, kHidden}, v1::FLOAT32).value();
}

// Token `t` of a [T, D] tensor as a [1, D] tensor.
v1::Tensor Row(const v1::Tensor& all, int64_t t) {
  v1::Tensor row;
  row.set_dtype(all.dtype());
  row.add_shape(1);
  row.add_shape(kHidden);
  row.set_data(all.data().substr(t * kHidden * 4, kHidden * 4));
  return row;
}

v1::Tensor Rows(const v1::Tensor& all, int64_t begin, int64_t end) {
  v1::Tensor rows = Row(all, begin);
  rows.set_shape(0, end - begin);
  rows.set_data(all.data().substr(begin * kHidden * 4, (end - begin) * kHidden * 4));
  return rows;
}

// One Pipeline::Step: rows [B, T, kHidden] and each row's real tokens.
struct StepCall {
  v1::Tensor rows;
  std::vector<int64_t> lengths;
};

// 3 sessions: a ragged prefill, 4 one-token steps, a ragged two-token step.
std::vector<StepCall> StepCalls(int seed) {
  auto batch = [&](int64_t tokens) {
    v1::Tensor x = Hidden(3 * tokens, seed++);
    x.clear_shape();
    for (int64_t d : {int64_t{3}, tokens, kHidden}) x.add_shape(d);
    return x;
  };
  std::vector<StepCall> calls = {{batch(5), {5, 2, 4}}};
  for (int i = 0; i < 4; ++i) calls.push_back({batch(1), {1, 1, 1}});
  calls.push_back({batch(2), {2, 1, 2}});
  return calls;
}

// Each row's real tokens as its session's own Forward, padded like a Step's
// answer; each session's length in `lengths`.
std::string Forwards(const std::vector<PipelineSession*>& sessions, const StepCall& call,
                     std::vector<int64_t>* lengths) {
  const int64_t row_bytes = call.rows.shape(1) * kHidden * 4;
  std::string out(sessions.size() * row_bytes, '\0');
  lengths->clear();
  for (size_t b = 0; b < sessions.size(); ++b) {
    absl::StatusOr<PipelineSession::StepResult> one =
        sessions[b]->Forward(RowTokens(call.rows, b, call.lengths[b]));
    EXPECT_TRUE(one.ok()) << one.status();
    if (!one.ok()) return "";
    out.replace(b * row_bytes, one->hidden_states.data().size(),
                one->hidden_states.data());
    lengths->push_back(one->length);
  }
  return out;
}

// Float32 bytes equal to float32 rounding (a re-prefilled cache).
void ExpectNear(const std::string& got, const std::string& want,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::vector<float> g(got.size() / 4), w(want.size() / 4);
  memcpy(g.data(), got.data(), got.size());
  memcpy(w.data(), want.data(), want.size());
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], w[i], 1e-5 * std::max(1.0f, std::fabs(w[i])))
        << what << " element " << i;
  }
}

std::vector<PipelineSession*> Pointers(
    const std::vector<std::unique_ptr<PipelineSession>>& sessions) {
  std::vector<PipelineSession*> out;
  for (const auto& s : sessions) out.push_back(s.get());
  return out;
}

class PipelineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // A folder of its own: ctest runs each test of this file as its own process,
    // two at once, and their servers' logs must not share names.
    std::string dir = ::testing::TempDir() + "/pipeline_test.XXXXXX";
    ASSERT_NE(mkdtemp(dir.data()), nullptr);
    dir_ = new std::string(dir);
    full_ = new ServerChild(*dir_, "pipeline-full", {});
    a_ = new ServerChild(*dir_, "pipeline-a", {"--layers=0:1"});
    b1_ = new ServerChild(*dir_, "pipeline-b1", {"--layers=1:3"});
    b2_ = new ServerChild(*dir_, "pipeline-b2", {"--layers=1:3"});
    c_ = new ServerChild(*dir_, "pipeline-c", {"--layers=3:4"});
  }
  static void TearDownTestSuite() {
    for (ServerChild* s : {full_, a_, b1_, b2_, c_}) delete s;
    delete dir_;
  }

  static ClientOptions Options() {
    ClientOptions options;
    options.timeout = absl::Seconds(60);
    return options;
  }
  static std::vector<PipelineStage> Stages(const ServerChild& b1, const ServerChild& b2) {
    return {{{a_->target()}, 0, 1},
            {{b1.target(), b2.target()}, 1, 2},
            {{c_->target()}, 3, 1}};
  }
  static std::unique_ptr<Client> FullClient() {
    ClientOptions options = Options();
    options.target = full_->target();
    return Client::Create(options).value();
  }
  // The outputs of a prefill of `prefill` tokens then one step per token left,
  // in one session of all 4 layers on the full server.
  static std::vector<v1::Tensor> OneServerSession(const v1::Tensor& x, int64_t prefill) {
    std::unique_ptr<Client> client = FullClient();
    v1::OpenSessionRequest open;
    open.set_num_layers(4);
    const std::string id = client->OpenSession(open).value().session_id();
    std::vector<v1::Tensor> out;
    const int64_t tokens = x.shape(0);
    for (int64_t t = 0; t < tokens; t = (t == 0 ? prefill : t + 1)) {
      v1::BlockForwardRequest request;
      request.set_session_id(id);
      *request.mutable_hidden_states() = t == 0 ? Rows(x, 0, prefill) : Row(x, t);
      out.push_back(client->BlockForward(request).value().hidden_states());
    }
    EXPECT_TRUE(client->CloseSession(id).ok());
    return out;
  }

  static std::string* dir_;
  static ServerChild *full_, *a_, *b1_, *b2_, *c_;
};

std::string* PipelineTest::dir_ = nullptr;
ServerChild *PipelineTest::full_ = nullptr, *PipelineTest::a_ = nullptr,
            *PipelineTest::b1_ = nullptr, *PipelineTest::b2_ = nullptr,
            *PipelineTest::c_ = nullptr;

TEST_F(PipelineTest, ForwardEqualsOneServerWithEveryLayer) {
  std::unique_ptr<Pipeline> pipeline =
      Pipeline::Create(Stages(*b1_, *b2_), "", Options()).value();
  v1::BlockForwardRequest request;
  *request.mutable_hidden_states() = Hidden(6, 1);
  std::vector<absl::Duration> times;
  absl::StatusOr<v1::BlockForwardResponse> got = pipeline->Forward(request, &times);
  ASSERT_TRUE(got.ok()) << got.status();
  request.set_num_layers(4);
  const v1::BlockForwardResponse want = FullClient()->BlockForward(request).value();
  EXPECT_EQ(got->hidden_states().data(), want.hidden_states().data());
  ASSERT_EQ(times.size(), 3u);
  for (absl::Duration t : times) EXPECT_GT(t, absl::ZeroDuration());
}

TEST_F(PipelineTest, SessionStepsEqualOneServersSession) {
  const v1::Tensor x = Hidden(5 + 16, 2);
  const std::vector<v1::Tensor> want = OneServerSession(x, 5);
  std::unique_ptr<Pipeline> pipeline =
      Pipeline::Create(Stages(*b1_, *b2_), "", Options()).value();
  std::unique_ptr<PipelineSession> session = pipeline->OpenSession().value();
  for (size_t step = 0; step < want.size(); ++step) {
    absl::StatusOr<PipelineSession::StepResult> got =
        session->Forward(step == 0 ? Rows(x, 0, 5) : Row(x, 4 + step));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->hidden_states.data(), want[step].data()) << "step " << step;
    EXPECT_EQ(got->length, static_cast<int64_t>(5 + step));
    EXPECT_EQ(got->stage_times.size(), 3u);
    EXPECT_EQ(got->stage_targets[1], b1_->target());
  }
  EXPECT_EQ(session->recoveries(), 0);
  EXPECT_TRUE(session->Close().ok());
}

TEST_F(PipelineTest, MiddleReplicaKilledTheSessionContinuesOnTheOther) {
  ServerChild doomed(*dir_, "pipeline-doomed", {"--layers=1:3"});
  const v1::Tensor x = Hidden(5 + 16, 3);
  const std::vector<v1::Tensor> want = OneServerSession(x, 5);
  std::unique_ptr<Pipeline> pipeline =
      Pipeline::Create(Stages(doomed, *b2_), "", Options()).value();
  std::unique_ptr<PipelineSession> session = pipeline->OpenSession().value();
  for (size_t step = 0; step < want.size(); ++step) {
    if (step == 9) doomed.Stop(SIGKILL);
    absl::StatusOr<PipelineSession::StepResult> got =
        session->Forward(step == 0 ? Rows(x, 0, 5) : Row(x, 4 + step));
    ASSERT_TRUE(got.ok()) << "step " << step << ": " << got.status();
    EXPECT_EQ(got->stage_targets[1], step < 9 ? doomed.target() : b2_->target());
    if (step < 9) {
      EXPECT_EQ(got->hidden_states.data(), want[step].data()) << "step " << step;
      continue;
    }
    // The other replica's cache came from one prefill of the cached inputs.
    const std::vector<float> g = FloatsFromTensor(got->hidden_states).value();
    const std::vector<float> w = FloatsFromTensor(want[step]).value();
    ASSERT_EQ(g.size(), w.size());
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_NEAR(g[i], w[i], 1e-5 * std::max(1.0f, std::fabs(w[i])))
          << "step " << step << " element " << i;
    }
  }
  EXPECT_EQ(session->recoveries(), 1);
}

TEST_F(PipelineTest, StepOfManySessionsEqualsTheirForwards) {
  std::unique_ptr<Pipeline> pipeline =
      Pipeline::Create(Stages(*b1_, *b2_), "", Options()).value();
  std::vector<std::unique_ptr<PipelineSession>> alone, together;
  for (int b = 0; b < 3; ++b) {
    alone.push_back(pipeline->OpenSession().value());
    together.push_back(pipeline->OpenSession().value());
  }
  for (const StepCall& call : StepCalls(20)) {
    std::vector<int64_t> want_lengths;
    const std::string want = Forwards(Pointers(alone), call, &want_lengths);
    absl::StatusOr<PipelineStepResult> got =
        pipeline->Step(Pointers(together), call.rows, call.lengths);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->hidden_states.data(), want);
    EXPECT_EQ(got->hidden_states.shape(1), call.rows.shape(1));
    EXPECT_EQ(got->lengths, want_lengths);
    ASSERT_EQ(got->stage_times.size(), 3u);
    // One call per stage: every row on the stage's replica in use.
    EXPECT_EQ(got->stage_targets, (std::vector<std::vector<std::string>>{
                                      std::vector<std::string>(3, a_->target()),
                                      std::vector<std::string>(3, b1_->target()),
                                      std::vector<std::string>(3, c_->target())}));
  }
  // [T, D]: one session's row.
  absl::StatusOr<PipelineStepResult> one =
      pipeline->Step({together[1].get()}, Row(Hidden(1, 30), 0));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->hidden_states.shape_size(), 2);
  for (const auto& s : together) EXPECT_EQ(s->recoveries(), 0);
}

TEST_F(PipelineTest, StepRecoversTheSessionARowNames) {
  std::unique_ptr<Pipeline> pipeline =
      Pipeline::Create(Stages(*b1_, *b2_), "", Options()).value();
  std::vector<std::unique_ptr<PipelineSession>> alone, together;
  for (int b = 0; b < 3; ++b) {
    alone.push_back(pipeline->OpenSession().value());
    together.push_back(pipeline->OpenSession().value());
  }
  const std::vector<StepCall> calls = StepCalls(40);
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i == 2) {  // The last stage's session of row 1 is gone, as if evicted.
      ClientOptions options = Options();
      options.target = c_->target();
      ASSERT_TRUE(Client::Create(options)
                      .value()
                      ->CloseSession(together[1]->session_ids()[2])
                      .ok());
    }
    std::vector<int64_t> want_lengths;
    const std::string want = Forwards(Pointers(alone), calls[i], &want_lengths);
    absl::StatusOr<PipelineStepResult> got =
        pipeline->Step(Pointers(together), calls[i].rows, calls[i].lengths);
    ASSERT_TRUE(got.ok()) << "call " << i << ": " << got.status();
    if (i < 2) {
      EXPECT_EQ(got->hidden_states.data(), want) << "call " << i;
    } else {
      ExpectNear(got->hidden_states.data(), want, "call " + std::to_string(i));
    }
    EXPECT_EQ(got->lengths, want_lengths);
  }
  EXPECT_EQ(together[0]->recoveries(), 0);
  EXPECT_EQ(together[1]->recoveries(), 1);
  EXPECT_EQ(together[2]->recoveries(), 0);
}

TEST_F(PipelineTest, StepMovesEverySessionOfAKilledReplicaTogether) {
  ServerChild doomed(*dir_, "pipeline-step-doomed", {"--layers=1:3"});
  std::unique_ptr<Pipeline> reference =
      Pipeline::Create(Stages(*b1_, *b2_), "", Options()).value();
  std::unique_ptr<Pipeline> pipeline =
      Pipeline::Create(Stages(doomed, *b2_), "", Options()).value();
  std::vector<std::unique_ptr<PipelineSession>> alone, together;
  for (int b = 0; b < 3; ++b) {
    alone.push_back(reference->OpenSession().value());
    together.push_back(pipeline->OpenSession().value());
  }
  const std::vector<StepCall> calls = StepCalls(50);
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i == 3) doomed.Stop(SIGKILL);
    std::vector<int64_t> want_lengths;
    const std::string want = Forwards(Pointers(alone), calls[i], &want_lengths);
    absl::StatusOr<PipelineStepResult> got =
        pipeline->Step(Pointers(together), calls[i].rows, calls[i].lengths);
    ASSERT_TRUE(got.ok()) << "call " << i << ": " << got.status();
    EXPECT_EQ(got->stage_targets[1],
              std::vector<std::string>(3, i < 3 ? doomed.target() : b2_->target()));
    if (i < 3) {
      EXPECT_EQ(got->hidden_states.data(), want) << "call " << i;
    } else {
      ExpectNear(got->hidden_states.data(), want, "call " + std::to_string(i));
    }
  }
  for (const auto& s : together) EXPECT_EQ(s->recoveries(), 1);
}

TEST_F(PipelineTest, StepRefusesWhatIsNotOneSessionOfItsOwnPerRow) {
  std::unique_ptr<Pipeline> pipeline =
      Pipeline::Create(Stages(*b1_, *b2_), "", Options()).value();
  std::unique_ptr<Pipeline> other =
      Pipeline::Create(Stages(*b1_, *b2_), "", Options()).value();
  std::unique_ptr<PipelineSession> a = pipeline->OpenSession().value();
  std::unique_ptr<PipelineSession> b = other->OpenSession().value();
  const v1::Tensor two = StepCalls(60)[1].rows;  // [3, 1, D]
  EXPECT_THAT(pipeline->Step({}, two),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sessions: empty")));
  EXPECT_THAT(pipeline->Step({a.get(), a.get(), a.get()}, two),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sessions[1]: repeats sessions[0]")));
  EXPECT_THAT(pipeline->Step({a.get(), b.get()}, two),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sessions[1]: not a session of this pipeline")));
  EXPECT_THAT(pipeline->Step({a.get()}, two),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hidden_states: shape [3,1,512] for 1 sessions")));
}

TEST_F(PipelineTest, AStageWithNoReplicaLeftFailsNamingIt) {
  ServerChild only(*dir_, "pipeline-only", {"--layers=1:3"});
  ClientOptions options = Options();
  options.timeout = absl::Seconds(10);
  std::unique_ptr<Pipeline> pipeline =
      Pipeline::Create(
          {{{a_->target()}, 0, 1}, {{only.target()}, 1, 2}, {{c_->target()}, 3, 1}}, "",
          options)
          .value();
  std::unique_ptr<PipelineSession> session = pipeline->OpenSession().value();
  const v1::Tensor x = Hidden(3, 5);
  ASSERT_TRUE(session->Forward(Rows(x, 0, 2)).ok());
  only.Stop(SIGKILL);
  EXPECT_THAT(session->Forward(Row(x, 2)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("layers 1..2: every replica failed; last: ")));
}

TEST_F(PipelineTest, FromServersOrdersTheSpansAndGroupsReplicas) {
  std::unique_ptr<Pipeline> pipeline =
      Pipeline::FromServers({c_->target(), b1_->target(), a_->target(), b2_->target()},
                            "", Options())
          .value();
  const std::vector<PipelineStage> stages = pipeline->stages();
  ASSERT_EQ(stages.size(), 3u);
  EXPECT_EQ(stages[0].targets, std::vector<std::string>{a_->target()});
  EXPECT_EQ(stages[1].targets, (std::vector<std::string>{b1_->target(), b2_->target()}));
  EXPECT_EQ(stages[1].layer_start, 1);
  EXPECT_EQ(stages[1].num_layers, 2);
  EXPECT_EQ(stages[2].targets, std::vector<std::string>{c_->target()});
}

TEST_F(PipelineTest, FromServersRefusesAGapAndAShortCover) {
  EXPECT_THAT(Pipeline::FromServers({a_->target(), c_->target()}, "", Options()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the spans leave a gap at layer 1")));
  EXPECT_THAT(Pipeline::FromServers({a_->target(), b1_->target()}, "", Options()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the spans end at layer 2; the model has 4 layers")));
}

TEST_F(PipelineTest, StagesThatDoNotChainAreRefused) {
  EXPECT_THAT(
      Pipeline::Create({{{"127.0.0.1:1"}, 0, 2}, {{"127.0.0.1:2"}, 1, 3}}, "", Options()),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("stages[1]: starts at layer 1 but stages[0] ends before "
                         "layer 2 (overlap)")));
  EXPECT_THAT(
      Pipeline::Create({{{}, 0, 2}}, "", Options()),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("stages[0]: no target")));
  EXPECT_THAT(Pipeline::Create({{{"127.0.0.1:1"}, 0, 0}}, "", Options()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("stages[0]: num_layers 0 must be >= 1")));
  EXPECT_THAT(Pipeline::Create({}, "", Options()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("stages: empty")));
}

TEST_F(PipelineTest, AStageOutsideItsServersSpanIsOutOfRange) {
  std::unique_ptr<Pipeline> pipeline =
      Pipeline::Create({{{a_->target()}, 0, 2}, {{c_->target()}, 2, 2}}, "", Options())
          .value();
  v1::BlockForwardRequest request;
  *request.mutable_hidden_states() = Hidden(2, 4);
  EXPECT_THAT(
      pipeline->Forward(request),
      StatusIs(absl::StatusCode::kOutOfRange,
               HasSubstr("layers 0..1 of model \"demo\" are outside this server's "
                         "span, layers 0..0 (--layers=0:1)")));
}

}  // namespace
}  // namespace layerserve::client
