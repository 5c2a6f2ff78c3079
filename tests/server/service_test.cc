// The real LayerService in-process behind a real gRPC server on an ephemeral
// loopback port, called through a real channel: Normalize against the PyTorch golden
// cases in FLOAT32 and BFLOAT16, errors with their exact codes, draining, and
// concurrent callers.
#include "server/rpc/service.h"

#include <grpcpp/grpcpp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>

#include "common/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/norm/norm.h"
#include "tests/golden/golden_json.h"
#include "tests/golden/norm_golden.h"
#include "tests/testing/loopback_server.h"
#include "tests/testing/wire_tensors.h"

namespace layerserve {
namespace {

using ::layerserve::testing::MakeTensor;
using ::layerserve::testing::TensorValues;

using ::layerserve::golden::NormGoldenCase;
using ::testing::HasSubstr;

// |got - want| <= tolerance * max(1, |want|), element by element; NaN where the
// golden file has NaN, the same infinities (golden::WithinTolerance).
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 float tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!golden::WithinTolerance(got[i], want[i], tolerance) && reported++ < 5) {
      ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << want[i]
                    << " (tolerance " << tolerance << " * max(1, |want|))";
    }
  }
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServiceOptions options;
    options.compute_threads = 2;
    service_ = std::make_unique<LayerServiceImpl>(options, &metrics_, models_.get());
    server_ = std::make_unique<testing::LoopbackServer>(service_.get());
    ASSERT_TRUE(server_->started());
    ASSERT_GT(server_->port(), 0);
    stub_ = v1::LayerService::NewStub(server_->NewInsecureChannel());
  }

  void TearDown() override {
    if (server_) server_->Shutdown();
    service_->StopWorkers();
  }

  grpc::Status Normalize(const v1::NormalizeRequest& request,
                         v1::NormalizeResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->Normalize(&context, request, response);
  }

  v1::NormalizeRequest GoldenRequest(const NormGoldenCase& c, ElementType type) {
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

  void CheckGolden(ElementType type, float tolerance) {
    const std::vector<NormGoldenCase> cases =
        golden::LoadNormGolden(LAYERSERVE_SOURCE_DIR "/tests/golden/norm_golden.json");
    ASSERT_FALSE(cases.empty());
    for (const NormGoldenCase& c : cases) {
      v1::NormalizeResponse response;
      const grpc::Status status = Normalize(GoldenRequest(c, type), &response);
      ASSERT_TRUE(status.ok()) << c.name << ": " << status.error_message();
      EXPECT_EQ(response.output().dtype(), GoldenRequest(c, type).input().dtype());
      EXPECT_THAT(response.output().shape(), ::testing::ElementsAreArray(c.shape));
      ExpectClose(TensorValues(response.output()), c.expected, tolerance, c.name);
      if (!c.expected_residual_out.empty()) {
        ExpectClose(TensorValues(response.residual_out()), c.expected_residual_out,
                    tolerance, c.name + " residual_out");
      }
    }
  }

  Metrics metrics_;
  std::unique_ptr<ModelRepository> models_ =
      ModelRepository::Demo(kernels::WeightType::kFloat32);
  std::unique_ptr<LayerServiceImpl> service_;
  std::unique_ptr<testing::LoopbackServer> server_;
  std::unique_ptr<v1::LayerService::Stub> stub_;
};

// Tolerances (tests/golden/make_norm_golden.py): float32 compute matches PyTorch to
// 1e-5 relative; a bfloat16 output carries 8 significant bits (relative rounding
// error up to 2^-9), well inside 2e-2.
TEST_F(ServiceTest, NormalizeMatchesPyTorchInFloat32) {
  CheckGolden(ElementType::kFloat32, golden::kFloat32Tolerance);
}

TEST_F(ServiceTest, NormalizeMatchesPyTorchInBfloat16) {
  CheckGolden(ElementType::kBfloat16, golden::kBfloat16Tolerance);
}

TEST_F(ServiceTest, InvalidRequestGetsInvalidArgumentNamingTheField) {
  v1::NormalizeRequest request;
  request.set_kind(v1::RMS_NORM);
  *request.mutable_input() =
      MakeTensor({3, 5}, std::vector<float>(15, 1.0f), ElementType::kFloat32);
  request.mutable_input()->mutable_data()->resize(56);
  v1::NormalizeResponse response;
  const grpc::Status status = Normalize(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "input.data: shape [3,5] FLOAT32 needs 60 bytes, got 56");
}

TEST_F(ServiceTest, SessionsOpenAndCloseOnce) {
  grpc::ClientContext c1, c2, c3;
  v1::OpenSessionResponse open;
  v1::CloseSessionResponse close;
  ASSERT_TRUE(stub_->OpenSession(&c1, {}, &open).ok());
  EXPECT_FALSE(open.session_id().empty());
  EXPECT_EQ(open.ttl_ms(), 300000);
  v1::CloseSessionRequest request;
  request.set_session_id(open.session_id());
  EXPECT_TRUE(stub_->CloseSession(&c2, request, &close).ok());
  const grpc::Status again = stub_->CloseSession(&c3, request, &close);
  EXPECT_EQ(again.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(again.error_message(), HasSubstr("already closed"));
}

TEST_F(ServiceTest, ListsAndDescribesTheDemoModel) {
  grpc::ClientContext list_context;
  v1::ListModelsResponse list;
  ASSERT_TRUE(stub_->ListModels(&list_context, {}, &list).ok());
  ASSERT_EQ(list.models_size(), 1);
  const v1::ModelInfo& demo = list.models(0);
  EXPECT_EQ(demo.name(), "demo");
  EXPECT_EQ(demo.architecture(), "llama");
  EXPECT_EQ(demo.state(), v1::ModelInfo::READY);
  EXPECT_TRUE(demo.is_default());
  EXPECT_EQ(demo.num_layers(), 4);
  EXPECT_EQ(demo.hidden_size(), 512);
  EXPECT_EQ(demo.num_attention_heads(), 8);
  EXPECT_EQ(demo.num_key_value_heads(), 2);
  EXPECT_EQ(demo.head_dim(), 64);
  EXPECT_EQ(demo.intermediate_size(), 1408);
  EXPECT_EQ(demo.activation(), v1::SWIGLU);
  EXPECT_EQ(demo.norm(), v1::RMS_NORM);
  EXPECT_EQ(demo.rope().rotary_dim(), 64);
  EXPECT_EQ(demo.weight_dtype(), v1::FLOAT32);

  grpc::ClientContext default_context;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModel(&default_context, {}, &info).ok());
  EXPECT_EQ(info.name(), "demo");

  grpc::ClientContext get_context;
  v1::GetModelRequest get;
  get.set_name("llama");
  const grpc::Status status = stub_->GetModel(&get_context, get, &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), HasSubstr("\"llama\""));
}

grpc::Status CallBlockForward(v1::LayerService::Stub& stub,
                              const v1::BlockForwardRequest& r,
                              v1::BlockForwardResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return stub.BlockForward(&context, r, response);
}

std::vector<float> Hidden(int64_t rows, int seed) {
  std::vector<float> x(rows * 512);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i + seed);
  return x;
}

// A padded sequence in a batch gives the same real rows as the sequence alone, its
// padding rows are zeros, and a second sequence does not disturb it.
TEST_F(ServiceTest, BlockForwardBatchWithPaddingMatchesSequenceAlone) {
  const std::vector<float> a = Hidden(5, 1), b = Hidden(5, 2);
  std::vector<float> both(a);
  both.insert(both.end(), b.begin(), b.end());
  v1::BlockForwardRequest batched;
  batched.set_num_layers(2);
  *batched.mutable_hidden_states() = MakeTensor({2, 5, 512}, both, ElementType::kFloat32);
  batched.add_sequence_lengths(3);
  batched.add_sequence_lengths(5);
  batched.set_want_attention_stats(true);
  v1::BlockForwardResponse batched_out;
  ASSERT_TRUE(CallBlockForward(*stub_, batched, &batched_out).ok());
  ASSERT_EQ(batched_out.attention_stats_size(), 2);
  EXPECT_EQ(batched_out.attention_stats(1).layer(), 1);
  EXPECT_EQ(batched_out.attention_stats(0).head_entropy_nats_size(), 8);

  v1::BlockForwardRequest alone;
  alone.set_num_layers(2);
  *alone.mutable_hidden_states() =
      MakeTensor({3, 512}, std::vector<float>(a.begin(), a.begin() + 3 * 512),
                 ElementType::kFloat32);
  v1::BlockForwardResponse alone_out;
  ASSERT_TRUE(CallBlockForward(*stub_, alone, &alone_out).ok());

  const std::vector<float> got = TensorValues(batched_out.hidden_states());
  const std::vector<float> want = TensorValues(alone_out.hidden_states());
  ExpectClose(std::vector<float>(got.begin(), got.begin() + 3 * 512), want, 1e-5f,
              "padded sequence");
  for (int64_t i = 3 * 512; i < 5 * 512; ++i) ASSERT_EQ(got[i], 0.0f) << i;
  for (int64_t i = 5 * 512; i < 10 * 512; ++i) ASSERT_TRUE(std::isfinite(got[i]));
}

TEST_F(ServiceTest, BlockForwardErrorsNameTheField) {
  v1::BlockForwardRequest good;
  *good.mutable_hidden_states() =
      MakeTensor({2, 512}, Hidden(2, 0), ElementType::kFloat32);
  v1::BlockForwardResponse response;
  ASSERT_TRUE(CallBlockForward(*stub_, good, &response).ok());
  EXPECT_EQ(response.hidden_states().dtype(), v1::FLOAT32);

  struct Case {
    std::function<void(v1::BlockForwardRequest&)> change;
    grpc::StatusCode code;
    std::string message;
  };
  const Case cases[] = {
      {[](auto& r) { r.set_model("nope"); }, grpc::StatusCode::NOT_FOUND,
       "model: no model \"nope\""},
      {[](auto& r) { r.set_layer_start(4); }, grpc::StatusCode::OUT_OF_RANGE,
       "layer_start: 4 is past"},
      {[](auto& r) {
         r.set_layer_start(3);
         r.set_num_layers(2);
       },
       grpc::StatusCode::OUT_OF_RANGE, "num_layers: layers 3..4 run past"},
      {[](auto& r) { r.set_layer_start(-1); }, grpc::StatusCode::INVALID_ARGUMENT,
       "layer_start: -1"},
      {[](auto& r) { r.clear_hidden_states(); }, grpc::StatusCode::INVALID_ARGUMENT,
       "hidden_states: required"},
      {[](auto& r) {
         *r.mutable_hidden_states() =
             MakeTensor({2, 7}, std::vector<float>(14), ElementType::kFloat32);
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       "hidden_states.shape: last dimension 7 of [2,7] must equal"},
      {[](auto& r) { r.add_sequence_lengths(3); }, grpc::StatusCode::INVALID_ARGUMENT,
       "sequence_lengths[0]: 3 must be in [1, T = 2]"},
      {[](auto& r) { r.set_position_offset(int64_t{1} << 24); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "position_offset: position 16777217 is past 16777216"},
      {[](auto& r) { r.set_session_id("s"); }, grpc::StatusCode::NOT_FOUND,
       "session_id: session \"s\" was not opened on this replica"},
  };
  for (const Case& c : cases) {
    v1::BlockForwardRequest request = good;
    c.change(request);
    const grpc::Status status = CallBlockForward(*stub_, request, &response);
    EXPECT_EQ(status.error_code(), c.code) << c.message << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message));
  }
}

TEST_F(ServiceTest, DrainingAnswersUnavailable) {
  service_->StartDraining();
  v1::NormalizeRequest request;
  request.set_kind(v1::LAYER_NORM);
  *request.mutable_input() = MakeTensor({4}, {1, 2, 3, 4}, ElementType::kFloat32);
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
        *request.mutable_input() = MakeTensor({rows, dim}, x, ElementType::kFloat32);
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
        const std::vector<float> got = TensorValues(response.output());
        for (size_t k = 0; k < want.size(); ++k) {
          if (!(std::fabs(got[k] - want[k]) <=
                1e-5f * std::max(1.0f, std::fabs(want[k])))) {
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
