// layerserve.v1.LayerService on gRPC's callback API. Each compute RPC is one line:
// the generic Dispatch<Op> (server/rpc/dispatch.h) of its operation (server/ops/),
// which validates the request and runs it inline or hands it to the batcher, whose
// worker runs the batch and answers every RPC in it. The others (models, sessions)
// are answered at once, here. Every RPC is answered exactly once, on every path,
// exceptions included. Thread-safe, as gRPC requires.
#ifndef LAYERSERVE_SERVER_RPC_SERVICE_H_
#define LAYERSERVE_SERVER_RPC_SERVICE_H_

#include <atomic>
#include <memory>

#include "layerserve/v1/layerserve.grpc.pb.h"
#include "server/batching/batcher.h"
#include "server/metrics/metrics.h"
#include "server/models/model_repository.h"
#include "server/ops/block_forward.h"
#include "server/ops/worker_context.h"
#include "server/rpc/call_tracker.h"
#include "server/rpc/dispatch.h"
#include "server/sessions/session_store.h"

namespace layerserve {

struct ServiceOptions {
  BatchOptions batch;
  int compute_threads = 1;
  // Largest tensor a request may carry or ask for, in values
  // (--max-request-elements); larger requests get RESOURCE_EXHAUSTED.
  int64_t max_request_elements = int64_t{1} << 26;
  SessionOptions sessions;
  BlockForwardOptions block_forward;
  // Largest response gRPC will send (--max-message-bytes): a larger one is
  // answered RESOURCE_EXHAUSTED by the service, with the numbers.
  int64_t max_response_bytes = int64_t{256} << 20;
};

class LayerServiceImpl final : public v1::LayerService::CallbackService {
 public:
  // `metrics` and `models` must outlive the service. Starts the compute threads.
  LayerServiceImpl(const ServiceOptions& options, Metrics* metrics,
                   const ModelRepository* models);
  // StopWorkers()s.
  ~LayerServiceImpl() override;

  // From now on new RPCs are answered UNAVAILABLE; accepted ones still complete.
  void StartDraining() { draining_.store(true); }
  // Runs every queued request, then joins the compute threads. Call after gRPC
  // has stopped accepting calls (or nothing will compute the late ones: they are
  // answered UNAVAILABLE).
  void StopWorkers() { batcher_.Stop(); }
  // The warm-up before serving (warm_up.h) on every compute worker, with sessions of
  // its own (never seen by clients or metrics). Returns the model warm-ups that
  // succeeded, all workers together. Call before the server takes calls.
  int WarmUp();
  // The same for `models` only (the versions a reload loaded, before they serve),
  // while the server serves: each worker runs it between two batches.
  int WarmUp(const ModelRepository& models);
  // Ends the idle sessions of models a reload retired (SessionStore::Sweep).
  void SweepSessions() { sessions_.Sweep(); }
  // Every RPC the service has accepted, refusals included.
  const CallTracker& calls() const { return calls_; }
  // What its compute RPCs are dispatched with; the Open Inference Protocol's
  // service (inference_service.h) dispatches through the same.
  const DispatchContext& dispatch() const { return dispatch_; }
  SessionStore& sessions() { return sessions_; }
  const ServiceOptions& options() const { return options_; }

  grpc::ServerUnaryReactor* Normalize(grpc::CallbackServerContext* context,
                                      const v1::NormalizeRequest* request,
                                      v1::NormalizeResponse* response) override;
  grpc::ServerUnaryReactor* PositionalEncode(
      grpc::CallbackServerContext* context, const v1::PositionalEncodeRequest* request,
      v1::PositionalEncodeResponse* response) override;
  grpc::ServerUnaryReactor* Activate(grpc::CallbackServerContext* context,
                                     const v1::ActivateRequest* request,
                                     v1::ActivateResponse* response) override;
  grpc::ServerUnaryReactor* BlockForward(grpc::CallbackServerContext* context,
                                         const v1::BlockForwardRequest* request,
                                         v1::BlockForwardResponse* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* context,
                                     const v1::GetModelRequest* request,
                                     v1::ModelInfo* response) override;
  grpc::ServerUnaryReactor* OpenSession(grpc::CallbackServerContext* context,
                                        const v1::OpenSessionRequest* request,
                                        v1::OpenSessionResponse* response) override;
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* context,
                                         const v1::CloseSessionRequest* request,
                                         v1::CloseSessionResponse* response) override;

 private:
  const ServiceOptions options_;
  Metrics* const metrics_;
  const ModelRepository* const models_;
  std::atomic<bool> draining_{false};
  CallTracker calls_;
  SessionStore sessions_;
  Batcher<WorkerContext> batcher_;
  // What every compute RPC is dispatched with (pointers to the members above).
  const DispatchContext dispatch_;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_SERVICE_H_
