#include "server/rpc/service.h"

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/ops/activate.h"
#include "server/ops/block_forward.h"
#include "server/ops/normalize.h"
#include "server/ops/positional_encode.h"
#include "server/rpc/call.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/warm_up.h"

namespace layerserve {

LayerServiceImpl::LayerServiceImpl(const ServiceOptions& options, Metrics* metrics,
                                   const ModelRepository* models)
    : options_(options),
      metrics_(metrics),
      models_(models),
      sessions_(options.sessions, metrics),
      batcher_(
          options.batch, options.compute_threads,
          [this, metrics](WorkerContext& worker, Batch& batch) {
            // Decode steps share their loops with idle workers (Batcher::Run).
            worker.block.parallel = &batcher_;
            RunServedBatch(worker, batch, *metrics);
          },
          [metrics](int64_t depth) { metrics->SetQueueDepth(depth); }),
      dispatch_{metrics,
                &calls_,
                &draining_,
                &batcher_,
                ParseContext{models, &sessions_, &options_.block_forward},
                options.max_request_elements,
                options.max_response_bytes} {}

LayerServiceImpl::~LayerServiceImpl() { StopWorkers(); }

grpc::ServerUnaryReactor* LayerServiceImpl::Normalize(
    grpc::CallbackServerContext* context, const v1::NormalizeRequest* request,
    v1::NormalizeResponse* response) {
  return Dispatch<NormalizeOp>(dispatch_, context, *request, response);
}

grpc::ServerUnaryReactor* LayerServiceImpl::PositionalEncode(
    grpc::CallbackServerContext* context, const v1::PositionalEncodeRequest* request,
    v1::PositionalEncodeResponse* response) {
  return Dispatch<PositionalEncodeOp>(dispatch_, context, *request, response);
}

grpc::ServerUnaryReactor* LayerServiceImpl::Activate(grpc::CallbackServerContext* context,
                                                     const v1::ActivateRequest* request,
                                                     v1::ActivateResponse* response) {
  return Dispatch<ActivateOp>(dispatch_, context, *request, response);
}

grpc::ServerUnaryReactor* LayerServiceImpl::BlockForward(
    grpc::CallbackServerContext* context, const v1::BlockForwardRequest* request,
    v1::BlockForwardResponse* response) {
  return Dispatch<BlockForwardOp>(dispatch_, context, *request, response);
}

// The RPCs below answer on the handler thread: no compute, a short critical
// section at most. An exception (an allocation) becomes their status too.

grpc::ServerUnaryReactor* LayerServiceImpl::ListModels(
    grpc::CallbackServerContext* context, const v1::ListModelsRequest* request,
    v1::ListModelsResponse* response) {
  Call call(context, "ListModels", metrics_, &calls_, request, response);
  try {
    if (draining_.load()) {
      call.Finish(DrainingStatus());
      return call.reactor();
    }
    call.Admit();
    models_->DescribeAll(response);
    call.Finish(grpc::Status::OK);
  } catch (...) {
    call.FinishWithCurrentException();
  }
  return call.reactor();
}

grpc::ServerUnaryReactor* LayerServiceImpl::GetModel(grpc::CallbackServerContext* context,
                                                     const v1::GetModelRequest* request,
                                                     v1::ModelInfo* response) {
  Call call(context, "GetModel", metrics_, &calls_, request, response);
  try {
    if (draining_.load()) {
      call.Finish(DrainingStatus());
      return call.reactor();
    }
    call.Admit();
    const std::string& name = request->name();
    if (!models_->Describe(name, response)) {
      call.Finish(grpc::Status(grpc::StatusCode::NOT_FOUND,
                               name.empty()
                                   ? "name: no default model is ready"
                                   : "name: no model \"" + name + "\" (see ListModels)"));
    } else {
      call.Finish(grpc::Status::OK);
    }
  } catch (...) {
    call.FinishWithCurrentException();
  }
  return call.reactor();
}

grpc::ServerUnaryReactor* LayerServiceImpl::OpenSession(
    grpc::CallbackServerContext* context, const v1::OpenSessionRequest* request,
    v1::OpenSessionResponse* response) {
  Call call(context, "OpenSession", metrics_, &calls_, request, response);
  try {
    if (draining_.load()) {
      call.Finish(DrainingStatus());
      return call.reactor();
    }
    call.Admit();
    absl::StatusOr<LayerRange> range = ResolveLayerRange(
        *models_, request->model(), request->layer_start(), request->num_layers());
    if (range.ok()) call.set_model(range->model->name);
    absl::StatusOr<std::string> id =
        range.ok() ? sessions_.Open(range->model, range->start, range->count,
                                    request->max_length())
                   : range.status();
    if (id.ok()) {
      response->set_session_id(*id);
      response->set_ttl_ms(absl::ToInt64Milliseconds(sessions_.ttl()));
    }
    call.Finish(ToGrpcStatus(id.status()));
  } catch (...) {
    call.FinishWithCurrentException();
  }
  return call.reactor();
}

grpc::ServerUnaryReactor* LayerServiceImpl::CloseSession(
    grpc::CallbackServerContext* context, const v1::CloseSessionRequest* request,
    v1::CloseSessionResponse* response) {
  Call call(context, "CloseSession", metrics_, &calls_, request, response);
  // Served while draining too: closing frees memory and starts nothing.
  try {
    call.Finish(ToGrpcStatus(sessions_.Close(request->session_id())));
  } catch (...) {
    call.FinishWithCurrentException();
  }
  return call.reactor();
}

int LayerServiceImpl::WarmUp() { return WarmUp(*models_); }

int LayerServiceImpl::WarmUp(const ModelRepository& models) {
  SessionOptions options = options_.sessions;
  options.replica += "-warm-up";
  SessionStore sessions(options, /*metrics=*/nullptr);
  const int64_t tokens = WarmUpTokens(options_.block_forward.prefill_chunk_tokens);
  std::atomic<int> warmed{0};
  batcher_.RunOnEachWorker([&](WorkerContext& worker) {
    // While serving (a reload), a worker's last batch left it sharing loops with
    // the others: the warm-up runs on this worker alone, as at start.
    kernels::ParallelFor* const parallel = worker.block.parallel;
    worker.block.parallel = nullptr;
    warmed += WarmUpWorker(models, sessions, worker, tokens);
    worker.block.parallel = parallel;
  });
  return warmed.load();
}

}  // namespace layerserve
