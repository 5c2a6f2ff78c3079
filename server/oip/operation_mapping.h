// How one layerserve.v1 operation appears on the Open Inference Protocol
// (inference.GRPCInferenceService's ModelInfer), derived from the v1 request and
// response descriptors by one rule, so that a field added to v1 appears here with no
// new code:
//
//   - Each request field is named by its path, the names of the fields that reach it
//     from the request joined by '.' ("hidden_states", "rope.query",
//     "rope.scaling.type"). It is an input where it is a layerserve.v1.Tensor
//     (datatype FP32, BF16 or FP16), and a request parameter where it is a scalar,
//     an enum (by value name: "RMS_NORM"; a v1.DataType also by the protocol's
//     datatype names "FP32", "BF16", "FP16") or a repeated scalar ("1,2,3"). A
//     repeated int64 (positions, sequence_lengths) is also accepted as an INT64
//     input. Singular message fields are walked into; the members of a oneof are
//     alternatives, so one request's inputs and parameters may come from only one
//     of them. Fields the server sets itself (`fixed`: BlockForward's `model`, which
//     the model name gives) are neither.
//   - Each Tensor field of the response is an output of its path's name; every other
//     response field that is set becomes a response parameter (a repeated message as
//     its JSON, "attention_stats").
//
// Every error is INVALID_ARGUMENT naming the input, parameter or output (the message
// starts with its name, as v1's errors start with the field's path) and the numbers.
// Immutable after construction: safe from any thread.
#ifndef LAYERSERVE_SERVER_OIP_OPERATION_MAPPING_H_
#define LAYERSERVE_SERVER_OIP_OPERATION_MAPPING_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "inference/grpc_service.pb.h"
#include "layerserve/v1/layerserve.pb.h"

namespace layerserve::oip {

// A field of a v1 message reached from it through singular message fields.
struct FieldPath {
  std::string name;  // "rope.scaling.type"
  // The fields from the message down, outermost first; back() is the field itself.
  std::vector<const google::protobuf::FieldDescriptor*> chain;

  const google::protobuf::FieldDescriptor& field() const { return *chain.back(); }
};

struct MappedInput {
  FieldPath path;
  // A v1.Tensor (FP32, BF16, FP16); else a repeated int64 taken as INT64.
  bool tensor = true;
  // The request's main input (its first Tensor field outside any oneof, as v1's
  // conventions name it): every v1 operation requires it. The parser says which
  // others an operation needs in which case; the model configuration marks them
  // optional.
  bool required = false;
};

class OperationMapping {
 public:
  // `fixed`: request fields the server sets, by top-level name.
  OperationMapping(const google::protobuf::Descriptor& request,
                   const google::protobuf::Descriptor& response,
                   const std::vector<std::string>& fixed = {});

  const google::protobuf::Descriptor& request_type() const { return request_; }
  const std::vector<MappedInput>& inputs() const { return inputs_; }
  const std::vector<FieldPath>& parameters() const { return parameters_; }
  const std::vector<FieldPath>& outputs() const { return outputs_; }
  const std::vector<FieldPath>& response_parameters() const {
    return response_parameters_;
  }

  // Fills `request` (of request_type()) from `infer`'s inputs and parameters. Each
  // raw input's bytes move out of `infer` into the request (no copy); typed
  // contents are copied. Parameters for which `reserved` is true (the protocol's
  // own, such as sequence_id) are left to the caller.
  absl::Status FillRequest(inference::ModelInferRequest& infer,
                           bool (*reserved)(absl::string_view name),
                           google::protobuf::Message* request) const;

  // INVALID_ARGUMENT if `infer` asks for an output this operation does not have,
  // twice for one, or gives an output parameter (none is supported).
  absl::Status CheckRequestedOutputs(const inference::ModelInferRequest& infer) const;

  // Fills `infer`'s outputs, raw_output_contents and parameters from `response`,
  // whose tensor bytes move into `infer` (no copy). `requested`: the outputs asked
  // for, in order; empty means every output the response holds. An output asked
  // for that the response does not hold (NormalizeResponse.residual_out without a
  // residual) is INVALID_ARGUMENT.
  absl::Status FillResponse(google::protobuf::Message& response,
                            const std::vector<std::string>& requested,
                            inference::ModelInferResponse* infer) const;

 private:
  const MappedInput* FindInput(absl::string_view name) const;
  const FieldPath* FindParameter(absl::string_view name) const;
  const FieldPath* FindOutput(absl::string_view name) const;

  const google::protobuf::Descriptor& request_;
  std::vector<MappedInput> inputs_;
  std::vector<FieldPath> parameters_;
  std::vector<FieldPath> outputs_;
  std::vector<FieldPath> response_parameters_;
};

// The protocol's datatype name of a v1 tensor dtype ("FP32"), and back (an unknown
// name: DATA_TYPE_UNSPECIFIED).
const char* DatatypeName(v1::DataType dtype);
v1::DataType DatatypeFromName(absl::string_view name);

}  // namespace layerserve::oip

#endif  // LAYERSERVE_SERVER_OIP_OPERATION_MAPPING_H_
