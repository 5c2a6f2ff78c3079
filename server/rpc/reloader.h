// Reloads the model repository while the server serves: on SIGHUP (Trigger) and,
// with --repository-poll-interval, every interval. A reload rescans
// --model-repository (ModelRepository::Scan); loads the new and changed models
// beside the ones serving, and warms them up (--warm-up) on every compute worker
// between batches; then swaps the new set in at once (ModelRepository::Publish).
// After the swap: the health service knows added models (SERVING once loaded and
// warm, NOT_SERVING while loading or when they failed) and forgets removed ones;
// sessions of replaced and removed models end (SessionStore::Sweep); the metrics
// count each load (layerserve_model_reloads_total) and list the models served
// (layerserve_model_info). One line on stdout says what changed:
//   layerserve: reload (SIGHUP): added [a], replaced [b], removed [c],
//   failed [d: why (the old version serves)], unchanged N
// A poll that finds nothing changed says nothing. Reloads run one at a time on the
// reloader's own thread; signals that arrive meanwhile make one more.
#ifndef LAYERSERVE_SERVER_RPC_RELOADER_H_
#define LAYERSERVE_SERVER_RPC_RELOADER_H_

#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/metrics/metrics.h"
#include "server/models/model_repository.h"
#include "server/rpc/health_service.h"
#include "server/rpc/service.h"

namespace layerserve {

struct ReloaderOptions {
  // Rescan this often without a signal; zero or infinite: only on Trigger().
  absl::Duration poll_interval = absl::ZeroDuration();
  // Warm up loaded models before they serve (--warm-up).
  bool warm_up = true;
};

class RepositoryReloader {
 public:
  // Everything must outlive the reloader; `models` has a directory (not the demo).
  RepositoryReloader(const ReloaderOptions& options, ModelRepository* models,
                     LayerServiceImpl* service, HealthService* health, Metrics* metrics);
  // Stop()s.
  ~RepositoryReloader();

  // Starts the thread that reloads on Trigger() and every poll interval.
  void Start();
  // Asks for a reload (SIGHUP). Returns at once.
  void Trigger();
  // Waits for a reload running to finish (a model being loaded finishes loading;
  // no further one starts) and joins the thread. Idempotent.
  void Stop();

  // One reload on the calling thread; `why` names its cause in the log line.
  // `quiet_if_unchanged`: say nothing when nothing changed (a poll).
  void ReloadNow(absl::string_view why, bool quiet_if_unchanged);

 private:
  void Run();
  bool stopping() const;

  const ReloaderOptions options_;
  ModelRepository* const models_;
  LayerServiceImpl* const service_;
  HealthService* const health_;
  Metrics* const metrics_;
  mutable absl::Mutex mu_;
  absl::CondVar wake_;  // Signalled by Trigger() and Stop().
  bool requested_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_RELOADER_H_
