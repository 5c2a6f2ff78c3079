#include "client/cpp/pipeline.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "client/cpp/tensor_util.h"
#include "common/dtype.h"

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

// The row a multi-session call's NOT_FOUND names ("session_ids[3]: ..."): that
// session is gone, not the replica. -1 for any other status.
int NamedRow(const absl::Status& status) {
  if (!absl::IsNotFound(status)) return -1;
  absl::string_view message = status.message();
  if (!absl::ConsumePrefix(&message, "session_ids[")) return -1;
  const size_t close = message.find("]: ");
  int row;
  if (close == absl::string_view::npos ||
      !absl::SimpleAtoi(message.substr(0, close), &row)) {
    return -1;
  }
  return row;
}

std::string ShapeText(const v1::Tensor& tensor) {
  return absl::StrCat("[", absl::StrJoin(tensor.shape(), ","), "]");
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

absl::StatusOr<PipelineStepResult> Pipeline::Step(
    absl::Span<PipelineSession* const> sessions, const v1::Tensor& hidden_states,
    absl::Span<const int64_t> sequence_lengths) {
  if (sessions.empty()) {
    return absl::InvalidArgumentError(
        "sessions: empty; give one PipelineSession per row");
  }
  for (size_t b = 0; b < sessions.size(); ++b) {
    if (sessions[b] == nullptr || sessions[b]->pipeline_ != this) {
      return absl::InvalidArgumentError(
          absl::StrCat("sessions[", b, "]: not a session of this pipeline"));
    }
    if (sessions[b]->closed_) {
      return absl::InvalidArgumentError(absl::StrCat("sessions[", b, "]: closed"));
    }
    for (size_t c = 0; c < b; ++c) {
      if (sessions[c] == sessions[b]) {
        return absl::InvalidArgumentError(
            absl::StrCat("sessions[", b, "]: repeats sessions[", c, "]"));
      }
    }
  }
  const int rank = hidden_states.shape_size();
  const int64_t batch = rank == 3 ? hidden_states.shape(0) : 1;
  if ((rank != 2 && rank != 3) || batch != static_cast<int64_t>(sessions.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hidden_states: shape ", ShapeText(hidden_states), " for ", sessions.size(),
        " sessions; want [B, T, D] with B = the number of sessions"));
  }
  const int64_t tokens = hidden_states.shape(rank - 2);
  const int64_t width = hidden_states.shape(rank - 1);
  absl::StatusOr<ElementType> type = ElementTypeFromProto(hidden_states.dtype());
  if (!type.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("hidden_states.dtype: ", type.status().message()));
  }
  if (tokens < 1 || width < 1 ||
      static_cast<int64_t>(hidden_states.data().size()) !=
          batch * tokens * width * ElementSize(*type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("hidden_states.data: shape ", ShapeText(hidden_states), " ",
                     v1::DataType_Name(hidden_states.dtype()), " needs ",
                     batch * tokens * width * ElementSize(*type), " bytes, got ",
                     hidden_states.data().size()));
  }
  std::vector<int64_t> lengths(sequence_lengths.begin(), sequence_lengths.end());
  if (lengths.empty()) lengths.assign(batch, tokens);
  if (static_cast<int64_t>(lengths.size()) != batch) {
    return absl::InvalidArgumentError(absl::StrCat("sequence_lengths: ", lengths.size(),
                                                   " entries for ", batch, " sessions"));
  }
  for (size_t b = 0; b < lengths.size(); ++b) {
    if (lengths[b] < 1 || lengths[b] > tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence_lengths[", b, "]: ", lengths[b], " must be in [1, ", tokens, "]"));
    }
  }
  v1::Tensor x = hidden_states;
  x.clear_shape();
  for (int64_t d : {batch, tokens, width}) x.add_shape(d);
  PipelineStepResult result;
  for (size_t i = 0; i < stages_.size(); ++i) {
    const absl::Time started = absl::Now();
    std::vector<std::string> targets;
    absl::StatusOr<v1::Tensor> out =
        StepStage(i, sessions, x, lengths, &targets, &result.lengths);
    if (!out.ok()) return out.status();
    x = *std::move(out);
    result.stage_times.push_back(absl::Now() - started);
    result.stage_targets.push_back(std::move(targets));
  }
  *x.mutable_shape() = hidden_states.shape();
  result.hidden_states = std::move(x);
  return result;
}

absl::StatusOr<v1::Tensor> Pipeline::StepStage(
    size_t index, absl::Span<PipelineSession* const> sessions, const v1::Tensor& x,
    absl::Span<const int64_t> sequence_lengths, std::vector<std::string>* targets,
    std::vector<int64_t>* lengths) {
  Stage& stage = *stages_[index];
  const size_t batch = sessions.size();
  const int64_t tokens = x.shape(1), width = x.shape(2);
  const size_t row_bytes = x.data().size() / batch;
  const size_t token_bytes = row_bytes / tokens;
  targets->assign(batch, "");
  lengths->assign(batch, 0);
  v1::Tensor out;
  size_t out_row_bytes = 0;
  std::vector<size_t> left(batch);
  std::iota(left.begin(), left.end(), 0);
  // Each failed call recovers at least one session; each session at most once per
  // replica of the stage.
  size_t failures_left = batch * stage.replicas.size() + 1;
  while (!left.empty()) {
    // The rows whose session is on the first row's replica: one call.
    const size_t replica = sessions[left.front()]->sessions_[index].replica;
    std::vector<size_t> rows;
    std::vector<std::string> ids;
    std::vector<int64_t> row_lengths;
    v1::Tensor part;
    part.set_dtype(x.dtype());
    for (size_t b : left) {
      if (sessions[b]->sessions_[index].replica != replica) continue;
      rows.push_back(b);
      ids.push_back(sessions[b]->sessions_[index].id);
      row_lengths.push_back(sequence_lengths[b]);
      part.mutable_data()->append(x.data(), b * row_bytes, row_bytes);
    }
    for (int64_t d : {static_cast<int64_t>(rows.size()), tokens, width})
      part.add_shape(d);
    absl::StatusOr<SessionsStepResult> answer =
        stage.replicas[replica]->StepSessions(ids, part, row_lengths);
    if (!answer.ok()) {
      if (!Lost(answer.status()) || --failures_left == 0) return answer.status();
      // NOT_FOUND naming a row: that session alone (evicted, expired); otherwise
      // the replica is lost, with every session on it.
      const int named = NamedRow(answer.status());
      std::vector<size_t> lost = rows;
      if (named >= 0 && static_cast<size_t>(named) < rows.size()) lost = {rows[named]};
      for (size_t b : lost) {
        if (absl::Status s = sessions[b]->Recover(index, answer.status()); !s.ok()) {
          return s;
        }
      }
      continue;  // The failed call appended nothing: send the step again.
    }
    const std::string& data = answer->hidden_states.data();
    if (out_row_bytes == 0) {
      out_row_bytes = data.size() / rows.size();
      out.set_dtype(answer->hidden_states.dtype());
      for (int64_t d : {static_cast<int64_t>(batch), tokens, width}) out.add_shape(d);
      out.mutable_data()->assign(batch * out_row_bytes, '\0');
    }
    if (data.size() != rows.size() * out_row_bytes ||
        answer->hidden_states.dtype() != out.dtype()) {
      return absl::InternalError(
          absl::StrCat("layers ", Layers(stage.layer_start, stage.num_layers),
                       ": replicas answered ", "rows of different sizes or dtypes"));
    }
    for (size_t k = 0; k < rows.size(); ++k) {
      const size_t b = rows[k];
      out.mutable_data()->replace(b * out_row_bytes, out_row_bytes, data,
                                  k * out_row_bytes, out_row_bytes);
      (*targets)[b] = stage.replicas[replica]->options().target;
      (*lengths)[b] = answer->lengths[k];
      // Row b's real tokens, [length, D], for a re-prefill of its session.
      v1::Tensor input;
      input.set_dtype(x.dtype());
      input.add_shape(sequence_lengths[b]);
      input.add_shape(width);
      input.set_data(x.data().substr(b * row_bytes, sequence_lengths[b] * token_bytes));
      sessions[b]->sessions_[index].inputs.push_back(std::move(input));
    }
    left.erase(std::remove_if(left.begin(), left.end(),
                              [&](size_t b) {
                                return std::find(rows.begin(), rows.end(), b) !=
                                       rows.end();
                              }),
               left.end());
  }
  return out;
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
    const size_t current = stage.current.load() % stage.replicas.size();
    if (attempt == 0 && current != from) {
      // Another session's recovery moved the stage already: follow it, so
      // sessions stepped together stay together.
      session.replica = current;
    } else {
      session.replica = (from + 1) % stage.replicas.size();
      // Stateless calls and new sessions go there too from now on.
      stage.NextReplica(from);
    }
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
