#include "server/rpc/health_service.h"

#include <optional>

#include "layerserve/v1/layerserve.grpc.pb.h"

namespace layerserve {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One Watch stream. gRPC allows one write in flight: a status that changes while a
// write is pending replaces the queued one, so the client always ends on the latest.
// gRPC may run OnDone inline from Finish or StartWrite, so no lock is held across
// those calls, and the service holds a reference while it talks to a watcher: the
// watcher is deleted when both gRPC (OnDone) and the service are done with it.
class HealthService::Watcher final
    : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  Watcher(HealthService* service, std::string watched)
      : service_(service), watched_(std::move(watched)) {}

  // The service name it watches.
  const std::string& watched() const { return watched_; }

  void Ref() {
    absl::MutexLock lock(&mu_);
    ++refs_;
  }
  void Unref() {
    bool last;
    {
      absl::MutexLock lock(&mu_);
      last = --refs_ == 0;
    }
    if (last) delete this;
  }

  void Send(ServingStatus status) {
    {
      absl::MutexLock lock(&mu_);
      if (finishing_) return;
      if (writing_) {
        pending_ = status;
        return;
      }
      writing_ = true;
      response_.set_status(status);
    }
    StartWrite(&response_);
  }

  // Finishes the stream (OK) once the writes in flight are done.
  void End() {
    {
      absl::MutexLock lock(&mu_);
      end_requested_ = true;
      if (writing_ || finishing_) return;
      finishing_ = true;
    }
    Finish(grpc::Status::OK);
  }

  void OnWriteDone(bool ok) override {
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok || cancelled_) {
        // The stream is broken or cancelled: no more writes.
        if (!finishing_) {
          finishing_ = true;
          finish = grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled");
        }
      } else if (pending_.has_value() && !finishing_) {
        writing_ = true;
        response_.set_status(*pending_);
        pending_.reset();
      } else if (end_requested_ && !finishing_) {
        finishing_ = true;
        finish = grpc::Status::OK;
      }
      if (!finish.has_value() && !writing_) return;
    }
    if (finish.has_value()) {
      Finish(*finish);
    } else {
      StartWrite(&response_);
    }
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      if (writing_ || finishing_) return;  // OnWriteDone(false) finishes.
      finishing_ = true;
    }
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }

  void OnDone() override {
    service_->RemoveWatcher(this);
    Unref();
  }

 private:
  HealthService* const service_;
  const std::string watched_;
  absl::Mutex mu_;
  int refs_ ABSL_GUARDED_BY(mu_) = 1;  // gRPC's, dropped in OnDone.
  HealthCheckResponse response_;       // Owned by gRPC while writing_.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<ServingStatus> pending_ ABSL_GUARDED_BY(mu_);
  bool end_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
};

std::string ModelHealthService(const std::string& model) {
  return std::string(v1::LayerService::service_full_name()) + "/" + model;
}

HealthService::HealthService(const std::vector<std::string>& services,
                             const std::set<std::string>& never_serving)
    : never_serving_(never_serving) {
  statuses_[""] = HealthCheckResponse::NOT_SERVING;
  for (const std::string& name : services)
    statuses_[name] = HealthCheckResponse::NOT_SERVING;
}

void HealthService::SetServing(bool serving) {
  std::vector<std::pair<Watcher*, std::optional<ServingStatus>>> sends;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    serving_ = serving;
    std::set<std::string> changed;
    for (auto& [name, value] : statuses_) {
      const ServingStatus now = serving && never_serving_.count(name) == 0
                                    ? HealthCheckResponse::SERVING
                                    : HealthCheckResponse::NOT_SERVING;
      if (now != value) changed.insert(name);
      value = now;
    }
    // Watchers hear of their own service's changes only (health.proto); one of an
    // unknown service keeps the SERVICE_UNKNOWN it was sent.
    for (Watcher* watcher : ReferenceWatchers()) {
      const bool tell = changed.count(watcher->watched()) > 0;
      sends.emplace_back(
          watcher, tell ? std::optional<ServingStatus>(statuses_[watcher->watched()])
                        : std::nullopt);
    }
  }
  for (auto& [watcher, status] : sends) {
    if (status) watcher->Send(*status);
    watcher->Unref();
  }
}

void HealthService::SetService(const std::string& service, bool ready) {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    if (ready) {
      never_serving_.erase(service);
    } else {
      never_serving_.insert(service);
    }
    const ServingStatus now = serving_ && ready ? HealthCheckResponse::SERVING
                                                : HealthCheckResponse::NOT_SERVING;
    auto [it, added] = statuses_.emplace(service, now);
    if (!added && it->second == now) return;
    it->second = now;
  }
  Tell(service);
}

void HealthService::RemoveService(const std::string& service) {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    never_serving_.erase(service);
    if (statuses_.erase(service) == 0) return;
  }
  Tell(service);
}

void HealthService::Tell(const std::string& service) {
  std::vector<Watcher*> watchers;
  ServingStatus status;
  {
    absl::MutexLock lock(&mu_);
    auto it = statuses_.find(service);
    status = it == statuses_.end() ? HealthCheckResponse::SERVICE_UNKNOWN : it->second;
    for (Watcher* watcher : ReferenceWatchers()) {
      if (watcher->watched() == service) {
        watchers.push_back(watcher);
      } else {
        watcher->Unref();
      }
    }
  }
  // Outside mu_, as SetServing: a write may finish the stream inline.
  for (Watcher* watcher : watchers) {
    watcher->Send(status);
    watcher->Unref();
  }
}

void HealthService::Shutdown() {
  std::vector<Watcher*> watchers;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    for (auto& [name, value] : statuses_) value = HealthCheckResponse::NOT_SERVING;
    watchers = ReferenceWatchers();
  }
  for (Watcher* watcher : watchers) {
    watcher->Send(HealthCheckResponse::NOT_SERVING);
    watcher->End();
    watcher->Unref();
  }
}

std::vector<HealthService::Watcher*> HealthService::ReferenceWatchers() {
  std::vector<Watcher*> watchers(watchers_.begin(), watchers_.end());
  for (Watcher* watcher : watchers) watcher->Ref();
  return watchers;
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* context,
                                               const HealthCheckRequest* request,
                                               HealthCheckResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  grpc::Status status;
  {
    absl::MutexLock lock(&mu_);
    auto it = statuses_.find(request->service());
    if (it == statuses_.end()) {
      status = grpc::Status(grpc::StatusCode::NOT_FOUND,
                            "unknown service \"" + request->service() + "\"");
    } else {
      response->set_status(it->second);
    }
  }
  reactor->Finish(status);
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext*, const HealthCheckRequest* request) {
  auto* watcher = new Watcher(this, request->service());
  absl::MutexLock lock(&mu_);
  auto it = statuses_.find(request->service());
  // Per health.proto, an unknown service is SERVICE_UNKNOWN on Watch, not an error.
  // A write started before the handler returns is held by gRPC until the reactor is
  // bound, so neither call below can run OnDone inline under mu_: the first write
  // is still in flight when End() asks to finish after it.
  watcher->Send(it == statuses_.end() ? HealthCheckResponse::SERVICE_UNKNOWN
                                      : it->second);
  if (shut_down_) {
    watcher->End();
  } else {
    watchers_.insert(watcher);
  }
  return watcher;
}

void HealthService::RemoveWatcher(Watcher* watcher) {
  absl::MutexLock lock(&mu_);
  watchers_.erase(watcher);
}

}  // namespace layerserve
