#include "client/cpp/pipeline.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace layerserve::client {
namespace {

// A stage's replica is lost: try another one (sessions: re-prefill there).
bool Lost(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsNotFound(status);
}

std::string Layers(int64_t start, int64_t count) {
  return absl::StrCat(start, "..", start + count - 1);
}

// The tensors sent to a stage, [T_i, D] or [1, T_i, D] each, as one [sum T_i, D]
// tensor for a re-prefill. They share a dtype: the first input's, and each
// stage's outputs come back in the dtype sent.
absl::StatusOr<v1::Tensor> Concatenate(const std::vector<v1::Tensor>& parts) {
  v1::Tensor all;
  all.set_dtype(parts.front().dtype());
  const int64_t d = parts.front().shape(parts.front().shape_size() - 1);
  int64_t tokens = 0;
  for (const v1::Tensor& part : parts) {
    if (part.dtype() != all.dtype() || part.shape(part.shape_size() - 1) != d) {
      return absl::InvalidArgumentError(
          "hidden_states: a session's calls must share one dtype and width");
    }
    tokens += part.shape(part.shape_size() - 2);
    all.mutable_data()->append(part.data());
  }
  all.add_shape(tokens);
  all.add_shape(d);
  return all;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Pipeline>> Pipeline::Create(
    std::vector<PipelineStage> stages, std::string model, const ClientOptions& options) {
  if (stages.empty()) {
    return absl::InvalidArgumentError(
        "stages: empty; give each stage's targets and layers");
  }
  std::vector<std::unique_ptr<Stage>> built;
  for (size_t i = 0; i < stages.size(); ++i) {
    const PipelineStage& s = stages[i];
    if (s.targets.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("stages[", i, "]: no target"));
    }
    if (s.num_layers < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("stages[", i, "]: num_layers ", s.num_layers, " must be >= 1"));
    }
    if (i > 0) {
      const int64_t end = stages[i - 1].layer_start + stages[i - 1].num_layers;
      if (s.layer_start != end) {
        return absl::InvalidArgumentError(absl::StrCat(
            "stages[", i, "]: starts at layer ", s.layer_start, " but stages[", i - 1,
            "] ends before layer ", end, s.layer_start > end ? " (gap)" : " (overlap)"));
      }
    }
    auto stage = std::make_unique<Stage>();
    stage->layer_start = s.layer_start;
    stage->num_layers = s.num_layers;
    for (const std::string& target : s.targets) {
      ClientOptions replica = options;
      replica.target = target;
      absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(std::move(replica));
      if (!client.ok()) return client.status();
      stage->replicas.push_back(std::move(*client));
    }
    built.push_back(std::move(stage));
  }
  return std::unique_ptr<Pipeline>(new Pipeline(std::move(model), std::move(built)));
}

absl::StatusOr<std::unique_ptr<Pipeline>> Pipeline::FromServers(
    const std::vector<std::string>& targets, std::string model,
    const ClientOptions& options) {
  if (targets.empty()) return absl::InvalidArgumentError("targets: empty");
  std::map<std::pair<int32_t, int32_t>, std::vector<std::string>> spans;
  int32_t total = -1;
  std::string total_from;
  for (const std::string& target : targets) {
    ClientOptions one = options;
    one.target = target;
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(std::move(one));
    if (!client.ok()) return client.status();
    absl::StatusOr<v1::ModelInfo> info = (*client)->GetModel(model);
    if (!info.ok()) {
      return absl::Status(info.status().code(),
                          absl::StrCat(target, ": ", info.status().message()));
    }
    if (info->state() != v1::ModelInfo::READY) {
      return absl::InvalidArgumentError(absl::StrCat(target, ": model \"", info->name(),
                                                     "\" is not READY: ", info->error()));
    }
    if (total >= 0 && info->num_layers() != total) {
      return absl::InvalidArgumentError(
          absl::StrCat(target, ": model \"", info->name(), "\" has ", info->num_layers(),
                       " layers, ", total_from, " says ", total));
    }
    total = info->num_layers();
    total_from = target;
    spans[{info->span_layer_start(), info->span_num_layers()}].push_back(target);
  }
  std::vector<PipelineStage> stages;
  int32_t expected = 0;
  for (const auto& [span, servers] : spans) {
    const auto [start, count] = span;
    if (start != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          "targets: the spans leave a ", start > expected ? "gap" : "overlap",
          " at layer ", std::min(start, expected), ": ", absl::StrJoin(servers, ", "),
          " serve layers ", Layers(start, count), ", the servers before end at layer ",
          expected - 1));
    }
    expected = start + count;
    stages.push_back({servers, start, count});
  }
  if (expected != total) {
    return absl::InvalidArgumentError(absl::StrCat("targets: the spans end at layer ",
                                                   expected - 1, "; the model has ",
                                                   total, " layers"));
  }
  return Create(std::move(stages), std::move(model), options);
}

std::vector<PipelineStage> Pipeline::stages() const {
  std::vector<PipelineStage> out;
  for (const auto& stage : stages_) {
    PipelineStage s{{}, stage->layer_start, stage->num_layers};
    for (const auto& replica : stage->replicas)
      s.targets.push_back(replica->options().target);
    out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<v1::BlockForwardResponse> Pipeline::Forward(
    const v1::BlockForwardRequest& request, std::vector<absl::Duration>* stage_times) {
  if (stage_times != nullptr) stage_times->clear();
  v1::BlockForwardRequest call = request;
  call.set_model(model_);
  call.clear_session_id();
  v1::BlockForwardResponse response;
  for (const auto& stage : stages_) {
    const absl::Time started = absl::Now();
    call.set_layer_start(stage->layer_start);
    call.set_num_layers(stage->num_layers);
    absl::StatusOr<v1::BlockForwardResponse> answer;
    for (size_t attempt = 0; attempt < stage->replicas.size(); ++attempt) {
      const size_t replica = stage->current.load();
      answer = stage->replicas[replica % stage->replicas.size()]->BlockForward(call);
      if (answer.ok() || !absl::IsUnavailable(answer.status())) break;
      stage->NextReplica(replica);
    }
    if (!answer.ok()) return answer.status();
    response = std::move(*answer);
    // The next stage's input is this one's output.
    *call.mutable_hidden_states() = std::move(*response.mutable_hidden_states());
    if (stage_times != nullptr) stage_times->push_back(absl::Now() - started);
  }
  *response.mutable_hidden_states() = std::move(*call.mutable_hidden_states());
  return response;
}

absl::StatusOr<std::unique_ptr<PipelineSession>> Pipeline::OpenSession(
    int64_t max_length) {
  std::unique_ptr<PipelineSession> session(new PipelineSession(this, max_length));
  session->sessions_.resize(stages_.size());
  for (size_t i = 0; i < stages_.size(); ++i) {
    session->sessions_[i].replica =
        stages_[i]->current.load() % stages_[i]->replicas.size();
    if (absl::Status status = session->Open(i); !status.ok()) return status;
  }
  return session;
}

PipelineSession::~PipelineSession() {
  if (!closed_) Close().IgnoreError();
}

std::vector<std::string> PipelineSession::session_ids() const {
  std::vector<std::string> ids;
  for (const StageSession& s : sessions_) ids.push_back(s.id);
  return ids;
}

absl::Status PipelineSession::Open(size_t stage_index) {
  Pipeline::Stage& stage = *pipeline_->stages_[stage_index];
  StageSession& session = sessions_[stage_index];
  v1::OpenSessionRequest request;
  request.set_model(pipeline_->model_);
  request.set_layer_start(stage.layer_start);
  request.set_num_layers(stage.num_layers);
  request.set_max_length(max_length_);
  absl::StatusOr<v1::OpenSessionResponse> opened =
      stage.replicas[session.replica]->OpenSession(request);
  if (!opened.ok()) return opened.status();
  session.id = opened->session_id();
  return absl::OkStatus();
}

absl::StatusOr<v1::BlockForwardResponse> PipelineSession::Send(
    size_t stage_index, const v1::Tensor& hidden_states) {
  const StageSession& session = sessions_[stage_index];
  v1::BlockForwardRequest request;
  request.set_session_id(session.id);
  *request.mutable_hidden_states() = hidden_states;
  return pipeline_->stages_[stage_index]->replicas[session.replica]->BlockForward(
      request);
}

absl::Status PipelineSession::Recover(size_t stage_index, absl::Status lost) {
  Pipeline::Stage& stage = *pipeline_->stages_[stage_index];
  StageSession& session = sessions_[stage_index];
  for (size_t attempt = 0; attempt < stage.replicas.size(); ++attempt) {
    const size_t from = session.replica;
    session.replica = (from + 1) % stage.replicas.size();
    // Stateless calls and new sessions go there too from now on.
    stage.NextReplica(from);
    absl::Status status = Open(stage_index);
    if (status.ok() && !session.inputs.empty()) {
      absl::StatusOr<v1::Tensor> prefill = Concatenate(session.inputs);
      if (!prefill.ok()) return prefill.status();
      status = Send(stage_index, *prefill).status();
    }
    if (status.ok()) {
      ++recoveries_;
      return absl::OkStatus();
    }
    if (!Lost(status)) return status;
    lost = status;
  }
  return absl::Status(lost.code(),
                      absl::StrCat("layers ", Layers(stage.layer_start, stage.num_layers),
                                   ": every replica failed; last: ", lost.message()));
}

absl::StatusOr<PipelineSession::StepResult> PipelineSession::Forward(
    const v1::Tensor& hidden_states) {
  StepResult result;
  v1::Tensor x = hidden_states;
  for (size_t i = 0; i < sessions_.size(); ++i) {
    const absl::Time started = absl::Now();
    absl::StatusOr<v1::BlockForwardResponse> answer = Send(i, x);
    if (!answer.ok() && Lost(answer.status())) {
      if (absl::Status status = Recover(i, answer.status()); !status.ok()) return status;
      answer = Send(i, x);
    }
    if (!answer.ok()) return answer.status();
    sessions_[i].inputs.push_back(std::move(x));
    x = std::move(*answer->mutable_hidden_states());
    result.length = answer->session_length();
    result.stage_times.push_back(absl::Now() - started);
    result.stage_targets.push_back(
        pipeline_->stages_[i]->replicas[sessions_[i].replica]->options().target);
  }
  result.hidden_states = std::move(x);
  return result;
}

absl::Status PipelineSession::Close() {
  closed_ = true;
  absl::Status first;
  for (size_t i = 0; i < sessions_.size(); ++i) {
    if (sessions_[i].id.empty()) continue;
    absl::Status status =
        pipeline_->stages_[i]->replicas[sessions_[i].replica]->CloseSession(
            sessions_[i].id);
    if (!status.ok() && !Lost(status) && first.ok()) first = status;
  }
  return first;
}

}  // namespace layerserve::client
