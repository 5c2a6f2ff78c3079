#include "server/oip/operation_mapping.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "server/oip/infer_parameter.h"

namespace layerserve::oip {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::OneofDescriptor;
using google::protobuf::Reflection;
using inference::InferParameter;
using inference::ModelInferRequest;

// v1 messages nest three deep at most (PositionalEncodeRequest.rope.scaling); the
// bound only keeps a recursive message from recursing forever.
constexpr int kMaxDepth = 8;

bool IsTensor(const FieldDescriptor& field) {
  return field.message_type() == v1::Tensor::descriptor();
}

bool IsRepeatedInt64(const FieldDescriptor& field) {
  return field.is_repeated() && field.cpp_type() == FieldDescriptor::CPPTYPE_INT64;
}

std::string JoinPath(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : absl::StrCat(prefix, ".", name);
}

template <typename Paths>
std::string NamesOf(const Paths& paths) {
  std::vector<std::string> names;
  for (const auto& path : paths) {
    if constexpr (std::is_same_v<typename Paths::value_type, MappedInput>) {
      names.push_back(path.path.name);
    } else {
      names.push_back(path.name);
    }
  }
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

std::string ShapeString(const google::protobuf::RepeatedField<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

// The number of values of `shape`, or -1 if a dimension is below 1 or the count
// overflows (v1's validation then says which, naming the input).
int64_t ElementCount(const google::protobuf::RepeatedField<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 1 || count > std::numeric_limits<int64_t>::max() / 8 / dim) return -1;
    count *= dim;
  }
  return count;
}

bool HasTypedContents(const inference::InferTensorContents& contents) {
  return contents.bool_contents_size() > 0 || contents.int_contents_size() > 0 ||
         contents.int64_contents_size() > 0 || contents.uint_contents_size() > 0 ||
         contents.uint64_contents_size() > 0 || contents.fp32_contents_size() > 0 ||
         contents.fp64_contents_size() > 0 || contents.bytes_contents_size() > 0;
}

// Walks `path` from `root` down to the message holding its field, making the
// messages on the way. The members of a oneof are alternatives: `chosen` remembers,
// per oneof, the path that chose its member, and a path under another member is an
// error naming both.
absl::StatusOr<Message*> MutableParent(
    const FieldPath& path, Message* root,
    std::map<const OneofDescriptor*, const FieldPath*>& chosen) {
  Message* message = root;
  for (const FieldDescriptor* field : path.chain) {
    const Reflection& reflection = *message->GetReflection();
    if (const OneofDescriptor* oneof = field->real_containing_oneof()) {
      const FieldDescriptor* set = reflection.GetOneofFieldDescriptor(*message, oneof);
      if (set != nullptr && set != field) {
        std::vector<std::string> members;
        for (int i = 0; i < oneof->field_count(); ++i) {
          members.push_back(oneof->field(i)->name());
        }
        const FieldPath* by = chosen[oneof];
        return absl::InvalidArgumentError(absl::StrCat(
            path.name, ": belongs to \"", field->name(), "\", but \"", set->name(),
            "\" was chosen", by != nullptr ? absl::StrCat(" by ", by->name) : "",
            "; give the inputs and parameters of one of ", absl::StrJoin(members, ", ")));
      }
      chosen.emplace(oneof, &path);
    }
    if (field == path.chain.back()) break;
    message = reflection.MutableMessage(message, field);
  }
  return message;
}

// The message holding `path`'s field in `root`, or null if a message on the way is
// not set.
Message* ParentIfSet(const FieldPath& path, Message* root) {
  Message* message = root;
  for (size_t i = 0; i + 1 < path.chain.size(); ++i) {
    const Reflection& reflection = *message->GetReflection();
    if (!reflection.HasField(*message, path.chain[i])) return nullptr;
    message = reflection.MutableMessage(message, path.chain[i]);
  }
  return message;
}

absl::StatusOr<const EnumValueDescriptor*> EnumValueOf(const FieldDescriptor& field,
                                                       const InferParameter& value,
                                                       absl::string_view name) {
  const google::protobuf::EnumDescriptor& type = *field.enum_type();
  const EnumValueDescriptor* found = nullptr;
  if (value.parameter_choice_case() == InferParameter::kStringParam) {
    found = type.FindValueByName(value.string_param());
    if (found == nullptr && &type == v1::DataType_descriptor()) {
      const v1::DataType dtype = DatatypeFromName(value.string_param());
      if (dtype != v1::DATA_TYPE_UNSPECIFIED) found = type.FindValueByNumber(dtype);
    }
  } else if (const absl::StatusOr<int64_t> number = ParameterAsInt64(value, name);
             number.ok() && *number >= std::numeric_limits<int32_t>::min() &&
             *number <= std::numeric_limits<int32_t>::max()) {
    found = type.FindValueByNumber(static_cast<int>(*number));  // Enums are int32.
  }
  if (found != nullptr) return found;
  std::vector<std::string> names;
  for (int i = 0; i < type.value_count(); ++i) names.push_back(type.value(i)->name());
  if (&type == v1::DataType_descriptor()) {
    for (const char* oip_name : {"FP32", "BF16", "FP16"}) names.push_back(oip_name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": parameter \"", name, "\" must be one of ",
                   absl::StrJoin(names, ", "), ", got ", DescribeParameter(value)));
}

// Sets (or, for a repeated field, adds) one value of `field` in `message`.
absl::Status StoreValue(Message* message, const FieldDescriptor& field,
                        const InferParameter& value, absl::string_view name) {
  const Reflection& r = *message->GetReflection();
  const bool add = field.is_repeated();
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_BOOL: {
      ASSIGN_OR_RETURN(const bool v, ParameterAsBool(value, name));
      add ? r.AddBool(message, &field, v) : r.SetBool(message, &field, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64: {
      ASSIGN_OR_RETURN(const int64_t v, ParameterAsInt64(value, name));
      const bool is32 = field.cpp_type() == FieldDescriptor::CPPTYPE_INT32 ||
                        field.cpp_type() == FieldDescriptor::CPPTYPE_UINT32;
      const bool is_unsigned = field.cpp_type() == FieldDescriptor::CPPTYPE_UINT32 ||
                               field.cpp_type() == FieldDescriptor::CPPTYPE_UINT64;
      const int64_t low = is_unsigned ? 0
                          : is32      ? std::numeric_limits<int32_t>::min()
                                      : std::numeric_limits<int64_t>::min();
      const int64_t high = !is32         ? std::numeric_limits<int64_t>::max()
                           : is_unsigned ? std::numeric_limits<uint32_t>::max()
                                         : std::numeric_limits<int32_t>::max();
      if (v < low || v > high) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": parameter \"", name,
                                                       "\" is ", v, ", outside [", low,
                                                       ", ", high, "]"));
      }
      switch (field.cpp_type()) {
        case FieldDescriptor::CPPTYPE_INT32:
          add ? r.AddInt32(message, &field, static_cast<int32_t>(v))
              : r.SetInt32(message, &field, static_cast<int32_t>(v));
          break;
        case FieldDescriptor::CPPTYPE_UINT32:
          add ? r.AddUInt32(message, &field, static_cast<uint32_t>(v))
              : r.SetUInt32(message, &field, static_cast<uint32_t>(v));
          break;
        case FieldDescriptor::CPPTYPE_UINT64:
          add ? r.AddUInt64(message, &field, static_cast<uint64_t>(v))
              : r.SetUInt64(message, &field, static_cast<uint64_t>(v));
          break;
        default:
          add ? r.AddInt64(message, &field, v) : r.SetInt64(message, &field, v);
          break;
      }
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      ASSIGN_OR_RETURN(const double v, ParameterAsDouble(value, name));
      if (field.cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
        add ? r.AddDouble(message, &field, v) : r.SetDouble(message, &field, v);
        return absl::OkStatus();
      }
      if (std::isfinite(v) && std::abs(v) > FLT_MAX) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": parameter \"", name, "\" is ", v, ", beyond the float range"));
      }
      const float f = static_cast<float>(v);
      add ? r.AddFloat(message, &field, f) : r.SetFloat(message, &field, f);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      ASSIGN_OR_RETURN(const EnumValueDescriptor* v, EnumValueOf(field, value, name));
      add ? r.AddEnum(message, &field, v) : r.SetEnum(message, &field, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      ASSIGN_OR_RETURN(std::string v, ParameterAsString(value, name));
      add ? r.AddString(message, &field, std::move(v))
          : r.SetString(message, &field, std::move(v));
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return absl::InternalError(absl::StrCat(name, ": not a parameter"));
}

// A parameter of a repeated field: a list "1,2,3" (brackets allowed, "" for none)
// or a single value.
absl::Status StoreParameter(Message* message, const FieldDescriptor& field,
                            const InferParameter& value, absl::string_view name) {
  if (!field.is_repeated()) return StoreValue(message, field, value, name);
  message->GetReflection()->ClearField(message, &field);
  if (value.parameter_choice_case() != InferParameter::kStringParam) {
    return StoreValue(message, field, value, name);
  }
  absl::string_view list = absl::StripAsciiWhitespace(value.string_param());
  if (absl::ConsumePrefix(&list, "[") && !absl::ConsumeSuffix(&list, "]")) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": parameter \"", name, "\" opens a list with '[' but does not close it"));
  }
  list = absl::StripAsciiWhitespace(list);
  if (list.empty()) return absl::OkStatus();
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    InferParameter one;
    one.set_string_param(std::string(absl::StripAsciiWhitespace(item)));
    RETURN_IF_ERROR(StoreValue(message, field, one, name));
  }
  return absl::OkStatus();
}

absl::Status FillTensor(const inference::ModelInferRequest::InferInputTensor& input,
                        std::string* raw, int raw_index, v1::Tensor* tensor) {
  const std::string& name = input.name();
  const v1::DataType dtype = DatatypeFromName(input.datatype());
  if (dtype == v1::DATA_TYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": input \"", name,
                                                   "\" has datatype \"", input.datatype(),
                                                   "\"; it takes FP32, BF16 or FP16"));
  }
  tensor->set_dtype(dtype);
  tensor->mutable_shape()->CopyFrom(input.shape());
  const int64_t count = ElementCount(input.shape());
  const int64_t bytes = count * (dtype == v1::FLOAT32 ? 4 : 2);
  const std::string described = absl::StrCat(
      name, ": input \"", name, "\" ", ShapeString(input.shape()), " ", input.datatype());
  if (raw != nullptr) {
    // A bad shape is v1's to report (naming the same input); the bytes are checked
    // once the shape is good.
    if (count >= 0 && static_cast<int64_t>(raw->size()) != bytes) {
      return absl::InvalidArgumentError(absl::StrCat(described, " needs ", bytes,
                                                     " bytes; raw_input_contents[",
                                                     raw_index, "] holds ", raw->size()));
    }
    tensor->mutable_data()->swap(*raw);
    return absl::OkStatus();
  }
  const inference::InferTensorContents& contents = input.contents();
  if (dtype != v1::FLOAT32) {
    return absl::InvalidArgumentError(
        absl::StrCat(described, ": the protocol has no typed contents for ",
                     input.datatype(), "; send it in raw_input_contents"));
  }
  if (contents.fp32_contents_size() == 0 && HasTypedContents(contents)) {
    return absl::InvalidArgumentError(absl::StrCat(
        described, ": FP32 values go in contents.fp32_contents (or raw_input_contents)"));
  }
  if (count >= 0 && contents.fp32_contents_size() != count) {
    return absl::InvalidArgumentError(absl::StrCat(
        described, " needs ", count, " values; contents.fp32_contents holds ",
        contents.fp32_contents_size()));
  }
  std::string* data = tensor->mutable_data();
  data->resize(contents.fp32_contents_size() * sizeof(float));
  if (!data->empty()) {
    std::memcpy(data->data(), contents.fp32_contents().data(), data->size());
  }
  return absl::OkStatus();
}

absl::Status FillInt64List(const inference::ModelInferRequest::InferInputTensor& input,
                           const std::string* raw, int raw_index, Message* message,
                           const FieldDescriptor& field) {
  const std::string& name = input.name();
  if (input.datatype() != "INT64") {
    return absl::InvalidArgumentError(absl::StrCat(name, ": input \"", name,
                                                   "\" has datatype \"", input.datatype(),
                                                   "\"; it takes INT64"));
  }
  const int64_t count = ElementCount(input.shape());
  const std::string described =
      absl::StrCat(name, ": input \"", name, "\" ", ShapeString(input.shape()), " INT64");
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(described, ": every dimension must be >= 1"));
  }
  const Reflection& r = *message->GetReflection();
  r.ClearField(message, &field);
  if (raw != nullptr) {
    if (static_cast<int64_t>(raw->size()) != count * 8) {
      return absl::InvalidArgumentError(absl::StrCat(described, " needs ", count * 8,
                                                     " bytes; raw_input_contents[",
                                                     raw_index, "] holds ", raw->size()));
    }
    for (int64_t i = 0; i < count; ++i) {
      int64_t v = 0;
      std::memcpy(&v, raw->data() + i * 8, 8);  // Little-endian, as the host.
      r.AddInt64(message, &field, v);
    }
    return absl::OkStatus();
  }
  const inference::InferTensorContents& contents = input.contents();
  if (contents.int64_contents_size() != count) {
    return absl::InvalidArgumentError(absl::StrCat(
        described, " needs ", count, " values; contents.int64_contents holds ",
        contents.int64_contents_size()));
  }
  for (int64_t v : contents.int64_contents()) r.AddInt64(message, &field, v);
  return absl::OkStatus();
}

// JSON as the v1 proto names its fields, zeros included ("layer": 0).
google::protobuf::util::JsonPrintOptions JsonOptions() {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  return options;
}

// The response parameter of a set field that is not a tensor.
InferParameter ResponseParameter(const Message& message, const FieldDescriptor& field) {
  const Reflection& r = *message.GetReflection();
  InferParameter value;
  if (field.is_repeated()) {
    std::vector<std::string> items;
    for (int i = 0; i < r.FieldSize(message, &field); ++i) {
      std::string item;
      switch (field.cpp_type()) {
        case FieldDescriptor::CPPTYPE_MESSAGE:
          (void)google::protobuf::util::MessageToJsonString(
              r.GetRepeatedMessage(message, &field, i), &item, JsonOptions());
          break;
        case FieldDescriptor::CPPTYPE_STRING:
          item = absl::StrCat("\"", r.GetRepeatedString(message, &field, i), "\"");
          break;
        case FieldDescriptor::CPPTYPE_ENUM:
          item = absl::StrCat("\"", r.GetRepeatedEnum(message, &field, i)->name(), "\"");
          break;
        case FieldDescriptor::CPPTYPE_BOOL:
          item = r.GetRepeatedBool(message, &field, i) ? "true" : "false";
          break;
        case FieldDescriptor::CPPTYPE_FLOAT:
          item = absl::StrCat(r.GetRepeatedFloat(message, &field, i));
          break;
        case FieldDescriptor::CPPTYPE_DOUBLE:
          item = absl::StrCat(r.GetRepeatedDouble(message, &field, i));
          break;
        case FieldDescriptor::CPPTYPE_INT32:
          item = absl::StrCat(r.GetRepeatedInt32(message, &field, i));
          break;
        case FieldDescriptor::CPPTYPE_UINT32:
          item = absl::StrCat(r.GetRepeatedUInt32(message, &field, i));
          break;
        case FieldDescriptor::CPPTYPE_UINT64:
          item = absl::StrCat(r.GetRepeatedUInt64(message, &field, i));
          break;
        case FieldDescriptor::CPPTYPE_INT64:
          item = absl::StrCat(r.GetRepeatedInt64(message, &field, i));
          break;
      }
      items.push_back(std::move(item));
    }
    // JSON: a list of the field's values.
    value.set_string_param(absl::StrCat("[", absl::StrJoin(items, ","), "]"));
    return value;
  }
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      std::string json;
      (void)google::protobuf::util::MessageToJsonString(r.GetMessage(message, &field),
                                                        &json, JsonOptions());
      value.set_string_param(std::move(json));
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING:
      value.set_string_param(r.GetString(message, &field));
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      value.set_string_param(r.GetEnum(message, &field)->name());
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      value.set_bool_param(r.GetBool(message, &field));
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      value.set_double_param(r.GetFloat(message, &field));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      value.set_double_param(r.GetDouble(message, &field));
      break;
    case FieldDescriptor::CPPTYPE_INT32:
      value.set_int64_param(r.GetInt32(message, &field));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      value.set_int64_param(r.GetUInt32(message, &field));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      value.set_uint64_param(r.GetUInt64(message, &field));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      value.set_int64_param(r.GetInt64(message, &field));
      break;
  }
  return value;
}

// Collects the request's inputs and parameters under `type` (reached by `chain`).
void WalkRequest(const Descriptor& type, const std::string& prefix,
                 std::vector<const FieldDescriptor*>& chain,
                 const std::vector<std::string>& fixed, std::vector<MappedInput>& inputs,
                 std::vector<FieldPath>& parameters) {
  for (int i = 0; i < type.field_count(); ++i) {
    const FieldDescriptor* field = type.field(i);
    if (chain.empty() &&
        std::find(fixed.begin(), fixed.end(), field->name()) != fixed.end()) {
      continue;
    }
    chain.push_back(field);
    const FieldPath path{JoinPath(prefix, field->name()), chain};
    if (IsTensor(*field)) {
      if (!field->is_repeated()) inputs.push_back({path, /*tensor=*/true});
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      // Repeated messages have no mapping (no v1 request has one).
      if (!field->is_repeated() && chain.size() < kMaxDepth) {
        WalkRequest(*field->message_type(), path.name, chain, fixed, inputs, parameters);
      }
    } else {
      parameters.push_back(path);
      if (IsRepeatedInt64(*field)) inputs.push_back({path, /*tensor=*/false});
    }
    chain.pop_back();
  }
}

void WalkResponse(const Descriptor& type, const std::string& prefix,
                  std::vector<const FieldDescriptor*>& chain,
                  std::vector<FieldPath>& outputs, std::vector<FieldPath>& parameters) {
  for (int i = 0; i < type.field_count(); ++i) {
    const FieldDescriptor* field = type.field(i);
    chain.push_back(field);
    const FieldPath path{JoinPath(prefix, field->name()), chain};
    if (IsTensor(*field) && !field->is_repeated()) {
      outputs.push_back(path);
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
               !field->is_repeated() && !IsTensor(*field) && chain.size() < kMaxDepth) {
      WalkResponse(*field->message_type(), path.name, chain, outputs, parameters);
    } else {
      parameters.push_back(path);
    }
    chain.pop_back();
  }
}

}  // namespace

const char* DatatypeName(v1::DataType dtype) {
  switch (dtype) {
    case v1::FLOAT32:
      return "FP32";
    case v1::BFLOAT16:
      return "BF16";
    case v1::FLOAT16:
      return "FP16";
    default:
      return "";
  }
}

v1::DataType DatatypeFromName(absl::string_view name) {
  if (name == "FP32") return v1::FLOAT32;
  if (name == "BF16") return v1::BFLOAT16;
  if (name == "FP16") return v1::FLOAT16;
  return v1::DATA_TYPE_UNSPECIFIED;
}

OperationMapping::OperationMapping(const Descriptor& request, const Descriptor& response,
                                   const std::vector<std::string>& fixed)
    : request_(request) {
  std::vector<const FieldDescriptor*> chain;
  WalkRequest(request, "", chain, fixed, inputs_, parameters_);
  WalkResponse(response, "", chain, outputs_, response_parameters_);
  for (MappedInput& input : inputs_) {
    if (input.tensor && input.path.chain.size() == 1 &&
        input.path.field().real_containing_oneof() == nullptr) {
      input.required = true;  // The first such field: the main input.
      break;
    }
  }
}

const MappedInput* OperationMapping::FindInput(absl::string_view name) const {
  for (const MappedInput& input : inputs_) {
    if (input.path.name == name) return &input;
  }
  return nullptr;
}

const FieldPath* OperationMapping::FindParameter(absl::string_view name) const {
  for (const FieldPath& path : parameters_) {
    if (path.name == name) return &path;
  }
  return nullptr;
}

const FieldPath* OperationMapping::FindOutput(absl::string_view name) const {
  for (const FieldPath& path : outputs_) {
    if (path.name == name) return &path;
  }
  return nullptr;
}

absl::Status OperationMapping::FillRequest(ModelInferRequest& infer,
                                           bool (*reserved)(absl::string_view name),
                                           Message* request) const {
  const int raw_count = infer.raw_input_contents_size();
  if (raw_count > 0 && raw_count != infer.inputs_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_input_contents: ", raw_count, " entries for ", infer.inputs_size(),
        " inputs; send one per input, in the order of inputs (or none, and typed "
        "contents)"));
  }
  std::map<const OneofDescriptor*, const FieldPath*> chosen;
  std::vector<std::string> given;
  for (int i = 0; i < infer.inputs_size(); ++i) {
    const ModelInferRequest::InferInputTensor& input = infer.inputs(i);
    const MappedInput* mapped = FindInput(input.name());
    if (mapped == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("inputs[", i, "].name: no input \"",
                                                     input.name(), "\"; the inputs are ",
                                                     NamesOf(inputs_)));
    }
    if (std::find(given.begin(), given.end(), input.name()) != given.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(input.name(), ": input \"", input.name(),
                       "\" is given twice (inputs[", i, "])"));
    }
    given.push_back(input.name());
    if (raw_count > 0 && HasTypedContents(input.contents())) {
      return absl::InvalidArgumentError(absl::StrCat(
          input.name(), ": input \"", input.name(),
          "\" has typed contents, and raw_input_contents are given too; send every "
          "input raw or every input typed"));
    }
    if (input.parameters_size() > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(input.name(), ": input \"", input.name(), "\" has parameters (\"",
                       input.parameters().begin()->first, "\"); inputs take none"));
    }
    ASSIGN_OR_RETURN(Message * parent, MutableParent(mapped->path, request, chosen));
    std::string* raw = raw_count > 0 ? infer.mutable_raw_input_contents(i) : nullptr;
    if (mapped->tensor) {
      auto* tensor = dynamic_cast<v1::Tensor*>(
          parent->GetReflection()->MutableMessage(parent, &mapped->path.field()));
      if (tensor == nullptr) return absl::InternalError("inputs: not a v1.Tensor");
      RETURN_IF_ERROR(FillTensor(input, raw, i, tensor));
    } else {
      RETURN_IF_ERROR(FillInt64List(input, raw, i, parent, mapped->path.field()));
    }
  }
  // In name order, so that an error names the same parameter every time.
  std::vector<std::string> names;
  for (const auto& [name, value] : infer.parameters()) names.push_back(name);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    if (reserved != nullptr && reserved(name)) continue;
    const FieldPath* path = FindParameter(name);
    if (path == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": no parameter \"", name,
                                                     "\"; the parameters are ",
                                                     NamesOf(parameters_)));
    }
    if (std::find(given.begin(), given.end(), name) != given.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": \"", name, "\" is given both as an input and as a parameter"));
    }
    ASSIGN_OR_RETURN(Message * parent, MutableParent(*path, request, chosen));
    RETURN_IF_ERROR(
        StoreParameter(parent, path->field(), infer.parameters().at(name), name));
  }
  return absl::OkStatus();
}

absl::Status OperationMapping::CheckRequestedOutputs(
    const ModelInferRequest& infer) const {
  for (int i = 0; i < infer.outputs_size(); ++i) {
    const auto& output = infer.outputs(i);
    if (FindOutput(output.name()) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("outputs[", i, "].name: no output \"", output.name(),
                       "\"; the outputs are ", NamesOf(outputs_)));
    }
    for (int j = 0; j < i; ++j) {
      if (infer.outputs(j).name() == output.name()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "outputs[", i, "].name: output \"", output.name(), "\" is asked for twice"));
      }
    }
    if (output.parameters_size() > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "outputs[", i, "].parameters: output \"", output.name(), "\" has parameter \"",
          output.parameters().begin()->first, "\"; outputs take none"));
    }
  }
  return absl::OkStatus();
}

absl::Status OperationMapping::FillResponse(Message& response,
                                            const std::vector<std::string>& requested,
                                            inference::ModelInferResponse* infer) const {
  std::vector<const FieldPath*> wanted;
  if (requested.empty()) {
    for (const FieldPath& path : outputs_) wanted.push_back(&path);
  } else {
    for (const std::string& name : requested) {
      const FieldPath* path = FindOutput(name);
      if (path == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("outputs: no output \"", name, "\""));
      }
      wanted.push_back(path);
    }
  }
  for (const FieldPath* path : wanted) {
    Message* parent = ParentIfSet(*path, &response);
    const Reflection* reflection = parent != nullptr ? parent->GetReflection() : nullptr;
    if (parent == nullptr || !reflection->HasField(*parent, &path->field())) {
      if (requested.empty()) continue;
      return absl::InvalidArgumentError(
          absl::StrCat("outputs: this request produced no \"", path->name,
                       "\"; leave outputs empty for every output it produces"));
    }
    auto* tensor =
        dynamic_cast<v1::Tensor*>(reflection->MutableMessage(parent, &path->field()));
    if (tensor == nullptr) return absl::InternalError("outputs: not a v1.Tensor");
    auto* output = infer->add_outputs();
    output->set_name(path->name);
    output->set_datatype(DatatypeName(tensor->dtype()));
    output->mutable_shape()->CopyFrom(tensor->shape());
    infer->add_raw_output_contents()->swap(*tensor->mutable_data());
  }
  for (const FieldPath& path : response_parameters_) {
    Message* parent = ParentIfSet(path, &response);
    if (parent == nullptr) continue;
    const Reflection& reflection = *parent->GetReflection();
    const bool set = path.field().is_repeated()
                         ? reflection.FieldSize(*parent, &path.field()) > 0
                         : reflection.HasField(*parent, &path.field());
    if (!set) continue;
    (*infer->mutable_parameters())[path.name] = ResponseParameter(*parent, path.field());
  }
  return absl::OkStatus();
}

}  // namespace layerserve::oip
