#include "server/oip/sequence.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/oip/infer_parameter.h"
#include "server/ops/block_forward.h"

namespace layerserve::oip {

bool IsSequenceParameter(absl::string_view name) {
  return name == "sequence_id" || name == "sequence_start" || name == "sequence_end";
}

absl::StatusOr<SequenceControl> ParseSequenceControl(
    const inference::ModelInferRequest& request) {
  SequenceControl sequence;
  const auto& parameters = request.parameters();
  if (auto it = parameters.find("sequence_id"); it != parameters.end()) {
    // Triton's sequence ids are unsigned integers or strings.
    const auto choice = it->second.parameter_choice_case();
    if (choice != inference::InferParameter::kInt64Param &&
        choice != inference::InferParameter::kUint64Param &&
        choice != inference::InferParameter::kStringParam) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence_id: parameter \"sequence_id\" must be an integer or a string, got ",
          DescribeParameter(it->second)));
    }
    ASSIGN_OR_RETURN(sequence.id, ParameterAsString(it->second, "sequence_id"));
    // Triton's clients send 0 (or "") for "no sequence".
    if (sequence.id == "0") sequence.id.clear();
  }
  for (auto [name, flag] :
       {std::pair<const char*, bool*>{"sequence_start", &sequence.start},
        {"sequence_end", &sequence.end}}) {
    auto it = parameters.find(name);
    if (it == parameters.end()) continue;
    ASSIGN_OR_RETURN(*flag, ParameterAsBool(it->second, name));
    if (*flag && sequence.id.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": parameter \"", name,
                       "\" is true but no sequence_id says which sequence"));
    }
  }
  return sequence;
}

absl::Status JoinSequence(SequenceControl& sequence, const ModelRepository& models,
                          SessionStore& sessions, v1::BlockForwardRequest* request) {
  if (!request->session_id().empty()) {
    return absl::InvalidArgumentError(
        "session_id, sequence_id: give a sequence or a v1 session, not both");
  }
  if (!request->session_ids().empty()) {
    return absl::InvalidArgumentError(
        "session_ids, sequence_id: give a sequence or v1 sessions, not both");
  }
  std::string session_id = SequenceSessionId(sequence.id);
  if (sequence.start) {
    ASSIGN_OR_RETURN(const LayerRange range,
                     ResolveLayerRange(models, request->model(), request->layer_start(),
                                       request->num_layers()));
    ASSIGN_OR_RETURN(session_id, sessions.OpenSequence(sequence.id, range.model,
                                                       range.start, range.count));
    sequence.opened = true;
  }
  request->set_session_id(std::move(session_id));
  return absl::OkStatus();
}

void LeaveSequence(const SequenceControl& sequence, absl::StatusCode status,
                   SessionStore& sessions) {
  const bool ok = status == absl::StatusCode::kOk;
  if ((sequence.end && ok) || (sequence.opened && !ok)) {
    (void)sessions.Close(SequenceSessionId(sequence.id));
  }
}

}  // namespace layerserve::oip
