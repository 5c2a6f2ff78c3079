// inference.GRPCInferenceService, the Open Inference Protocol (KServe's v2 gRPC API
// with Triton's extensions), on the same server, port, TLS, tokens, limits and
// drain as layerserve.v1.LayerService, through the same dispatch and batcher: an
// OIP request and a v1 call for the same model and layers share a batch.
//
// Models: each model of the repository, under its own name, runs BlockForward;
// the built-in models `normalize`, `activate` and `positional_encode` run the other
// compute RPCs (the snake_case names of their v1 methods). A ModelInfer request is
// turned into the v1 request by the operation's OperationMapping
// (server/oip/operation_mapping.h: inputs and parameters by their v1 field paths),
// dispatched as v1's own calls are (server/rpc/dispatch.h), and its v1 response
// turned back into a ModelInferResponse just before it is sent (an
// AnswerTranslation the call carries). Sequences (sequence_id, sequence_start,
// sequence_end) are KV-cache sessions (server/oip/sequence.h).
//
// Request metrics carry method="ModelInfer" or "ModelStreamInfer" and the model
// name; the batch's and the values' series, the operation's ("BlockForward").
// ServerLive, ServerReady and ModelReady answer without a token
// (server/security/auth.h); ServerReady and ModelReady say false while the server
// drains. The RPCs layerserve does not serve answer UNIMPLEMENTED naming
// themselves. Thread-safe, as gRPC requires.
#ifndef LAYERSERVE_SERVER_RPC_INFERENCE_SERVICE_H_
#define LAYERSERVE_SERVER_RPC_INFERENCE_SERVICE_H_

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/models/model_repository.h"
#include "server/oip/operation_mapping.h"
#include "server/rpc/call.h"
#include "server/rpc/service.h"

namespace layerserve {

class InferStream;

class InferenceServiceImpl final
    : public inference::GRPCInferenceService::CallbackService {
 public:
  // `service` (whose dispatch, sessions and drain it shares) and `models` must
  // outlive this service.
  InferenceServiceImpl(LayerServiceImpl* service, const ModelRepository* models);
  // REQUIRES: the gRPC server is shut down (no stream is left).
  ~InferenceServiceImpl() override;

  // After LayerServiceImpl::StartDraining: every open ModelStreamInfer stream
  // answers what it has accepted and then ends UNAVAILABLE, so that a drain need
  // not wait for clients to close their streams.
  void StartDraining();

  // One ModelInfer request, unary or of a stream: resolves its model, translates
  // it and dispatches it; `call` answers it. `request` and `response` must live
  // until the call is answered; the request's raw contents move out of it.
  // `may_run_inline`: as DispatchAdmitted's.
  void Infer(Call call, inference::ModelInferRequest& request,
             inference::ModelInferResponse* response, bool may_run_inline);

  const DispatchContext& dispatch() const { return service_->dispatch(); }

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(
      grpc::CallbackServerContext* context, const inference::ServerReadyRequest* request,
      inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(
      grpc::CallbackServerContext* context,
      const inference::ServerMetadataRequest* request,
      inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(
      grpc::CallbackServerContext* context,
      const inference::ModelMetadataRequest* request,
      inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelConfig(
      grpc::CallbackServerContext* context, const inference::ModelConfigRequest* request,
      inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;
  grpc::ServerBidiReactor<inference::ModelInferRequest,
                          inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* context) override;

  // Not served: UNIMPLEMENTED, naming the RPC.
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* context,
                                            const inference::ModelStatisticsRequest*,
                                            inference::ModelStatisticsResponse*) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* context,
                                            const inference::RepositoryIndexRequest*,
                                            inference::RepositoryIndexResponse*) override;
  grpc::ServerUnaryReactor* RepositoryModelLoad(
      grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest*,
      inference::RepositoryModelLoadResponse*) override;
  grpc::ServerUnaryReactor* RepositoryModelUnload(
      grpc::CallbackServerContext* context,
      const inference::RepositoryModelUnloadRequest*,
      inference::RepositoryModelUnloadResponse*) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryStatusRequest*,
      inference::SystemSharedMemoryStatusResponse*) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryRegisterRequest*,
      inference::SystemSharedMemoryRegisterResponse*) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryUnregisterRequest*,
      inference::SystemSharedMemoryUnregisterResponse*) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryStatus(
      grpc::CallbackServerContext* context,
      const inference::CudaSharedMemoryStatusRequest*,
      inference::CudaSharedMemoryStatusResponse*) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::CudaSharedMemoryRegisterRequest*,
      inference::CudaSharedMemoryRegisterResponse*) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::CudaSharedMemoryUnregisterRequest*,
      inference::CudaSharedMemoryUnregisterResponse*) override;
  grpc::ServerUnaryReactor* TraceSetting(grpc::CallbackServerContext* context,
                                         const inference::TraceSettingRequest*,
                                         inference::TraceSettingResponse*) override;
  grpc::ServerUnaryReactor* LogSettings(grpc::CallbackServerContext* context,
                                        const inference::LogSettingsRequest*,
                                        inference::LogSettingsResponse*) override;

 private:
  friend class InferStream;

  // The operation a model name runs, and the model of the repository it names.
  struct Target;
  // INVALID_ARGUMENT for an empty name, NOT_FOUND for an unknown one or a version
  // it does not serve, FAILED_PRECONDITION for a model that failed to load. The
  // messages name the request's fields `name_field` and `version_field`.
  absl::StatusOr<Target> Resolve(const std::string& name, const std::string& version,
                                 absl::string_view name_field = "model_name",
                                 absl::string_view version_field = "model_version") const;
  // ModelMetadata's and ModelConfig's answer: `fill(const oip::ModelFacts&)` with the
  // facts of the model the request names, or the error Resolve gives.
  template <typename Fill>
  grpc::Status Describe(const std::string& name, const std::string& version, Call* call,
                        Fill fill) const;
  template <typename Op>
  void InferAs(Call call, const Target& target, inference::ModelInferRequest& request,
               inference::ModelInferResponse* response, bool may_run_inline);
  // Answers at once, on the handler thread, whatever `answer` sets or throws.
  template <typename Request, typename Response, typename Answer>
  grpc::ServerUnaryReactor* AnswerNow(grpc::CallbackServerContext* context,
                                      const char* method, const Request* request,
                                      Response* response, Answer answer);
  grpc::ServerUnaryReactor* Unimplemented(grpc::CallbackServerContext* context,
                                          const char* method);

  // Registers a new stream; true if the service drains (the stream must end).
  bool StreamStarted(const std::shared_ptr<InferStream>& stream);
  void StreamEnded(InferStream* stream);

  LayerServiceImpl* const service_;
  const ModelRepository* const models_;
  const oip::OperationMapping block_forward_, normalize_, activate_, positional_encode_;

  absl::Mutex streams_mu_;
  // The open streams, to drain. Weak: each owns itself until gRPC is done with it.
  std::map<InferStream*, std::weak_ptr<InferStream>> streams_
      ABSL_GUARDED_BY(streams_mu_);
  bool draining_ ABSL_GUARDED_BY(streams_mu_) = false;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_INFERENCE_SERVICE_H_
