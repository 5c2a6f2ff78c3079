#include "server/rpc/infer_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/metrics/metrics.h"
#include "server/oip/sequence.h"
#include "server/rpc/inference_service.h"

namespace layerserve {

// One request of the stream and its answer. Its call (the CallAnswer) is answered
// once, from any thread, which hands it back to the stream.
class InferStream::Request final : public CallAnswer {
 public:
  explicit Request(InferStream* stream) : stream_(stream) {}

  void Admitted() override { admitted = true; }
  void Send(const grpc::Status& status) override { stream_->Answered(this, status); }

  inference::ModelInferRequest request;
  inference::ModelStreamInferResponse response;
  std::optional<Call> call;  // Until dispatched.
  std::string sequence;      // The sequence it continues; empty for none.
  bool admitted = false;
  bool answered = false;  // Under the stream's mu_.

 private:
  InferStream* const stream_;
};

InferStream::InferStream(InferenceServiceImpl* service,
                         grpc::CallbackServerContext* context)
    : service_(service), context_(context) {
  // The stream counts as a call until gRPC is done with it, so a drain waits for
  // its last answers to be written.
  service_->dispatch().calls->Started();
}

InferStream* InferStream::Start(InferenceServiceImpl* service,
                                grpc::CallbackServerContext* context) {
  auto stream = std::make_shared<InferStream>(service, context);
  stream->self_ = stream;
  if (service->StreamStarted(stream)) {
    stream->Drain();
  } else {
    Actions actions;
    {
      absl::MutexLock lock(&stream->mu_);
      stream->NextLocked(actions);
    }
    stream->Run(std::move(actions));
  }
  return stream.get();
}

void InferStream::Drain() {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    NextLocked(actions);
  }
  Run(std::move(actions));
}

void InferStream::OnReadDone(bool ok) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    read_pending_ = false;
    if (!ok) {
      reads_done_ = true;
      reading_.reset();
    } else {
      Request* request = reading_.get();
      requests_.push_back(std::move(reading_));
      const DispatchContext& dispatch = service_->dispatch();
      request->call.emplace(context_, "ModelStreamInfer", dispatch.metrics,
                            dispatch.calls, &request->request,
                            request->response.mutable_infer_response(), request);
      // A bad sequence parameter is the dispatch's to answer; it runs unordered.
      absl::StatusOr<oip::SequenceControl> sequence =
          oip::ParseSequenceControl(request->request);
      if (sequence.ok()) request->sequence = sequence->id;
      AcceptLocked(request, /*may_run_inline=*/true, actions);
    }
    NextLocked(actions);
  }
  Run(std::move(actions));
}

void InferStream::AcceptLocked(Request* request, bool may_run_inline, Actions& actions) {
  if (!request->sequence.empty() && sequences_running_.count(request->sequence) > 0) {
    parked_ = request;  // NextLocked reads no more until it runs.
    return;
  }
  if (!request->sequence.empty()) ++sequences_running_[request->sequence];
  ++running_;
  actions.dispatch.emplace_back(request, may_run_inline);
}

void InferStream::Answered(Request* request, const grpc::Status& status) {
  // As a unary call's reactor does at OnDone; the stream's own count waits for the
  // write.
  service_->dispatch().calls->Finished(request->admitted);
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    request->answered = true;
    if (!status.ok()) {
      // The code in the message: the protocol's stream answer has no field for it.
      request->response.set_error_message(absl::StrCat(
          StatusCodeName(status.error_code()), ": ", status.error_message()));
      inference::ModelInferResponse* answer = request->response.mutable_infer_response();
      answer->Clear();
      // So that a client with many requests in flight knows which one failed.
      answer->set_model_name(request->request.model_name());
      answer->set_model_version(request->request.model_version());
      answer->set_id(request->request.id());
    }
    --running_;
    if (!request->sequence.empty() && --sequences_running_[request->sequence] == 0) {
      sequences_running_.erase(request->sequence);
    }
    if (parked_ != nullptr && sequences_running_.count(parked_->sequence) == 0) {
      Request* next = parked_;
      parked_ = nullptr;
      // This thread may be a worker's: the next step queues rather than running here.
      AcceptLocked(next, /*may_run_inline=*/false, actions);
    }
    NextLocked(actions);
  }
  Run(std::move(actions));
}

void InferStream::OnWriteDone(bool ok) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    requests_.pop_front();
    if (!ok) broken_ = true;  // The client is gone: nothing more can be written.
    NextLocked(actions);
  }
  Run(std::move(actions));
}

void InferStream::OnCancel() {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    NextLocked(actions);
  }
  Run(std::move(actions));
}

void InferStream::OnDone() {
  service_->dispatch().calls->Finished(/*admitted=*/false);
  service_->StreamEnded(this);
  // The last owner, unless the service holds it for a moment (StartDraining).
  std::shared_ptr<InferStream> self = std::move(self_);
}

void InferStream::NextLocked(Actions& actions) {
  if (finishing_) return;
  while (broken_ && !requests_.empty() && requests_.front()->answered) {
    requests_.pop_front();
  }
  if (!writing_ && !broken_ && !requests_.empty() && requests_.front()->answered) {
    writing_ = true;
    actions.write = &requests_.front()->response;
  }
  const bool stop_reading = reads_done_ || draining_ || cancelled_ || broken_;
  if (!read_pending_ && !stop_reading && parked_ == nullptr && running_ < kMaxRunning) {
    read_pending_ = true;
    reading_ = std::make_unique<Request>(this);
    actions.read = &reading_->request;
  }
  if (stop_reading && requests_.empty() && !writing_) {
    finishing_ = true;
    actions.finish = cancelled_ || broken_ ? grpc::Status(grpc::StatusCode::CANCELLED,
                                                          "the stream was cancelled")
                     : reads_done_         ? grpc::Status::OK
                                           : DrainingStatus();
  }
}

void InferStream::Run(Actions actions) {
  // The read first: while one is outstanding gRPC keeps the stream (no OnDone), so
  // the dispatches below cannot outlive it.
  if (actions.read != nullptr) StartRead(actions.read);
  if (actions.write != nullptr) StartWrite(actions.write);
  for (auto& [request, may_run_inline] : actions.dispatch) {
    service_->Infer(std::move(*request->call), request->request,
                    request->response.mutable_infer_response(), may_run_inline);
  }
  if (actions.finish.has_value()) Finish(*std::move(actions.finish));
}

}  // namespace layerserve
