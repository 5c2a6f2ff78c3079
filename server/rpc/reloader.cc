#include "server/rpc/reloader.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/models/model_info_proto.h"

namespace layerserve {
namespace {

void Say(const std::string& line) {
  std::printf("layerserve: %s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace

RepositoryReloader::RepositoryReloader(const ReloaderOptions& options,
                                       ModelRepository* models, LayerServiceImpl* service,
                                       HealthService* health, Metrics* metrics)
    : options_(options),
      models_(models),
      service_(service),
      health_(health),
      metrics_(metrics) {}

RepositoryReloader::~RepositoryReloader() { Stop(); }

void RepositoryReloader::Start() {
  thread_ = std::thread([this] { Run(); });
}

void RepositoryReloader::Trigger() {
  absl::MutexLock lock(&mu_);
  requested_ = true;
  wake_.Signal();
}

void RepositoryReloader::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    wake_.Signal();
  }
  if (thread_.joinable()) thread_.join();
}

bool RepositoryReloader::stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

void RepositoryReloader::Run() {
  const bool polls = options_.poll_interval > absl::ZeroDuration() &&
                     options_.poll_interval < absl::InfiniteDuration();
  absl::Time next_poll =
      polls ? absl::Now() + options_.poll_interval : absl::InfiniteFuture();
  while (true) {
    bool signalled;
    {
      absl::MutexLock lock(&mu_);
      // A CondVar, not an absl::Condition: see Batcher::RunOnEachWorker.
      while (!requested_ && !stopping_ && absl::Now() < next_poll) {
        wake_.WaitWithDeadline(&mu_, next_poll);
      }
      if (stopping_) return;
      signalled = requested_;
      requested_ = false;
    }
    if (!signalled && absl::Now() < next_poll) continue;
    ReloadNow(signalled ? "SIGHUP" : "poll", /*quiet_if_unchanged=*/!signalled);
    if (polls) next_poll = absl::Now() + options_.poll_interval;
  }
}

void RepositoryReloader::ReloadNow(absl::string_view why, bool quiet_if_unchanged) {
  const absl::Time begin = absl::Now();
  absl::StatusOr<RepositoryChanges> changes = models_->Scan();
  if (!changes.ok()) {
    Say(absl::StrCat("reload (", why, ") failed, the models loaded serve on: ",
                     changes.status().message()));
    return;
  }
  if (changes->empty()) {
    if (!quiet_if_unchanged) {
      Say(absl::StrCat("reload (", why, "): no change, unchanged ",
                       changes->unchanged.size()));
    }
    return;
  }
  // Added models are known, and not serving, while they load.
  for (const FoundModel& found : changes->added) {
    health_->SetService(ModelHealthService(found.name), /*ready=*/false);
    metrics_->ModelKnown(found.name);
  }
  std::vector<std::shared_ptr<Model>> loaded;
  std::vector<std::shared_ptr<const Model>> ready;
  for (const auto* list : {&changes->added, &changes->changed}) {
    for (const FoundModel& found : *list) {
      if (stopping()) {
        Say(absl::StrCat("reload (", why, ") stopped: the server is stopping"));
        return;
      }
      loaded.push_back(models_->LoadFound(found));
      metrics_->ModelReloaded(found.name, loaded.back()->ready());
      if (loaded.back()->ready()) ready.push_back(loaded.back());
    }
  }
  if (options_.warm_up && !ready.empty()) service_->WarmUp(*ModelRepository::Of(ready));
  ready.clear();

  // The models as they were, for the metrics of those the swap drops.
  std::map<std::string, std::shared_ptr<const Model>> before;
  for (auto& model : models_->models()) before[model->name] = model;
  const ReloadReport report = models_->Publish(*changes, std::move(loaded));

  for (const std::string& name : report.removed) {
    health_->RemoveService(ModelHealthService(name));
    const Model& old = *before.at(name);
    if (old.ready()) {
      metrics_->ModelRemoved(name, v1::DataType_Name(WeightDtype(old.weight_type)),
                             old.weight_group_size);
    }
  }
  for (const auto* list : {&report.added, &report.replaced}) {
    for (const std::string& name : *list) {
      health_->SetService(ModelHealthService(name), /*ready=*/true);
      absl::StatusOr<std::shared_ptr<const Model>> model = models_->Find(name);
      if (model.ok()) {
        metrics_->ModelInfo(name, v1::DataType_Name(WeightDtype((*model)->weight_type)),
                            (*model)->weight_group_size);
      }
    }
  }
  for (const auto& [name, error] : report.failed) {
    // One that failed beside a serving version keeps its health (SERVING).
    if (std::find(report.kept.begin(), report.kept.end(), name) == report.kept.end()) {
      health_->SetService(ModelHealthService(name), /*ready=*/false);
    }
  }
  // The idle sessions of the versions swapped out end now, and free their memory.
  service_->SweepSessions();
  Say(absl::StrCat(
      "reload (", why, "): ", report.ToString(), " in ",
      absl::FormatDuration(absl::Trunc(absl::Now() - begin, absl::Milliseconds(1)))));
}

}  // namespace layerserve
