// ModelInfer: serialized inference.ModelInferRequest -> each v1 operation's
// OperationMapping (CheckRequestedOutputs, FillRequest), ParseSequenceControl, and
// for a filled request the operation's v1 Parse, as server/rpc/inference_service.cc
// runs them. Not the kernels: the per-operation targets run those.
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_targets.h"
#include "fuzz/worker.h"
#include "inference/grpc_service.pb.h"
#include "server/models/model_repository.h"
#include "server/oip/operation_mapping.h"
#include "server/oip/sequence.h"
#include "server/ops/activate.h"
#include "server/ops/block_forward.h"
#include "server/ops/normalize.h"
#include "server/ops/positional_encode.h"
#include "server/rpc/grpc_status.h"

namespace layerserve::fuzz {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using inference::ModelInferRequest;

const ModelRepository& Models() {
  static const ModelRepository* const models =
      ModelRepository::Demo(kernels::WeightType::kFloat32).release();
  return *models;
}

template <typename Op>
const oip::OperationMapping& MappingOf(const std::vector<std::string>& fixed = {}) {
  static const oip::OperationMapping* const mapping = new oip::OperationMapping(
      *Op::Request::descriptor(), *Op::Response::descriptor(), fixed);
  return *mapping;
}

// An INVALID_ARGUMENT message starts with what it is about, then ": ", so that
// ToGrpcStatus's BadRequest names a field (FieldPathsOfMessage). The one name that
// need not look like a field path is a request parameter's own, echoed back as the
// client spelt it (an unknown parameter).
void CheckNamesItsField(const absl::Status& status, const ModelInferRequest& infer) {
  if (status.code() != absl::StatusCode::kInvalidArgument) return;
  const std::string message(status.message());
  const std::vector<std::string> paths = FieldPathsOfMessage(message);
  if (!(paths.size() == 1 && paths[0].empty())) return;
  for (const auto& [name, value] : infer.parameters()) {
    if (absl::StartsWith(message, absl::StrCat(name, ": "))) return;
  }
  FUZZ_CHECK(false,
             "INVALID_ARGUMENT does not start with the name it is about: " + message);
}

// The mapping's own errors (FillRequest, CheckRequestedOutputs,
// ParseSequenceControl) are INVALID_ARGUMENT only.
void CheckMappingError(const absl::Status& status, const ModelInferRequest& infer) {
  FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument, status.ToString());
  FUZZ_CHECK(!status.message().empty(), "an error without a message");
  CheckNamesItsField(status, infer);
}

// The message holding `path`'s field in `request`, which FillRequest has made.
const Message& ParentOf(const oip::FieldPath& path, const Message& request) {
  const Message* message = &request;
  for (size_t i = 0; i + 1 < path.chain.size(); ++i) {
    const auto& reflection = *message->GetReflection();
    FUZZ_CHECK(reflection.HasField(*message, path.chain[i]),
               path.name + ": its parent message was not made");
    message = &reflection.GetMessage(*message, path.chain[i]);
  }
  return *message;
}

// After a FillRequest that succeeded, every input of `infer` is in `request` as it
// came: datatype, shape and bytes (raw ones moved out of `moved`, infer's copy
// that FillRequest took), or the INT64 values.
void CheckFilled(const oip::OperationMapping& mapping, const ModelInferRequest& infer,
                 const ModelInferRequest& moved, const Message& request) {
  const bool raw = infer.raw_input_contents_size() > 0;
  for (int i = 0; i < infer.inputs_size(); ++i) {
    const auto& input = infer.inputs(i);
    const oip::MappedInput* mapped = nullptr;
    for (const oip::MappedInput& candidate : mapping.inputs()) {
      if (candidate.path.name == input.name()) mapped = &candidate;
    }
    FUZZ_CHECK(mapped != nullptr, input.name() + ": accepted, but no such input");
    const Message& parent = ParentOf(mapped->path, request);
    const auto& reflection = *parent.GetReflection();
    const FieldDescriptor& field = mapped->path.field();
    if (mapped->tensor) {
      FUZZ_CHECK(reflection.HasField(parent, &field), input.name() + ": not filled");
      const auto* tensor =
          dynamic_cast<const v1::Tensor*>(&reflection.GetMessage(parent, &field));
      FUZZ_CHECK(tensor != nullptr, input.name() + ": not a v1.Tensor");
      FUZZ_CHECK(tensor->dtype() == oip::DatatypeFromName(input.datatype()),
                 input.name() + ": dtype");
      FUZZ_CHECK(std::vector<int64_t>(tensor->shape().begin(), tensor->shape().end()) ==
                     std::vector<int64_t>(input.shape().begin(), input.shape().end()),
                 input.name() + ": shape");
      if (raw) {
        FUZZ_CHECK(tensor->data() == infer.raw_input_contents(i),
                   input.name() + ": raw bytes changed");
        FUZZ_CHECK(moved.raw_input_contents(i).empty(),
                   input.name() + ": raw bytes copied, not moved");
      } else {
        const auto& values = input.contents().fp32_contents();
        FUZZ_CHECK(tensor->data().size() == values.size() * sizeof(float),
                   input.name() + ": typed values");
        FUZZ_CHECK(values.empty() || std::memcmp(tensor->data().data(), values.data(),
                                                 tensor->data().size()) == 0,
                   input.name() + ": typed values changed");
      }
    } else {
      std::vector<int64_t> expected;
      if (raw) {
        const std::string& bytes = infer.raw_input_contents(i);
        FUZZ_CHECK(bytes.size() % 8 == 0, input.name() + ": INT64 bytes");
        expected.resize(bytes.size() / 8);
        if (!expected.empty()) std::memcpy(expected.data(), bytes.data(), bytes.size());
      } else {
        expected.assign(input.contents().int64_contents().begin(),
                        input.contents().int64_contents().end());
      }
      std::vector<int64_t> values;
      for (int j = 0; j < reflection.FieldSize(parent, &field); ++j) {
        values.push_back(reflection.GetRepeatedInt64(parent, &field, j));
      }
      FUZZ_CHECK(values == expected, input.name() + ": INT64 values");
    }
  }
}

// One operation: true if the server would hand the request to its dispatch (the
// outputs asked for exist, the mapping fills a v1 request and v1 parses it).
template <typename Op>
bool Infer(const oip::OperationMapping& mapping, const ModelInferRequest& infer) {
  const absl::Status outputs = mapping.CheckRequestedOutputs(infer);
  if (!outputs.ok()) CheckMappingError(outputs, infer);

  // FillRequest moves raw bytes out of the request it is given: a copy, so every
  // operation sees the input as it came.
  ModelInferRequest moved = infer;
  typename Op::Request request;
  const absl::Status filled =
      mapping.FillRequest(moved, &oip::IsSequenceParameter, &request);
  if (!filled.ok()) {
    CheckMappingError(filled, infer);
    return false;
  }
  CheckFilled(mapping, infer, moved, request);
  if constexpr (std::is_same_v<Op, BlockForwardOp>) {
    request.set_model("demo");  // The model name gives it (ModelInfer's model_name).
  }

  ParseContext context;
  context.models = &Models();
  absl::StatusOr<typename Op::Job> job = Op::Parse(request, context);
  if (!job.ok()) {
    CheckRejection(job.status());
    CheckNamesItsField(job.status(), infer);
    return false;
  }
  FUZZ_CHECK(Op::Rows(*job) >= 1, absl::StrCat(Op::kMethod, ": a job of no rows"));
  FUZZ_CHECK(Op::Elements(*job) >= 1, absl::StrCat(Op::kMethod, ": a job of no values"));
  return outputs.ok();
}

}  // namespace

Outcome FuzzModelInfer(const uint8_t* data, size_t size) {
  std::optional<ModelInferRequest> infer = ParseRequest<ModelInferRequest>(data, size);
  if (!infer) return Outcome::kUnparsable;

  // Independent of the operation: the same for each.
  const absl::StatusOr<oip::SequenceControl> sequence = oip::ParseSequenceControl(*infer);
  if (!sequence.ok()) {
    CheckMappingError(sequence.status(), *infer);
  } else {
    FUZZ_CHECK(sequence->id != "0", "sequence_id 0 means no sequence");
    FUZZ_CHECK(sequence->any() || (!sequence->start && !sequence->end),
               "a start or end without a sequence");
    FUZZ_CHECK(!sequence->opened, "opened before JoinSequence");
  }

  bool accepted = false;
  accepted |= Infer<BlockForwardOp>(MappingOf<BlockForwardOp>({"model"}), *infer);
  accepted |= Infer<NormalizeOp>(MappingOf<NormalizeOp>(), *infer);
  accepted |= Infer<ActivateOp>(MappingOf<ActivateOp>(), *infer);
  accepted |= Infer<PositionalEncodeOp>(MappingOf<PositionalEncodeOp>(), *infer);
  return accepted && sequence.ok() ? Outcome::kAccepted : Outcome::kRejected;
}

}  // namespace layerserve::fuzz
