// The standard gRPC health service (grpc.health.v1.Health: Check and Watch).
//
// gRPC's built-in service cannot end Watch streams, so a server with a watching
// client could not shut down until its grace ran out, and then gRPC cancelled every
// call still running, accepted ones included. This one ends them: Shutdown() sends
// NOT_SERVING to every watcher and finishes its stream. Thread-safe.
#ifndef LAYERSERVE_SERVER_RPC_HEALTH_SERVICE_H_
#define LAYERSERVE_SERVER_RPC_HEALTH_SERVICE_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace layerserve {

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  // Knows "" (the whole server) and each of `services`, all NOT_SERVING until set.
  explicit HealthService(const std::vector<std::string>& services);
  // REQUIRES: the gRPC server is shut down (no reactor is left).
  ~HealthService() override = default;

  // Sets every known service SERVING or NOT_SERVING and tells the watchers.
  // Ignored after Shutdown().
  void SetServing(bool serving);
  // Everything NOT_SERVING for good; every Watch stream gets that and is finished.
  void Shutdown();

  grpc::ServerUnaryReactor* Check(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request,
      grpc::health::v1::HealthCheckResponse* response) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request) override;

  class Watcher;

 private:
  friend class Watcher;
  void RemoveWatcher(Watcher* watcher);
  // The current watchers, each with a reference the caller drops (Unref) after
  // talking to it outside mu_.
  std::vector<Watcher*> ReferenceWatchers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::map<std::string, ServingStatus> statuses_ ABSL_GUARDED_BY(mu_);
  std::set<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_HEALTH_SERVICE_H_
