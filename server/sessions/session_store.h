// KV-cache sessions: each holds one sequence's keys and values for a model's range
// of blocks, so a client generating text sends only its new tokens.
//
// A call on a session leases it (SessionStore::Acquire): one call at a time (a
// second concurrent call is refused, never interleaved), with the KV-cache bytes its
// new tokens need reserved up front; the lease ends before the call is answered. A
// call that failed part-way closes its session (SessionLease::ReleaseFailed).
// Memory is bounded by max_bytes: when a lease needs more, idle sessions are
// evicted, least recently used first. Idle sessions expire after `ttl` (checked on
// every store operation). Thread-safe.
#ifndef LAYERSERVE_SERVER_SESSIONS_SESSION_STORE_H_
#define LAYERSERVE_SERVER_SESSIONS_SESSION_STORE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/attention/kv_cache.h"
#include "server/models/model_repository.h"

namespace layerserve {

class Metrics;

struct SessionOptions {
  kernels::KvCacheType cache_type = kernels::KvCacheType::kFloat32;
  int64_t max_bytes = int64_t{2} << 30;
  absl::Duration ttl = absl::Minutes(5);
  // Names this server in session ids, so a call routed to the wrong replica can say
  // so. Unique per process.
  std::string replica;
};

struct Session {
  Session(std::string id, std::shared_ptr<const Model> model, int64_t layer_start,
          int64_t num_layers, int64_t max_length, kernels::KvCacheType type);

  const std::string id;
  // The version of the model its cache was computed with: held until the session
  // ends. Once a reload retires that version, the session ends at the next look.
  const std::shared_ptr<const Model> model;
  const int64_t layer_start, num_layers, max_length;
  kernels::KvCache cache;  // Used only by the holder of the lease.
};

class SessionStore;

// One session of a call and the tokens it adds. `field` names it in messages
// ("session_ids[3]"); empty: session_id (or sequence_id), as Acquire does.
struct SessionRequest {
  std::string id;
  int64_t tokens = 0;
  std::string field;
};

// The id of the session that serves the Open Inference Protocol's sequence
// `sequence_id`: the client names a sequence, where OpenSession's ids are the
// store's own. Messages about such a session name the sequence as the client does
// (`sequence_id: sequence "42" ...`).
std::string SequenceSessionId(absl::string_view sequence_id);

// A session as messages name it to the client: `session "ID"`, or, for a
// sequence's session, `sequence "42"`.
std::string DescribeSession(absl::string_view id);

// One call's hold on a session. Move-only; Release() (or destruction) ends it.
class SessionLease {
 public:
  SessionLease() = default;
  SessionLease(SessionStore* store, std::shared_ptr<Session> session, int64_t reserved);
  SessionLease(SessionLease&& other) noexcept { *this = std::move(other); }
  SessionLease& operator=(SessionLease&& other) noexcept;
  ~SessionLease() { Release(/*computed=*/false); }

  Session* get() const { return session_.get(); }
  explicit operator bool() const { return session_ != nullptr; }
  // `computed`: the call appended its tokens and committed them.
  void Release(bool computed);
  // Ends a call whose computation failed part-way (its kernel threw): its tokens
  // may be in the cache in part (appended to some layers, or committed with no
  // answer sent), which no later call could tell. Closes the session, so that its
  // next call is NOT_FOUND, saying why and to prefill again, instead of continuing
  // from that cache.
  void ReleaseFailed();

 private:
  SessionStore* store_ = nullptr;
  std::shared_ptr<Session> session_;
  int64_t reserved_ = 0;
};

class SessionStore {
 public:
  // `metrics` may be null (tests); it must outlive the store.
  SessionStore(const SessionOptions& options, Metrics* metrics);

  // INVALID_ARGUMENT / OUT_OF_RANGE for a bad max_length; the id otherwise.
  absl::StatusOr<std::string> Open(std::shared_ptr<const Model> model,
                                   int64_t layer_start, int64_t num_layers,
                                   int64_t max_length);
  // Opens the session of a sequence (SequenceSessionId), max_length the model's. A
  // sequence started again replaces its session (its cache is dropped), unless a
  // call holds it: ABORTED. Otherwise as Open.
  absl::StatusOr<std::string> OpenSequence(absl::string_view sequence_id,
                                           std::shared_ptr<const Model> model,
                                           int64_t layer_start, int64_t num_layers);
  // NOT_FOUND when unknown (or already gone). A call holding the session finishes;
  // its memory is freed when it ends.
  absl::Status Close(const std::string& id);
  // Leases the session for a call adding `tokens`. NOT_FOUND unknown, expired,
  // evicted, its model reloaded (replaced or removed) or another replica's (the
  // message says which and to prefill again);
  // ABORTED busy with another call; OUT_OF_RANGE past its max_length;
  // RESOURCE_EXHAUSTED when the cache cannot make room.
  absl::StatusOr<SessionLease> Acquire(const std::string& id, int64_t tokens);
  // Leases every session of a call on many (BlockForwardRequest.session_ids), or
  // none: each fails as Acquire would, its message naming `field` instead of
  // session_id (and of hidden_states for max_length); all are marked busy before
  // room is made for their tokens together, so making room for one never evicts
  // another of the same call. The ids must differ (a repeated id is ABORTED, busy).
  absl::StatusOr<std::vector<SessionLease>> AcquireAll(
      const std::vector<SessionRequest>& requests);

  // Ends the idle sessions whose model a reload retired (the others are ended when
  // their call does, or at their next look), so the old version's memory goes.
  void Sweep();

  int64_t active() const;
  int64_t bytes() const;
  absl::Duration ttl() const { return options_.ttl; }

  // Tests move time with this; production uses absl::Now.
  void set_clock_for_testing(absl::Time (*now)()) { now_ = now; }

 private:
  friend class SessionLease;
  struct Entry {
    std::shared_ptr<Session> session;
    bool busy = false;
    absl::Time last_used;
    int64_t bytes = 0;
  };
  absl::StatusOr<std::string> OpenLocked(std::string id,
                                         std::shared_ptr<const Model> model,
                                         int64_t layer_start, int64_t num_layers,
                                         int64_t max_length)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The errors of Acquire for one session, with no side effect.
  absl::Status CheckLocked(const SessionRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Release(const Session& session, int64_t reserved, bool computed);
  // Forgets `session` (unless already gone): its cache cannot be trusted.
  void Discard(const Session& session);
  // Drops idle sessions past their ttl or on a retired model.
  void ExpireLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts idle sessions, oldest use first, until `need` more bytes fit. False if
  // they cannot.
  bool MakeRoomLocked(int64_t need) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `id` by value: callers may pass the key of the entry it erases.
  void ForgetLocked(std::string id, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SessionOptions options_;
  Metrics* const metrics_;
  absl::Time (*now_)() = &absl::Now;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> sessions_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_serial_ ABSL_GUARDED_BY(mu_) = 0;
  // Why recently removed sessions are gone, for the NOT_FOUND message; bounded.
  std::map<std::string, std::string> gone_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> gone_order_ ABSL_GUARDED_BY(mu_);
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_SESSIONS_SESSION_STORE_H_
