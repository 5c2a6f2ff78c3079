// One ModelStreamInfer stream of the Open Inference Protocol: a bidirectional
// stream of ModelInferRequests, each answered by one ModelStreamInferResponse in the
// order the requests came. Each request is a call of its own (metrics method
// "ModelStreamInfer"), dispatched as a unary ModelInfer is, so the requests of one
// stream (decode steps of many sequences, say) batch together and with everyone
// else's. An error answers its request with `error_message` ("CODE: message") and
// the stream goes on.
//
// Up to kMaxRunning requests of a stream run at once; further reads wait. A request
// of a sequence with an earlier request still running waits for it (and reads stop
// until it can run), so a sequence's steps run in order rather than meeting each
// other on the session's lease. A drain (InferenceServiceImpl::StartDraining)
// stops reading: the stream answers what it accepted, then ends UNAVAILABLE.
//
// Lifetime: owned by itself (`self_`) until gRPC is done with it (OnDone), and by
// whoever holds a reference meanwhile (the service, while it drains it).
// Thread-safe: gRPC's reactions and the workers answering its requests meet under
// mu_; the stream operations (read, write, finish) are started outside it.
#ifndef LAYERSERVE_SERVER_RPC_INFER_STREAM_H_
#define LAYERSERVE_SERVER_RPC_INFER_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "inference/grpc_service.pb.h"
#include "server/rpc/call.h"

namespace layerserve {

class InferenceServiceImpl;

class InferStream final
    : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  static constexpr int kMaxRunning = 64;

  // Registers the stream with `service` and starts reading (or, while the service
  // drains, ends it at once). Returns the reactor for gRPC.
  static InferStream* Start(InferenceServiceImpl* service,
                            grpc::CallbackServerContext* context);

  // Stops reading; ends the stream UNAVAILABLE once every accepted request is
  // answered and written.
  void Drain();

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  // Public for Start's make_shared; use Start.
  InferStream(InferenceServiceImpl* service, grpc::CallbackServerContext* context);

 private:
  class Request;
  // What a change of state lets the stream do next, done outside mu_ (Run).
  struct Actions {
    std::vector<std::pair<Request*, bool>> dispatch;  // With may_run_inline.
    inference::ModelInferRequest* read = nullptr;
    const inference::ModelStreamInferResponse* write = nullptr;
    std::optional<grpc::Status> finish;
  };

  // Its request's call was answered `status` (from any thread).
  void Answered(Request* request, const grpc::Status& status);
  // Adds to `actions` the read, write or finish the state now allows.
  void NextLocked(Actions& actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts `request` running, or parks it behind its sequence's running request.
  void AcceptLocked(Request* request, bool may_run_inline, Actions& actions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finish comes last: the stream may be gone once it returns.
  void Run(Actions actions);

  InferenceServiceImpl* const service_;
  grpc::CallbackServerContext* const context_;
  std::shared_ptr<InferStream> self_;  // Until OnDone.

  absl::Mutex mu_;
  // Accepted requests in the order they came, until their answer is written.
  std::deque<std::unique_ptr<Request>> requests_ ABSL_GUARDED_BY(mu_);
  // The buffer of the read in progress.
  std::unique_ptr<Request> reading_ ABSL_GUARDED_BY(mu_);
  // A request waiting for the running request of its sequence.
  Request* parked_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Running requests per sequence id.
  std::map<std::string, int> sequences_running_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool read_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;  // The client closed its side.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // A write failed: write no more.
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_INFER_STREAM_H_
