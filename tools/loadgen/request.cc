#include "tools/loadgen/request.h"

#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cpp/pipeline.h"
#include "client/cpp/tensor_util.h"

namespace layerserve::client {
namespace {

// A tensor of `shape` with standard normal values, in `dtype`.
absl::StatusOr<v1::Tensor> RandomTensor(const std::vector<int64_t>& shape,
                                        v1::DataType dtype, std::mt19937_64* rng) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> values(n);
  std::normal_distribution<float> normal;
  for (float& v : values) v = normal(*rng);
  return TensorFromFloats(values, shape, dtype);
}

std::string Shape(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

// A BenchRequest that sends `request` through `rpc` (a Client method).
template <typename Request, typename Response>
BenchRequest Sender(std::string rpc, std::string description, Request request,
                    absl::StatusOr<Response> (Client::*method)(const Request&,
                                                               const CallOptions&)) {
  auto shared = std::make_shared<const Request>(std::move(request));
  BenchRequest r;
  r.rpc = std::move(rpc);
  r.description = std::move(description);
  r.request_bytes = static_cast<int64_t>(shared->ByteSizeLong());
  r.send = [shared, method](Client& client, const CallOptions& call) {
    return (client.*method)(*shared, call).status();
  };
  return r;
}

absl::Status NeedRank(const BenchOptions& o, size_t rank, const char* what) {
  if (o.shape.size() == rank) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--method ", o.method,
                                                 " needs a --shape of ", rank, " dims (",
                                                 what, "), got ", Shape(o.shape)));
}

// "N sessions per call, " when a request steps several sessions.
std::string SessionsPerCall(int64_t n) {
  return n == 1 ? std::string() : absl::StrCat(n, " sessions per call, ");
}

// A random hidden-states tensor of `tokens` tokens per session: [tokens, hidden]
// for one session, [n, tokens, hidden] for several (one row each).
absl::StatusOr<v1::Tensor> SessionsHidden(int64_t n, int64_t tokens, int64_t hidden,
                                          v1::DataType dtype, std::mt19937_64* rng) {
  std::vector<int64_t> shape = {tokens, hidden};
  if (n > 1) shape.insert(shape.begin(), n);
  return RandomTensor(shape, dtype, rng);
}

// Incremental decoding through KV-cache sessions: every sending thread keeps its
// own --sessions-per-call sessions (thread_local: a thread's calls are sequential,
// as a session's must be). Its first request opens them and prefills `tokens`
// tokens into each; each later one sends one token per session; after `steps` of
// them the sessions are closed and the next request starts new ones. So the
// prefill calls (1 in steps + 1) are in the latency figures too. One session goes
// as session_id calls, several as one session_ids call per request. A request
// that fails (an OpenSession refused, a prefill or a step lost: expired, evicted,
// a restarted server) leaves the thread to open new sessions at its next request,
// closing what it had.
absl::StatusOr<BenchRequest> DecodeRequest(const BenchOptions& o, Client& client,
                                           std::mt19937_64* rng) {
  absl::StatusOr<v1::ModelInfo> model = client.GetModel(o.model);
  if (!model.ok()) return model.status();
  const int64_t n = o.sessions_per_call;
  v1::OpenSessionRequest open;
  open.set_model(o.model);
  open.set_num_layers(static_cast<int32_t>(o.layers));
  open.set_max_length(o.tokens + o.steps);
  auto prefill = std::make_shared<v1::BlockForwardRequest>();
  auto step = std::make_shared<v1::BlockForwardRequest>();
  for (auto [request, tokens] :
       {std::pair{prefill.get(), o.tokens}, std::pair{step.get(), int64_t{1}}}) {
    absl::StatusOr<v1::Tensor> hidden =
        SessionsHidden(n, tokens, model->hidden_size(), o.wire_dtype, rng);
    if (!hidden.ok()) return hidden.status();
    *request->mutable_hidden_states() = *std::move(hidden);
  }
  BenchRequest r;
  r.rpc = "BlockForward";
  r.description =
      absl::StrCat("BlockForward decode ", model->name(), " ", o.layers, " layer(s), ",
                   SessionsPerCall(n), "prefill ", o.tokens, " then ", o.steps,
                   " one-token steps per session, hidden ", model->hidden_size());
  r.request_bytes = static_cast<int64_t>(step->ByteSizeLong());
  const int64_t steps = o.steps;
  r.send = [open, prefill, step, steps, n](Client& client,
                                           const CallOptions& call) -> SendOutcome {
    struct Sessions {
      Client* client = nullptr;
      std::vector<std::string> ids;
      int64_t steps_left = 0;  // 0: open new sessions at the next request.
    };
    thread_local Sessions sessions;
    auto send = [&](v1::BlockForwardRequest request) {
      if (n == 1) {
        request.set_session_id(sessions.ids.front());
      } else {
        request.mutable_session_ids()->Add(sessions.ids.begin(), sessions.ids.end());
      }
      return client.BlockForward(request, call).status();
    };
    if (sessions.client != &client || sessions.steps_left == 0) {
      if (sessions.client == &client) {
        // Full, lost or half opened: start anew.
        for (const std::string& id : sessions.ids) {
          client.CloseSession(id, call).IgnoreError();
        }
      }
      sessions = Sessions{&client, {}, 0};
      for (int64_t i = 0; i < n; ++i) {
        absl::StatusOr<v1::OpenSessionResponse> opened = client.OpenSession(open, call);
        if (!opened.ok()) return opened.status();
        sessions.ids.push_back(opened->session_id());
      }
      absl::Status status = send(*prefill);
      if (status.ok()) sessions.steps_left = steps;
      return status;
    }
    --sessions.steps_left;
    absl::Status status = send(*step);
    if (!status.ok()) sessions.steps_left = 0;  // Lost (expired, evicted): reopen.
    return SendOutcome(std::move(status), /*step=*/true);
  };
  return r;
}

// DecodeRequest through a Pipeline of span servers: each sending thread keeps
// --sessions-per-call PipelineSessions (one server session per stage each) in the
// same cycle of prefill and steps, several sessions stepped by Pipeline::Step (one
// call per stage). The Pipeline's Clients take the bench's ClientOptions
// (deadline, token, TLS), so `call` is not used.
absl::StatusOr<BenchRequest> PipelineDecodeRequest(const BenchOptions& o, Client& client,
                                                   std::mt19937_64* rng) {
  absl::StatusOr<std::unique_ptr<Pipeline>> made =
      Pipeline::FromServers(o.pipeline, o.model, client.options());
  if (!made.ok()) return made.status();
  std::shared_ptr<Pipeline> pipeline = std::move(*made);
  ClientOptions first = client.options();
  first.target = o.pipeline.front();
  absl::StatusOr<std::unique_ptr<Client>> any = Client::Create(first);
  if (!any.ok()) return any.status();
  absl::StatusOr<v1::ModelInfo> model = (*any)->GetModel(o.model);
  if (!model.ok()) return model.status();
  const int64_t n = o.sessions_per_call;
  absl::StatusOr<v1::Tensor> prefill =
      SessionsHidden(n, o.tokens, model->hidden_size(), o.wire_dtype, rng);
  if (!prefill.ok()) return prefill.status();
  absl::StatusOr<v1::Tensor> step =
      SessionsHidden(n, 1, model->hidden_size(), o.wire_dtype, rng);
  if (!step.ok()) return step.status();
  BenchRequest r;
  r.rpc = "BlockForward";
  r.description = absl::StrCat(
      "BlockForward decode ", model->name(), " through a ", pipeline->stages().size(),
      "-stage pipeline (", model->num_layers(), " layers), ", SessionsPerCall(n),
      "prefill ", o.tokens, " then ", o.steps, " one-token steps per session, hidden ",
      model->hidden_size());
  r.request_bytes = static_cast<int64_t>(step->ByteSizeLong());
  const int64_t steps = o.steps, max_length = o.tokens + o.steps;
  r.send = [pipeline, prefill = *std::move(prefill), step = *std::move(step), steps,
            max_length, n](Client& client, const CallOptions&) -> SendOutcome {
    struct Sessions {
      // The pipeline outlives the sessions it opened (members end in reverse).
      std::shared_ptr<Pipeline> pipeline;
      std::vector<std::unique_ptr<PipelineSession>> sessions;
      Client* client = nullptr;
      int64_t steps_left = 0;  // 0: open new sessions at the next request.
    };
    thread_local Sessions sessions;
    auto send = [&](const v1::Tensor& hidden) -> absl::Status {
      if (n == 1) return sessions.sessions.front()->Forward(hidden).status();
      std::vector<PipelineSession*> all;
      for (const auto& s : sessions.sessions) all.push_back(s.get());
      return sessions.pipeline->Step(all, hidden).status();
    };
    if (sessions.client != &client || sessions.steps_left == 0) {
      sessions.sessions.clear();  // Closes the full, lost or half opened ones.
      sessions.pipeline = pipeline;
      sessions.client = &client;
      for (int64_t i = 0; i < n; ++i) {
        absl::StatusOr<std::unique_ptr<PipelineSession>> opened =
            pipeline->OpenSession(max_length);
        if (!opened.ok()) return opened.status();
        sessions.sessions.push_back(std::move(*opened));
      }
      absl::Status status = send(prefill);
      if (status.ok()) sessions.steps_left = steps;
      return status;
    }
    --sessions.steps_left;
    absl::Status status = send(step);
    if (!status.ok()) sessions.steps_left = 0;  // Start anew.
    return SendOutcome(std::move(status), /*step=*/true);
  };
  return r;
}

}  // namespace

absl::StatusOr<BenchRequest> MakeBenchRequest(const BenchOptions& o, Client& client) {
  std::mt19937_64 rng(o.seed);
  const std::string dtype = v1::DataType_Name(o.wire_dtype);
  if (o.method == "normalize") {
    v1::NormalizeRequest request;
    request.set_kind(o.kind == "layer" ? v1::LAYER_NORM : v1::RMS_NORM);
    absl::StatusOr<v1::Tensor> input = RandomTensor(o.shape, o.wire_dtype, &rng);
    if (!input.ok()) return input.status();
    absl::StatusOr<v1::Tensor> weight =
        RandomTensor({o.shape.back()}, o.wire_dtype, &rng);
    if (!weight.ok()) return weight.status();
    *request.mutable_input() = *std::move(input);
    *request.mutable_weight() = *std::move(weight);
    // Described before the request is moved away (argument order is unspecified).
    std::string description =
        absl::StrCat("Normalize ", v1::NormKind_Name(request.kind()), " input ",
                     Shape(o.shape), " ", dtype);
    return Sender("Normalize", std::move(description), std::move(request),
                  &Client::Normalize);
  }
  if (o.method == "activate") {
    v1::ActivateRequest request;
    request.set_activation(o.activation);
    absl::StatusOr<v1::Tensor> input = RandomTensor(o.shape, o.wire_dtype, &rng);
    if (!input.ok()) return input.status();
    *request.mutable_input() = *std::move(input);
    return Sender("Activate",
                  absl::StrCat("Activate ", v1::Activation_Name(o.activation), " input ",
                               Shape(o.shape), " ", dtype),
                  std::move(request), &Client::Activate);
  }
  if (o.method == "sinusoidal" || o.method == "rope" || o.method == "alibi") {
    v1::PositionalEncodeRequest request;
    std::string what;
    if (o.method == "sinusoidal") {
      if (absl::Status s = NeedRank(o, 3, "B,T,D"); !s.ok()) return s;
      absl::StatusOr<v1::Tensor> input = RandomTensor(o.shape, o.wire_dtype, &rng);
      if (!input.ok()) return input.status();
      *request.mutable_sinusoidal()->mutable_input() = *std::move(input);
      what = "sinusoidal input";
    } else if (o.method == "rope") {
      if (absl::Status s = NeedRank(o, 4, "B,H,T,Dh"); !s.ok()) return s;
      absl::StatusOr<v1::Tensor> query = RandomTensor(o.shape, o.wire_dtype, &rng);
      if (!query.ok()) return query.status();
      absl::StatusOr<v1::Tensor> key = RandomTensor(o.shape, o.wire_dtype, &rng);
      if (!key.ok()) return key.status();
      *request.mutable_rope()->mutable_query() = *std::move(query);
      *request.mutable_rope()->mutable_key() = *std::move(key);
      what = "rope query and key";
    } else {
      if (absl::Status s = NeedRank(o, 4, "B,H,TQ,TK"); !s.ok()) return s;
      absl::StatusOr<v1::Tensor> scores = RandomTensor(o.shape, o.wire_dtype, &rng);
      if (!scores.ok()) return scores.status();
      *request.mutable_alibi()->mutable_scores() = *std::move(scores);
      what = "alibi scores";
    }
    return Sender(
        "PositionalEncode",
        absl::StrCat("PositionalEncode ", what, " ", Shape(o.shape), " ", dtype),
        std::move(request), &Client::PositionalEncode);
  }
  if (o.method == "block-forward") {
    absl::StatusOr<v1::ModelInfo> model = client.GetModel(o.model);
    if (!model.ok()) return model.status();
    const std::vector<int64_t> shape = {o.batch, o.tokens, model->hidden_size()};
    v1::BlockForwardRequest request;
    request.set_model(o.model);
    request.set_num_layers(static_cast<int32_t>(o.layers));
    absl::StatusOr<v1::Tensor> hidden = RandomTensor(shape, o.wire_dtype, &rng);
    if (!hidden.ok()) return hidden.status();
    *request.mutable_hidden_states() = *std::move(hidden);
    return Sender("BlockForward",
                  absl::StrCat("BlockForward ", model->name(), " ", o.layers,
                               " layer(s), hidden ", Shape(shape), " ", dtype),
                  std::move(request), &Client::BlockForward);
  }
  if (o.method == "decode" && !o.pipeline.empty()) {
    return PipelineDecodeRequest(o, client, &rng);
  }
  if (o.method == "decode") return DecodeRequest(o, client, &rng);
  BenchRequest r;
  if (o.method == "get-model") {
    const std::string name = o.model;
    r.rpc = "GetModel";
    r.description = absl::StrCat("GetModel ", name.empty() ? "(default)" : name);
    r.send = [name](Client& client, const CallOptions& call) {
      return client.GetModel(name, call).status();
    };
  } else if (o.method == "list-models") {
    r.rpc = "ListModels";
    r.description = "ListModels";
    r.send = [](Client& client, const CallOptions& call) {
      return client.ListModels(call).status();
    };
  } else {  // health
    r.rpc = "Health.Check";
    r.description = "grpc.health.v1 Health.Check";
    r.send = [](Client& client, const CallOptions& call) {
      return client.Health("", call).status();
    };
  }
  return r;
}

}  // namespace layerserve::client
