// layerserve::Client against fake LayerService servers on loopback ports the OS
// picks: retries on UNAVAILABLE only and within the deadline, status codes and
// messages passed through, round robin over a comma list, message size limits,
// session calls (header sent, session steps never retried, one or many sessions
// a call), and the pure helpers (ChannelTarget, RetryBackoff).
#include "client/cpp/client.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback_server.h"
#include "tests/testing/status_matchers.h"

namespace layerserve::client {
namespace {

using ::layerserve::testing::StatusIs;
using ::testing::HasSubstr;

// Normalize answers `failures` calls with `failure` and then echoes the input; the
// other methods answer fixed values so a test can tell the calls apart.
class FakeService final : public v1::LayerService::Service {
 public:
  FakeService(int failures, grpc::Status failure)
      : failures_(failures), failure_(std::move(failure)) {}

  grpc::Status Normalize(grpc::ServerContext*, const v1::NormalizeRequest* request,
                         v1::NormalizeResponse* response) override {
    if (calls_.fetch_add(1) < failures_) return failure_;
    *response->mutable_output() = request->input();
    return grpc::Status::OK;
  }
  grpc::Status GetModel(grpc::ServerContext*, const v1::GetModelRequest* request,
                        v1::ModelInfo* response) override {
    ++calls_;
    if (request->name() == "missing") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no model \"missing\"");
    }
    response->set_name(request->name().empty() ? "demo" : request->name());
    response->set_hidden_size(512);
    return grpc::Status::OK;
  }

  // Sessions: BlockForward fails like Normalize, then answers the number of the
  // call as session_length; each method records the session header it got.
  grpc::Status BlockForward(grpc::ServerContext* context,
                            const v1::BlockForwardRequest* request,
                            v1::BlockForwardResponse* response) override {
    Record(context);
    const int n = calls_.fetch_add(1);
    if (n < failures_) return failure_;
    *response->mutable_hidden_states() = request->hidden_states();
    response->set_session_length(n + 1);
    for (int b = 0; b < request->session_ids_size(); ++b) {
      response->add_session_lengths(10 * (b + 1) + n);
    }
    return grpc::Status::OK;
  }
  grpc::Status OpenSession(grpc::ServerContext* context,
                           const v1::OpenSessionRequest* request,
                           v1::OpenSessionResponse* response) override {
    Record(context);
    ++calls_;
    response->set_session_id("replica-1." + request->model());
    response->set_ttl_ms(300000);
    return grpc::Status::OK;
  }
  grpc::Status CloseSession(grpc::ServerContext* context,
                            const v1::CloseSessionRequest* request,
                            v1::CloseSessionResponse*) override {
    Record(context);
    ++calls_;
    if (request->session_id() != "replica-1.open") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "no session \"" + request->session_id() + "\"");
    }
    return grpc::Status::OK;
  }

  int calls() const { return calls_.load(); }
  // The x-layerserve-session header of each call to a session method, "-" if absent.
  std::vector<std::string> headers() const {
    std::lock_guard<std::mutex> lock(mu_);
    return headers_;
  }

 private:
  void Record(grpc::ServerContext* context) {
    const auto& metadata = context->client_metadata();
    auto it = metadata.find(kSessionHeader);
    std::lock_guard<std::mutex> lock(mu_);
    headers_.push_back(
        it == metadata.end() ? "-" : std::string(it->second.data(), it->second.size()));
  }

  mutable std::mutex mu_;
  std::vector<std::string> headers_;
  const int failures_;
  const grpc::Status failure_;
  std::atomic<int> calls_{0};
};

// A gRPC server with a FakeService on 127.0.0.1, port picked by the OS.
class FakeServer {
 public:
  explicit FakeServer(int failures = 0,
                      grpc::Status failure = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                                          "draining"),
                      std::shared_ptr<grpc::ServerCredentials> credentials =
                          grpc::InsecureServerCredentials())
      : service_(failures, std::move(failure)),
        server_(&service_, std::move(credentials)) {}

  std::string target() const { return server_.target(); }
  int calls() const { return service_.calls(); }
  std::vector<std::string> headers() const { return service_.headers(); }

 private:
  FakeService service_;
  testing::LoopbackServer server_;  // Shut down before service_ is destroyed.
};

// Fast retries, so tests take milliseconds.
ClientOptions Options(const std::string& target) {
  ClientOptions options;
  options.target = target;
  options.timeout = absl::Seconds(10);
  options.retry.initial_backoff = absl::Milliseconds(1);
  options.retry.max_backoff = absl::Milliseconds(4);
  return options;
}

std::unique_ptr<Client> MakeClient(ClientOptions options) {
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(std::move(options));
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

v1::NormalizeRequest Request() {
  v1::NormalizeRequest request;
  request.set_kind(v1::RMS_NORM);
  request.mutable_input()->add_shape(2);
  request.mutable_input()->set_dtype(v1::FLOAT32);
  request.mutable_input()->set_data(std::string(8, '\x01'));
  return request;
}

TEST(ClientTest, RetriesUnavailableThenSucceeds) {
  FakeServer server(/*failures=*/2);
  std::vector<RetryEvent> events;
  ClientOptions options = Options(server.target());
  options.on_retry = [&](const RetryEvent& e) { events.push_back(e); };
  std::unique_ptr<Client> client = MakeClient(options);
  absl::StatusOr<v1::NormalizeResponse> response = client->Normalize(Request());
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->output().data(), std::string(8, '\x01'));
  EXPECT_EQ(server.calls(), 3);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_STREQ(events[0].method, "Normalize");
  EXPECT_EQ(events[0].attempt, 1);
  EXPECT_EQ(events[1].attempt, 2);
  EXPECT_THAT(events[1].status, StatusIs(absl::StatusCode::kUnavailable, "draining"));
  // Retry 2 waits initial * 2 = 2 ms, +-20% jitter.
  EXPECT_GE(events[1].backoff, absl::Microseconds(1600));
  EXPECT_LE(events[1].backoff, absl::Microseconds(2400));
}

TEST(ClientTest, DoesNotRetryInvalidArgument) {
  FakeServer server(/*failures=*/1,
                    grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "input.shape: bad"));
  int retries = 0;
  ClientOptions options = Options(server.target());
  options.on_retry = [&](const RetryEvent&) { ++retries; };
  std::unique_ptr<Client> client = MakeClient(options);
  EXPECT_THAT(client->Normalize(Request()),
              StatusIs(absl::StatusCode::kInvalidArgument, "input.shape: bad"));
  EXPECT_EQ(server.calls(), 1);
  EXPECT_EQ(retries, 0);
}

TEST(ClientTest, DoesNotRetryResourceExhausted) {
  FakeServer server(/*failures=*/1,
                    grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "queue full"));
  std::unique_ptr<Client> client = MakeClient(Options(server.target()));
  EXPECT_THAT(client->Normalize(Request()),
              StatusIs(absl::StatusCode::kResourceExhausted, "queue full"));
  EXPECT_EQ(server.calls(), 1);
}

TEST(ClientTest, GivesUpAfterMaxAttempts) {
  FakeServer server(/*failures=*/100);
  ClientOptions options = Options(server.target());
  options.retry.max_attempts = 3;
  std::unique_ptr<Client> client = MakeClient(options);
  EXPECT_THAT(client->Normalize(Request()),
              StatusIs(absl::StatusCode::kUnavailable, "draining"));
  EXPECT_EQ(server.calls(), 3);
}

TEST(ClientTest, PerCallRetryPolicyOverridesTheClients) {
  FakeServer server(/*failures=*/100);
  std::unique_ptr<Client> client = MakeClient(Options(server.target()));
  CallOptions call;
  call.retry = RetryPolicy{/*max_attempts=*/1};
  EXPECT_THAT(client->Normalize(Request(), call),
              StatusIs(absl::StatusCode::kUnavailable, "draining"));
  EXPECT_EQ(server.calls(), 1);
}

TEST(ClientTest, NoRetryStartsPastTheDeadline) {
  FakeServer server(/*failures=*/100);
  ClientOptions options = Options(server.target());
  options.retry.max_attempts = 10;
  options.retry.initial_backoff = absl::Seconds(5);
  options.retry.max_backoff = absl::Seconds(5);
  std::unique_ptr<Client> client = MakeClient(options);
  CallOptions call;
  call.timeout = absl::Milliseconds(500);
  const absl::Time start = absl::Now();
  // The first backoff (4-6 s) would end past the deadline: the UNAVAILABLE of the
  // first attempt comes back at once instead of a DEADLINE_EXCEEDED 0.5 s later.
  EXPECT_THAT(client->Normalize(Request(), call),
              StatusIs(absl::StatusCode::kUnavailable, "draining"));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(400));
  EXPECT_EQ(server.calls(), 1);
}

TEST(ClientTest, RetriesUntilAServerListens) {
  // Nothing listens on the port at first: connection refused is UNAVAILABLE. The
  // port is found free by a server that is then shut down.
  int port = 0;
  {
    FakeServer probe;
    port = std::stoi(probe.target().substr(probe.target().rfind(':') + 1));
  }
  const std::string target = "127.0.0.1:" + std::to_string(port);
  std::vector<RetryEvent> events;
  ClientOptions options = Options(target);
  options.retry.max_attempts = 1000;
  options.retry.initial_backoff = absl::Milliseconds(10);
  options.retry.max_backoff = absl::Milliseconds(20);
  std::unique_ptr<testing::LoopbackServer> late;
  int started_after_attempt = 0;
  FakeService service(0, grpc::Status::OK);
  options.on_retry = [&](const RetryEvent& e) {
    events.push_back(e);
    if (e.attempt == 3) {  // Start the server between attempts 3 and 4.
      late = std::make_unique<testing::LoopbackServer>(
          &service, grpc::InsecureServerCredentials(), port);
      started_after_attempt = e.attempt;
    }
  };
  std::unique_ptr<Client> client = MakeClient(options);
  absl::StatusOr<v1::NormalizeResponse> response = client->Normalize(Request());
  ASSERT_TRUE(late != nullptr && late->started()) << "port " << port << " was taken";
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->output().data(), std::string(8, '\x01'));
  EXPECT_EQ(started_after_attempt, 3);
  // The wait before a retry makes gRPC reconnect at once, so attempt 4 finds the
  // server started before it; without that gRPC would fail it fast until its own
  // reconnect backoff (1 s) passed, many 10-20 ms retries later.
  EXPECT_EQ(events.size(), 3u);
  for (const RetryEvent& e : events) {
    EXPECT_EQ(e.status.code(), absl::StatusCode::kUnavailable) << e.status;
  }
  late->Shutdown();
}

TEST(ClientTest, PassesErrorsThroughAndTypesEveryCall) {
  FakeServer server;
  std::unique_ptr<Client> client = MakeClient(Options(server.target()));
  absl::StatusOr<v1::ModelInfo> model = client->GetModel("");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->name(), "demo");
  EXPECT_EQ(model->hidden_size(), 512);
  EXPECT_THAT(client->GetModel("missing"),
              StatusIs(absl::StatusCode::kNotFound, "no model \"missing\""));
  // The fake does not implement Activate: gRPC's UNIMPLEMENTED, not retried.
  EXPECT_THAT(client->Activate(v1::ActivateRequest()),
              StatusIs(absl::StatusCode::kUnimplemented, ::testing::_));
}

v1::BlockForwardRequest SessionStep(const std::string& session_id) {
  v1::BlockForwardRequest request;
  request.set_session_id(session_id);
  request.mutable_hidden_states()->add_shape(1);
  request.mutable_hidden_states()->add_shape(2);
  request.mutable_hidden_states()->set_dtype(v1::FLOAT32);
  request.mutable_hidden_states()->set_data(std::string(8, '\x02'));
  return request;
}

TEST(ClientTest, SessionCallsCarryTheSessionHeader) {
  FakeServer server;
  std::unique_ptr<Client> client = MakeClient(Options(server.target()));
  v1::OpenSessionRequest open;
  open.set_model("open");
  absl::StatusOr<v1::OpenSessionResponse> session = client->OpenSession(open);
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ(session->session_id(), "replica-1.open");
  EXPECT_EQ(session->ttl_ms(), 300000);
  absl::StatusOr<v1::BlockForwardResponse> step =
      client->BlockForward(SessionStep(session->session_id()));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->session_length(), 2);
  EXPECT_EQ(step->hidden_states().data(), std::string(8, '\x02'));
  ASSERT_TRUE(client->BlockForward(SessionStep("")).ok());  // No session: no header.
  EXPECT_TRUE(client->CloseSession(session->session_id()).ok());
  EXPECT_THAT(client->CloseSession("replica-1.gone"),
              StatusIs(absl::StatusCode::kNotFound, "no session \"replica-1.gone\""));
  EXPECT_THAT(server.headers(),
              ::testing::ElementsAre("-", "replica-1.open", "-", "replica-1.open",
                                     "replica-1.gone"));
}

TEST(ClientTest, SessionStepsAreNeverRetried) {
  // An UNAVAILABLE session step may have appended to the cache before its answer
  // was lost: a retry would append the tokens twice.
  FakeServer server(/*failures=*/1);
  int retries = 0;
  ClientOptions options = Options(server.target());
  options.on_retry = [&](const RetryEvent&) { ++retries; };
  std::unique_ptr<Client> client = MakeClient(options);
  EXPECT_THAT(client->BlockForward(SessionStep("replica-1.s")),
              StatusIs(absl::StatusCode::kUnavailable, "draining"));
  EXPECT_EQ(server.calls(), 1);
  EXPECT_EQ(retries, 0);
  // The same failure without a session is retried.
  FakeServer plain(/*failures=*/1);
  client = MakeClient(Options(plain.target()));
  absl::StatusOr<v1::BlockForwardResponse> response =
      client->BlockForward(SessionStep(""));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(plain.calls(), 2);
}

v1::Tensor TwoRows() {
  v1::Tensor hidden;
  hidden.add_shape(2);
  hidden.add_shape(1);
  hidden.add_shape(2);
  hidden.set_dtype(v1::FLOAT32);
  hidden.set_data(std::string(16, '\x03'));
  return hidden;
}

TEST(ClientTest, ManySessionsInOneCallAreSentOnceWithTheFirstsHeader) {
  // Like a session step: an UNAVAILABLE call may have appended to every session.
  FakeServer server(/*failures=*/1);
  int retries = 0;
  ClientOptions options = Options(server.target());
  options.on_retry = [&](const RetryEvent&) { ++retries; };
  std::unique_ptr<Client> client = MakeClient(options);
  const std::vector<std::string> ids = {"replica-1.a", "replica-1.b"};
  EXPECT_THAT(client->StepSessions(ids, TwoRows()),
              StatusIs(absl::StatusCode::kUnavailable, "draining"));
  EXPECT_EQ(server.calls(), 1);
  EXPECT_EQ(retries, 0);
  absl::StatusOr<SessionsStepResult> step = client->StepSessions(ids, TwoRows(), {1, 1});
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->hidden_states.data(), std::string(16, '\x03'));
  EXPECT_THAT(step->lengths, ::testing::ElementsAre(11, 21));
  // The same through BlockForward: session_ids alone make it a session call.
  v1::BlockForwardRequest request;
  request.add_session_ids("replica-1.c");
  *request.mutable_hidden_states() = TwoRows();
  FakeServer once(/*failures=*/1);
  client = MakeClient(Options(once.target()));
  EXPECT_THAT(client->BlockForward(request),
              StatusIs(absl::StatusCode::kUnavailable, "draining"));
  EXPECT_EQ(once.calls(), 1);
  // The sessions share a replica: the first one's id routes the call.
  EXPECT_THAT(server.headers(), ::testing::ElementsAre("replica-1.a", "replica-1.a"));
  EXPECT_THAT(once.headers(), ::testing::ElementsAre("replica-1.c"));
}

TEST(ClientTest, StepSessionsRefusesNoSessionsAndIdsThatCannotBeHeaders) {
  FakeServer server;
  std::unique_ptr<Client> client = MakeClient(Options(server.target()));
  EXPECT_THAT(
      client->StepSessions({}, TwoRows()),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("session_ids: empty")));
  EXPECT_THAT(client->StepSessions({"replica-1.a", "bad\nid"}, TwoRows()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("session_ids[1]: a session id is printable ASCII")));
  EXPECT_EQ(server.calls(), 0);
}

TEST(ClientTest, RejectsASessionIdThatCannotBeAHeader) {
  FakeServer server;
  std::unique_ptr<Client> client = MakeClient(Options(server.target()));
  EXPECT_THAT(client->BlockForward(SessionStep("bad\nid")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("printable ASCII")));
  EXPECT_THAT(client->CloseSession("bad\nid"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("printable ASCII")));
  EXPECT_EQ(server.calls(), 0);
}

TEST(ClientTest, HealthOfAServerWithoutHealthServiceIsUnimplemented) {
  FakeServer server;  // No grpc.health.v1 service registered.
  std::unique_ptr<Client> client = MakeClient(Options(server.target()));
  EXPECT_THAT(client->Health(), StatusIs(absl::StatusCode::kUnimplemented, ::testing::_));
}

TEST(ClientTest, RoundRobinOverACommaList) {
  FakeServer a, b;
  std::unique_ptr<Client> client = MakeClient(Options(a.target() + "," + b.target()));
  // round_robin sends only over connections that are ready: until the second one
  // is (slow under the sanitizers), every call goes to the first.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while ((a.calls() == 0 || b.calls() == 0) && absl::Now() < deadline) {
    ASSERT_TRUE(client->Normalize(Request()).ok());
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_GT(a.calls(), 0);
  ASSERT_GT(b.calls(), 0);
  // Both ready: it alternates.
  const int a_before = a.calls(), b_before = b.calls();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(client->Normalize(Request()).ok());
  }
  EXPECT_EQ(a.calls() - a_before + b.calls() - b_before, 20);
  EXPECT_GE(a.calls() - a_before, 5);
  EXPECT_GE(b.calls() - b_before, 5);
}

TEST(ClientTest, MaxMessageBytesLimitsWhatIsSent) {
  FakeServer server;
  ClientOptions options = Options(server.target());
  options.max_message_bytes = 1000;
  std::unique_ptr<Client> client = MakeClient(options);
  v1::NormalizeRequest request = Request();
  request.mutable_input()->set_data(std::string(2000, '\0'));
  EXPECT_THAT(client->Normalize(request), StatusIs(absl::StatusCode::kResourceExhausted,
                                                   HasSubstr("larger than max")));
  EXPECT_EQ(server.calls(), 0);
}

TEST(ClientTest, CreateRejectsBadOptions) {
  ClientOptions options;
  options.retry.max_attempts = 0;
  EXPECT_THAT(Client::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_attempts")));
  options = ClientOptions();
  options.retry.jitter = 1.5;
  EXPECT_THAT(Client::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("jitter")));
  options = ClientOptions();
  options.target = "10.0.0.1:1,server.example:2";
  EXPECT_THAT(Client::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dns:///")));
}

std::string ReadTestFile(const std::string& name) {
  std::ifstream file(std::string(LAYERSERVE_SOURCE_DIR) + "/tests/client/data/tls/" +
                     name);
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_FALSE(text.str().empty()) << name;
  return text.str();
}

// tests/client/data/tls: a self-signed certificate for localhost and 127.0.0.1,
// valid until 2126, made with
//   openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes
//     -keyout server.key -out server.crt -days 36500 -subj /CN=localhost
//     -addext subjectAltName=DNS:localhost,IP:127.0.0.1
TEST(ClientTest, TlsCredentials) {
  grpc::SslServerCredentialsOptions server_tls;
  server_tls.pem_key_cert_pairs.push_back(
      {ReadTestFile("server.key"), ReadTestFile("server.crt")});
  FakeServer server(0, grpc::Status::OK, grpc::SslServerCredentials(server_tls));

  grpc::SslCredentialsOptions client_tls;
  client_tls.pem_root_certs = ReadTestFile("server.crt");
  ClientOptions options = Options(server.target());
  options.credentials = grpc::SslCredentials(client_tls);
  std::unique_ptr<Client> client = MakeClient(options);
  absl::StatusOr<v1::NormalizeResponse> response = client->Normalize(Request());
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->output().data(), std::string(8, '\x01'));

  // Plaintext to a TLS port never gets an answer: UNAVAILABLE, retried, and the
  // server's handler never runs.
  std::unique_ptr<Client> plain = MakeClient(Options(server.target()));
  EXPECT_THAT(plain->Normalize(Request()),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  EXPECT_EQ(server.calls(), 1);
}

TEST(ChannelTargetTest, CommaListsBecomeIpUris) {
  EXPECT_EQ(*ChannelTarget("127.0.0.1:50051"), "127.0.0.1:50051");
  EXPECT_EQ(*ChannelTarget("layerserve:50051"), "layerserve:50051");
  EXPECT_EQ(*ChannelTarget("dns:///layerserve-headless:50051"),
            "dns:///layerserve-headless:50051");
  EXPECT_EQ(*ChannelTarget("10.0.0.1:1, 10.0.0.2:2"), "ipv4:10.0.0.1:1,10.0.0.2:2");
  EXPECT_EQ(*ChannelTarget("ipv4:10.0.0.1:1,10.0.0.2:2"), "ipv4:10.0.0.1:1,10.0.0.2:2");
  EXPECT_EQ(*ChannelTarget("[::1]:1,[fe80::2]:2"), "ipv6:[::1]:1,[fe80::2]:2");
  EXPECT_THAT(ChannelTarget("10.0.0.1:1,[::1]:2"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("all IPv4")));
  EXPECT_THAT(ChannelTarget("10.0.0.1,10.0.0.2"),  // No ports.
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(ChannelTarget("10.0.0.256:1,10.0.0.2:2"),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(ChannelTarget(" "),
              StatusIs(absl::StatusCode::kInvalidArgument, "the target is empty"));
}

TEST(RetryBackoffTest, GrowsExponentiallyWithBoundedJitter) {
  auto ms = [](absl::Duration d) { return absl::ToDoubleMilliseconds(d); };
  RetryPolicy policy;  // 50 ms, x2, max 2 s, jitter 0.2.
  EXPECT_NEAR(ms(RetryBackoff(policy, 1, 0.5)), 50, 1e-6);
  EXPECT_NEAR(ms(RetryBackoff(policy, 2, 0.5)), 100, 1e-6);
  EXPECT_NEAR(ms(RetryBackoff(policy, 3, 0.5)), 200, 1e-6);
  EXPECT_NEAR(ms(RetryBackoff(policy, 6, 0.5)), 1600, 1e-6);
  EXPECT_NEAR(ms(RetryBackoff(policy, 7, 0.5)), 2000, 1e-6);  // Capped.
  EXPECT_NEAR(ms(RetryBackoff(policy, 1000, 0.5)), 2000, 1e-6);
  EXPECT_NEAR(ms(RetryBackoff(policy, 1, 0.0)), 40, 1e-6);   // -20%
  EXPECT_NEAR(ms(RetryBackoff(policy, 2, 1.0)), 120, 1e-6);  // +20%
  policy.jitter = 0;
  EXPECT_NEAR(ms(RetryBackoff(policy, 2, 0.9)), 100, 1e-6);
}

TEST(FromGrpcStatusTest, KeepsCodeAndMessage) {
  EXPECT_THAT(FromGrpcStatus(grpc::Status(grpc::StatusCode::OUT_OF_RANGE, "layer 9")),
              StatusIs(absl::StatusCode::kOutOfRange, "layer 9"));
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

}  // namespace
}  // namespace layerserve::client
