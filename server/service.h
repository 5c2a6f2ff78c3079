// layerserve.v1.LayerService on gRPC's callback API. Handlers validate a request,
// hand the work to the WorkerPool and return; the worker finishes the RPC. Every RPC
// is finished exactly once. Thread-safe, as gRPC requires.
#ifndef LAYERSERVE_SERVER_SERVICE_H_
#define LAYERSERVE_SERVER_SERVICE_H_

#include <atomic>

#include "layerserve/v1/layerserve.grpc.pb.h"
#include "server/call_tracker.h"
#include "server/model_repository.h"
#include "server/metrics.h"
#include "server/worker_pool.h"

namespace layerserve {

class LayerServiceImpl final : public v1::LayerService::CallbackService {
 public:
  // `pool`, `metrics` and `models` must outlive the service.
  LayerServiceImpl(WorkerPool* pool, Metrics* metrics, const ModelRepository* models);

  // From now on new RPCs are answered UNAVAILABLE; accepted ones still complete.
  void StartDraining() { draining_.store(true); }
  // Every RPC the service has accepted, refusals included.
  const CallTracker& calls() const { return calls_; }

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
  // The shape of every compute RPC: refuse while draining, validate with `parse`
  // (a StatusOr<Job>), then hand the job to a worker, which runs `run(worker, job)`
  // and finishes the call. Defined in service.cc, the only user.
  template <typename Parse, typename Run>
  grpc::ServerUnaryReactor* Dispatch(grpc::CallbackServerContext* context,
                                     const char* method, Parse parse, Run run);

  // Answers UNIMPLEMENTED for an RPC whose issue has not landed yet.
  grpc::ServerUnaryReactor* Unimplemented(grpc::CallbackServerContext* context,
                                          const char* method);

  WorkerPool* const pool_;
  Metrics* const metrics_;
  const ModelRepository* const models_;
  std::atomic<bool> draining_{false};
  CallTracker calls_;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_SERVICE_H_
