#include "server/sessions/session_store.h"

#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/retry_delay.h"
#include "common/status_macros.h"
#include "server/metrics/metrics.h"

namespace layerserve {
namespace {

// Removed sessions remembered for a precise NOT_FOUND message.
constexpr size_t kRememberGone = 4096;

std::string ReplicaOf(const std::string& id) { return id.substr(0, id.rfind('.')); }

// Sequence sessions' ids: the prefix, then the client's sequence id. No id the store
// makes starts so (they start with the replica's name, which has no ':').
constexpr absl::string_view kSequencePrefix = "sequence:";

bool IsSequence(absl::string_view id) { return absl::StartsWith(id, kSequencePrefix); }

// The field that gave a session and the session, as a message's start:
// `session_id: session "ID"` or `sequence_id: sequence "42"`.
std::string Named(absl::string_view id) {
  return absl::StrCat(IsSequence(id) ? "sequence_id: " : "session_id: ",
                      DescribeSession(id));
}

// What a client does about a session that is gone.
absl::string_view Restart(absl::string_view id) {
  return IsSequence(id) ? "start it again (sequence_start) and prefill again"
                        : "open a new session and prefill again";
}

}  // namespace

std::string SequenceSessionId(absl::string_view sequence_id) {
  return absl::StrCat(kSequencePrefix, sequence_id);
}

std::string DescribeSession(absl::string_view id) {
  if (IsSequence(id)) {
    return absl::StrCat("sequence \"", id.substr(kSequencePrefix.size()), "\"");
  }
  return absl::StrCat("session \"", id, "\"");
}

Session::Session(std::string session_id, std::shared_ptr<const Model> model_in,
                 int64_t start, int64_t count, int64_t max_tokens,
                 kernels::KvCacheType type)
    : id(std::move(session_id)),
      model(std::move(model_in)),
      layer_start(start),
      num_layers(count),
      max_length(max_tokens),
      cache(count, model->block.num_kv_heads, model->block.head_dim, type) {}

SessionLease::SessionLease(SessionStore* store, std::shared_ptr<Session> session,
                           int64_t reserved)
    : store_(store), session_(std::move(session)), reserved_(reserved) {}

SessionLease& SessionLease::operator=(SessionLease&& other) noexcept {
  if (this != &other) {
    Release(false);
    store_ = other.store_;
    session_ = std::move(other.session_);
    reserved_ = other.reserved_;
    other.store_ = nullptr;
  }
  return *this;
}

void SessionLease::Release(bool computed) {
  if (session_ == nullptr) return;
  store_->Release(*session_, reserved_, computed);
  session_.reset();
}

void SessionLease::ReleaseFailed() {
  if (session_ == nullptr) return;
  store_->Discard(*session_);
  session_.reset();
}

SessionStore::SessionStore(const SessionOptions& options, Metrics* metrics)
    : options_(options), metrics_(metrics) {}

absl::StatusOr<std::string> SessionStore::Open(std::shared_ptr<const Model> model,
                                               int64_t layer_start, int64_t num_layers,
                                               int64_t max_length) {
  const int64_t model_max = model->config.max_position_embeddings;
  if (max_length < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_length: ", max_length, " must be >= 0 (0: the model's ", model_max, ")"));
  }
  if (model_max > 0 && max_length > model_max) {
    return absl::OutOfRangeError(
        absl::StrCat("max_length: ", max_length, " is past model \"", model->name,
                     "\"'s max_position_embeddings ", model_max));
  }
  absl::MutexLock lock(&mu_);
  ExpireLocked(now_());
  // Unguessable within a replica: the serial makes it unique, the random part keeps
  // one client from naming another's session.
  static thread_local std::mt19937_64 random(std::random_device{}());
  return OpenLocked(
      absl::StrFormat("%s.%x%016x", options_.replica, next_serial_++, random()),
      std::move(model), layer_start, num_layers, max_length);
}

absl::StatusOr<std::string> SessionStore::OpenSequence(absl::string_view sequence_id,
                                                       std::shared_ptr<const Model> model,
                                                       int64_t layer_start,
                                                       int64_t num_layers) {
  std::string id = SequenceSessionId(sequence_id);
  absl::MutexLock lock(&mu_);
  ExpireLocked(now_());
  auto it = sessions_.find(id);
  if (it != sessions_.end()) {
    if (it->second.busy) {
      return absl::AbortedError(
          absl::StrCat(Named(id),
                       " is in use by another request; it cannot start again until that "
                       "request ends"));
    }
    ForgetLocked(id, "started again (sequence_start)");
  }
  return OpenLocked(std::move(id), std::move(model), layer_start, num_layers,
                    /*max_length=*/0);
}

absl::StatusOr<std::string> SessionStore::OpenLocked(std::string id,
                                                     std::shared_ptr<const Model> model,
                                                     int64_t layer_start,
                                                     int64_t num_layers,
                                                     int64_t max_length) {
  const int64_t model_max = model->config.max_position_embeddings;
  if (max_length == 0) max_length = model_max > 0 ? model_max : int64_t{1} << 24;
  Entry& entry = sessions_[id];
  entry.session = std::make_shared<Session>(id, std::move(model), layer_start, num_layers,
                                            max_length, options_.cache_type);
  entry.last_used = now_();
  PublishLocked();
  return id;
}

absl::Status SessionStore::Close(const std::string& id) {
  absl::MutexLock lock(&mu_);
  ExpireLocked(now_());
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat(
        IsSequence(id) ? "sequence_id: no " : "session_id: no ", DescribeSession(id),
        " on this replica (already closed, expired or evicted)"));
  }
  ForgetLocked(id, "closed");
  return absl::OkStatus();
}

absl::StatusOr<SessionLease> SessionStore::Acquire(const std::string& id,
                                                   int64_t tokens) {
  ASSIGN_OR_RETURN(std::vector<SessionLease> leases, AcquireAll({{id, tokens, ""}}));
  return std::move(leases.front());
}

absl::Status SessionStore::CheckLocked(const SessionRequest& request) {
  const std::string& id = request.id;
  const std::string named = request.field.empty()
                                ? Named(id)
                                : absl::StrCat(request.field, ": ", DescribeSession(id));
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    if (IsSequence(id) && gone_.find(id) == gone_.end()) {
      return absl::NotFoundError(absl::StrCat(
          named,
          " is unknown on this replica: never started (sequence_start), or started "
          "on another one (route a sequence's requests to one replica: load-balancer "
          "affinity on the x-layerserve-sequence header); ",
          Restart(id)));
    }
    if (!IsSequence(id) && ReplicaOf(id) != options_.replica) {
      return absl::NotFoundError(absl::StrCat(
          named, " was not opened on this replica (\"", options_.replica,
          "\"): route every call of a session to the replica that "
          "opened it (load-balancer affinity on the x-layerserve-session header), or "
          "open a new session and prefill again"));
    }
    auto gone = gone_.find(id);
    return absl::NotFoundError(absl::StrCat(
        named, " ",
        gone == gone_.end() ? "is unknown" : absl::StrCat("was ", gone->second), "; ",
        Restart(id)));
  }
  const Entry& entry = it->second;
  if (entry.busy) {
    return absl::AbortedError(absl::StrCat(
        named, " is in use by another call; send its calls one after another"));
  }
  const Session& session = *entry.session;
  const int64_t length = session.cache.length();
  if (length + request.tokens > session.max_length) {
    return absl::OutOfRangeError(
        absl::StrCat(request.field.empty() ? "hidden_states" : request.field, ": ",
                     DescribeSession(id), " holds ", length, " tokens; ", request.tokens,
                     " more would pass its max_length ", session.max_length));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SessionLease>> SessionStore::AcquireAll(
    const std::vector<SessionRequest>& requests) {
  absl::MutexLock lock(&mu_);
  ExpireLocked(now_());
  // Each is checked and marked busy (not evictable) before room is made for any,
  // so that making room for one never evicts another of the same call.
  std::vector<Entry*> entries;
  auto unmark = [&entries] {
    for (Entry* entry : entries) entry->busy = false;
  };
  int64_t need = 0, after = 0;
  std::vector<int64_t> needs;
  for (const SessionRequest& request : requests) {
    if (absl::Status checked = CheckLocked(request); !checked.ok()) {
      unmark();
      return checked;
    }
    Entry& entry = sessions_.find(request.id)->second;
    entry.busy = true;
    entries.push_back(&entry);
    needs.push_back(entry.session->cache.BytesToGrow(request.tokens));
    need += needs.back();
    after += entry.bytes + needs.back();
  }
  if (!MakeRoomLocked(need)) {
    unmark();
    const std::string who =
        requests.size() == 1 ? DescribeSession(requests.front().id)
                             : absl::StrCat("the call's ", requests.size(), " sessions");
    absl::Status full = absl::ResourceExhaustedError(absl::StrCat(
        "KV cache full: ", who, " needs ", need, " more bytes and only ",
        options_.max_bytes - bytes_, " of --max-kv-cache-bytes=", options_.max_bytes,
        " can be freed; close idle sessions or retry later"));
    // Bigger than the whole cache: no wait makes it fit, so no retry delay.
    if (after > options_.max_bytes) return full;
    // What could not be freed belongs to sessions in the middle of a call; each
    // becomes evictable when its step ends, a decode step or a prefill chunk: well
    // under a second. Sooner would mostly find them still busy.
    return WithRetryDelay(std::move(full), absl::Seconds(1));
  }
  std::vector<SessionLease> leases;
  for (size_t i = 0; i < entries.size(); ++i) {
    entries[i]->last_used = now_();
    entries[i]->bytes += needs[i];
    bytes_ += needs[i];
    leases.emplace_back(this, entries[i]->session, needs[i]);
  }
  PublishLocked();
  return leases;
}

void SessionStore::Release(const Session& session, int64_t reserved, bool computed) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session.id);
  // Closed while the call ran: its memory went with it.
  if (it == sessions_.end() || it->second.session.get() != &session) return;
  Entry& entry = it->second;
  entry.busy = false;
  entry.last_used = now_();
  if (!computed) {
    entry.bytes -= reserved;
    bytes_ -= reserved;
  }
  PublishLocked();
}

void SessionStore::Discard(const Session& session) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session.id);
  // Closed while the call ran: its memory went with it.
  if (it == sessions_.end() || it->second.session.get() != &session) return;
  ForgetLocked(session.id,
               "closed by the server: a call on it failed part-way, which may have left "
               "part of that call in its KV cache");
}

void SessionStore::ExpireLocked(absl::Time now) {
  std::vector<std::string> expired, reloaded;
  for (const auto& [id, entry] : sessions_) {
    if (entry.busy) continue;  // Its call runs on the version it holds.
    if (entry.session->model->retired.load()) {
      reloaded.push_back(id);
    } else if (now - entry.last_used > options_.ttl) {
      expired.push_back(id);
    }
  }
  for (const std::string& id : expired) {
    ForgetLocked(id, absl::StrCat("expired after ", absl::FormatDuration(options_.ttl),
                                  " without a call (--session-ttl)"));
    if (metrics_ != nullptr) metrics_->SessionExpired();
  }
  for (const std::string& id : reloaded) {
    const std::string model = sessions_.at(id).session->model->name;
    ForgetLocked(id, absl::StrCat("closed: model \"", model,
                                  "\" was reloaded (its files changed or were removed "
                                  "from --model-repository), and its KV cache was "
                                  "computed with the old weights"));
  }
}

void SessionStore::Sweep() {
  absl::MutexLock lock(&mu_);
  ExpireLocked(now_());
}

bool SessionStore::MakeRoomLocked(int64_t need) {
  while (bytes_ + need > options_.max_bytes) {
    auto oldest = sessions_.end();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      if (it->second.busy || it->second.bytes == 0) continue;
      if (oldest == sessions_.end() || it->second.last_used < oldest->second.last_used) {
        oldest = it;
      }
    }
    if (oldest == sessions_.end()) return false;
    ForgetLocked(oldest->first,
                 "evicted to free KV-cache memory for other sessions "
                 "(--max-kv-cache-bytes)");
    if (metrics_ != nullptr) metrics_->SessionEvicted();
  }
  return true;
}

void SessionStore::ForgetLocked(std::string id, std::string reason) {
  auto it = sessions_.find(id);
  bytes_ -= it->second.bytes;
  sessions_.erase(it);
  gone_[id] = std::move(reason);
  gone_order_.push_back(id);
  if (gone_order_.size() > kRememberGone) {
    gone_.erase(gone_order_.front());
    gone_order_.pop_front();
  }
  PublishLocked();
}

void SessionStore::PublishLocked() {
  if (metrics_ != nullptr) {
    metrics_->Sessions(static_cast<int64_t>(sessions_.size()), bytes_);
  }
}

int64_t SessionStore::active() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(sessions_.size());
}

int64_t SessionStore::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace layerserve
