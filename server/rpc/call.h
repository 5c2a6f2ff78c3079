// One accepted RPC of the service, as a move-only handle: whoever holds it answers
// it, exactly once, and the answer is recorded (metrics, the CallTracker). The
// handler creates it; for a compute RPC it travels inside the queued task to the
// worker that answers it. A handle destroyed unanswered answers INTERNAL, so no
// path (an exception, a dropped task) leaves a client waiting or a drain hanging.
// Not thread-safe: one owner at a time.
#ifndef LAYERSERVE_SERVER_RPC_CALL_H_
#define LAYERSERVE_SERVER_RPC_CALL_H_

#include <google/protobuf/message.h>
#include <grpcpp/grpcpp.h>

#include "absl/time/time.h"
#include "server/metrics/metrics.h"
#include "server/rpc/call_tracker.h"

namespace layerserve {

// The answer to every RPC that arrives while the server drains.
const grpc::Status& DrainingStatus();

class Call {
 public:
  // Counts the call as started. `request` and `response` may be null (no bytes
  // counted); `response` must live until the call is answered, and the others
  // longer than the handle.
  Call(grpc::CallbackServerContext* context, const char* method, Metrics* metrics,
       CallTracker* tracker, const google::protobuf::Message* request,
       const google::protobuf::Message* response);
  // The moved-from handle answers nothing.
  Call(Call&& other) noexcept;
  Call& operator=(Call&&) = delete;
  // Answers INTERNAL if still pending.
  ~Call();

  // What the handler returns to gRPC; still valid to return once answered.
  grpc::ServerUnaryReactor* reactor() const { return reactor_; }
  const char* method() const { return method_; }
  absl::Duration elapsed() const { return absl::Now() - start_; }
  // Not answered yet (and not moved from).
  bool pending() const { return pending_; }

  // Neither cancelled by the client nor past its deadline (gRPC cancels the call
  // when it passes). Cheap: safe to ask between the layers of a computation.
  bool wanted() const { return !context_->IsCancelled(); }

  // The status to answer instead of computing, if the client is gone or its
  // deadline passed while the request waited; OK to go on. `between_parts`: the
  // request runs in parts and some have run (the message says the rest did not).
  grpc::Status CheckStillWanted(bool between_parts = false) const;

  // The server is not draining and the call will be computed (CallTracker::
  // admitted()). Once, while pending().
  void Admit() {
    reactor_->set_admitted();
    tracker_->Admitted();
  }

  // The served model the call is for, once known (BlockForward, OpenSession): its
  // request metrics then carry it as their `model` label.
  void set_model(std::string model) { model_ = std::move(model); }

  // Answers `status` and records it (metrics first: the response may go with the
  // answer). Does nothing if not pending().
  void Finish(const grpc::Status& status);
  // Answers the status of the exception being handled (StatusOfCurrentException),
  // if pending. Call only inside a catch block.
  void FinishWithCurrentException();

 private:
  grpc::CallbackServerContext* const context_;
  // The call's reactor: it tells the tracker the call finished only once gRPC is
  // done with it (OnDone), that is once the answer has left gRPC's buffers. Finish
  // only starts sending it: an 8 MiB answer to a slow client could still be on its
  // way when a drain that counted calls finished at Finish shut the server down,
  // and the client then lost it to a connection reset.
  class TrackedReactor : public grpc::ServerUnaryReactor {
   public:
    explicit TrackedReactor(CallTracker* tracker) : tracker_(tracker) {}
    void set_admitted() { admitted_ = true; }  // Before Finish: OnDone follows it.
    void OnDone() override {
      tracker_->Finished(admitted_);
      delete this;
    }

   private:
    CallTracker* const tracker_;
    bool admitted_ = false;
  };

  TrackedReactor* const reactor_;
  const char* const method_;
  Metrics* const metrics_;
  CallTracker* const tracker_;
  const google::protobuf::Message* const response_;
  const absl::Time start_;
  std::string model_;
  bool pending_ = true;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_CALL_H_
