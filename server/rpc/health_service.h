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

// The health service name of one model: "layerserve.v1.LayerService/" + name.
std::string ModelHealthService(const std::string& model);

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  // Knows "" (the whole server) and each of `services`, all NOT_SERVING until set.
  // Those in `never_serving` (models that failed to load) stay NOT_SERVING.
  explicit HealthService(const std::vector<std::string>& services,
                         const std::set<std::string>& never_serving = {});
  // REQUIRES: the gRPC server is shut down (no reactor is left).
  ~HealthService() override = default;

  // Sets every known service SERVING (but those never serving) or NOT_SERVING and
  // tells each watcher its service's status. Ignored after Shutdown().
  void SetServing(bool serving);
  // Adds `service` (a model a reload added) or changes whether it may serve: it is
  // SERVING while the server is and `ready`, NOT_SERVING otherwise (a model still
  // loading, or one that failed). Its watchers hear of a change. Ignored after
  // Shutdown().
  void SetService(const std::string& service, bool ready);
  // Forgets `service` (a model a reload removed): Check answers NOT_FOUND and its
  // watchers get SERVICE_UNKNOWN, as for a service never served. Ignored after
  // Shutdown().
  void RemoveService(const std::string& service);
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

  // Tells the watchers of `service` its status now (SERVICE_UNKNOWN if unknown).
  void Tell(const std::string& service) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  std::set<std::string> never_serving_ ABSL_GUARDED_BY(mu_);
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, ServingStatus> statuses_ ABSL_GUARDED_BY(mu_);
  std::set<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_HEALTH_SERVICE_H_
