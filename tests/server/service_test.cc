// The real LayerService in-process behind a real gRPC server on an ephemeral
// loopback port, called through a real channel: Normalize against the PyTorch golden
// cases in FLOAT32 and BFLOAT16, errors with their exact codes, draining, and
// concurrent callers.
#include "server/service.h"

#include <grpcpp/grpcpp.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/dtype.h"
#include "kernels/norm.h"
#include "tests/golden/norm_golden.h"

namespace layerserve {
namespace {

using ::layerserve::golden::NormGoldenCase;
using ::testing::HasSubstr;

v1::Tensor MakeTensor(const std::vector<int64_t>& shape, const std::vector<float>& values,
                      kernels::ElementType type) {
  v1::Tensor t;
  t.mutable_shape()->Assign(shape.begin(), shape.end());
  t.set_dtype(type == kernels::ElementType::kFloat32    ? v1::FLOAT32
              : type == kernels::ElementType::kBfloat16 ? v1::BFLOAT16
                                                        : v1::FLOAT16);
  std::string* data = t.mutable_data();
  data->resize(values.size() * kernels::ElementSize(type));
  kernels::ConvertFromFloat32(type, values.data(), values.size(), data->data());
  return t;
}

std::vector<float> ToFloats(const v1::Tensor& t) {
  const kernels::ElementType type = t.dtype() == v1::FLOAT32 ? kernels::ElementType::kFloat32
                                    : t.dtype() == v1::BFLOAT16
                                        ? kernels::ElementType::kBfloat16
                                        : kernels::ElementType::kFloat16;
  std::vector<float> values(t.data().size() / kernels::ElementSize(type));
  kernels::ConvertToFloat32(type, t.data().data(), values.size(), values.data());
  return values;
}

// |got - want| <= tolerance * max(1, |want|), element by element.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 float tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float bound = tolerance * std::max(1.0f, std::fabs(want[i]));
    if (!(std::fabs(got[i] - want[i]) <= bound) && reported++ < 5) {
      ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << want[i]
                    << " (bound " << bound << ")";
    }
  }
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pool_ = std::make_unique<WorkerPool>(2);
    service_ = std::make_unique<LayerServiceImpl>(pool_.get(), &metrics_);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    stub_ = v1::LayerService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_) server_->Shutdown();
    pool_->Stop();
  }

  grpc::Status Normalize(const v1::NormalizeRequest& request,
                         v1::NormalizeResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->Normalize(&context, request, response);
  }

  v1::NormalizeRequest GoldenRequest(const NormGoldenCase& c, kernels::ElementType type) {
    v1::NormalizeRequest request;
    request.set_kind(c.kind == "layer_norm" ? v1::LAYER_NORM : v1::RMS_NORM);
    request.set_epsilon(c.epsilon);
    request.set_weight_offset(c.weight_offset);
    *request.mutable_input() = MakeTensor(c.shape, c.input, type);
    const int64_t dim = c.shape.back();
    if (!c.weight.empty()) *request.mutable_weight() = MakeTensor({dim}, c.weight, type);
    if (!c.bias.empty()) *request.mutable_bias() = MakeTensor({dim}, c.bias, type);
    if (!c.residual.empty()) {
      *request.mutable_residual() = MakeTensor(c.shape, c.residual, type);
    }
    return request;
  }

  void CheckGolden(kernels::ElementType type, float tolerance) {
    const std::vector<NormGoldenCase> cases =
        golden::LoadNormGolden(LAYERSERVE_SOURCE_DIR "/tests/golden/norm_golden.json");
    ASSERT_FALSE(cases.empty());
    for (const NormGoldenCase& c : cases) {
      v1::NormalizeResponse response;
      const grpc::Status status = Normalize(GoldenRequest(c, type), &response);
      ASSERT_TRUE(status.ok()) << c.name << ": " << status.error_message();
      EXPECT_EQ(response.output().dtype(), GoldenRequest(c, type).input().dtype());
      EXPECT_THAT(response.output().shape(), ::testing::ElementsAreArray(c.shape));
      ExpectClose(ToFloats(response.output()), c.expected, tolerance, c.name);
      if (!c.expected_residual_out.empty()) {
        ExpectClose(ToFloats(response.residual_out()), c.expected_residual_out,
                    tolerance, c.name + " residual_out");
      }
    }
  }

  Metrics metrics_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<LayerServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::LayerService::Stub> stub_;
};

// Tolerances (tests/golden/make_norm_golden.py): float32 compute matches PyTorch to
// 1e-5 relative; a bfloat16 output carries 8 significant bits (relative rounding
// error up to 2^-9), well inside 2e-2.
TEST_F(ServiceTest, NormalizeMatchesPyTorchInFloat32) {
  CheckGolden(kernels::ElementType::kFloat32, golden::kFloat32Tolerance);
}

TEST_F(ServiceTest, NormalizeMatchesPyTorchInBfloat16) {
  CheckGolden(kernels::ElementType::kBfloat16, golden::kBfloat16Tolerance);
}

TEST_F(ServiceTest, InvalidRequestGetsInvalidArgumentNamingTheField) {
  v1::NormalizeRequest request;
  request.set_kind(v1::RMS_NORM);
  *request.mutable_input() = MakeTensor({3, 5}, std::vector<float>(15, 1.0f),
                                        kernels::ElementType::kFloat32);
  request.mutable_input()->mutable_data()->resize(56);
  v1::NormalizeResponse response;
  const grpc::Status status = Normalize(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "input.data: shape [3,5] FLOAT32 needs 60 bytes, got 56");
}

TEST_F(ServiceTest, MethodsNotYetServedAnswerUnimplemented) {
  grpc::ClientContext c1, c2, c3, c4, c5;
  v1::PositionalEncodeResponse pe;
  v1::ActivateResponse act;
  v1::BlockForwardResponse block;
  v1::OpenSessionResponse open;
  v1::CloseSessionResponse close;
  const grpc::Status statuses[] = {
      stub_->PositionalEncode(&c1, {}, &pe), stub_->Activate(&c2, {}, &act),
      stub_->BlockForward(&c3, {}, &block), stub_->OpenSession(&c4, {}, &open),
      stub_->CloseSession(&c5, {}, &close)};
  const char* names[] = {"PositionalEncode", "Activate", "BlockForward", "OpenSession",
                         "CloseSession"};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(statuses[i].error_code(), grpc::StatusCode::UNIMPLEMENTED) << names[i];
    EXPECT_THAT(statuses[i].error_message(), HasSubstr(names[i]));
  }
}

TEST_F(ServiceTest, ListModelsIsEmptyAndGetModelIsNotFound) {
  grpc::ClientContext list_context;
  v1::ListModelsResponse list;
  ASSERT_TRUE(stub_->ListModels(&list_context, {}, &list).ok());
  EXPECT_EQ(list.models_size(), 0);

  grpc::ClientContext get_context;
  v1::GetModelRequest get;
  get.set_name("llama");
  v1::ModelInfo info;
  const grpc::Status status = stub_->GetModel(&get_context, get, &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), HasSubstr("\"llama\""));
}

TEST_F(ServiceTest, DrainingAnswersUnavailable) {
  service_->StartDraining();
  v1::NormalizeRequest request;
  request.set_kind(v1::LAYER_NORM);
  *request.mutable_input() = MakeTensor({4}, {1, 2, 3, 4}, kernels::ElementType::kFloat32);
  v1::NormalizeResponse response;
  const grpc::Status status = Normalize(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(status.error_message(), HasSubstr("draining"));
}

// Many callers at once, each with its own data: every answer is its own, equal to
// the reference kernel run on that request alone.
TEST_F(ServiceTest, ConcurrentCallersEachGetTheirOwnResult) {
  constexpr int kThreads = 8;
  constexpr int kCallsPerThread = 20;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCallsPerThread; ++i) {
        const int64_t rows = 1 + (t + i) % 5, dim = 7 + 64 * ((t * i) % 3);
        std::vector<float> x(rows * dim);
        for (size_t k = 0; k < x.size(); ++k) x[k] = std::sin(0.1f * k + t * 13 + i);
        v1::NormalizeRequest request;
        request.set_kind(i % 2 ? v1::RMS_NORM : v1::LAYER_NORM);
        *request.mutable_input() =
            MakeTensor({rows, dim}, x, kernels::ElementType::kFloat32);
        v1::NormalizeResponse response;
        if (!Normalize(request, &response).ok()) {
          ++failures;
          continue;
        }
        std::vector<float> want(x.size());
        kernels::NormParams params;
        params.epsilon = i % 2 ? 1e-6f : 1e-5f;
        if (i % 2) {
          kernels::RmsNormReference(x.data(), rows, dim, params, want.data());
        } else {
          kernels::LayerNormReference(x.data(), rows, dim, params, want.data());
        }
        const std::vector<float> got = ToFloats(response.output());
        for (size_t k = 0; k < want.size(); ++k) {
          if (!(std::fabs(got[k] - want[k]) <= 1e-5f * std::max(1.0f, std::fabs(want[k])))) {
            ++failures;
            break;
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace layerserve
