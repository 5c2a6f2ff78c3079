// layerserve::Client against the real server binary (build/bin/layerserve) secured
// with tests/testing/pki.py's files: bearer tokens (right, wrong, missing, from a
// file, on session calls, not needed for Health), mutual TLS (a client certificate
// from the server's CA, none, another CA's), and the security options that
// Client::Create refuses. The token never shows in a status the client returns.
// In process: which calls carry the token (all but Health).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/cpp/client.h"
#include "client/cpp/pipeline.h"
#include "client/cpp/tensor_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback_server.h"
#include "tests/testing/server_child.h"
#include "tests/testing/status_matchers.h"

namespace layerserve::client {
namespace {

using ::layerserve::testing::ReadFile;
using ::layerserve::testing::ServerChild;
using ::layerserve::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

// tests/testing/pki.py's TOKENS.
constexpr char kToken[] = "s3cret-token-one-0123456789abcdef";
constexpr char kWrongToken[] = "s3cret-token-zzz-0123456789abcdef";
constexpr char kMissing[] =
    "missing credentials: this server requires \"authorization: Bearer <token>\" "
    "metadata";
constexpr char kInvalid[] = "invalid bearer token";

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream(path) << content;
}

void ExpectServing(Client& client) {
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> health =
      client.Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, grpc::health::v1::HealthCheckResponse::SERVING);
}

class ClientSecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char dir[] = "/tmp/layerserve-client-security-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = new std::string(dir);
    const std::string make_pki = absl::StrCat("/usr/bin/python3 ", LAYERSERVE_SOURCE_DIR,
                                              "/tests/testing/pki.py ", *dir_);
    ASSERT_EQ(std::system(make_pki.c_str()), 0) << make_pki;
    token_server_ = new ServerChild(*dir_, "token",
                                    {absl::StrCat("--auth-token-file=", Path("tokens"))});
    ASSERT_FALSE(token_server_->target().empty()) << token_server_->output();
    mtls_server_ = new ServerChild(*dir_, "mtls",
                                   {absl::StrCat("--tls-cert=", Path("server.crt")),
                                    absl::StrCat("--tls-key=", Path("server.key")),
                                    absl::StrCat("--tls-client-ca=", Path("ca.crt")),
                                    absl::StrCat("--auth-token-file=", Path("tokens"))});
    ASSERT_FALSE(mtls_server_->target().empty()) << mtls_server_->output();
  }
  static void TearDownTestSuite() {
    delete token_server_;
    delete mtls_server_;
    std::system(absl::StrCat("rm -rf ", *dir_).c_str());
    delete dir_;
  }

  static std::string Path(const std::string& name) {
    return absl::StrCat(*dir_, "/", name);
  }

  // Options of a client of `server` that makes one attempt, so that a refused
  // handshake (UNAVAILABLE) is not retried until the deadline.
  static ClientOptions Options(const ServerChild& server) {
    ClientOptions options;
    options.target = server.target();
    options.timeout = absl::Seconds(20);
    options.retry.max_attempts = 1;
    return options;
  }

  static std::unique_ptr<Client> Make(ClientOptions options) {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(std::move(options));
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  static std::string* dir_;
  static ServerChild* token_server_;
  static ServerChild* mtls_server_;
};

std::string* ClientSecurityTest::dir_ = nullptr;
ServerChild* ClientSecurityTest::token_server_ = nullptr;
ServerChild* ClientSecurityTest::mtls_server_ = nullptr;

TEST_F(ClientSecurityTest, TheRightTokenIsAccepted) {
  ClientOptions options = Options(*token_server_);
  options.token = kToken;
  std::unique_ptr<Client> client = Make(options);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<v1::ListModelsResponse> models = client->ListModels();
  ASSERT_TRUE(models.ok()) << models.status();
  EXPECT_GT(models->models_size(), 0);
}

TEST_F(ClientSecurityTest, ATokenFileIsReadAndStripped) {
  // The trailing newline an editor adds is not part of the token.
  WriteFile(Path("my-token"), absl::StrCat("  ", kToken, "\n"));
  ClientOptions options = Options(*token_server_);
  options.token_file = Path("my-token");
  std::unique_ptr<Client> client = Make(options);
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(client->GetModel("").ok());
}

TEST_F(ClientSecurityTest, AWrongOrMissingTokenIsUnauthenticatedWithTheServersMessage) {
  ClientOptions wrong = Options(*token_server_);
  wrong.token = kWrongToken;
  absl::StatusOr<v1::ListModelsResponse> refused = Make(wrong)->ListModels();
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kUnauthenticated, kInvalid));
  EXPECT_THAT(refused.status().ToString(), Not(HasSubstr(kWrongToken)));
  EXPECT_THAT(Make(Options(*token_server_))->ListModels(),
              StatusIs(absl::StatusCode::kUnauthenticated, kMissing));
}

TEST_F(ClientSecurityTest, HealthNeedsNoToken) {
  std::unique_ptr<Client> client = Make(Options(*token_server_));
  ExpectServing(*client);
}

TEST_F(ClientSecurityTest, SessionCallsCarryTheToken) {
  ClientOptions options = Options(*token_server_);
  options.token = kToken;
  std::unique_ptr<Client> client = Make(options);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<v1::ModelInfo> model = client->GetModel("");
  ASSERT_TRUE(model.ok()) << model.status();
  v1::OpenSessionRequest open;
  open.set_num_layers(1);
  absl::StatusOr<v1::OpenSessionResponse> session = client->OpenSession(open);
  ASSERT_TRUE(session.ok()) << session.status();
  v1::BlockForwardRequest step;
  step.set_session_id(session->session_id());
  const int64_t hidden = model->hidden_size();
  absl::StatusOr<v1::Tensor> x =
      TensorFromFloats(std::vector<float>(3 * hidden, 0.5f), {3, hidden}, v1::FLOAT32);
  ASSERT_TRUE(x.ok()) << x.status();
  *step.mutable_hidden_states() = *x;
  absl::StatusOr<v1::BlockForwardResponse> out = client->BlockForward(step);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->session_length(), 3);
  EXPECT_TRUE(client->CloseSession(session->session_id()).ok());

  // The same session call without the token is refused before it reaches the
  // session.
  ClientOptions no_token = Options(*token_server_);
  EXPECT_THAT(Make(no_token)->BlockForward(step),
              StatusIs(absl::StatusCode::kUnauthenticated, kMissing));
}

// Two stages (layers 0-1 and 2-3 of the demo model, both on the token server):
// the pipeline's BlockForward, OpenSession and CloseSession calls all carry the
// token of its options; with a wrong one the first stage refuses.
TEST_F(ClientSecurityTest, PipelineCallsCarryTheToken) {
  ClientOptions options = Options(*token_server_);
  options.token = kToken;
  const std::vector<PipelineStage> stages = {{{token_server_->target()}, 0, 2},
                                             {{token_server_->target()}, 2, 2}};
  absl::StatusOr<std::unique_ptr<Pipeline>> pipeline =
      Pipeline::Create(stages, "", options);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  absl::StatusOr<v1::ModelInfo> model = Make(options)->GetModel("");
  ASSERT_TRUE(model.ok()) << model.status();
  const int64_t hidden = model->hidden_size();
  absl::StatusOr<v1::Tensor> x =
      TensorFromFloats(std::vector<float>(2 * hidden, 0.25f), {2, hidden}, v1::FLOAT32);
  ASSERT_TRUE(x.ok()) << x.status();
  v1::BlockForwardRequest request;
  *request.mutable_hidden_states() = *x;
  absl::StatusOr<v1::BlockForwardResponse> out = (*pipeline)->Forward(request);
  EXPECT_TRUE(out.ok()) << out.status();
  {
    absl::StatusOr<std::unique_ptr<PipelineSession>> session = (*pipeline)->OpenSession();
    ASSERT_TRUE(session.ok()) << session.status();
    absl::StatusOr<PipelineSession::StepResult> step = (*session)->Forward(*x);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(step->length, 2);
    EXPECT_TRUE((*session)->Close().ok());
  }

  ClientOptions wrong = options;
  wrong.token = kWrongToken;
  absl::StatusOr<std::unique_ptr<Pipeline>> refused = Pipeline::Create(stages, "", wrong);
  ASSERT_TRUE(refused.ok()) << refused.status();
  absl::StatusOr<v1::BlockForwardResponse> denied = (*refused)->Forward(request);
  EXPECT_THAT(denied, StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr(kInvalid)));
  EXPECT_THAT(denied.status().ToString(), Not(HasSubstr(kWrongToken)));
}

TEST_F(ClientSecurityTest, MutualTlsWithAClientCertificateFromTheCa) {
  ClientOptions options = Options(*mtls_server_);
  options.token = kToken;
  options.tls_ca_file = Path("ca.crt");
  options.tls_cert_file = Path("client.crt");
  options.tls_key_file = Path("client.key");
  std::unique_ptr<Client> client = Make(options);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<v1::ListModelsResponse> models = client->ListModels();
  EXPECT_TRUE(models.ok()) << models.status();
  ExpectServing(*client);
}

TEST_F(ClientSecurityTest, MutualTlsRefusesNoCertificateAndAnotherCasCertificate) {
  // With the right token, so the handshake is what refuses them.
  ClientOptions none = Options(*mtls_server_);
  none.token = kToken;
  none.tls_ca_file = Path("ca.crt");
  EXPECT_THAT(Make(none)->ListModels(),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  ClientOptions stranger = none;
  stranger.tls_cert_file = Path("stranger.crt");
  stranger.tls_key_file = Path("stranger.key");
  absl::StatusOr<v1::ListModelsResponse> refused = Make(stranger)->ListModels();
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  EXPECT_THAT(refused.status().ToString(), Not(HasSubstr(kToken)));
}

TEST_F(ClientSecurityTest, CreateRefusesContradictoryOrUnreadableSecurityOptions) {
  ClientOptions twice;
  twice.token = kToken;
  twice.token_file = Path("tokens");
  EXPECT_THAT(Client::Create(twice),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("token and token_file exclude each other")));
  ClientOptions cert_only;
  cert_only.tls_cert_file = Path("client.crt");
  EXPECT_THAT(Client::Create(cert_only),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tls_cert_file needs tls_key_file")));
  ClientOptions key_only;
  key_only.tls_key_file = Path("client.key");
  EXPECT_THAT(Client::Create(key_only),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tls_key_file needs tls_cert_file")));
  ClientOptions both_ways;
  both_ways.credentials = grpc::SslCredentials(grpc::SslCredentialsOptions());
  both_ways.tls_ca_file = Path("ca.crt");
  EXPECT_THAT(Client::Create(both_ways),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("credentials and tls_ca_file exclude each other")));
  ClientOptions missing;
  missing.tls_ca_file = Path("nope.crt");
  EXPECT_THAT(Client::Create(missing),
              StatusIs(absl::StatusCode::kNotFound,
                       absl::StrCat("tls_ca_file: cannot read ", Path("nope.crt"))));
  ClientOptions no_file;
  no_file.token_file = Path("nope");
  EXPECT_THAT(Client::Create(no_file),
              StatusIs(absl::StatusCode::kNotFound,
                       absl::StrCat("token_file: cannot read ", Path("nope"))));
  WriteFile(Path("empty"), "\n");
  ClientOptions empty;
  empty.token_file = Path("empty");
  EXPECT_THAT(Client::Create(empty),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("token_file: " + Path("empty") + " holds no token")));
  // A file with two lines is not one token; the message does not quote it.
  WriteFile(Path("two-lines"), absl::StrCat(kToken, "\n", kWrongToken, "\n"));
  ClientOptions two_lines;
  two_lines.token_file = Path("two-lines");
  absl::StatusOr<std::unique_ptr<Client>> bad = Client::Create(two_lines);
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("one token")));
  EXPECT_THAT(bad.status().ToString(), Not(HasSubstr(kToken)));
  ClientOptions spaced;
  spaced.token = absl::StrCat(kToken, " x");
  absl::StatusOr<std::unique_ptr<Client>> refused = Client::Create(spaced);
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("token:")));
  EXPECT_THAT(refused.status().ToString(), Not(HasSubstr(kToken)));
}

// What the client sends: an in-process server that records the authorization
// metadata of each call (the real server strips it before any handler runs).
class RecordingService final : public v1::LayerService::Service,
                               public grpc::health::v1::Health::Service {
 public:
  grpc::Status ListModels(grpc::ServerContext* context, const v1::ListModelsRequest*,
                          v1::ListModelsResponse*) override {
    return Record("ListModels", context);
  }
  grpc::Status Check(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest*,
                     grpc::health::v1::HealthCheckResponse* response) override {
    response->set_status(grpc::health::v1::HealthCheckResponse::SERVING);
    return Record("Health", context);
  }
  std::vector<std::string> seen() {
    absl::MutexLock lock(&mu_);
    return seen_;
  }

 private:
  grpc::Status Record(const char* method, grpc::ServerContext* context) {
    std::string value = "-";
    for (auto [key, v] : context->client_metadata()) {
      if (key == "authorization") value = std::string(v.data(), v.size());
    }
    absl::MutexLock lock(&mu_);
    seen_.push_back(absl::StrCat(method, " ", value));
    return grpc::Status::OK;
  }

  absl::Mutex mu_;
  std::vector<std::string> seen_ ABSL_GUARDED_BY(mu_);
};

TEST(ClientTokenTest, EveryLayerServiceCallCarriesTheTokenAndHealthDoesNot) {
  RecordingService service;
  testing::LoopbackServer server(
      {static_cast<v1::LayerService::Service*>(&service),
       static_cast<grpc::health::v1::Health::Service*>(&service)});
  ASSERT_TRUE(server.started());
  ClientOptions options;
  options.target = server.target();
  options.token = kToken;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->ListModels().ok());
  EXPECT_TRUE((*client)->Health().ok());
  EXPECT_THAT(
      service.seen(),
      ::testing::ElementsAre(absl::StrCat("ListModels Bearer ", kToken), "Health -"));
  server.Shutdown();
}

}  // namespace
}  // namespace layerserve::client
