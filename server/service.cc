#include "server/service.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/activate.h"
#include "server/block_forward.h"
#include "server/grpc_status.h"
#include "server/normalize.h"
#include "server/positional_encode.h"

namespace layerserve {
namespace {

// One accepted RPC: finishes its reactor exactly once and records the outcome.
class Call {
 public:
  Call(grpc::CallbackServerContext* context, const char* method, Metrics* metrics,
       CallTracker* tracker)
      : context_(context),
        reactor_(context->DefaultReactor()),
        method_(method),
        metrics_(metrics),
        tracker_(tracker),
        start_(absl::Now()) {
    tracker_->Started();
    metrics_->RequestStarted();
  }

  grpc::ServerUnaryReactor* reactor() const { return reactor_; }
  grpc::CallbackServerContext* context() const { return context_; }

  // The status to answer instead of computing, if the client is gone or its
  // deadline passed while the request waited; OK to go on.
  grpc::Status CheckStillWanted() const {
    if (!context_->IsCancelled()) return grpc::Status::OK;
    if (std::chrono::system_clock::now() >= context_->deadline()) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "deadline passed before the request was computed");
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the call");
  }

  void Finish(const grpc::Status& status) {
    metrics_->RequestFinished(method_, status.error_code(), absl::Now() - start_);
    reactor_->Finish(status);
    tracker_->Finished();
  }

 private:
  grpc::CallbackServerContext* const context_;
  grpc::ServerUnaryReactor* const reactor_;
  const char* const method_;
  Metrics* const metrics_;
  CallTracker* const tracker_;
  const absl::Time start_;
};

const grpc::Status kDraining(grpc::StatusCode::UNAVAILABLE,
                             "server is draining (shutting down); retry on another "
                             "replica");

}  // namespace

LayerServiceImpl::LayerServiceImpl(WorkerPool* pool, Metrics* metrics,
                                   const ModelRepository* models)
    : pool_(pool), metrics_(metrics), models_(models) {}

template <typename Parse, typename Run>
grpc::ServerUnaryReactor* LayerServiceImpl::Dispatch(grpc::CallbackServerContext* context,
                                                     const char* method, Parse parse,
                                                     Run run) {
  Call call(context, method, metrics_, &calls_);
  if (draining_.load()) {
    call.Finish(kDraining);
    return call.reactor();
  }
  auto job = parse();
  if (!job.ok()) {
    call.Finish(ToGrpcStatus(job.status()));
    return call.reactor();
  }
  WorkerPool::Task task = [call, job = std::move(*job),
                           run = std::move(run)](WorkerContext& worker) mutable {
    const grpc::Status wanted = call.CheckStillWanted();
    if (!wanted.ok()) {
      call.Finish(wanted);
      return;
    }
    run(worker, job);
    call.Finish(grpc::Status::OK);
  };
  if (!pool_->Submit(task)) call.Finish(kDraining);
  return call.reactor();
}

grpc::ServerUnaryReactor* LayerServiceImpl::Normalize(
    grpc::CallbackServerContext* context, const v1::NormalizeRequest* request,
    v1::NormalizeResponse* response) {
  return Dispatch(
      context, "Normalize", [&] { return ParseNormalizeRequest(*request); },
      [response](WorkerContext& worker, const NormalizeJob& job) {
        RunNormalize(worker.norm, job, response);
      });
}

grpc::ServerUnaryReactor* LayerServiceImpl::Unimplemented(
    grpc::CallbackServerContext* context, const char* method) {
  Call call(context, method, metrics_, &calls_);
  call.Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                           absl::StrCat(method, " is not served by this version of "
                                                "layerserve yet")));
  return call.reactor();
}

grpc::ServerUnaryReactor* LayerServiceImpl::PositionalEncode(
    grpc::CallbackServerContext* context, const v1::PositionalEncodeRequest* request,
    v1::PositionalEncodeResponse* response) {
  return Dispatch(
      context, "PositionalEncode", [&] { return ParsePositionalEncodeRequest(*request); },
      [response](WorkerContext& worker, const PositionalEncodeJob& job) {
        RunPositionalEncode(worker.positional, job, response);
      });
}

grpc::ServerUnaryReactor* LayerServiceImpl::Activate(grpc::CallbackServerContext* context,
                                                     const v1::ActivateRequest* request,
                                                     v1::ActivateResponse* response) {
  return Dispatch(
      context, "Activate", [&] { return ParseActivateRequest(*request); },
      [response](WorkerContext& worker, ActivateJob& job) {
        RunActivate(worker.activation, job, response);
      });
}

grpc::ServerUnaryReactor* LayerServiceImpl::BlockForward(
    grpc::CallbackServerContext* context, const v1::BlockForwardRequest* request,
    v1::BlockForwardResponse* response) {
  return Dispatch(
      context, "BlockForward",
      [&] { return ParseBlockForwardRequest(*request, *models_); },
      [response](WorkerContext& worker, const BlockForwardJob& job) {
        RunBlockForward(worker.block, job, response);
      });
}

grpc::ServerUnaryReactor* LayerServiceImpl::ListModels(
    grpc::CallbackServerContext* context, const v1::ListModelsRequest*,
    v1::ListModelsResponse* response) {
  // Answered on the handler thread: a few fields per model, no compute.
  Call call(context, "ListModels", metrics_, &calls_);
  if (draining_.load()) {
    call.Finish(kDraining);
    return call.reactor();
  }
  for (const auto& model : models_->models()) {
    models_->Describe(*model, response->add_models());
  }
  call.Finish(grpc::Status::OK);
  return call.reactor();
}

grpc::ServerUnaryReactor* LayerServiceImpl::GetModel(grpc::CallbackServerContext* context,
                                                     const v1::GetModelRequest* request,
                                                     v1::ModelInfo* response) {
  Call call(context, "GetModel", metrics_, &calls_);
  if (draining_.load()) {
    call.Finish(kDraining);
    return call.reactor();
  }
  const std::string& name = request->name();
  const Model* found = name.empty() ? models_->default_model() : nullptr;
  for (const auto& model : models_->models()) {
    if (model->name == name) found = model.get();
  }
  if (found == nullptr) {
    call.Finish(grpc::Status(grpc::StatusCode::NOT_FOUND,
                             name.empty() ? "name: no default model is ready"
                                          : "name: no model \"" + name +
                                                "\" (see ListModels)"));
  } else {
    models_->Describe(*found, response);
    call.Finish(grpc::Status::OK);
  }
  return call.reactor();
}

grpc::ServerUnaryReactor* LayerServiceImpl::OpenSession(
    grpc::CallbackServerContext* context, const v1::OpenSessionRequest*,
    v1::OpenSessionResponse*) {
  return Unimplemented(context, "OpenSession");
}

grpc::ServerUnaryReactor* LayerServiceImpl::CloseSession(
    grpc::CallbackServerContext* context, const v1::CloseSessionRequest*,
    v1::CloseSessionResponse*) {
  return Unimplemented(context, "CloseSession");
}

}  // namespace layerserve
