#include "server/oip/model_description.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace layerserve::oip {
namespace {

using google::protobuf::FieldDescriptor;

// -1 for every dimension: the rank a v1 field takes is in the v1 proto's comments,
// not its descriptor, and inputs of several ranks ([T, D] or [B, T, D]) are
// accepted. A repository model's residual stream is [B, T, hidden_size].
std::vector<int64_t> ShapeOf(const FieldPath& path, bool tensor,
                             const v1::ModelInfo* info) {
  if (tensor && info != nullptr && path.name == "hidden_states") {
    return {-1, -1, info->hidden_size()};
  }
  return {-1};
}

// A ModelInfo field as a configuration parameter's text.
std::string FieldText(const v1::ModelInfo& info, const FieldDescriptor& field) {
  const auto& r = *info.GetReflection();
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      return r.GetString(info, &field);
    case FieldDescriptor::CPPTYPE_ENUM:
      return r.GetEnum(info, &field)->name();
    case FieldDescriptor::CPPTYPE_BOOL:
      return r.GetBool(info, &field) ? "true" : "false";
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(r.GetInt32(info, &field));
    case FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(r.GetInt64(info, &field));
    case FieldDescriptor::CPPTYPE_UINT32:
      return absl::StrCat(r.GetUInt32(info, &field));
    case FieldDescriptor::CPPTYPE_UINT64:
      return absl::StrCat(r.GetUInt64(info, &field));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return absl::StrCat(r.GetFloat(info, &field));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return absl::StrCat(r.GetDouble(info, &field));
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      std::string json;
      google::protobuf::util::JsonPrintOptions options;
      options.preserve_proto_field_names = true;
      (void)google::protobuf::util::MessageToJsonString(r.GetMessage(info, &field), &json,
                                                        options);
      return json;
    }
  }
  return "";
}

}  // namespace

void FillModelMetadata(const ModelFacts& model,
                       inference::ModelMetadataResponse* metadata) {
  metadata->set_name(model.name);
  metadata->add_versions(model.version);
  metadata->set_platform(kPlatform);
  for (const MappedInput& input : model.mapping->inputs()) {
    auto* tensor = metadata->add_inputs();
    tensor->set_name(input.path.name);
    // FP32; BF16 and FP16 are accepted as well (the protocol lists one datatype).
    tensor->set_datatype(input.tensor ? "FP32" : "INT64");
    for (int64_t dim : ShapeOf(input.path, input.tensor, model.info)) {
      tensor->add_shape(dim);
    }
  }
  for (const FieldPath& output : model.mapping->outputs()) {
    auto* tensor = metadata->add_outputs();
    tensor->set_name(output.name);
    // The input's datatype unless the output_dtype parameter says otherwise.
    tensor->set_datatype("FP32");
    for (int64_t dim : ShapeOf(output, /*tensor=*/true, model.info))
      tensor->add_shape(dim);
  }
}

void FillModelConfig(const ModelFacts& model, inference::ModelConfig* config) {
  config->set_name(model.name);
  config->set_platform(kPlatform);
  config->set_backend(kPlatform);
  config->set_max_batch_size(0);
  for (const MappedInput& input : model.mapping->inputs()) {
    auto* tensor = config->add_input();
    tensor->set_name(input.path.name);
    tensor->set_data_type(input.tensor ? inference::TYPE_FP32 : inference::TYPE_INT64);
    for (int64_t dim : ShapeOf(input.path, input.tensor, model.info)) {
      tensor->add_dims(dim);
    }
    tensor->set_optional(!input.required);
  }
  for (const FieldPath& output : model.mapping->outputs()) {
    auto* tensor = config->add_output();
    tensor->set_name(output.name);
    tensor->set_data_type(inference::TYPE_FP32);
    for (int64_t dim : ShapeOf(output, /*tensor=*/true, model.info))
      tensor->add_dims(dim);
  }
  auto* group = config->add_instance_group();
  group->set_name(model.name);
  group->set_kind(inference::ModelInstanceGroup::KIND_CPU);
  group->set_count(model.instances);
  if (model.sequences) {
    config->mutable_sequence_batching()->set_max_sequence_idle_microseconds(
        static_cast<uint64_t>(model.sequence_idle_us));
  } else {
    config->mutable_dynamic_batching()->set_max_queue_delay_microseconds(
        static_cast<uint64_t>(model.max_queue_delay_us));
  }
  if (model.info != nullptr) {
    const auto& r = *model.info->GetReflection();
    std::vector<const FieldDescriptor*> fields;
    r.ListFields(*model.info, &fields);  // The fields that are set.
    for (const FieldDescriptor* field : fields) {
      if (field->is_repeated()) continue;
      (*config->mutable_parameters())[field->name()].set_string_value(
          FieldText(*model.info, *field));
    }
  }
}

}  // namespace layerserve::oip
