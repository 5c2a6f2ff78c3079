// The Open Inference Protocol's mapping onto layerserve.v1 (server/oip/): the
// inputs, parameters and outputs each operation's descriptors give, the same rule
// on a message built at run time (a field appears with no code change),
// FillRequest / CheckRequestedOutputs / FillResponse with every error's exact code
// and message, the parameter conversions (infer_parameter.h) and the sequence
// parameters (ParseSequenceControl).
#include "server/oip/operation_mapping.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/dynamic_message.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.pb.h"
#include "layerserve/v1/layerserve.pb.h"
#include "server/oip/infer_parameter.h"
#include "server/oip/sequence.h"
#include "server/ops/activate.h"
#include "server/ops/block_forward.h"
#include "server/ops/normalize.h"
#include "server/ops/positional_encode.h"
#include "tests/testing/status_matchers.h"

namespace layerserve::oip {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::DescriptorPool;
using ::google::protobuf::DynamicMessageFactory;
using ::google::protobuf::FieldDescriptorProto;
using ::google::protobuf::FileDescriptorProto;
using ::google::protobuf::Message;
using ::inference::InferParameter;
using ::inference::ModelInferRequest;
using ::inference::ModelInferResponse;
using ::layerserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::IsSupersetOf;
using ::testing::Not;
using ::testing::StartsWith;

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

// As server/rpc/inference_service.cc builds them.
template <typename Op>
OperationMapping MappingOf(const std::vector<std::string>& fixed = {}) {
  return OperationMapping(*Op::Request::descriptor(), *Op::Response::descriptor(), fixed);
}

const OperationMapping& Normalize() {
  static const OperationMapping* const mapping =
      new OperationMapping(MappingOf<NormalizeOp>());
  return *mapping;
}
const OperationMapping& Activate() {
  static const OperationMapping* const mapping =
      new OperationMapping(MappingOf<ActivateOp>());
  return *mapping;
}
const OperationMapping& PositionalEncode() {
  static const OperationMapping* const mapping =
      new OperationMapping(MappingOf<PositionalEncodeOp>());
  return *mapping;
}
const OperationMapping& BlockForward() {
  static const OperationMapping* const mapping =
      new OperationMapping(MappingOf<BlockForwardOp>({"model"}));
  return *mapping;
}

std::vector<std::string> Names(const std::vector<FieldPath>& paths) {
  std::vector<std::string> names;
  for (const FieldPath& path : paths) names.push_back(path.name);
  return names;
}
std::vector<std::string> Names(const std::vector<MappedInput>& inputs) {
  std::vector<std::string> names;
  for (const MappedInput& input : inputs) names.push_back(input.path.name);
  return names;
}
const MappedInput& InputNamed(const OperationMapping& mapping, const std::string& name) {
  for (const MappedInput& input : mapping.inputs()) {
    if (input.path.name == name) return input;
  }
  ADD_FAILURE() << "no input " << name;
  static const MappedInput none;
  return none;
}

InferParameter Int(int64_t v) {
  InferParameter p;
  p.set_int64_param(v);
  return p;
}
InferParameter Uint(uint64_t v) {
  InferParameter p;
  p.set_uint64_param(v);
  return p;
}
InferParameter Double(double v) {
  InferParameter p;
  p.set_double_param(v);
  return p;
}
InferParameter String(const std::string& v) {
  InferParameter p;
  p.set_string_param(v);
  return p;
}
InferParameter Bool(bool v) {
  InferParameter p;
  p.set_bool_param(v);
  return p;
}

ModelInferRequest::InferInputTensor* AddInput(ModelInferRequest& request,
                                              const std::string& name,
                                              const std::string& datatype,
                                              const std::vector<int64_t>& shape) {
  auto* input = request.add_inputs();
  input->set_name(name);
  input->set_datatype(datatype);
  for (int64_t dim : shape) input->add_shape(dim);
  return input;
}

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::vector<float> Floats(const v1::Tensor& tensor) {
  std::vector<float> values(tensor.data().size() / sizeof(float));
  if (!values.empty())
    std::memcpy(values.data(), tensor.data().data(), tensor.data().size());
  return values;
}

// FillRequest as the service calls it (the sequence parameters are its own).
absl::Status Fill(const OperationMapping& mapping, ModelInferRequest& infer,
                  Message* request) {
  return mapping.FillRequest(infer, &IsSequenceParameter, request);
}

// ---------------------------------------------------------------------------
// The lists each operation's descriptors give.

TEST(OperationMappingListsTest, Normalize) {
  const OperationMapping& m = Normalize();
  EXPECT_EQ(&m.request_type(), v1::NormalizeRequest::descriptor());
  EXPECT_THAT(Names(m.inputs()), ElementsAre("input", "weight", "bias", "residual"));
  for (const MappedInput& input : m.inputs()) {
    EXPECT_TRUE(input.tensor) << input.path.name;
    EXPECT_EQ(input.required, input.path.name == "input") << input.path.name;
  }
  EXPECT_THAT(Names(m.parameters()),
              ElementsAre("kind", "epsilon", "weight_offset", "output_dtype"));
  EXPECT_THAT(Names(m.outputs()), ElementsAre("output", "residual_out"));
  EXPECT_THAT(Names(m.response_parameters()), IsEmpty());
}

TEST(OperationMappingListsTest, Activate) {
  const OperationMapping& m = Activate();
  EXPECT_THAT(Names(m.inputs()), ElementsAre("input", "gate"));
  EXPECT_TRUE(InputNamed(m, "input").required);
  EXPECT_FALSE(InputNamed(m, "gate").required);
  EXPECT_THAT(Names(m.parameters()), ElementsAre("activation", "output_dtype"));
  EXPECT_THAT(Names(m.outputs()), ElementsAre("output"));
  EXPECT_THAT(Names(m.response_parameters()), IsEmpty());
}

TEST(OperationMappingListsTest, PositionalEncode) {
  const OperationMapping& m = PositionalEncode();
  // Tensors, and the repeated int64 positions also as INT64 inputs, in field order.
  EXPECT_THAT(Names(m.inputs()),
              ElementsAre("sinusoidal.input", "sinusoidal.positions", "learned.input",
                          "learned.table", "learned.positions", "rope.query", "rope.key",
                          "rope.positions", "alibi.scores", "t5_bias.table"));
  EXPECT_TRUE(InputNamed(m, "rope.query").tensor);
  EXPECT_TRUE(InputNamed(m, "t5_bias.table").tensor);
  EXPECT_FALSE(InputNamed(m, "sinusoidal.positions").tensor);  // INT64.
  // Every input is under the oneof: none is the main input.
  for (const MappedInput& input : m.inputs()) {
    EXPECT_FALSE(input.required) << input.path.name;
  }
  const FieldPath* type = nullptr;
  for (const FieldPath& path : m.parameters()) {
    if (path.name == "rope.scaling.type") type = &path;
  }
  ASSERT_NE(type, nullptr);
  ASSERT_EQ(type->chain.size(), 3u);  // rope -> scaling -> type.
  EXPECT_EQ(type->chain[0]->name(), "rope");
  EXPECT_EQ(type->chain[1]->name(), "scaling");
  EXPECT_EQ(&type->field(), v1::RopeScaling::descriptor()->FindFieldByName("type"));
  EXPECT_THAT(
      Names(m.parameters()),
      IsSupersetOf({"sinusoidal.num_positions", "sinusoidal.positions", "rope.theta",
                    "rope.scaling.type", "rope.scaling.factor", "rope.positions",
                    "alibi.num_heads", "t5_bias.num_buckets", "output_dtype"}));
  EXPECT_THAT(Names(m.parameters()), Not(::testing::Contains("rope.query")));
  EXPECT_THAT(Names(m.parameters()), Not(::testing::Contains("rope.scaling")));
  EXPECT_THAT(Names(m.outputs()), ElementsAre("output", "key"));
  EXPECT_THAT(Names(m.response_parameters()), IsEmpty());
}

TEST(OperationMappingListsTest, BlockForwardWithoutModel) {
  const OperationMapping& m = BlockForward();
  EXPECT_THAT(Names(m.inputs()),
              ElementsAre("hidden_states", "positions", "sequence_lengths"));
  EXPECT_TRUE(InputNamed(m, "hidden_states").required);
  EXPECT_TRUE(InputNamed(m, "hidden_states").tensor);
  EXPECT_FALSE(InputNamed(m, "positions").tensor);
  EXPECT_FALSE(InputNamed(m, "positions").required);
  EXPECT_FALSE(InputNamed(m, "sequence_lengths").tensor);
  EXPECT_THAT(Names(m.parameters()),
              ElementsAre("layer_start", "num_layers", "position_offset", "positions",
                          "sequence_lengths", "causal", "want_attention_stats",
                          "session_id", "output_dtype", "session_ids"));
  EXPECT_THAT(Names(m.outputs()), ElementsAre("hidden_states"));
  EXPECT_THAT(Names(m.response_parameters()),
              ElementsAre("attention_stats", "session_length", "session_lengths"));

  // `fixed` is what hides it.
  const OperationMapping with_model = MappingOf<BlockForwardOp>();
  EXPECT_THAT(Names(with_model.parameters()), ::testing::Contains("model"));
}

TEST(OperationMappingListsTest, DatatypeNames) {
  EXPECT_STREQ(DatatypeName(v1::FLOAT32), "FP32");
  EXPECT_STREQ(DatatypeName(v1::BFLOAT16), "BF16");
  EXPECT_STREQ(DatatypeName(v1::FLOAT16), "FP16");
  EXPECT_STREQ(DatatypeName(v1::INT8), "");
  EXPECT_EQ(DatatypeFromName("FP32"), v1::FLOAT32);
  EXPECT_EQ(DatatypeFromName("BF16"), v1::BFLOAT16);
  EXPECT_EQ(DatatypeFromName("FP16"), v1::FLOAT16);
  EXPECT_EQ(DatatypeFromName("fp32"), v1::DATA_TYPE_UNSPECIFIED);
  EXPECT_EQ(DatatypeFromName("INT64"), v1::DATA_TYPE_UNSPECIFIED);
}

// ---------------------------------------------------------------------------
// The rule on a message no code knows of: built at run time, over v1.Tensor.

class DynamicMessageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The generated pool underneath, so that layerserve.v1.Tensor is the compiled
    // type the mapping recognises.
    pool_ = std::make_unique<DescriptorPool>(DescriptorPool::generated_pool());
    FileDescriptorProto file;
    file.set_name("oip_dynamic_test.proto");
    file.set_package("oiptest");
    file.set_syntax("proto3");
    file.add_dependency(v1::Tensor::descriptor()->file()->name());

    auto* mode = file.add_enum_type();
    mode->set_name("Mode");
    auto* value = mode->add_value();
    value->set_name("MODE_UNSPECIFIED");
    value->set_number(0);
    value = mode->add_value();
    value->set_name("FAST");
    value->set_number(1);
    value = mode->add_value();
    value->set_name("EXACT");
    value->set_number(2);

    auto* inner = file.add_message_type();
    inner->set_name("Inner");
    AddField(inner, "scale", 1, FieldDescriptorProto::TYPE_FLOAT);
    AddField(inner, "values", 2, FieldDescriptorProto::TYPE_INT64,
             FieldDescriptorProto::LABEL_REPEATED);

    auto* request = file.add_message_type();
    request->set_name("Request");
    AddField(request, "data", 1, FieldDescriptorProto::TYPE_MESSAGE,
             FieldDescriptorProto::LABEL_OPTIONAL, ".layerserve.v1.Tensor");
    AddField(request, "count", 2, FieldDescriptorProto::TYPE_INT32);
    AddField(request, "mode", 3, FieldDescriptorProto::TYPE_ENUM,
             FieldDescriptorProto::LABEL_OPTIONAL, ".oiptest.Mode");
    AddField(request, "inner", 4, FieldDescriptorProto::TYPE_MESSAGE,
             FieldDescriptorProto::LABEL_OPTIONAL, ".oiptest.Inner");

    auto* response = file.add_message_type();
    response->set_name("Response");
    AddField(response, "result", 1, FieldDescriptorProto::TYPE_MESSAGE,
             FieldDescriptorProto::LABEL_OPTIONAL, ".layerserve.v1.Tensor");
    AddField(response, "steps", 2, FieldDescriptorProto::TYPE_INT64);
    AddField(response, "note", 3, FieldDescriptorProto::TYPE_STRING);

    ASSERT_NE(pool_->BuildFile(file), nullptr);
    request_type_ = pool_->FindMessageTypeByName("oiptest.Request");
    response_type_ = pool_->FindMessageTypeByName("oiptest.Response");
    ASSERT_NE(request_type_, nullptr);
    ASSERT_NE(response_type_, nullptr);
    // Sub-messages of compiled types (the v1.Tensor) as their compiled classes,
    // which FillRequest and FillResponse expect.
    factory_.SetDelegateToGeneratedFactory(true);
  }

  static void AddField(
      google::protobuf::DescriptorProto* message, const std::string& name, int number,
      FieldDescriptorProto::Type type,
      FieldDescriptorProto::Label label = FieldDescriptorProto::LABEL_OPTIONAL,
      const std::string& type_name = "") {
    auto* field = message->add_field();
    field->set_name(name);
    field->set_number(number);
    field->set_type(type);
    field->set_label(label);
    if (!type_name.empty()) field->set_type_name(type_name);
  }

  std::unique_ptr<Message> New(const Descriptor* type) {
    return std::unique_ptr<Message>(factory_.GetPrototype(type)->New());
  }

  std::unique_ptr<DescriptorPool> pool_;
  DynamicMessageFactory factory_;
  const Descriptor* request_type_ = nullptr;
  const Descriptor* response_type_ = nullptr;
};

TEST_F(DynamicMessageTest, FieldsAppearByTheRule) {
  const OperationMapping m(*request_type_, *response_type_);
  EXPECT_THAT(Names(m.inputs()), ElementsAre("data", "inner.values"));
  EXPECT_TRUE(InputNamed(m, "data").tensor);
  EXPECT_TRUE(InputNamed(m, "data").required);
  EXPECT_FALSE(InputNamed(m, "inner.values").tensor);
  EXPECT_THAT(Names(m.parameters()),
              ElementsAre("count", "mode", "inner.scale", "inner.values"));
  EXPECT_THAT(Names(m.outputs()), ElementsAre("result"));
  EXPECT_THAT(Names(m.response_parameters()), ElementsAre("steps", "note"));

  // A `fixed` field is neither.
  const OperationMapping without_count(*request_type_, *response_type_, {"count"});
  EXPECT_THAT(Names(without_count.parameters()),
              ElementsAre("mode", "inner.scale", "inner.values"));
}

TEST_F(DynamicMessageTest, FillsAndAnswers) {
  const OperationMapping m(*request_type_, *response_type_);
  ModelInferRequest infer;
  AddInput(infer, "data", "FP32", {2})->mutable_contents()->add_fp32_contents(1.5f);
  infer.mutable_inputs(0)->mutable_contents()->add_fp32_contents(-2);
  (*infer.mutable_parameters())["count"] = Int(3);
  (*infer.mutable_parameters())["mode"] = String("EXACT");
  (*infer.mutable_parameters())["inner.scale"] = String("0.25");
  (*infer.mutable_parameters())["inner.values"] = String("[7, 8, 9]");
  std::unique_ptr<Message> request = New(request_type_);
  ASSERT_TRUE(Fill(m, infer, request.get()).ok());

  const auto& r = *request->GetReflection();
  const auto* data = dynamic_cast<const v1::Tensor*>(
      &r.GetMessage(*request, request_type_->FindFieldByName("data")));
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(data->dtype(), v1::FLOAT32);
  EXPECT_THAT(data->shape(), ElementsAre(2));
  EXPECT_THAT(Floats(*data), ElementsAre(1.5f, -2.0f));
  EXPECT_EQ(r.GetInt32(*request, request_type_->FindFieldByName("count")), 3);
  EXPECT_EQ(r.GetEnum(*request, request_type_->FindFieldByName("mode"))->name(), "EXACT");
  const Message& inner = r.GetMessage(*request, request_type_->FindFieldByName("inner"));
  const Descriptor* inner_type = inner.GetDescriptor();
  EXPECT_EQ(inner.GetReflection()->GetFloat(inner, inner_type->FindFieldByName("scale")),
            0.25f);
  const auto values = inner.GetReflection()->GetRepeatedFieldRef<int64_t>(
      inner, inner_type->FindFieldByName("values"));
  EXPECT_THAT(std::vector<int64_t>(values.begin(), values.end()), ElementsAre(7, 8, 9));

  // int32 bounds come from the field's type.
  (*infer.mutable_parameters())["count"] = Int(int64_t{1} << 31);
  EXPECT_THAT(Fill(m, infer, New(request_type_).get()),
              StatusIs(kInvalid,
                       "count: parameter \"count\" is 2147483648, outside "
                       "[-2147483648, 2147483647]"));

  std::unique_ptr<Message> response = New(response_type_);
  const auto& rr = *response->GetReflection();
  auto* result = dynamic_cast<v1::Tensor*>(
      rr.MutableMessage(response.get(), response_type_->FindFieldByName("result")));
  ASSERT_NE(result, nullptr);
  result->set_dtype(v1::FLOAT16);
  result->add_shape(1);
  result->set_data(std::string("\x00\x3c", 2));
  rr.SetInt64(response.get(), response_type_->FindFieldByName("steps"), 4);
  ModelInferResponse answer;
  ASSERT_TRUE(m.FillResponse(*response, {}, &answer).ok());
  ASSERT_EQ(answer.outputs_size(), 1);
  EXPECT_EQ(answer.outputs(0).name(), "result");
  EXPECT_EQ(answer.outputs(0).datatype(), "FP16");
  EXPECT_THAT(answer.raw_output_contents(), ElementsAre(std::string("\x00\x3c", 2)));
  ASSERT_EQ(answer.parameters().count("steps"), 1u);
  EXPECT_EQ(answer.parameters().at("steps").int64_param(), 4);
  EXPECT_EQ(answer.parameters().count("note"), 0u);  // Unset: not a parameter.
}

// ---------------------------------------------------------------------------
// FillRequest: inputs.

TEST(FillRequestTest, RawFp32MovesTheBytes) {
  const std::vector<float> values = {1, 2, 3, 4, -1, 0, 1, 2};
  ModelInferRequest infer;
  AddInput(infer, "input", "FP32", {2, 4});
  infer.add_raw_input_contents(Bytes(values));
  v1::NormalizeRequest request;
  ASSERT_TRUE(Fill(Normalize(), infer, &request).ok());
  EXPECT_EQ(request.input().dtype(), v1::FLOAT32);
  EXPECT_THAT(request.input().shape(), ElementsAre(2, 4));
  EXPECT_THAT(Floats(request.input()), ElementsAreArray(values));
  EXPECT_FALSE(request.has_weight());
  // Moved, not copied.
  ASSERT_EQ(infer.raw_input_contents_size(), 1);
  EXPECT_THAT(infer.raw_input_contents(0), IsEmpty());
}

TEST(FillRequestTest, TypedFp32IsCopied) {
  ModelInferRequest infer;
  auto* input = AddInput(infer, "input", "FP32", {1, 3});
  for (float v : {0.5f, -1.0f, 2.0f}) input->mutable_contents()->add_fp32_contents(v);
  auto* weight = AddInput(infer, "weight", "FP32", {3});
  for (float v : {1.0f, 1.0f, 2.0f}) weight->mutable_contents()->add_fp32_contents(v);
  v1::NormalizeRequest request;
  ASSERT_TRUE(Fill(Normalize(), infer, &request).ok());
  EXPECT_THAT(Floats(request.input()), ElementsAre(0.5f, -1.0f, 2.0f));
  EXPECT_THAT(Floats(request.weight()), ElementsAre(1.0f, 1.0f, 2.0f));
  EXPECT_EQ(request.weight().dtype(), v1::FLOAT32);
  EXPECT_EQ(infer.inputs(0).contents().fp32_contents_size(), 3);  // Still there.
}

TEST(FillRequestTest, RawBf16AndFp16) {
  const std::string bf16 = Bytes(std::vector<uint16_t>{0x3f80, 0xc000});  // 1, -2.
  const std::string fp16 = Bytes(std::vector<uint16_t>{0x3c00, 0xc000});  // 1, -2.
  ModelInferRequest infer;
  AddInput(infer, "input", "BF16", {2});
  AddInput(infer, "gate", "FP16", {2});
  infer.add_raw_input_contents(bf16);
  infer.add_raw_input_contents(fp16);
  v1::ActivateRequest request;
  ASSERT_TRUE(Fill(Activate(), infer, &request).ok());
  EXPECT_EQ(request.input().dtype(), v1::BFLOAT16);
  EXPECT_EQ(request.input().data(), bf16);
  EXPECT_EQ(request.gate().dtype(), v1::FLOAT16);
  EXPECT_EQ(request.gate().data(), fp16);
  EXPECT_THAT(infer.raw_input_contents(0), IsEmpty());
  EXPECT_THAT(infer.raw_input_contents(1), IsEmpty());
}

TEST(FillRequestTest, Int64ListInputRawAndTyped) {
  ModelInferRequest raw;
  AddInput(raw, "hidden_states", "FP32", {1, 2});
  AddInput(raw, "positions", "INT64", {2});
  raw.add_raw_input_contents(Bytes(std::vector<float>{1, 2}));
  raw.add_raw_input_contents(Bytes(std::vector<int64_t>{5, -1}));
  v1::BlockForwardRequest request;
  ASSERT_TRUE(Fill(BlockForward(), raw, &request).ok());
  EXPECT_THAT(request.positions(), ElementsAre(5, -1));

  ModelInferRequest typed;
  auto* hidden = AddInput(typed, "hidden_states", "FP32", {1, 2});
  hidden->mutable_contents()->add_fp32_contents(1);
  hidden->mutable_contents()->add_fp32_contents(2);
  auto* lengths = AddInput(typed, "sequence_lengths", "INT64", {1, 3});
  for (int64_t v : {3, 1, 2}) lengths->mutable_contents()->add_int64_contents(v);
  v1::BlockForwardRequest typed_request;
  ASSERT_TRUE(Fill(BlockForward(), typed, &typed_request).ok());
  EXPECT_THAT(typed_request.sequence_lengths(), ElementsAre(3, 1, 2));
  EXPECT_THAT(typed_request.positions(), IsEmpty());

  // Under a message: PositionalEncode's rope.positions makes `rope`.
  ModelInferRequest nested;
  auto* positions = AddInput(nested, "rope.positions", "INT64", {2});
  positions->mutable_contents()->add_int64_contents(0);
  positions->mutable_contents()->add_int64_contents(9);
  v1::PositionalEncodeRequest nested_request;
  ASSERT_TRUE(Fill(PositionalEncode(), nested, &nested_request).ok());
  EXPECT_TRUE(nested_request.has_rope());
  EXPECT_THAT(nested_request.rope().positions(), ElementsAre(0, 9));
}

// ---------------------------------------------------------------------------
// FillRequest: parameters of each type.

TEST(FillRequestTest, IntegersFromDoubleStringAndUint64) {
  ModelInferRequest infer;
  (*infer.mutable_parameters())["layer_start"] = Double(2.0);
  (*infer.mutable_parameters())["num_layers"] = String("3");
  (*infer.mutable_parameters())["position_offset"] = Uint(5);
  v1::BlockForwardRequest request;
  ASSERT_TRUE(Fill(BlockForward(), infer, &request).ok());
  EXPECT_EQ(request.layer_start(), 2);
  EXPECT_EQ(request.num_layers(), 3);
  EXPECT_EQ(request.position_offset(), 5);
}

TEST(FillRequestTest, FloatsFromInt64AndString) {
  ModelInferRequest infer;
  (*infer.mutable_parameters())["epsilon"] = Int(1);
  v1::NormalizeRequest request;
  ASSERT_TRUE(Fill(Normalize(), infer, &request).ok());
  ASSERT_TRUE(request.has_epsilon());
  EXPECT_EQ(request.epsilon(), 1.0f);

  (*infer.mutable_parameters())["epsilon"] = String("1e-6");
  ASSERT_TRUE(Fill(Normalize(), infer, &request).ok());
  EXPECT_EQ(request.epsilon(), 1e-6f);

  (*infer.mutable_parameters())["epsilon"] = Double(0.5);
  ASSERT_TRUE(Fill(Normalize(), infer, &request).ok());
  EXPECT_EQ(request.epsilon(), 0.5f);
}

TEST(FillRequestTest, EnumsByNameNumberAndDatatypeName) {
  ModelInferRequest infer;
  (*infer.mutable_parameters())["kind"] = String("RMS_NORM");
  (*infer.mutable_parameters())["output_dtype"] = String("BF16");
  v1::NormalizeRequest request;
  ASSERT_TRUE(Fill(Normalize(), infer, &request).ok());
  EXPECT_EQ(request.kind(), v1::RMS_NORM);
  EXPECT_EQ(request.output_dtype(), v1::BFLOAT16);

  (*infer.mutable_parameters())["kind"] = Int(1);
  (*infer.mutable_parameters())["output_dtype"] = String("FLOAT16");  // v1's own name.
  ASSERT_TRUE(Fill(Normalize(), infer, &request).ok());
  EXPECT_EQ(request.kind(), v1::LAYER_NORM);
  EXPECT_EQ(request.output_dtype(), v1::FLOAT16);

  (*infer.mutable_parameters())["output_dtype"] = String("FP32");
  ASSERT_TRUE(Fill(Normalize(), infer, &request).ok());
  EXPECT_EQ(request.output_dtype(), v1::FLOAT32);

  // The protocol's datatype names are for v1.DataType only.
  ModelInferRequest activate;
  (*activate.mutable_parameters())["activation"] = String("BF16");
  v1::ActivateRequest activate_request;
  EXPECT_THAT(
      Fill(Activate(), activate, &activate_request),
      StatusIs(kInvalid, StartsWith("activation: parameter \"activation\" must be "
                                    "one of ACTIVATION_UNSPECIFIED, RELU,")));
}

TEST(FillRequestTest, BoolsFromBoolNumberAndString) {
  v1::NormalizeRequest request;
  for (const InferParameter& yes : {Bool(true), Int(1), Uint(1), String("true")}) {
    ModelInferRequest infer;
    (*infer.mutable_parameters())["weight_offset"] = yes;
    request.Clear();
    ASSERT_TRUE(Fill(Normalize(), infer, &request).ok()) << DescribeParameter(yes);
    EXPECT_TRUE(request.weight_offset()) << DescribeParameter(yes);
  }
  for (const InferParameter& no : {Bool(false), Int(0), String("false")}) {
    ModelInferRequest infer;
    (*infer.mutable_parameters())["weight_offset"] = no;
    request.set_weight_offset(true);
    ASSERT_TRUE(Fill(Normalize(), infer, &request).ok()) << DescribeParameter(no);
    EXPECT_FALSE(request.weight_offset()) << DescribeParameter(no);
  }
  // proto3 `optional bool`: present once given, even false.
  ModelInferRequest causal;
  (*causal.mutable_parameters())["causal"] = Int(0);
  v1::BlockForwardRequest block;
  ASSERT_TRUE(Fill(BlockForward(), causal, &block).ok());
  EXPECT_TRUE(block.has_causal());
  EXPECT_FALSE(block.causal());
}

TEST(FillRequestTest, RepeatedFromListsAndSingleValues) {
  const std::vector<std::pair<InferParameter, std::vector<int64_t>>> cases = {
      {String("1,2,3"), {1, 2, 3}}, {String("[4, 5]"), {4, 5}}, {String(""), {}},
      {String(" [ ] "), {}},        {String("6"), {6}},         {Int(7), {7}},
      {Double(8.0), {8}},
  };
  for (const auto& [value, expected] : cases) {
    ModelInferRequest infer;
    (*infer.mutable_parameters())["positions"] = value;
    v1::BlockForwardRequest request;
    request.add_positions(99);  // Replaced, not appended to.
    ASSERT_TRUE(Fill(BlockForward(), infer, &request).ok()) << DescribeParameter(value);
    EXPECT_THAT(request.positions(), ElementsAreArray(expected))
        << DescribeParameter(value);
  }
}

TEST(FillRequestTest, NestedPathsMakeTheirMessages) {
  ModelInferRequest infer;
  (*infer.mutable_parameters())["rope.scaling.type"] = String("YARN");
  (*infer.mutable_parameters())["rope.scaling.factor"] = Int(4);
  (*infer.mutable_parameters())["rope.theta"] = String("500000");
  v1::PositionalEncodeRequest request;
  ASSERT_TRUE(Fill(PositionalEncode(), infer, &request).ok());
  EXPECT_EQ(request.method_case(), v1::PositionalEncodeRequest::kRope);
  ASSERT_TRUE(request.rope().has_scaling());
  EXPECT_EQ(request.rope().scaling().type(), v1::RopeScaling::YARN);
  EXPECT_EQ(request.rope().scaling().factor(), 4.0f);
  EXPECT_EQ(request.rope().theta(), 500000.0f);
  EXPECT_FALSE(request.rope().has_query());
}

TEST(FillRequestTest, SequenceParametersAreLeftToTheCaller) {
  ModelInferRequest infer;
  (*infer.mutable_parameters())["sequence_id"] = Int(42);
  (*infer.mutable_parameters())["sequence_start"] = Bool(true);
  (*infer.mutable_parameters())["sequence_end"] = Bool(false);
  v1::BlockForwardRequest request;
  EXPECT_TRUE(Fill(BlockForward(), infer, &request).ok());
  EXPECT_EQ(request.ByteSizeLong(), 0u);
  // Without the caller's filter, they are unknown parameters.
  EXPECT_THAT(
      BlockForward().FillRequest(infer, nullptr, &request),
      StatusIs(kInvalid, StartsWith("sequence_end: no parameter \"sequence_end\"")));
}

TEST(FillRequestTest, OneofMembersAreAlternatives) {
  ModelInferRequest infer;
  auto* query = AddInput(infer, "rope.query", "FP32", {1, 1, 1, 2});
  query->mutable_contents()->add_fp32_contents(1);
  query->mutable_contents()->add_fp32_contents(2);
  (*infer.mutable_parameters())["alibi.num_heads"] = Int(2);
  v1::PositionalEncodeRequest request;
  EXPECT_THAT(
      Fill(PositionalEncode(), infer, &request),
      StatusIs(kInvalid,
               "alibi.num_heads: belongs to \"alibi\", but \"rope\" was chosen by "
               "rope.query; give the inputs and parameters of one of sinusoidal, "
               "learned, rope, alibi, t5_bias"));

  // Between two parameters: the first in name order chose.
  ModelInferRequest params;
  (*params.mutable_parameters())["t5_bias.num_buckets"] = Int(8);
  (*params.mutable_parameters())["sinusoidal.dim"] = Int(4);
  request.Clear();
  EXPECT_THAT(
      Fill(PositionalEncode(), params, &request),
      StatusIs(kInvalid, StartsWith("t5_bias.num_buckets: belongs to \"t5_bias\", "
                                    "but \"sinusoidal\" was chosen by "
                                    "sinusoidal.dim;")));

  // Members of the same one are fine together.
  ModelInferRequest same;
  (*same.mutable_parameters())["rope.theta"] = Int(10000);
  (*same.mutable_parameters())["rope.rotary_dim"] = Int(2);
  (*same.mutable_parameters())["output_dtype"] = String("FP16");  // Outside the oneof.
  request.Clear();
  EXPECT_TRUE(Fill(PositionalEncode(), same, &request).ok());
}

// ---------------------------------------------------------------------------
// FillRequest: every error, INVALID_ARGUMENT starting with the name.

TEST(FillRequestErrorsTest, RawAndTypedMixed) {
  ModelInferRequest infer;
  AddInput(infer, "input", "FP32", {1})->mutable_contents()->add_fp32_contents(1);
  infer.add_raw_input_contents(Bytes(std::vector<float>{1}));
  v1::NormalizeRequest request;
  EXPECT_THAT(Fill(Normalize(), infer, &request),
              StatusIs(kInvalid,
                       "input: input \"input\" has typed contents, and "
                       "raw_input_contents are given too; send every input raw "
                       "or every input typed"));
}

TEST(FillRequestErrorsTest, RawCountNotInputCount) {
  ModelInferRequest infer;
  AddInput(infer, "input", "FP32", {1});
  AddInput(infer, "weight", "FP32", {1});
  infer.add_raw_input_contents(Bytes(std::vector<float>{1}));
  v1::NormalizeRequest request;
  EXPECT_THAT(Fill(Normalize(), infer, &request),
              StatusIs(kInvalid,
                       "raw_input_contents: 1 entries for 2 inputs; send one per "
                       "input, in the order of inputs (or none, and typed "
                       "contents)"));
}

TEST(FillRequestErrorsTest, UnknownInputAndParameter) {
  ModelInferRequest infer;
  AddInput(infer, "x", "FP32", {1})->mutable_contents()->add_fp32_contents(1);
  v1::NormalizeRequest request;
  EXPECT_THAT(Fill(Normalize(), infer, &request),
              StatusIs(kInvalid,
                       "inputs[0].name: no input \"x\"; the inputs are input, "
                       "weight, bias, residual"));

  ModelInferRequest param;
  (*param.mutable_parameters())["x"] = Int(1);
  EXPECT_THAT(Fill(Normalize(), param, &request),
              StatusIs(kInvalid,
                       "x: no parameter \"x\"; the parameters are kind, epsilon, "
                       "weight_offset, output_dtype"));
  // An input's name is not a parameter's, nor the reverse.
  ModelInferRequest tensor_as_param;
  (*tensor_as_param.mutable_parameters())["weight"] = Int(1);
  EXPECT_THAT(Fill(Normalize(), tensor_as_param, &request),
              StatusIs(kInvalid, StartsWith("weight: no parameter \"weight\";")));
  ModelInferRequest param_as_input;
  AddInput(param_as_input, "kind", "FP32", {1})->mutable_contents()->add_fp32_contents(1);
  EXPECT_THAT(Fill(Normalize(), param_as_input, &request),
              StatusIs(kInvalid, StartsWith("inputs[0].name: no input \"kind\";")));
}

TEST(FillRequestErrorsTest, BytesNotMatchingTheShape) {
  ModelInferRequest infer;
  AddInput(infer, "input", "FP32", {2, 4});
  infer.add_raw_input_contents(std::string(28, '\0'));
  v1::NormalizeRequest request;
  EXPECT_THAT(Fill(Normalize(), infer, &request),
              StatusIs(kInvalid,
                       "input: input \"input\" [2,4] FP32 needs 32 bytes; "
                       "raw_input_contents[0] holds 28"));

  ModelInferRequest bf16;
  AddInput(bf16, "input", "FP32", {1});
  AddInput(bf16, "gate", "BF16", {3});
  bf16.add_raw_input_contents(std::string(4, '\0'));
  bf16.add_raw_input_contents(std::string(4, '\0'));
  v1::ActivateRequest activate;
  EXPECT_THAT(Fill(Activate(), bf16, &activate),
              StatusIs(kInvalid,
                       "gate: input \"gate\" [3] BF16 needs 6 bytes; "
                       "raw_input_contents[1] holds 4"));
}

TEST(FillRequestErrorsTest, BadShapeIsLeftToV1) {
  // No byte count for a shape with a zero: v1's validation names the input.
  ModelInferRequest infer;
  AddInput(infer, "input", "FP32", {0, 4});
  infer.add_raw_input_contents("");
  v1::NormalizeRequest request;
  request.set_kind(v1::LAYER_NORM);
  ASSERT_TRUE(Fill(Normalize(), infer, &request).ok());
  EXPECT_THAT(ParseNormalizeRequest(request),
              StatusIs(kInvalid, StartsWith("input.shape")));
}

TEST(FillRequestErrorsTest, TypedCountMismatch) {
  ModelInferRequest infer;
  auto* input = AddInput(infer, "input", "FP32", {2, 4});
  for (int i = 0; i < 7; ++i) input->mutable_contents()->add_fp32_contents(1);
  v1::NormalizeRequest request;
  EXPECT_THAT(Fill(Normalize(), infer, &request),
              StatusIs(kInvalid,
                       "input: input \"input\" [2,4] FP32 needs 8 values; "
                       "contents.fp32_contents holds 7"));

  ModelInferRequest none;
  AddInput(none, "input", "FP32", {3});
  EXPECT_THAT(Fill(Normalize(), none, &request),
              StatusIs(kInvalid,
                       "input: input \"input\" [3] FP32 needs 3 values; "
                       "contents.fp32_contents holds 0"));
}

TEST(FillRequestErrorsTest, TypedContentsOfTheWrongKind) {
  ModelInferRequest infer;
  AddInput(infer, "input", "FP32", {2})->mutable_contents()->add_int64_contents(1);
  v1::NormalizeRequest request;
  EXPECT_THAT(Fill(Normalize(), infer, &request),
              StatusIs(kInvalid,
                       "input: input \"input\" [2] FP32: FP32 values go in "
                       "contents.fp32_contents (or raw_input_contents)"));

  for (const char* datatype : {"BF16", "FP16"}) {
    ModelInferRequest half;
    AddInput(half, "input", datatype, {2})->mutable_contents()->add_fp32_contents(1);
    EXPECT_THAT(
        Fill(Normalize(), half, &request),
        StatusIs(kInvalid, absl::StrCat("input: input \"input\" [2] ", datatype,
                                        ": the protocol has no typed contents for ",
                                        datatype, "; send it in raw_input_contents")));
  }
}

TEST(FillRequestErrorsTest, BadDatatype) {
  ModelInferRequest infer;
  AddInput(infer, "input", "INT8", {1});
  infer.add_raw_input_contents(std::string(1, '\0'));
  v1::NormalizeRequest request;
  EXPECT_THAT(Fill(Normalize(), infer, &request),
              StatusIs(kInvalid,
                       "input: input \"input\" has datatype \"INT8\"; it takes "
                       "FP32, BF16 or FP16"));

  ModelInferRequest positions;
  AddInput(positions, "positions", "FP32", {1})->mutable_contents()->add_fp32_contents(0);
  v1::BlockForwardRequest block;
  EXPECT_THAT(Fill(BlockForward(), positions, &block),
              StatusIs(kInvalid,
                       "positions: input \"positions\" has datatype \"FP32\"; it "
                       "takes INT64"));
}

TEST(FillRequestErrorsTest, Int64ListErrors) {
  v1::BlockForwardRequest request;
  ModelInferRequest zero;
  AddInput(zero, "positions", "INT64", {0});
  EXPECT_THAT(Fill(BlockForward(), zero, &request),
              StatusIs(kInvalid,
                       "positions: input \"positions\" [0] INT64: every dimension "
                       "must be >= 1"));

  ModelInferRequest raw;
  AddInput(raw, "hidden_states", "FP32", {1});
  AddInput(raw, "positions", "INT64", {2});
  raw.add_raw_input_contents(Bytes(std::vector<float>{1}));
  raw.add_raw_input_contents(Bytes(std::vector<int64_t>{1}));
  EXPECT_THAT(Fill(BlockForward(), raw, &request),
              StatusIs(kInvalid,
                       "positions: input \"positions\" [2] INT64 needs 16 bytes; "
                       "raw_input_contents[1] holds 8"));

  ModelInferRequest typed;
  AddInput(typed, "positions", "INT64", {2})->mutable_contents()->add_int64_contents(1);
  EXPECT_THAT(Fill(BlockForward(), typed, &request),
              StatusIs(kInvalid,
                       "positions: input \"positions\" [2] INT64 needs 2 values; "
                       "contents.int64_contents holds 1"));
}

TEST(FillRequestErrorsTest, InputGivenTwiceOrWithParameters) {
  ModelInferRequest twice;
  AddInput(twice, "input", "FP32", {1})->mutable_contents()->add_fp32_contents(1);
  AddInput(twice, "input", "FP32", {1})->mutable_contents()->add_fp32_contents(2);
  v1::NormalizeRequest request;
  EXPECT_THAT(Fill(Normalize(), twice, &request),
              StatusIs(kInvalid, "input: input \"input\" is given twice (inputs[1])"));

  ModelInferRequest with_parameters;
  auto* input = AddInput(with_parameters, "input", "FP32", {1});
  input->mutable_contents()->add_fp32_contents(1);
  (*input->mutable_parameters())["p"] = Int(1);
  EXPECT_THAT(Fill(Normalize(), with_parameters, &request),
              StatusIs(kInvalid,
                       "input: input \"input\" has parameters (\"p\"); inputs take "
                       "none"));

  ModelInferRequest both;
  AddInput(both, "positions", "INT64", {1})->mutable_contents()->add_int64_contents(0);
  (*both.mutable_parameters())["positions"] = String("0");
  v1::BlockForwardRequest block;
  EXPECT_THAT(Fill(BlockForward(), both, &block),
              StatusIs(kInvalid,
                       "positions: \"positions\" is given both as an input and as "
                       "a parameter"));
}

TEST(FillRequestErrorsTest, WrongParameterValues) {
  v1::NormalizeRequest request;
  auto fill = [&](const std::string& name, const InferParameter& value) {
    ModelInferRequest infer;
    (*infer.mutable_parameters())[name] = value;
    request.Clear();
    return Fill(Normalize(), infer, &request);
  };
  EXPECT_THAT(fill("epsilon", Bool(true)),
              StatusIs(kInvalid,
                       "epsilon: parameter \"epsilon\" must be a number, got bool "
                       "true"));
  EXPECT_THAT(fill("epsilon", String("small")),
              StatusIs(kInvalid,
                       "epsilon: parameter \"epsilon\" must be a number, got "
                       "string \"small\""));
  EXPECT_THAT(fill("epsilon", Double(1e300)),
              StatusIs(kInvalid,
                       "epsilon: parameter \"epsilon\" is 1e+300, beyond the float "
                       "range"));
  EXPECT_THAT(fill("epsilon", InferParameter()),
              StatusIs(kInvalid,
                       "epsilon: parameter \"epsilon\" must be a number, got no "
                       "value"));
  EXPECT_THAT(fill("weight_offset", Int(2)),
              StatusIs(kInvalid,
                       "weight_offset: parameter \"weight_offset\" must be a bool "
                       "(true or false), got int64 2"));
  EXPECT_THAT(fill("kind", String("BATCH_NORM")),
              StatusIs(kInvalid,
                       "kind: parameter \"kind\" must be one of "
                       "NORM_KIND_UNSPECIFIED, LAYER_NORM, RMS_NORM, got string "
                       "\"BATCH_NORM\""));
  EXPECT_THAT(fill("kind", Int(7)),
              StatusIs(kInvalid,
                       "kind: parameter \"kind\" must be one of "
                       "NORM_KIND_UNSPECIFIED, LAYER_NORM, RMS_NORM, got int64 7"));
  // An enum's number may come as any whole number, but only an int32 one: 2^32 + 1
  // is not LAYER_NORM (1).
  EXPECT_TRUE(fill("kind", Double(1.0)).ok());
  EXPECT_THAT(fill("kind", Double(1.5)),
              StatusIs(kInvalid, StartsWith("kind: parameter \"kind\" must be one of ")));
  EXPECT_THAT(
      fill("kind", Int(int64_t{4294967297})),
      StatusIs(kInvalid,
               "kind: parameter \"kind\" must be one of "
               "NORM_KIND_UNSPECIFIED, LAYER_NORM, RMS_NORM, got int64 4294967297"));
  EXPECT_THAT(
      fill("output_dtype", String("fp32")),
      StatusIs(kInvalid, StartsWith("output_dtype: parameter \"output_dtype\" must be "
                                    "one of DATA_TYPE_UNSPECIFIED, FLOAT32,")));
  // The protocol's names are listed too.
  EXPECT_THAT(fill("output_dtype", String("fp32")),
              StatusIs(kInvalid, HasSubstr(", FP32, BF16, FP16, got string \"fp32\"")));

  v1::BlockForwardRequest block;
  auto fill_block = [&](const std::string& name, const InferParameter& value) {
    ModelInferRequest infer;
    (*infer.mutable_parameters())[name] = value;
    block.Clear();
    return Fill(BlockForward(), infer, &block);
  };
  EXPECT_THAT(fill_block("layer_start", Int(int64_t{1} << 40)),
              StatusIs(kInvalid,
                       "layer_start: parameter \"layer_start\" is 1099511627776, "
                       "outside [-2147483648, 2147483647]"));
  EXPECT_THAT(fill_block("num_layers", Double(1.5)),
              StatusIs(kInvalid,
                       "num_layers: parameter \"num_layers\" must be a whole "
                       "number, got double 1.5"));
  EXPECT_THAT(fill_block("positions", String("[1,2")),
              StatusIs(kInvalid,
                       "positions: parameter \"positions\" opens a list with '[' "
                       "but does not close it"));
  EXPECT_THAT(fill_block("positions", String("1,x")),
              StatusIs(kInvalid,
                       "positions: parameter \"positions\" must be a whole number, "
                       "got string \"x\""));
  EXPECT_THAT(fill_block("positions", String("1,,2")),
              StatusIs(kInvalid,
                       "positions: parameter \"positions\" must be a whole number, "
                       "got string \"\""));
  EXPECT_THAT(fill_block("session_id", Bool(true)),
              StatusIs(kInvalid,
                       "session_id: parameter \"session_id\" must be a string, got "
                       "bool true"));
}

TEST(FillRequestErrorsTest, ParametersInNameOrder) {
  // Two bad parameters: the error names the first by name, every time.
  ModelInferRequest infer;
  (*infer.mutable_parameters())["weight_offset"] = Int(5);
  (*infer.mutable_parameters())["epsilon"] = Bool(true);
  (*infer.mutable_parameters())["zzz"] = Int(1);
  v1::NormalizeRequest request;
  EXPECT_THAT(Fill(Normalize(), infer, &request),
              StatusIs(kInvalid, StartsWith("epsilon: ")));
}

// ---------------------------------------------------------------------------
// CheckRequestedOutputs.

TEST(CheckRequestedOutputsTest, KnownOutputsOnceWithoutParameters) {
  ModelInferRequest infer;
  EXPECT_TRUE(Normalize().CheckRequestedOutputs(infer).ok());
  infer.add_outputs()->set_name("residual_out");
  infer.add_outputs()->set_name("output");
  EXPECT_TRUE(Normalize().CheckRequestedOutputs(infer).ok());

  ModelInferRequest unknown;
  unknown.add_outputs()->set_name("output");
  unknown.add_outputs()->set_name("hidden_states");
  EXPECT_THAT(Normalize().CheckRequestedOutputs(unknown),
              StatusIs(kInvalid,
                       "outputs[1].name: no output \"hidden_states\"; the outputs "
                       "are output, residual_out"));

  ModelInferRequest twice;
  twice.add_outputs()->set_name("output");
  twice.add_outputs()->set_name("output");
  EXPECT_THAT(
      Normalize().CheckRequestedOutputs(twice),
      StatusIs(kInvalid, "outputs[1].name: output \"output\" is asked for twice"));

  ModelInferRequest with_parameters;
  auto* output = with_parameters.add_outputs();
  output->set_name("output");
  (*output->mutable_parameters())["classification"] = Int(3);
  EXPECT_THAT(Normalize().CheckRequestedOutputs(with_parameters),
              StatusIs(kInvalid,
                       "outputs[0].parameters: output \"output\" has parameter "
                       "\"classification\"; outputs take none"));
}

// ---------------------------------------------------------------------------
// FillResponse.

v1::NormalizeResponse NormalizeAnswer(bool residual) {
  v1::NormalizeResponse response;
  response.mutable_output()->set_dtype(v1::FLOAT32);
  response.mutable_output()->add_shape(1);
  response.mutable_output()->add_shape(2);
  response.mutable_output()->set_data(Bytes(std::vector<float>{1, 2}));
  if (residual) {
    response.mutable_residual_out()->set_dtype(v1::BFLOAT16);
    response.mutable_residual_out()->add_shape(2);
    response.mutable_residual_out()->set_data(
        Bytes(std::vector<uint16_t>{0x3f80, 0x4000}));
  }
  return response;
}

TEST(FillResponseTest, EveryOutputWhenNoneRequested) {
  v1::NormalizeResponse response = NormalizeAnswer(/*residual=*/true);
  ModelInferResponse answer;
  ASSERT_TRUE(Normalize().FillResponse(response, {}, &answer).ok());
  ASSERT_EQ(answer.outputs_size(), 2);
  EXPECT_EQ(answer.outputs(0).name(), "output");
  EXPECT_EQ(answer.outputs(0).datatype(), "FP32");
  EXPECT_THAT(answer.outputs(0).shape(), ElementsAre(1, 2));
  EXPECT_EQ(answer.outputs(1).name(), "residual_out");
  EXPECT_EQ(answer.outputs(1).datatype(), "BF16");
  EXPECT_THAT(answer.outputs(1).shape(), ElementsAre(2));
  ASSERT_EQ(answer.raw_output_contents_size(), 2);
  EXPECT_EQ(answer.raw_output_contents(0), Bytes(std::vector<float>{1, 2}));
  EXPECT_EQ(answer.raw_output_contents(1), Bytes(std::vector<uint16_t>{0x3f80, 0x4000}));
  EXPECT_FALSE(answer.outputs(0).has_contents());  // Raw only.
  // Moved out of the v1 response.
  EXPECT_THAT(response.output().data(), IsEmpty());
  EXPECT_THAT(response.residual_out().data(), IsEmpty());
  EXPECT_EQ(answer.parameters().size(), 0u);

  // What the response does not hold is left out.
  v1::NormalizeResponse plain = NormalizeAnswer(/*residual=*/false);
  ModelInferResponse one;
  ASSERT_TRUE(Normalize().FillResponse(plain, {}, &one).ok());
  ASSERT_EQ(one.outputs_size(), 1);
  EXPECT_EQ(one.outputs(0).name(), "output");
}

TEST(FillResponseTest, RequestedOutputsOnlyInRequestedOrder) {
  v1::NormalizeResponse response = NormalizeAnswer(/*residual=*/true);
  ModelInferResponse answer;
  ASSERT_TRUE(
      Normalize().FillResponse(response, {"residual_out", "output"}, &answer).ok());
  ASSERT_EQ(answer.outputs_size(), 2);
  EXPECT_EQ(answer.outputs(0).name(), "residual_out");
  EXPECT_EQ(answer.outputs(1).name(), "output");
  EXPECT_EQ(answer.raw_output_contents(0), Bytes(std::vector<uint16_t>{0x3f80, 0x4000}));
  EXPECT_EQ(answer.raw_output_contents(1), Bytes(std::vector<float>{1, 2}));

  v1::NormalizeResponse again = NormalizeAnswer(/*residual=*/true);
  ModelInferResponse only;
  ASSERT_TRUE(Normalize().FillResponse(again, {"residual_out"}, &only).ok());
  ASSERT_EQ(only.outputs_size(), 1);
  EXPECT_EQ(only.outputs(0).name(), "residual_out");
  EXPECT_EQ(only.raw_output_contents_size(), 1);
  EXPECT_THAT(again.output().data(), Not(IsEmpty()));  // Not asked for: untouched.
}

TEST(FillResponseTest, RequestedOutputTheResponseLacks) {
  v1::NormalizeResponse response = NormalizeAnswer(/*residual=*/false);
  ModelInferResponse answer;
  EXPECT_THAT(Normalize().FillResponse(response, {"output", "residual_out"}, &answer),
              StatusIs(kInvalid,
                       "outputs: this request produced no \"residual_out\"; leave "
                       "outputs empty for every output it produces"));
  EXPECT_THAT(Normalize().FillResponse(response, {"nope"}, &answer),
              StatusIs(kInvalid, "outputs: no output \"nope\""));
}

TEST(FillResponseTest, ResponseParameters) {
  v1::BlockForwardResponse response;
  response.mutable_hidden_states()->set_dtype(v1::FLOAT16);
  response.mutable_hidden_states()->add_shape(1);
  response.mutable_hidden_states()->set_data(std::string("\x00\x3c", 2));
  response.set_session_length(17);
  auto* stats = response.add_attention_stats();
  stats->set_layer(0);
  stats->add_head_entropy_nats(0.5f);
  stats->add_head_entropy_nats(1.25f);
  stats = response.add_attention_stats();
  stats->set_layer(1);
  stats->add_head_entropy_nats(2);
  ModelInferResponse answer;
  ASSERT_TRUE(BlockForward().FillResponse(response, {}, &answer).ok());
  ASSERT_EQ(answer.outputs_size(), 1);
  EXPECT_EQ(answer.outputs(0).name(), "hidden_states");
  EXPECT_EQ(answer.outputs(0).datatype(), "FP16");
  ASSERT_EQ(answer.parameters().count("session_length"), 1u);
  EXPECT_EQ(answer.parameters().at("session_length").parameter_choice_case(),
            InferParameter::kInt64Param);
  EXPECT_EQ(answer.parameters().at("session_length").int64_param(), 17);
  ASSERT_EQ(answer.parameters().count("attention_stats"), 1u);
  // A JSON list of the messages, named as the v1 proto names their fields, zeros
  // included.
  EXPECT_EQ(answer.parameters().at("attention_stats").string_param(),
            "[{\"layer\":0,\"head_entropy_nats\":[0.5,1.25]},"
            "{\"layer\":1,\"head_entropy_nats\":[2]}]");

  // Neither set: no parameters.
  v1::BlockForwardResponse bare;
  bare.mutable_hidden_states()->set_dtype(v1::FLOAT32);
  ModelInferResponse bare_answer;
  ASSERT_TRUE(BlockForward().FillResponse(bare, {}, &bare_answer).ok());
  EXPECT_EQ(bare_answer.parameters().size(), 0u);
}

// ---------------------------------------------------------------------------
// infer_parameter.h.

TEST(InferParameterTest, AsBool) {
  EXPECT_EQ(*ParameterAsBool(Bool(true), "b"), true);
  EXPECT_EQ(*ParameterAsBool(Bool(false), "b"), false);
  EXPECT_EQ(*ParameterAsBool(Int(1), "b"), true);
  EXPECT_EQ(*ParameterAsBool(Int(0), "b"), false);
  EXPECT_EQ(*ParameterAsBool(Uint(1), "b"), true);
  EXPECT_EQ(*ParameterAsBool(Uint(0), "b"), false);
  EXPECT_EQ(*ParameterAsBool(String("true"), "b"), true);
  EXPECT_EQ(*ParameterAsBool(String("false"), "b"), false);
  EXPECT_EQ(*ParameterAsBool(String("1"), "b"), true);
  EXPECT_THAT(ParameterAsBool(Int(2), "b"),
              StatusIs(kInvalid,
                       "b: parameter \"b\" must be a bool (true or false), got "
                       "int64 2"));
  EXPECT_THAT(ParameterAsBool(Int(-1), "b"),
              StatusIs(kInvalid, HasSubstr("got int64 -1")));
  EXPECT_THAT(ParameterAsBool(Uint(2), "b"),
              StatusIs(kInvalid, HasSubstr("got uint64 2")));
  EXPECT_THAT(ParameterAsBool(Double(1), "b"),
              StatusIs(kInvalid, HasSubstr("got double 1")));
  EXPECT_THAT(ParameterAsBool(String("maybe"), "b"),
              StatusIs(kInvalid, HasSubstr("got string \"maybe\"")));
  EXPECT_THAT(ParameterAsBool(InferParameter(), "b"),
              StatusIs(kInvalid,
                       "b: parameter \"b\" must be a bool (true or false), got no "
                       "value"));
}

TEST(InferParameterTest, AsInt64) {
  EXPECT_EQ(*ParameterAsInt64(Int(-7), "n"), -7);
  EXPECT_EQ(*ParameterAsInt64(Uint(7), "n"), 7);
  EXPECT_EQ(*ParameterAsInt64(Uint(std::numeric_limits<int64_t>::max()), "n"),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(*ParameterAsInt64(Double(3.0), "n"), 3);
  EXPECT_EQ(*ParameterAsInt64(Double(-1e18), "n"), -1000000000000000000);
  EXPECT_EQ(*ParameterAsInt64(String("42"), "n"), 42);
  EXPECT_EQ(*ParameterAsInt64(String("-5"), "n"), -5);
  EXPECT_THAT(ParameterAsInt64(Uint(uint64_t{1} << 63), "n"),
              StatusIs(kInvalid,
                       "n: parameter \"n\" must be a whole number, got uint64 "
                       "9223372036854775808"));
  EXPECT_THAT(
      ParameterAsInt64(Double(2.5), "n"),
      StatusIs(kInvalid, "n: parameter \"n\" must be a whole number, got double 2.5"));
  EXPECT_THAT(ParameterAsInt64(Double(9.3e18), "n"),
              StatusIs(kInvalid, HasSubstr("got double 9.3e+18")));
  EXPECT_THAT(
      ParameterAsInt64(Double(std::numeric_limits<double>::quiet_NaN()), "n"),
      StatusIs(kInvalid, StartsWith("n: parameter \"n\" must be a whole number")));
  EXPECT_THAT(ParameterAsInt64(String("4.0"), "n"),
              StatusIs(kInvalid,
                       "n: parameter \"n\" must be a whole number, got string "
                       "\"4.0\""));
  EXPECT_THAT(ParameterAsInt64(String("99999999999999999999"), "n"),
              StatusIs(kInvalid, HasSubstr("got string \"99999999999999999999\"")));
  EXPECT_THAT(
      ParameterAsInt64(Bool(true), "n"),
      StatusIs(kInvalid, "n: parameter \"n\" must be a whole number, got bool true"));
}

TEST(InferParameterTest, AsDouble) {
  EXPECT_EQ(*ParameterAsDouble(Double(0.25), "x"), 0.25);
  EXPECT_EQ(*ParameterAsDouble(Int(-3), "x"), -3.0);
  EXPECT_EQ(*ParameterAsDouble(Uint(3), "x"), 3.0);
  EXPECT_EQ(*ParameterAsDouble(String("1e-6"), "x"), 1e-6);
  EXPECT_EQ(*ParameterAsDouble(String("2"), "x"), 2.0);
  EXPECT_THAT(
      ParameterAsDouble(String("abc"), "x"),
      StatusIs(kInvalid, "x: parameter \"x\" must be a number, got string \"abc\""));
  EXPECT_THAT(ParameterAsDouble(Bool(false), "x"),
              StatusIs(kInvalid, "x: parameter \"x\" must be a number, got bool false"));
}

TEST(InferParameterTest, AsString) {
  EXPECT_EQ(*ParameterAsString(String("abc"), "s"), "abc");
  EXPECT_EQ(*ParameterAsString(String(""), "s"), "");
  EXPECT_EQ(*ParameterAsString(Int(-7), "s"), "-7");
  EXPECT_EQ(*ParameterAsString(Uint(std::numeric_limits<uint64_t>::max()), "s"),
            "18446744073709551615");
  EXPECT_THAT(ParameterAsString(Double(0.5), "s"),
              StatusIs(kInvalid, "s: parameter \"s\" must be a string, got double 0.5"));
  EXPECT_THAT(ParameterAsString(Bool(true), "s"),
              StatusIs(kInvalid, "s: parameter \"s\" must be a string, got bool true"));
}

TEST(InferParameterTest, Describe) {
  EXPECT_EQ(DescribeParameter(Bool(true)), "bool true");
  EXPECT_EQ(DescribeParameter(Bool(false)), "bool false");
  EXPECT_EQ(DescribeParameter(Int(-7)), "int64 -7");
  EXPECT_EQ(DescribeParameter(Uint(7)), "uint64 7");
  EXPECT_EQ(DescribeParameter(Double(0.5)), "double 0.5");
  EXPECT_EQ(DescribeParameter(String("abc")), "string \"abc\"");
  EXPECT_EQ(DescribeParameter(InferParameter()), "no value");
}

// ---------------------------------------------------------------------------
// ParseSequenceControl.

ModelInferRequest WithParameters(
    std::initializer_list<std::pair<const char*, InferParameter>> parameters) {
  ModelInferRequest request;
  for (const auto& [name, value] : parameters)
    (*request.mutable_parameters())[name] = value;
  return request;
}

TEST(SequenceControlTest, NoneByDefault) {
  const absl::StatusOr<SequenceControl> none = ParseSequenceControl(ModelInferRequest());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->any());
  EXPECT_FALSE(none->start);
  EXPECT_FALSE(none->end);
  EXPECT_FALSE(none->opened);
}

TEST(SequenceControlTest, IdsOfEachType) {
  absl::StatusOr<SequenceControl> s =
      ParseSequenceControl(WithParameters({{"sequence_id", Int(42)}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->id, "42");
  EXPECT_TRUE(s->any());

  s = ParseSequenceControl(
      WithParameters({{"sequence_id", Uint(std::numeric_limits<uint64_t>::max())}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->id, "18446744073709551615");

  s = ParseSequenceControl(WithParameters({{"sequence_id", String("chat-7")}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->id, "chat-7");

  // 0 and "" are Triton's "no sequence".
  for (const InferParameter& none : {Int(0), Uint(0), String(""), String("0")}) {
    s = ParseSequenceControl(WithParameters({{"sequence_id", none}}));
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_FALSE(s->any()) << DescribeParameter(none);
  }
}

TEST(SequenceControlTest, StartAndEnd) {
  absl::StatusOr<SequenceControl> s =
      ParseSequenceControl(WithParameters({{"sequence_id", Int(7)},
                                           {"sequence_start", Bool(true)},
                                           {"sequence_end", Int(1)}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->id, "7");
  EXPECT_TRUE(s->start);
  EXPECT_TRUE(s->end);
  EXPECT_FALSE(s->opened);  // JoinSequence's to set.

  s = ParseSequenceControl(WithParameters(
      {{"sequence_id", String("a")}, {"sequence_start", String("false")}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->start);

  // False flags need no id.
  s = ParseSequenceControl(
      WithParameters({{"sequence_start", Bool(false)}, {"sequence_end", Bool(false)}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->any());
}

TEST(SequenceControlTest, Errors) {
  EXPECT_THAT(ParseSequenceControl(WithParameters({{"sequence_start", Bool(true)}})),
              StatusIs(kInvalid,
                       "sequence_start: parameter \"sequence_start\" is true but "
                       "no sequence_id says which sequence"));
  EXPECT_THAT(ParseSequenceControl(WithParameters(
                  {{"sequence_id", Int(0)}, {"sequence_end", Bool(true)}})),
              StatusIs(kInvalid,
                       "sequence_end: parameter \"sequence_end\" is true but no "
                       "sequence_id says which sequence"));
  EXPECT_THAT(ParseSequenceControl(WithParameters({{"sequence_id", Double(1.5)}})),
              StatusIs(kInvalid,
                       "sequence_id: parameter \"sequence_id\" must be an integer "
                       "or a string, got double 1.5"));
  EXPECT_THAT(ParseSequenceControl(WithParameters({{"sequence_id", Bool(true)}})),
              StatusIs(kInvalid,
                       "sequence_id: parameter \"sequence_id\" must be an integer "
                       "or a string, got bool true"));
  EXPECT_THAT(ParseSequenceControl(
                  WithParameters({{"sequence_id", Int(1)}, {"sequence_end", Int(2)}})),
              StatusIs(kInvalid,
                       "sequence_end: parameter \"sequence_end\" must be a bool "
                       "(true or false), got int64 2"));
}

TEST(SequenceControlTest, SequenceParameterNames) {
  EXPECT_TRUE(IsSequenceParameter("sequence_id"));
  EXPECT_TRUE(IsSequenceParameter("sequence_start"));
  EXPECT_TRUE(IsSequenceParameter("sequence_end"));
  EXPECT_FALSE(IsSequenceParameter("sequence"));
  EXPECT_FALSE(IsSequenceParameter("session_id"));
}

}  // namespace
}  // namespace layerserve::oip
