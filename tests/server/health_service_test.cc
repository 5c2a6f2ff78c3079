// grpc.health.v1 as served by HealthService, through a real loopback channel:
// Check, Watch updates, and Shutdown() ending the Watch streams.
#include "server/rpc/health_service.h"

#include <grpcpp/grpcpp.h>

#include <memory>

#include "gtest/gtest.h"
#include "tests/testing/loopback_server.h"

namespace layerserve {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

class HealthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<testing::LoopbackServer>(&health_);
    ASSERT_TRUE(server_->started());
    stub_ = Health::NewStub(server_->NewInsecureChannel());
  }
  void TearDown() override {
    health_.Shutdown();
    server_->Shutdown();
  }

  grpc::Status Check(const std::string& service, HealthCheckResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    HealthCheckRequest request;
    request.set_service(service);
    return stub_->Check(&context, request, response);
  }

  HealthService health_{{"svc.A", "svc.Failed"}, {"svc.Failed"}};
  std::unique_ptr<testing::LoopbackServer> server_;
  std::unique_ptr<Health::Stub> stub_;
};

TEST_F(HealthServiceTest, CheckReportsStatusOfKnownServices) {
  HealthCheckResponse response;
  ASSERT_TRUE(Check("svc.A", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  health_.SetServing(true);
  for (const char* name : {"", "svc.A"}) {
    ASSERT_TRUE(Check(name, &response).ok());
    EXPECT_EQ(response.status(), HealthCheckResponse::SERVING) << name;
  }
}

// A service that never serves (a model that failed to load) stays NOT_SERVING
// while the others serve, on Check and on Watch.
TEST_F(HealthServiceTest, ANeverServingServiceStaysNotServing) {
  health_.SetServing(true);
  HealthCheckResponse response;
  ASSERT_TRUE(Check("svc.Failed", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  ASSERT_TRUE(Check("svc.A", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  HealthCheckRequest request;
  request.set_service("svc.Failed");
  auto reader = stub_->Watch(&context, request);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  health_.SetServing(false);  // No change for it: nothing sent.
  health_.SetServing(true);
  health_.Shutdown();
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(reader->Read(&response));
  EXPECT_TRUE(reader->Finish().ok());
}

// A repository reload adds a model's service (NOT_SERVING while it loads, SERVING
// once it serves) and removes one (SERVICE_UNKNOWN to its watchers, NOT_FOUND on
// Check), and its watchers hear each step.
TEST_F(HealthServiceTest, ServicesComeAndGoAtRuntime) {
  health_.SetServing(true);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  HealthCheckRequest request;
  request.set_service("svc.New");
  auto reader = stub_->Watch(&context, request);
  HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVICE_UNKNOWN);

  health_.SetService("svc.New", /*ready=*/false);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  health_.SetService("svc.New", /*ready=*/true);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  ASSERT_TRUE(Check("svc.New", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);

  health_.RemoveService("svc.New");
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  EXPECT_EQ(Check("svc.New", &response).error_code(), grpc::StatusCode::NOT_FOUND);
  context.TryCancel();
  while (reader->Read(&response)) {
  }

  // A model that failed at start and loads on a reload serves; a service added
  // while the server does not serve (draining) stays NOT_SERVING.
  health_.SetService("svc.Failed", /*ready=*/true);
  ASSERT_TRUE(Check("svc.Failed", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  health_.SetServing(false);
  health_.SetService("svc.Late", /*ready=*/true);
  ASSERT_TRUE(Check("svc.Late", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  health_.SetServing(true);
  ASSERT_TRUE(Check("svc.Late", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
}

TEST(ModelHealthServiceTest, IsTheLayerServiceSlashTheModel) {
  EXPECT_EQ(ModelHealthService("tiny-llama"), "layerserve.v1.LayerService/tiny-llama");
}

TEST_F(HealthServiceTest, CheckOfUnknownServiceIsNotFound) {
  HealthCheckResponse response;
  EXPECT_EQ(Check("svc.B", &response).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(HealthServiceTest, WatchSeesEveryChangeAndEndsOnShutdown) {
  health_.SetServing(true);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  HealthCheckRequest request;
  request.set_service("svc.A");
  auto reader = stub_->Watch(&context, request);
  HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);

  health_.SetServing(false);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);

  health_.Shutdown();
  // The last status sent is NOT_SERVING, then the stream ends with OK.
  while (reader->Read(&response)) {
    EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  }
  EXPECT_TRUE(reader->Finish().ok());

  // After Shutdown, SetServing(true) is ignored.
  health_.SetServing(true);
  ASSERT_TRUE(Check("svc.A", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
}

TEST_F(HealthServiceTest, WatchOfUnknownServiceSaysServiceUnknown) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  HealthCheckRequest request;
  request.set_service("svc.B");
  auto reader = stub_->Watch(&context, request);
  HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  context.TryCancel();
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(HealthServiceTest, WatchAfterShutdownGetsNotServingAndEnds) {
  health_.Shutdown();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  HealthCheckRequest request;
  auto reader = stub_->Watch(&context, request);
  HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(reader->Read(&response));
  EXPECT_TRUE(reader->Finish().ok());
}

// Many watchers coming and going while the status flips: no crash, no hang, and
// each ends when the service shuts down.
TEST_F(HealthServiceTest, ManyWatchersSurviveChurn) {
  constexpr int kWatchers = 16;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<HealthCheckResponse>>> readers;
  HealthCheckRequest request;
  for (int i = 0; i < kWatchers; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() +
                                  std::chrono::seconds(20));
    readers.push_back(stub_->Watch(contexts.back().get(), request));
    health_.SetServing(i % 2 == 0);
  }
  for (int i = 0; i < kWatchers; i += 2) contexts[i]->TryCancel();
  health_.Shutdown();
  HealthCheckResponse response;
  for (int i = 0; i < kWatchers; ++i) {
    HealthCheckResponse::ServingStatus last = HealthCheckResponse::UNKNOWN;
    while (readers[i]->Read(&response)) last = response.status();
    const grpc::Status status = readers[i]->Finish();
    if (i % 2 == 1) {
      EXPECT_TRUE(status.ok()) << i << ": " << status.error_message();
      EXPECT_EQ(last, HealthCheckResponse::NOT_SERVING) << i;
    } else {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED) << i;
    }
  }
}

}  // namespace
}  // namespace layerserve
