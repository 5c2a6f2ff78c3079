// The BlockForward RPC apart from transport: validation against the served model
// (every error names its field), the forward pass through the requested blocks, and
// BlockForwardOp, what the dispatcher (server/rpc/dispatch.h) needs of it
// (server/ops/operation.h): a batch runs as one pass, never inline, a long session
// prefill in chunks (--prefill-chunk-tokens), and ends its session leases.
// Stateless; safe from any thread (a job: one thread at a time).
#ifndef LAYERSERVE_SERVER_OPS_BLOCK_FORWARD_H_
#define LAYERSERVE_SERVER_OPS_BLOCK_FORWARD_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/dtype.h"
#include "kernels/block/block.h"
#include "kernels/value_stats/value_stats.h"
#include "layerserve/v1/layerserve.pb.h"
#include "server/models/model_repository.h"
#include "server/ops/operation.h"
#include "server/ops/tensor_codec.h"
#include "server/sessions/session_store.h"

namespace layerserve {

struct BlockForwardJob {
  // The version current when the call was parsed (or its session's): held until
  // the job ends, so a reload meanwhile neither frees nor swaps its weights.
  std::shared_ptr<const Model> model;
  int64_t layer_start = 0;
  int64_t num_layers = 1;
  DecodedTensor hidden;            // [B, T, D] or [T, D], float32
  int64_t batch = 1, tokens = 1;   // B, T
  std::vector<int64_t> positions;  // [B * T]
  std::vector<int64_t> lengths;    // [B]: real tokens of each sequence
  bool causal = true;
  bool want_attention_stats = false;
  ElementType output_type = ElementType::kFloat32;
  // A session call: one lease per sequence (row b of hidden_states continues
  // sessions[b]; session_id gives one, session_ids one per row), held until the
  // call is answered (across all its parts). Empty without sessions.
  std::vector<SessionLease> sessions;
  // Given by session_ids (answered in session_lengths), not session_id.
  bool many_sessions = false;

  // Chunked prefill: a session call of more tokens than `chunk_tokens`
  // (--prefill-chunk-tokens; 0 without a session or with the flag off) runs that
  // many at a time, each chunk through the whole layer range, appending its keys
  // and values to the sessions' caches; the next chunk attends over them. Between
  // chunks the job goes back to the queue (BlockForwardOp::Finished), so decode
  // steps waiting run first. The sequences of a call on many sessions run their
  // chunks side by side: sequence b's real tokens in [done, done + part).
  int64_t chunk_tokens = 0;
  // Tokens of each sequence computed so far: 0, then `tokens` (whole) or the
  // chunks' sum.
  int64_t done = 0;
  // Each session's cache length before the call, to restore if it stops between
  // chunks (BlockForwardOp::End).
  std::vector<int64_t> cache_lengths;
  // Session calls: the output [B, T, D], each part's rows written as it runs,
  // answered after the last (padded rows stay zero).
  std::vector<float> output;
  // [num_layers, Hq]: each head's attention entropy summed over the computed
  // tokens (and sequences).
  std::vector<double> entropy;

  bool has_sessions() const { return !sessions.empty(); }
  bool InChunks() const { return chunk_tokens > 0 && tokens > chunk_tokens; }
  // The tokens (of each sequence) the next run computes.
  int64_t PartTokens() const {
    return InChunks() ? std::min(chunk_tokens, tokens - done) : tokens;
  }
  // The real tokens sequence b computes in the next part: a session's padding is
  // never computed (a session call takes exactly the rows it adds), a call
  // without sessions computes its padded rows too.
  int64_t PartRealTokens(int64_t b) const {
    if (!has_sessions()) return PartTokens();
    return std::clamp<int64_t>(lengths[b] - done, 0, PartTokens());
  }
  // The rows of the next part, all sequences together.
  int64_t PartRows() const {
    int64_t rows = 0;
    for (int64_t b = 0; b < batch; ++b) rows += PartRealTokens(b);
    return rows;
  }
};

// A model and a valid range of its blocks.
struct LayerRange {
  std::shared_ptr<const Model> model;
  int64_t start = 0;
  int64_t count = 1;
};

// NOT_FOUND unknown model, FAILED_PRECONDITION model that failed to load,
// INVALID_ARGUMENT negative numbers, OUT_OF_RANGE layers past the model or
// outside the span this server serves (--layers).
// num_layers 0 means 1.
absl::StatusOr<LayerRange> ResolveLayerRange(const ModelRepository& models,
                                             absl::string_view model, int64_t layer_start,
                                             int64_t num_layers);

// Positions are rounded to float32 before the RoPE angle (as Hugging Face does), so
// past 2^24 two positions would rotate alike: those are rejected.
inline constexpr int64_t kMaxPosition = int64_t{1} << 24;

// NOT_FOUND unknown model, FAILED_PRECONDITION model that failed to load,
// OUT_OF_RANGE layers past the model, INVALID_ARGUMENT anything else malformed.
// With a session_id or session_ids: the errors of SessionStore::AcquireAll (for
// session_ids naming the row), INVALID_ARGUMENT sessions that differ in model or
// layers, and FAILED_PRECONDITION when `sessions` is null. A session call of more than
// `prefill_chunk_tokens` tokens (when > 0) runs in chunks of that many.
absl::StatusOr<BlockForwardJob> ParseBlockForwardRequest(
    const v1::BlockForwardRequest& request, const ModelRepository& models,
    SessionStore* sessions = nullptr, int64_t prefill_chunk_tokens = 0);

// Runs the blocks for the next part of each of `jobs` (all of a job's tokens, or
// its next chunk) in one pass and advances the jobs; fills responses[i] once
// jobs[i] is done (its last part ran). The jobs must share model, layer range and
// `causal` (the batcher keys on them). The linear layers run once on the tokens of
// all jobs; attention runs per sequence; each job's result is bit-identical to
// running it alone. Returns each job's numeric health (meaningful once done).
// Between two layers it asks `abandoned` (if set) and, when every call is gone,
// returns with no job advanced: what the layers run so far appended to a session's
// cache is uncommitted (BlockForwardOp::End forgets it).
std::vector<OutputHealth> RunBlockForwardBatch(
    kernels::BlockKernels& kernels, const std::vector<BlockForwardJob*>& jobs,
    const std::vector<v1::BlockForwardResponse*>& responses,
    const BatchAbandoned& abandoned = nullptr);

// One job alone, all its parts.
OutputHealth RunBlockForward(kernels::BlockKernels& kernels, BlockForwardJob& job,
                             v1::BlockForwardResponse* response);

// Whether the batch after a held batch of a BlockForward key gathers
// (BatchTask::gathers(): it waits for as many tasks as the held batch had). Only
// for session steps, whose next step follows their answer, and only when each
// batch streams the layer range's weights from memory: `weight_bytes` above the
// last-level cache, or the cache size unknown (0). Weights that stay in the cache
// cost a batch little, and a wait for more steps cost the demo model (23 MB of
// bfloat16 in a 32 MB L3) 7-25% at 8 and 32 sessions. Stateless requests gained
// nothing either: 64 clients of the float32 demo model (45 MB) sent 10-22% fewer
// requests with gathering (docs/perf/2026-11-30-kv-cache-sessions.md, "Which models
// gather"; docs/perf/2026-11-30-batching-gain.md, "Gathering only for sessions").
inline bool BlockForwardGathers(bool session_step, int64_t weight_bytes,
                                int64_t last_level_cache_bytes) {
  if (!session_step) return false;
  return last_level_cache_bytes == 0 || weight_bytes > last_level_cache_bytes;
}

// The service's settings of BlockForward (ParseContext::block_forward).
struct BlockForwardOptions {
  // --prefill-chunk-tokens: a session call of more tokens runs this many at a time
  // (BlockForwardJob::chunk_tokens); 0: every call runs whole.
  int64_t prefill_chunk_tokens = 0;
};

struct BlockForwardOp : OperationDefaults {
  using Job = BlockForwardJob;
  using Request = v1::BlockForwardRequest;
  using Response = v1::BlockForwardResponse;
  static constexpr const char* kMethod = "BlockForward";
  // Requests of a batch share their linear layers (RunBlockForwardBatch).
  static constexpr BatchRun kBatchRun = BatchRun::kOneCallPerBatch;

  static absl::StatusOr<Job> Parse(const Request& request, const ParseContext& context) {
    const BlockForwardOptions options =
        context.block_forward != nullptr ? *context.block_forward : BlockForwardOptions{};
    return ParseBlockForwardRequest(request, *context.models, context.sessions,
                                    options.prefill_chunk_tokens);
  }
  // Session calls, decode steps and prefill chunks alike, share one queue per
  // model version and layers: a batch takes every waiting step first, then the
  // next prefill's chunk (FirstInBatch, MaxBatchRows), so a step waits for at most
  // one batch of steps and a chunk, and the batch streams its weights on every
  // worker (each row still takes the kernels of its own sequence's length,
  // kernels/block/block.h, so its result is that of its call alone). Calls without
  // a session queue apart by length, as decode steps and longer sequences take
  // different kernels: a long one runs beside the short ones instead of inside
  // their batch.
  static std::string BatchKey(const Job& job);
  static int64_t Rows(const Job& job) { return job.PartRows(); }
  // With chunked prefill, a batch holding a session's prefill holds at most a
  // chunk's tokens of prefills (the token budget beside its decode steps, which
  // it takes whatever their number), so that the decode steps wait at most about
  // one chunk's time, however many prefills queue together.
  static int64_t MaxBatchRows(const Job& job);
  // A session's decode step (a few tokens): taken before the prefills waiting.
  static bool FirstInBatch(const Job& job) {
    return job.has_sessions() && job.tokens <= kernels::kShortSequenceTokens;
  }
  // Not until its last chunk has run.
  static bool Finished(const Job& job) { return job.done == job.tokens; }
  static int64_t Elements(const Job& job) { return job.hidden.info.elements; }
  static absl::string_view ModelLabel(const Job& job) { return job.model->name; }
  static kernels::ValueStats InputStats(const Job& job, const OutputHealth&) {
    return ValueStatsOf(job.hidden);
  }
  static ElementType OutputType(const Job& job) { return job.output_type; }
  static std::vector<OutputHealth> RunBatch(WorkerContext& worker,
                                            const std::vector<Job*>& jobs,
                                            const std::vector<Response*>& responses,
                                            const BatchAbandoned& abandoned);

  // Always queued, even when small: in the queue requests share their linear
  // layers.
  static bool MayRunInline(const Job&) { return false; }
  // Only session steps of weights beyond the cache (BlockForwardGathers).
  static bool Gathers(const Job& job);
  // The attention entropy of the job's model; for a session call, the tokens it
  // added, and for a decode step (one token) the call's whole time.
  static void RecordComputed(const Job& job, const OutputHealth& health,
                             absl::Duration call_elapsed, Metrics& metrics);
  // Releases the session lease: the step counts if computed; a failed step closes
  // the session (SessionLease::ReleaseFailed); a prefill stopped between chunks
  // takes its chunks out of the cache first, so the session is as it was before
  // the call.
  static void End(Job& job, JobOutcome outcome);
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_OPS_BLOCK_FORWARD_H_
