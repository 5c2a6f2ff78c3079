// layerserve::client::Pipeline: one model split across replicas that each serve a
// span of its layers (the server's --layers=START:END), chained from the client as
// Petals does. Each stage is a span and its replicas; every replica gets its own
// Client made from the Pipeline's ClientOptions (target replaced), so every call
// carries the same token, TLS and deadlines.
//
// Fault tolerance. A stateless Forward that finds a replica UNAVAILABLE (after the
// Client's own retries) tries the stage's next replica. A PipelineSession keeps
// the inputs it sent to each stage; when a stage's replica is lost (UNAVAILABLE,
// or NOT_FOUND because its session was evicted or the replica restarted) it opens
// a session on another replica of the stage (the same one again if it is the
// only one), re-sends the stage's cached inputs as one prefill, then the step.
// The recovered cache equals the lost one up to float32 rounding (a prefill sums
// in another order than the steps did).
//
// Many sessions in one call per stage (Pipeline::Step): row b continues
// PipelineSession b, and each stage gets one BlockForward carrying every session's
// stage session (session_ids), all or nothing. A stage's sessions normally share a
// replica; rows whose sessions live on different ones go as one call per replica.
// Recovery is Forward's: a call that fails because its replica is lost
// (UNAVAILABLE, or NOT_FOUND without a row) re-opens each of its sessions on the
// stage's next replica, a NOT_FOUND naming a row ("session_ids[2]: ...") that
// session alone; the failed call appended nothing, so the step is sent again. A
// recovering session tries the stage's current replica first unless that is the
// lost one, so the sessions moved by one failure stay together.
//
// Thread safety: a Pipeline may be used by many threads at once (each with its
// own sessions); a PipelineSession by one thread at a time.
#ifndef LAYERSERVE_CLIENT_CPP_PIPELINE_H_
#define LAYERSERVE_CLIENT_CPP_PIPELINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
// A sibling by a path relative to this file: right both in the source tree and
// installed (include/layerserve/client/, docs/clients/cpp.md).
#include "client.h"

namespace layerserve::client {

// Blocks layer_start .. layer_start + num_layers - 1 and the replicas serving them.
struct PipelineStage {
  std::vector<std::string> targets;
  int32_t layer_start = 0;
  int32_t num_layers = 0;
};

class PipelineSession;

// What Pipeline::Step answers.
struct PipelineStepResult {
  v1::Tensor hidden_states;      // The last stage's output, the shape sent.
  std::vector<int64_t> lengths;  // Each session's tokens after the step.
  std::vector<absl::Duration> stage_times;
  // Per stage, the replica that answered each row.
  std::vector<std::vector<std::string>> stage_targets;
};

class Pipeline {
 public:
  // INVALID_ARGUMENT naming the stage for no stages, a stage without targets or
  // layers, or stages that do not chain (each starts where the one before ends);
  // a Client's own errors for bad options.
  static absl::StatusOr<std::unique_ptr<Pipeline>> Create(
      std::vector<PipelineStage> stages, std::string model, const ClientOptions& options);
  // Stages from each target's span (GetModel of `model`), ordered, targets with the
  // same span as replicas of one stage. INVALID_ARGUMENT naming the servers when
  // the spans leave a gap, overlap or do not cover the model's layers.
  static absl::StatusOr<std::unique_ptr<Pipeline>> FromServers(
      const std::vector<std::string>& targets, std::string model,
      const ClientOptions& options);

  // request (hidden_states, positions, sequence_lengths, causal, output_dtype...)
  // through every stage, model and layers set per stage. The last stage's
  // response; each stage's wall time in `*stage_times` if given.
  absl::StatusOr<v1::BlockForwardResponse> Forward(
      const v1::BlockForwardRequest& request,
      std::vector<absl::Duration>* stage_times = nullptr);

  // One server session per stage; max_length 0 = the model's maximum.
  absl::StatusOr<std::unique_ptr<PipelineSession>> OpenSession(int64_t max_length = 0);

  // Many sessions through every stage, one call per stage: row b of hidden_states
  // [B, T, D] ([T, D]: one session) is appended to sessions[b], a session of this
  // pipeline, bit for bit what that session's Forward of the row would give.
  // sequence_lengths (B entries in [1, T], or empty) makes the rows ragged; padded
  // rows of the output are zeros. INVALID_ARGUMENT for no sessions, a repeated one
  // or one of another pipeline. A step that fails at a later stage leaves the
  // earlier stages' sessions advanced, as Forward does. The sessions are used by
  // this thread for the call.
  absl::StatusOr<PipelineStepResult> Step(
      absl::Span<PipelineSession* const> sessions, const v1::Tensor& hidden_states,
      absl::Span<const int64_t> sequence_lengths = {});

  std::vector<PipelineStage> stages() const;
  const std::string& model() const { return model_; }

 private:
  friend class PipelineSession;
  struct Stage {
    int32_t layer_start = 0;
    int32_t num_layers = 0;
    std::vector<std::unique_ptr<Client>> replicas;
    // The replica in use; moves on when one is lost.
    std::atomic<size_t> current{0};
    // The next replica (the same one when it is the only one: it may restart).
    void NextReplica(size_t from) {
      current.compare_exchange_strong(from, (from + 1) % replicas.size());
    }
  };

  // Stage `index` of Step on x [B, T, D]: one StepSessions per replica holding the
  // rows' sessions (normally one), lost sessions recovered; each row's real tokens
  // kept for a re-prefill. The output [B, T, D]; each row's replica target and
  // session length in `targets` and `lengths`.
  absl::StatusOr<v1::Tensor> StepStage(size_t index,
                                       absl::Span<PipelineSession* const> sessions,
                                       const v1::Tensor& x,
                                       absl::Span<const int64_t> sequence_lengths,
                                       std::vector<std::string>* targets,
                                       std::vector<int64_t>* lengths);

  Pipeline(std::string model, std::vector<std::unique_ptr<Stage>> stages)
      : model_(std::move(model)), stages_(std::move(stages)) {}

  const std::string model_;
  const std::vector<std::unique_ptr<Stage>> stages_;
};

class PipelineSession {
 public:
  struct StepResult {
    v1::Tensor hidden_states;  // The last stage's output, the shape sent.
    int64_t length = 0;        // Tokens the session holds now.
    std::vector<absl::Duration> stage_times;
    std::vector<std::string> stage_targets;  // The replica that answered each stage.
  };

  ~PipelineSession();  // Closes what is still open, errors ignored.

  // Appends hidden_states [T, D] or [1, T, D] to every stage's session in turn;
  // positions continue from the cached tokens.
  absl::StatusOr<StepResult> Forward(const v1::Tensor& hidden_states);
  // Closes every stage's session; one already gone or unreachable is fine.
  absl::Status Close();

  // How many times a stage was re-opened and re-prefilled.
  int recoveries() const { return recoveries_; }
  std::vector<std::string> session_ids() const;

 private:
  friend class Pipeline;
  struct StageSession {
    std::string id;
    size_t replica = 0;              // Index into the stage's replicas.
    std::vector<v1::Tensor> inputs;  // Sent so far, for a re-prefill.
  };
  PipelineSession(Pipeline* pipeline, int64_t max_length)
      : pipeline_(pipeline), max_length_(max_length) {}

  absl::Status Open(size_t stage_index);
  absl::Status Recover(size_t stage_index, absl::Status lost);
  absl::StatusOr<v1::BlockForwardResponse> Send(size_t stage_index,
                                                const v1::Tensor& hidden_states);

  Pipeline* const pipeline_;
  const int64_t max_length_;
  std::vector<StageSession> sessions_;
  int recoveries_ = 0;
  bool closed_ = false;
};

}  // namespace layerserve::client

#endif  // LAYERSERVE_CLIENT_CPP_PIPELINE_H_
