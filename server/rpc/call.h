// One accepted RPC of the service, as a move-only handle: whoever holds it answers
// it, exactly once, and the answer is recorded (metrics, the CallTracker). The
// handler creates it; for a compute RPC it travels inside the queued task to the
// worker that answers it. A handle destroyed unanswered answers INTERNAL, so no
// path (an exception, a dropped task) leaves a client waiting or a drain hanging.
// The answer goes to a unary RPC's reactor, or to one response of a stream (a
// CallAnswer: ModelStreamInfer's requests are calls each). Not thread-safe: one
// owner at a time.
#ifndef LAYERSERVE_SERVER_RPC_CALL_H_
#define LAYERSERVE_SERVER_RPC_CALL_H_

#include <google/protobuf/message.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "server/metrics/metrics.h"
#include "server/rpc/call_tracker.h"

namespace layerserve {

// The answer to every RPC that arrives while the server drains.
const grpc::Status& DrainingStatus();

// Where a call's answer goes when it is not a unary RPC of its own: one response of
// a stream. It tells the CallTracker the call finished.
class CallAnswer {
 public:
  // The call passed the draining check (CallTracker::Admitted): count it admitted
  // when it finishes. Before Send.
  virtual void Admitted() = 0;
  // Sends `status`, with the response when OK (filled by then). Once.
  virtual void Send(const grpc::Status& status) = 0;

 protected:
  ~CallAnswer() = default;
};

// Turns a call's answer into another protocol's just before it is sent: the Open
// Inference Protocol's calls compute a v1 response and answer a ModelInferResponse.
// Owned by the call, so it may own what the call's job reads (the v1 request) and
// writes (the v1 response): it lives until the handle is destroyed.
class AnswerTranslation {
 public:
  virtual ~AnswerTranslation() = default;
  // The status to send instead of `status` (OK, or the error a failed translation
  // gives). Fills the call's response when OK. May throw: the call then answers
  // the exception's status.
  virtual grpc::Status Translate(const grpc::Status& status) = 0;
};

class Call {
 public:
  // A unary RPC, answered through reactor(). Counts the call as started. `request`
  // and `response` may be null (no bytes counted); `response` must live until the
  // call is answered, and the others longer than the handle.
  Call(grpc::CallbackServerContext* context, const char* method, Metrics* metrics,
       CallTracker* tracker, const google::protobuf::Message* request,
       const google::protobuf::Message* response);
  // One request of a stream, answered through `answer` (which must live until
  // then); `context` is the stream's.
  Call(grpc::CallbackServerContext* context, const char* method, Metrics* metrics,
       CallTracker* tracker, const google::protobuf::Message* request,
       const google::protobuf::Message* response, CallAnswer* answer);
  // The moved-from handle answers nothing.
  Call(Call&& other) noexcept;
  Call& operator=(Call&&) = delete;
  // Answers INTERNAL if still pending.
  ~Call();

  // What the handler of a unary RPC returns to gRPC; still valid to return once
  // answered. Null for a stream's request.
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
    answer_->Admitted();
    tracker_->Admitted();
  }

  // Translates the answer before it is sent (AnswerTranslation). Once.
  void set_translation(std::unique_ptr<AnswerTranslation> translation) {
    translation_ = std::move(translation);
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
  class TrackedReactor : public grpc::ServerUnaryReactor, public CallAnswer {
   public:
    explicit TrackedReactor(CallTracker* tracker) : tracker_(tracker) {}
    void Admitted() override { admitted_ = true; }  // Before Finish: OnDone follows.
    void Send(const grpc::Status& status) override { Finish(status); }
    void OnDone() override {
      tracker_->Finished(admitted_);
      delete this;
    }

   private:
    CallTracker* const tracker_;
    bool admitted_ = false;
  };

  // Null for a stream's request.
  TrackedReactor* const reactor_;
  CallAnswer* const answer_;
  const char* const method_;
  Metrics* const metrics_;
  CallTracker* const tracker_;
  const google::protobuf::Message* const response_;
  const absl::Time start_;
  std::string model_;
  std::unique_ptr<AnswerTranslation> translation_;
  bool pending_ = true;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_CALL_H_
