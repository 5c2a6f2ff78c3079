// Counts the RPCs a handler accepted and gRPC is not done with, and when the last
// one arrived or finished, so a drain can wait until the server is idle.
// Thread-safe.
#ifndef LAYERSERVE_SERVER_RPC_CALL_TRACKER_H_
#define LAYERSERVE_SERVER_RPC_CALL_TRACKER_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace layerserve {

class CallTracker {
 public:
  void Started() {
    absl::MutexLock lock(&mu_);
    ++inflight_;
    last_activity_ = absl::Now();
  }
  // A started call that passed the draining check: it will be computed.
  void Admitted() {
    absl::MutexLock lock(&mu_);
    ++admitted_;
  }
  // gRPC is done with the call (its reactor's OnDone): the answer has left its
  // buffers.
  void Finished(bool admitted) {
    absl::MutexLock lock(&mu_);
    --inflight_;
    if (admitted) --admitted_;
    last_activity_ = absl::Now();
  }
  int64_t inflight() const {
    absl::MutexLock lock(&mu_);
    return inflight_;
  }
  // Calls in flight that were admitted: what a drain lets finish. inflight() also
  // counts calls being refused (a call counts from its handler's first line, before
  // it sees that the server drains).
  int64_t admitted() const {
    absl::MutexLock lock(&mu_);
    return admitted_;
  }

  // Waits until no call is in flight and none has arrived or finished for `quiet`,
  // or until `deadline`. Returns true if idle. Polls: it runs once, at shutdown.
  // (The last answers' bytes may still sit in the kernel's socket buffers when gRPC
  // is done: `quiet` is the clients' time to read them before the server closes
  // the connections.)
  bool AwaitIdle(absl::Duration quiet, absl::Time deadline) const {
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (inflight_ == 0 && absl::Now() - last_activity_ >= quiet) return true;
      }
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
  }

 private:
  mutable absl::Mutex mu_;
  int64_t inflight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t admitted_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_activity_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_CALL_TRACKER_H_
