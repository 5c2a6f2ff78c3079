#include "server/rpc/call.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "server/rpc/exception_status.h"

namespace layerserve {

const grpc::Status& DrainingStatus() {
  static const grpc::Status* const status =
      new grpc::Status(grpc::StatusCode::UNAVAILABLE,
                       "server is draining (shutting down); retry on another replica");
  return *status;
}

Call::Call(grpc::CallbackServerContext* context, const char* method, Metrics* metrics,
           CallTracker* tracker, const google::protobuf::Message* request,
           const google::protobuf::Message* response)
    : Call(context, method, metrics, tracker, request, response,
           new TrackedReactor(tracker)) {}

Call::Call(grpc::CallbackServerContext* context, const char* method, Metrics* metrics,
           CallTracker* tracker, const google::protobuf::Message* request,
           const google::protobuf::Message* response, CallAnswer* answer)
    : context_(context),
      reactor_(dynamic_cast<TrackedReactor*>(answer)),
      answer_(answer),
      method_(method),
      metrics_(metrics),
      tracker_(tracker),
      response_(response),
      start_(absl::Now()) {
  tracker_->Started();
  // A failure to count (an allocation of a first series) must not keep the call
  // from being served: the handle exists from here on, and answers.
  try {
    metrics_->RequestStarted(method, request == nullptr ? 0 : request->ByteSizeLong());
  } catch (...) {
  }
}

Call::Call(Call&& other) noexcept
    : context_(other.context_),
      reactor_(other.reactor_),
      answer_(other.answer_),
      method_(other.method_),
      metrics_(other.metrics_),
      tracker_(other.tracker_),
      response_(other.response_),
      start_(other.start_),
      model_(std::move(other.model_)),
      translation_(std::move(other.translation_)),
      pending_(other.pending_) {
  other.pending_ = false;
}

Call::~Call() {
  if (!pending_) return;
  // A bug, but a client that gets an answer can retry; one left waiting cannot.
  Finish(grpc::Status(grpc::StatusCode::INTERNAL,
                      absl::StrCat(method_,
                                   ": the server dropped the call without answering "
                                   "it; retry")));
}

grpc::Status Call::CheckStillWanted(bool between_parts) const {
  if (!context_->IsCancelled()) return grpc::Status::OK;
  if (std::chrono::system_clock::now() >= context_->deadline()) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        between_parts
                            ? "deadline passed between the parts of the request's "
                              "computation; the rest was not computed"
                            : "deadline passed while the request waited in the queue; "
                              "it was not computed");
  }
  return grpc::Status(grpc::StatusCode::CANCELLED,
                      between_parts
                          ? "the client cancelled the call between the parts of its "
                            "computation; the rest was not computed"
                          : "the client cancelled the call before it was computed");
}

void Call::Finish(const grpc::Status& status) {
  if (!pending_) return;
  pending_ = false;
  grpc::Status sent = status;
  if (translation_ != nullptr) {
    try {
      sent = translation_->Translate(status);
    } catch (...) {
      sent = StatusOfCurrentException(method_);
    }
  }
  // A failure to count (an allocation of a first series) must not keep the answer
  // from the client.
  try {
    const int64_t response_bytes =
        sent.ok() && response_ != nullptr ? response_->ByteSizeLong() : 0;
    metrics_->RequestFinished(method_, model_, sent.error_code(), absl::Now() - start_,
                              response_bytes);
  } catch (...) {
  }
  // A unary call's tracker counts it finished at OnDone; a stream's answer counts
  // it at once.
  answer_->Send(sent);
}

void Call::FinishWithCurrentException() {
  if (pending_) Finish(StatusOfCurrentException(method_));
}

}  // namespace layerserve
