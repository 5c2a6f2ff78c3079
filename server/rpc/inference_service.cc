#include "server/rpc/inference_service.h"

#include <algorithm>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "server/oip/model_description.h"
#include "server/oip/sequence.h"
#include "server/ops/activate.h"
#include "server/ops/block_forward.h"
#include "server/ops/normalize.h"
#include "server/ops/positional_encode.h"
#include "server/rpc/dispatch.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/infer_stream.h"

namespace layerserve {
namespace {

// "PositionalEncode" -> "positional_encode": a built-in model's name, from its v1
// method's.
std::string SnakeCase(absl::string_view method) {
  std::string name;
  for (char c : method) {
    if (absl::ascii_isupper(c) && !name.empty()) name += '_';
    name += absl::ascii_tolower(c);
  }
  return name;
}

template <typename Op>
oip::OperationMapping MappingOf(const std::vector<std::string>& fixed = {}) {
  return oip::OperationMapping(*Op::Request::descriptor(), *Op::Response::descriptor(),
                               fixed);
}

// The RPCs this server serves; the others answer UNIMPLEMENTED naming them.
constexpr const char* kServed[] = {"ServerLive",     "ServerReady",     "ModelReady",
                                   "ServerMetadata", "ModelMetadata",   "ModelConfig",
                                   "ModelInfer",     "ModelStreamInfer"};

// Triton's own request parameters that layerserve has no use for, refused with what
// to do instead (Triton's clients send them only when set).
absl::Status CheckTritonParameters(const inference::ModelInferRequest& request) {
  if (request.parameters().count("priority") > 0) {
    return absl::InvalidArgumentError(
        "priority: layerserve serves requests in one priority level; leave priority "
        "unset");
  }
  if (request.parameters().count("timeout") > 0) {
    return absl::InvalidArgumentError(
        "timeout: set the call's gRPC deadline instead (tritonclient: client_timeout); "
        "a request whose deadline passes in the queue is never computed");
  }
  return absl::OkStatus();
}

// One ModelInfer request's v1 exchange: the v1 request its job reads, the v1
// response its run fills, and how that becomes the ModelInferResponse, just before
// the call answers (Call::Finish).
class InferExchange final : public AnswerTranslation {
 public:
  std::unique_ptr<google::protobuf::Message> v1_request, v1_response;
  const oip::OperationMapping* mapping = nullptr;
  inference::ModelInferResponse* response = nullptr;
  std::vector<std::string> requested;  // The outputs asked for, in order.
  std::string model_name, model_version, id;
  oip::SequenceControl sequence;
  SessionStore* sessions = nullptr;

  grpc::Status Translate(const grpc::Status& status) override {
    grpc::Status answer = status;
    if (status.ok()) {
      response->set_model_name(model_name);
      response->set_model_version(model_version);
      response->set_id(id);
      const absl::Status filled =
          mapping->FillResponse(*v1_response, requested, response);
      if (!filled.ok()) {
        response->Clear();
        answer = ToGrpcStatus(filled);
      }
    }
    if (sequence.any()) {
      oip::LeaveSequence(sequence, static_cast<absl::StatusCode>(answer.error_code()),
                         *sessions);
    }
    return answer;
  }
};

}  // namespace

struct InferenceServiceImpl::Target {
  enum class Operation { kBlockForward, kNormalize, kActivate, kPositionalEncode };
  Operation operation;
  std::string name;
  std::string version;
  std::shared_ptr<const Model> model;  // A repository model's; null for the others.
};

InferenceServiceImpl::InferenceServiceImpl(LayerServiceImpl* service,
                                           const ModelRepository* models)
    : service_(service),
      models_(models),
      // The model name gives BlockForward's `model`.
      block_forward_(MappingOf<BlockForwardOp>({"model"})),
      normalize_(MappingOf<NormalizeOp>()),
      activate_(MappingOf<ActivateOp>()),
      positional_encode_(MappingOf<PositionalEncodeOp>()) {
  for (const char* method : kServed) dispatch().metrics->MethodKnown(method);
}

InferenceServiceImpl::~InferenceServiceImpl() {
  // Every stream has ended, on gRPC's threads (their OnDone): the lock orders their
  // last StreamEnded before the map goes.
  absl::MutexLock lock(&streams_mu_);
  streams_.clear();
}

absl::StatusOr<InferenceServiceImpl::Target> InferenceServiceImpl::Resolve(
    const std::string& name, const std::string& version, absl::string_view name_field,
    absl::string_view version_field) const {
  using Operation = Target::Operation;
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name_field, ": required"));
  }
  // The built-in models, by the snake_case names of their v1 methods.
  static const auto* const kBuiltins = new std::vector<std::pair<std::string, Operation>>{
      {SnakeCase(NormalizeOp::kMethod), Operation::kNormalize},
      {SnakeCase(ActivateOp::kMethod), Operation::kActivate},
      {SnakeCase(PositionalEncodeOp::kMethod), Operation::kPositionalEncode}};
  Target target;
  target.name = name;
  target.version = "1";
  const auto builtin =
      std::find_if(kBuiltins->begin(), kBuiltins->end(),
                   [&name](const auto& entry) { return entry.first == name; });
  if (builtin != kBuiltins->end()) {
    target.operation = builtin->second;
  } else {
    absl::StatusOr<std::shared_ptr<const Model>> model = models_->Find(name);
    if (!model.ok()) {
      if (model.status().code() == absl::StatusCode::kNotFound) {
        std::vector<std::string> names;
        for (const auto& m : models_->models()) {
          if (m->ready()) names.push_back(m->name);
        }
        std::vector<std::string> builtins;
        for (const auto& [builtin_name, operation] : *kBuiltins) {
          builtins.push_back(builtin_name);
        }
        return absl::NotFoundError(
            absl::StrCat(name_field, ": no model \"", name, "\"; this server serves ",
                         absl::StrJoin(builtins, ", "), " and its repository's ",
                         absl::StrJoin(names, ", ")));
      }
      // A model that failed to load: its message, naming this protocol's field.
      absl::string_view message = model.status().message();
      absl::ConsumePrefix(&message, "model: ");
      return absl::Status(model.status().code(), absl::StrCat(name_field, ": ", message));
    }
    target.operation = Operation::kBlockForward;
    target.model = *std::move(model);
    target.version = absl::StrCat(target.model->version);
  }
  if (!version.empty() && version != target.version) {
    return absl::NotFoundError(absl::StrCat(version_field, ": model \"", name,
                                            "\" serves version ", target.version,
                                            ", not \"", version, "\""));
  }
  return target;
}

void InferenceServiceImpl::Infer(Call call, inference::ModelInferRequest& request,
                                 inference::ModelInferResponse* response,
                                 bool may_run_inline) {
  using Operation = Target::Operation;
  try {
    if (!AdmitCall(dispatch(), call)) return;
    absl::StatusOr<Target> target =
        Resolve(request.model_name(), request.model_version());
    if (!target.ok()) {
      call.Finish(ToGrpcStatus(target.status()));
      return;
    }
    // A label of bounded values: the built-in names and the served models'.
    call.set_model(target->name);
    switch (target->operation) {
      case Operation::kBlockForward:
        return InferAs<BlockForwardOp>(std::move(call), *target, request, response,
                                       may_run_inline);
      case Operation::kNormalize:
        return InferAs<NormalizeOp>(std::move(call), *target, request, response,
                                    may_run_inline);
      case Operation::kActivate:
        return InferAs<ActivateOp>(std::move(call), *target, request, response,
                                   may_run_inline);
      case Operation::kPositionalEncode:
        return InferAs<PositionalEncodeOp>(std::move(call), *target, request, response,
                                           may_run_inline);
    }
  } catch (...) {
    call.FinishWithCurrentException();
  }
}

template <typename Op>
void InferenceServiceImpl::InferAs(Call call, const Target& target,
                                   inference::ModelInferRequest& request,
                                   inference::ModelInferResponse* response,
                                   bool may_run_inline) {
  using Request = typename Op::Request;
  using Response = typename Op::Response;
  Request* v1_request = nullptr;
  Response* v1_response = nullptr;
  try {
    auto exchange = std::make_unique<InferExchange>();
    exchange->v1_request = std::make_unique<Request>();
    exchange->v1_response = std::make_unique<Response>();
    v1_request = static_cast<Request*>(exchange->v1_request.get());
    v1_response = static_cast<Response*>(exchange->v1_response.get());
    exchange->mapping = std::is_same_v<Op, BlockForwardOp> ? &block_forward_
                        : std::is_same_v<Op, NormalizeOp>  ? &normalize_
                        : std::is_same_v<Op, ActivateOp>   ? &activate_
                                                           : &positional_encode_;
    exchange->response = response;
    for (const auto& output : request.outputs())
      exchange->requested.push_back(output.name());
    exchange->model_name = target.name;
    exchange->model_version = target.version;
    exchange->id = request.id();
    exchange->sessions = &service_->sessions();
    InferExchange& ex = *exchange;
    // From here the call's answer goes through the exchange, errors included (a
    // failed sequence start closes the session it opened).
    call.set_translation(std::move(exchange));
    const absl::Status translated = [&]() -> absl::Status {
      RETURN_IF_ERROR(CheckTritonParameters(request));
      ASSIGN_OR_RETURN(ex.sequence, oip::ParseSequenceControl(request));
      RETURN_IF_ERROR(ex.mapping->CheckRequestedOutputs(request));
      RETURN_IF_ERROR(
          ex.mapping->FillRequest(request, &oip::IsSequenceParameter, v1_request));
      if constexpr (std::is_same_v<Op, BlockForwardOp>) {
        v1_request->set_model(target.name);
        if (ex.sequence.any()) {
          RETURN_IF_ERROR(
              oip::JoinSequence(ex.sequence, *models_, service_->sessions(), v1_request));
        }
      } else if (ex.sequence.any()) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence_id: model \"", target.name,
                         "\" keeps no state; sequences are for the repository's models"));
      }
      return absl::OkStatus();
    }();
    if (!translated.ok()) {
      call.Finish(ToGrpcStatus(translated));
      return;
    }
  } catch (...) {
    call.FinishWithCurrentException();
    return;
  }
  DispatchAdmitted<Op>(dispatch(), std::move(call), *v1_request, v1_response,
                       may_run_inline);
}

template <typename Request, typename Response, typename Answer>
grpc::ServerUnaryReactor* InferenceServiceImpl::AnswerNow(
    grpc::CallbackServerContext* context, const char* method, const Request* request,
    Response* response, Answer answer) {
  Call call(context, method, dispatch().metrics, dispatch().calls, request, response);
  grpc::ServerUnaryReactor* const reactor = call.reactor();
  try {
    call.Finish(answer(call));
  } catch (...) {
    call.FinishWithCurrentException();
  }
  return reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::Unimplemented(
    grpc::CallbackServerContext* context, const char* method) {
  return AnswerNow(
      context, method, static_cast<const google::protobuf::Message*>(nullptr),
      static_cast<google::protobuf::Message*>(nullptr), [method](Call&) {
        return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                            absl::StrCat("inference.GRPCInferenceService/", method,
                                         " is not served by layerserve; it serves ",
                                         absl::StrJoin(kServed, ", ")));
      });
}

// Liveness and readiness: served while draining too (they report it), and without
// a token (server/security/auth.h), as the standard health service.

grpc::ServerUnaryReactor* InferenceServiceImpl::ServerLive(
    grpc::CallbackServerContext* context, const inference::ServerLiveRequest* request,
    inference::ServerLiveResponse* response) {
  return AnswerNow(context, "ServerLive", request, response, [response](Call&) {
    response->set_live(true);
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ServerReady(
    grpc::CallbackServerContext* context, const inference::ServerReadyRequest* request,
    inference::ServerReadyResponse* response) {
  return AnswerNow(context, "ServerReady", request, response, [this, response](Call&) {
    response->set_ready(!dispatch().draining->load());
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ModelReady(
    grpc::CallbackServerContext* context, const inference::ModelReadyRequest* request,
    inference::ModelReadyResponse* response) {
  return AnswerNow(
      context, "ModelReady", request, response, [this, request, response](Call&) {
        // Unknown, failed, another version: not ready (a probe's answer,
        // not an error).
        response->set_ready(
            !dispatch().draining->load() &&
            Resolve(request->name(), request->version(), "name", "version").ok());
        return grpc::Status::OK;
      });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest* request,
    inference::ServerMetadataResponse* response) {
  return AnswerNow(
      context, "ServerMetadata", request, response, [this, response](Call& call) {
        if (!AdmitCall(dispatch(), call)) return DrainingStatus();
        response->set_name("layerserve");
        response->set_version(LAYERSERVE_VERSION);
        // "statistics" is not among them: perf_analyzer then measures on its side only.
        for (const char* extension : {"model_configuration", "sequence", "parameters"}) {
          response->add_extensions(extension);
        }
        return grpc::Status::OK;
      });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  return AnswerNow(context, "ModelMetadata", request, response,
                   [this, request, response](Call& call) {
                     if (!AdmitCall(dispatch(), call)) return DrainingStatus();
                     return Describe(request->name(), request->version(), &call,
                                     [response](const oip::ModelFacts& facts) {
                                       oip::FillModelMetadata(facts, response);
                                     });
                   });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ModelConfig(
    grpc::CallbackServerContext* context, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  return AnswerNow(
      context, "ModelConfig", request, response, [this, request, response](Call& call) {
        if (!AdmitCall(dispatch(), call)) return DrainingStatus();
        return Describe(request->name(), request->version(), &call,
                        [response](const oip::ModelFacts& facts) {
                          oip::FillModelConfig(facts, response->mutable_config());
                        });
      });
}

template <typename Fill>
grpc::Status InferenceServiceImpl::Describe(const std::string& name,
                                            const std::string& version, Call* call,
                                            Fill fill) const {
  // ModelMetadata's and ModelConfig's requests name them `name` and `version`.
  absl::StatusOr<Target> target = Resolve(name, version, "name", "version");
  if (!target.ok()) return ToGrpcStatus(target.status());
  call->set_model(target->name);
  const ServiceOptions& options = service_->options();
  oip::ModelFacts facts;
  facts.name = target->name;
  facts.version = target->version;
  facts.instances = options.compute_threads;
  facts.max_queue_delay_us = absl::ToInt64Microseconds(options.batch.max_queue_delay);
  v1::ModelInfo info;
  switch (target->operation) {
    case Target::Operation::kBlockForward:
      facts.mapping = &block_forward_;
      if (models_->Describe(target->name, &info)) facts.info = &info;
      facts.sequences = true;
      facts.sequence_idle_us = absl::ToInt64Microseconds(options.sessions.ttl);
      break;
    case Target::Operation::kNormalize:
      facts.mapping = &normalize_;
      break;
    case Target::Operation::kActivate:
      facts.mapping = &activate_;
      break;
    case Target::Operation::kPositionalEncode:
      facts.mapping = &positional_encode_;
      break;
  }
  fill(facts);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ModelInfer(
    grpc::CallbackServerContext* context, const inference::ModelInferRequest* request,
    inference::ModelInferResponse* response) {
  Call call(context, "ModelInfer", dispatch().metrics, dispatch().calls, request,
            response);
  grpc::ServerUnaryReactor* const reactor = call.reactor();
  // The request is this call's own: gRPC made it for the call, keeps it until the
  // call is done, and reads it no more. Its raw contents move into the v1 request
  // instead of being copied (8 MiB each way at T = 512 of an 8B-shaped layer).
  Infer(std::move(call), const_cast<inference::ModelInferRequest&>(*request), response,
        /*may_run_inline=*/true);
  return reactor;
}

grpc::ServerBidiReactor<inference::ModelInferRequest,
                        inference::ModelStreamInferResponse>*
InferenceServiceImpl::ModelStreamInfer(grpc::CallbackServerContext* context) {
  return InferStream::Start(this, context);
}

void InferenceServiceImpl::StartDraining() {
  std::vector<std::shared_ptr<InferStream>> streams;
  {
    absl::MutexLock lock(&streams_mu_);
    draining_ = true;
    for (const auto& [raw, weak] : streams_) {
      if (std::shared_ptr<InferStream> stream = weak.lock()) streams.push_back(stream);
    }
  }
  // Outside streams_mu_: a stream that ends here unregisters itself (StreamEnded).
  for (const auto& stream : streams) stream->Drain();
}

bool InferenceServiceImpl::StreamStarted(const std::shared_ptr<InferStream>& stream) {
  absl::MutexLock lock(&streams_mu_);
  streams_.emplace(stream.get(), stream);
  return draining_;
}

void InferenceServiceImpl::StreamEnded(InferStream* stream) {
  absl::MutexLock lock(&streams_mu_);
  streams_.erase(stream);
}

#define LAYERSERVE_NOT_SERVED(Rpc)                                          \
  grpc::ServerUnaryReactor* InferenceServiceImpl::Rpc(                      \
      grpc::CallbackServerContext* context, const inference::Rpc##Request*, \
      inference::Rpc##Response*) {                                          \
    return Unimplemented(context, #Rpc);                                    \
  }
LAYERSERVE_NOT_SERVED(ModelStatistics)
LAYERSERVE_NOT_SERVED(RepositoryIndex)
LAYERSERVE_NOT_SERVED(RepositoryModelLoad)
LAYERSERVE_NOT_SERVED(RepositoryModelUnload)
LAYERSERVE_NOT_SERVED(SystemSharedMemoryStatus)
LAYERSERVE_NOT_SERVED(SystemSharedMemoryRegister)
LAYERSERVE_NOT_SERVED(SystemSharedMemoryUnregister)
LAYERSERVE_NOT_SERVED(CudaSharedMemoryStatus)
LAYERSERVE_NOT_SERVED(CudaSharedMemoryRegister)
LAYERSERVE_NOT_SERVED(CudaSharedMemoryUnregister)
LAYERSERVE_NOT_SERVED(TraceSetting)
LAYERSERVE_NOT_SERVED(LogSettings)
#undef LAYERSERVE_NOT_SERVED

}  // namespace layerserve
