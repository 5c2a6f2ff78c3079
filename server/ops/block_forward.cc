#include "server/ops/block_forward.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/common/cpu_cache.h"
#include "kernels/rope/rope.h"
#include "server/metrics/metrics.h"
#include "server/ops/positions.h"
#include "server/ops/worker_context.h"

namespace layerserve {

absl::StatusOr<LayerRange> ResolveLayerRange(const ModelRepository& models,
                                             absl::string_view model, int64_t layer_start,
                                             int64_t num_layers) {
  LayerRange range;
  ASSIGN_OR_RETURN(range.model, models.Find(model));
  const int64_t layers = range.model->config.num_layers;
  if (layer_start < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer_start: ", layer_start, " must be >= 0"));
  }
  if (num_layers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_layers: ", num_layers, " must be >= 0"));
  }
  range.start = layer_start;
  range.count = num_layers == 0 ? 1 : num_layers;
  if (range.start >= layers) {
    return absl::OutOfRangeError(
        absl::StrCat("layer_start: ", range.start, " is past the last layer of model \"",
                     range.model->name, "\" (", layers, " layers)"));
  }
  if (range.start + range.count > layers) {
    return absl::OutOfRangeError(absl::StrCat(
        "num_layers: layers ", range.start, "..", range.start + range.count - 1,
        " run past the last layer of model \"", range.model->name, "\" (", layers,
        " layers)"));
  }
  const Model& m = *range.model;
  if (range.start < m.span_start || range.start + range.count > m.span_end) {
    return absl::OutOfRangeError(
        absl::StrCat("layer_start, num_layers: layers ", range.start, "..",
                     range.start + range.count - 1, " of model \"", m.name,
                     "\" are outside this server's span, layers ", m.span_start, "..",
                     m.span_end - 1, " (--layers=", m.span_start, ":", m.span_end, ")"));
  }
  return range;
}

namespace {

// sequence_lengths for hidden_states of B sequences of T tokens: B entries in
// [1, T], or all T when empty.
absl::StatusOr<std::vector<int64_t>> SequenceLengths(
    const v1::BlockForwardRequest& request, int64_t batch, int64_t tokens) {
  if (request.sequence_lengths().empty()) return std::vector<int64_t>(batch, tokens);
  if (request.sequence_lengths_size() != batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence_lengths: ", request.sequence_lengths_size(),
                     " entries; expected B = ", batch));
  }
  std::vector<int64_t> lengths;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t length = request.sequence_lengths(b);
    if (length < 1 || length > tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence_lengths[", b, "]: ", length, " must be in [1, T = ", tokens, "]"));
    }
    lengths.push_back(length);
  }
  return lengths;
}

// The largest position of sequence b, which dynamic NTK scaling depends on: of its
// real tokens for a session (so a session's row of a call on many gets the angles
// of a call of its own), of the whole call without sessions (as it always was).
int64_t MaxPositionOf(const BlockForwardJob& job, int64_t b) {
  auto begin = job.positions.begin(), end = job.positions.end();
  if (job.has_sessions()) {
    begin += b * job.tokens;
    end = begin + job.lengths[b];
  }
  return *std::max_element(begin, end);
}

// Takes the model and layers from the call's leased sessions: the request may
// repeat them (or leave them empty/0) but not contradict them, and with many
// sessions they must all be on the same model version and layers (a batch runs
// one set of weights).
absl::Status TakeRangeOfSessions(const v1::BlockForwardRequest& request,
                                 BlockForwardJob& job) {
  const Session& session = *job.sessions.front().get();
  const bool many = request.session_ids_size() > 0;
  for (size_t b = 1; b < job.sessions.size(); ++b) {
    const Session& other = *job.sessions[b].get();
    if (other.model != session.model || other.layer_start != session.layer_start ||
        other.num_layers != session.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "session_ids[", b, "]: ", DescribeSession(other.id), " runs model \"",
          other.model->name, "\" (version ", other.model->version, ") layers ",
          other.layer_start, "..", other.layer_start + other.num_layers - 1,
          ", session_ids[0]'s model \"", session.model->name, "\" (version ",
          session.model->version, ") layers ", session.layer_start, "..",
          session.layer_start + session.num_layers - 1,
          "; the sessions of one call must share model and layers"));
    }
  }
  const std::string named =
      many ? absl::StrCat("session_ids[0]'s ", DescribeSession(session.id))
           : DescribeSession(session.id);
  if (!request.model().empty() && request.model() != session.model->name) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: \"", request.model(), "\" differs from ", named,
                     "'s model \"", session.model->name, "\""));
  }
  if ((request.layer_start() != 0 && request.layer_start() != session.layer_start) ||
      (request.num_layers() != 0 && request.num_layers() != session.num_layers)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer_start, num_layers: ", request.layer_start(), ", ", request.num_layers(),
        " differ from ", named, "'s layers ", session.layer_start, "..",
        session.layer_start + session.num_layers - 1, " (leave them 0 or repeat them)"));
  }
  job.model = session.model;
  job.layer_start = session.layer_start;
  job.num_layers = session.num_layers;
  return absl::OkStatus();
}

// Leases the request's session (session_id) or sessions (session_ids, all or
// none) for the tokens each adds.
absl::Status LeaseSessions(const v1::BlockForwardRequest& request, SessionStore* sessions,
                           BlockForwardJob& job) {
  const bool many = request.session_ids_size() > 0;
  const char* field = many ? "session_ids" : "session_id";
  if (many && !request.session_id().empty()) {
    return absl::InvalidArgumentError(
        "session_ids: give session_id (one session) or session_ids (one per sequence), "
        "not both");
  }
  if (sessions == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": this server does not keep sessions"));
  }
  ASSIGN_OR_RETURN(const TensorInfo info,
                   ValidateTensor(request.hidden_states(), "hidden_states", {2, 3}));
  const int64_t batch = info.shape.size() == 3 ? info.shape[0] : 1;
  const int64_t tokens = info.shape[info.shape.size() - 2];
  std::vector<SessionRequest> wanted;
  if (!many) {
    if (batch != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hidden_states.shape: ", ShapeToString(info.shape), " holds ", batch,
          " sequences; a session_id call takes one ([T, D] or [1, T, D]); give "
          "session_ids, one per sequence, for many"));
    }
    wanted.push_back({request.session_id(), tokens, ""});
  } else {
    if (request.session_ids_size() != batch) {
      return absl::InvalidArgumentError(
          absl::StrCat("session_ids: ", request.session_ids_size(),
                       " sessions for hidden_states.shape ", ShapeToString(info.shape),
                       " of ", batch, " sequences; give one session per sequence"));
    }
    if (request.position_offset() != 0 || !request.positions().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          request.positions().empty() ? "position_offset" : "positions",
          ": leave it empty with session_ids; each session's positions continue from "
          "its own length"));
    }
    ASSIGN_OR_RETURN(const std::vector<int64_t> lengths,
                     SequenceLengths(request, batch, tokens));
    absl::flat_hash_map<absl::string_view, int> row_of;
    for (int b = 0; b < request.session_ids_size(); ++b) {
      const std::string& id = request.session_ids(b);
      const std::string row = absl::StrCat("session_ids[", b, "]");
      if (id.empty()) return absl::InvalidArgumentError(absl::StrCat(row, ": empty"));
      auto [seen, fresh] = row_of.emplace(id, b);
      if (!fresh) {
        return absl::InvalidArgumentError(
            absl::StrCat(row, ": ", DescribeSession(id), " repeats session_ids[",
                         seen->second, "]; a session takes one sequence of a call"));
      }
      wanted.push_back({id, lengths[b], row});
    }
  }
  ASSIGN_OR_RETURN(job.sessions, sessions->AcquireAll(wanted));
  job.many_sessions = many;
  return TakeRangeOfSessions(request, job);
}

}  // namespace

absl::StatusOr<BlockForwardJob> ParseBlockForwardRequest(
    const v1::BlockForwardRequest& request, const ModelRepository& models,
    SessionStore* sessions, int64_t prefill_chunk_tokens) {
  BlockForwardJob job;
  if (!request.has_hidden_states()) {
    return absl::InvalidArgumentError("hidden_states: required");
  }
  if (request.session_id().empty() && request.session_ids().empty()) {
    ASSIGN_OR_RETURN(const LayerRange range,
                     ResolveLayerRange(models, request.model(), request.layer_start(),
                                       request.num_layers()));
    job.model = range.model;
    job.layer_start = range.start;
    job.num_layers = range.count;
  } else {
    RETURN_IF_ERROR(LeaseSessions(request, sessions, job));
  }
  const ModelConfig& config = job.model->config;
  ASSIGN_OR_RETURN(job.hidden,
                   DecodeTensor(request.hidden_states(), "hidden_states", {2, 3}));
  const std::vector<int64_t>& shape = job.hidden.info.shape;
  if (shape.back() != config.hidden_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("hidden_states.shape: last dimension ", shape.back(), " of ",
                     ShapeToString(shape), " must equal model \"", job.model->name,
                     "\"'s hidden_size ", config.hidden_size));
  }
  job.batch = shape.size() == 3 ? shape[0] : 1;
  job.tokens = shape[shape.size() - 2];
  ASSIGN_OR_RETURN(job.lengths, SequenceLengths(request, job.batch, job.tokens));
  if (!request.session_id().empty() && job.lengths[0] != job.tokens) {
    return absl::InvalidArgumentError(
        "sequence_lengths: a session_id call has no padding (leave it empty)");
  }
  for (const SessionLease& session : job.sessions) {
    job.cache_lengths.push_back(session.get()->cache.length());
  }
  if (request.session_ids().empty()) {
    // A session continues from its cached length unless positions are given.
    const int64_t offset = job.has_sessions() && request.position_offset() == 0
                               ? job.cache_lengths[0]
                               : request.position_offset();
    ASSIGN_OR_RETURN(job.positions, ResolvePositions(offset, request.positions(),
                                                     job.batch, job.tokens, ""));
  } else {
    // Each session's row continues from its own length (padded tokens too, never
    // computed).
    for (int64_t b = 0; b < job.batch; ++b) {
      for (int64_t t = 0; t < job.tokens; ++t) {
        job.positions.push_back(job.cache_lengths[b] + t);
      }
    }
  }
  int64_t max_position = 0;
  for (int64_t b = 0; b < job.batch; ++b) {
    max_position = std::max(max_position, MaxPositionOf(job, b));
  }
  if (config.has_rope && max_position >= kMaxPosition) {
    return absl::InvalidArgumentError(
        absl::StrCat(request.positions().empty() ? "position_offset" : "positions",
                     ": position ", max_position, " is past ", kMaxPosition,
                     " (2^24), beyond which float32 positions stop being exact"));
  }
  if (config.sliding_window > 0 && max_position >= config.sliding_window) {
    return absl::InvalidArgumentError(absl::StrCat(
        request.positions().empty() ? "position_offset" : "positions", ": position ",
        max_position, " reaches model \"", job.model->name, "\"'s sliding_window ",
        config.sliding_window, ", which this server does not implement yet"));
  }
  job.causal = request.has_causal() ? request.causal() : true;
  job.want_attention_stats = request.want_attention_stats();
  ASSIGN_OR_RETURN(
      job.output_type,
      ResolveOutputType(request.output_dtype(), job.hidden.info.dtype, "output_dtype"));
  // Only session calls run in chunks: a chunk attends over the earlier ones through
  // the session's cache, which a call without a session does not have.
  if (job.has_sessions()) job.chunk_tokens = prefill_chunk_tokens;
  return job;
}

namespace {

// Fills `response` for a job whose last part has run: `out` holds its output
// [B, T, D], `job.entropy` its sums.
OutputHealth FinishBlockForward(BlockForwardJob& job, float* out,
                                v1::BlockForwardResponse* response) {
  const kernels::BlockConfig& config = job.model->block;
  const int64_t d = config.hidden_size, heads = config.num_heads;
  for (const SessionLease& session : job.sessions) {
    const int64_t length = session.get()->cache.length();
    if (job.many_sessions) {
      response->add_session_lengths(length);
    } else {
      response->set_session_length(length);
    }
  }
  // Padded rows come back as zeros, as the proto promises.
  for (int64_t b = 0; b < job.batch; ++b) {
    std::fill(out + (b * job.tokens + job.lengths[b]) * d, out + (b + 1) * job.tokens * d,
              0.0f);
  }
  OutputHealth health;
  health.saturated =
      EncodeTensor(job.hidden.info.shape, out, job.batch * job.tokens * d,
                   job.output_type, response->mutable_hidden_states(), &health.stats);
  int64_t real_tokens = 0;
  for (int64_t length : job.lengths) real_tokens += length;
  double entropy_total = 0;
  for (int64_t l = 0; l < job.num_layers; ++l) {
    v1::AttentionStats* stats = nullptr;
    if (job.want_attention_stats) {
      stats = response->add_attention_stats();
      stats->set_layer(static_cast<int32_t>(job.layer_start + l));
    }
    for (int64_t h = 0; h < heads; ++h) {
      const double mean = job.entropy[l * heads + h] / real_tokens;
      entropy_total += mean;
      if (stats != nullptr) stats->add_head_entropy_nats(static_cast<float>(mean));
    }
  }
  health.attention_entropy_nats =
      entropy_total / static_cast<double>(heads * job.num_layers);
  return health;
}

}  // namespace

std::vector<OutputHealth> RunBlockForwardBatch(
    kernels::BlockKernels& kernels, const std::vector<BlockForwardJob*>& jobs,
    const std::vector<v1::BlockForwardResponse*>& responses,
    const BatchAbandoned& abandoned) {
  const BlockForwardJob& first = *jobs.front();
  const Model& model = *first.model;
  const kernels::BlockConfig& config = model.block;
  const int64_t d = config.hidden_size, rotary_dim = config.rotary_dim;
  const int64_t heads = config.num_heads;

  // The sequences of all jobs' next parts, one after another. A call without
  // sessions brings its sequences whole, padding included; a session's sequence
  // brings only its real tokens of the part, [done, done + PartRealTokens(b)),
  // and none once they are all computed.
  struct Piece {
    size_t job;
    int64_t sequence;  // b within the job
    int64_t from;      // Its first row in the job's hidden states [B * T, D].
    int64_t row;       // Its first row in the batch.
    int64_t tokens;
  };
  std::vector<Piece> pieces;
  std::vector<int64_t> job_row(jobs.size());
  kernels::BlockBatch batch;
  batch.causal = first.causal;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const BlockForwardJob& job = *jobs[j];
    job_row[j] = batch.rows;
    for (int64_t b = 0; b < job.batch; ++b) {
      const int64_t tokens = job.PartRealTokens(b);
      if (tokens == 0) continue;
      pieces.push_back({j, b, b * job.tokens + job.done, batch.rows, tokens});
      batch.caches.push_back(job.has_sessions() ? &job.sessions[b].get()->cache
                                                : nullptr);
      batch.starts.push_back(batch.rows);
      batch.tokens.push_back(tokens);
      batch.lengths.push_back(job.has_sessions() ? tokens : job.lengths[b]);
      batch.rows += tokens;
    }
  }
  std::vector<float> x(batch.rows * d);
  for (const Piece& piece : pieces) {
    const float* in = jobs[piece.job]->hidden.values.data() + piece.from * d;
    std::copy(in, in + piece.tokens * d, x.begin() + piece.row * d);
  }
  std::vector<float> cos, sin;
  if (config.has_rope) {
    cos.resize(batch.rows * rotary_dim);
    sin.resize(batch.rows * rotary_dim);
    for (const Piece& piece : pieces) {
      // Dynamic NTK scales by the sequence's longest position (MaxPositionOf), so
      // its angles never depend on its batch mates, nor a chunk's on where the
      // call was cut.
      const BlockForwardJob& job = *jobs[piece.job];
      const kernels::RopeFrequencies frequencies = kernels::ComputeRopeFrequencies(
          config.rope_theta, rotary_dim, config.rope_scaling,
          MaxPositionOf(job, piece.sequence) + 1);
      kernels::ComputeRopeTables(frequencies, kernels::RopeStyle::kHalf,
                                 job.positions.data() + piece.from, piece.tokens,
                                 cos.data() + piece.row * rotary_dim,
                                 sin.data() + piece.row * rotary_dim);
    }
    batch.cos = cos.data();
    batch.sin = sin.data();
  }

  // Entropy is nearly free (the softmax pass sums it), so it is always taken: the
  // metrics export it for every request.
  for (BlockForwardJob* job : jobs) job->entropy.resize(job->num_layers * heads);
  std::vector<double> entropy(pieces.size() * heads);
  for (int64_t l = 0; l < first.num_layers; ++l) {
    // A layer of a long prefill takes up to hundreds of milliseconds: a call
    // cancelled or expired meanwhile frees the worker after the layer it is in.
    if (l > 0 && abandoned && abandoned()) return std::vector<OutputHealth>(jobs.size());
    std::fill(entropy.begin(), entropy.end(), 0.0);
    batch.cache_layer = l;
    kernels::BlockForward(config, model.layer_weights(first.layer_start + l), batch,
                          kernels, x.data(), entropy.data());
    for (size_t p = 0; p < pieces.size(); ++p) {
      BlockForwardJob& job = *jobs[pieces[p].job];
      for (int64_t h = 0; h < heads; ++h) {
        job.entropy[l * heads + h] += entropy[p * heads + h];
      }
    }
  }

  for (const Piece& piece : pieces) {
    BlockForwardJob& job = *jobs[piece.job];
    if (!job.has_sessions()) continue;
    job.sessions[piece.sequence].get()->cache.Commit(piece.tokens);
    // A session call's output waits in the job: its rows come in parts.
    job.output.resize(job.batch * job.tokens * d);
    const float* out = x.data() + piece.row * d;
    std::copy(out, out + piece.tokens * d, job.output.begin() + piece.from * d);
  }
  std::vector<OutputHealth> health(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    BlockForwardJob& job = *jobs[j];
    job.done += job.PartTokens();
    // A session call is done once its longest sequence is: the rest is padding.
    if (job.has_sessions() &&
        job.done >= *std::max_element(job.lengths.begin(), job.lengths.end())) {
      job.done = job.tokens;
    }
    if (job.done < job.tokens) continue;
    // Without sessions a job runs whole, its rows in order from job_row[j]: the
    // batch's rows are its output.
    float* out = job.has_sessions() ? job.output.data() : x.data() + job_row[j] * d;
    health[j] = FinishBlockForward(job, out, responses[j]);
  }
  return health;
}

OutputHealth RunBlockForward(kernels::BlockKernels& kernels, BlockForwardJob& job,
                             v1::BlockForwardResponse* response) {
  while (true) {
    const OutputHealth health = RunBlockForwardBatch(kernels, {&job}, {response}).front();
    if (job.done == job.tokens) return health;
  }
}

std::string BlockForwardOp::BatchKey(const Job& job) {
  // The version too: calls on a model's old and new weights run apart, and only
  // the same name and version mean the same weights.
  return absl::StrCat("BlockForward/", job.model->name, "/v", job.model->version, "/",
                      job.layer_start, "/", job.num_layers,
                      job.causal ? "/causal" : "/bidirectional",
                      job.has_sessions()                            ? "/sessions"
                      : job.tokens <= kernels::kShortSequenceTokens ? "/steps"
                                                                    : "/sequences");
}

std::vector<OutputHealth> BlockForwardOp::RunBatch(
    WorkerContext& worker, const std::vector<Job*>& jobs,
    const std::vector<Response*>& responses, const BatchAbandoned& abandoned) {
  return RunBlockForwardBatch(worker.block, jobs, responses, abandoned);
}

int64_t BlockForwardOp::MaxBatchRows(const Job& job) {
  if (job.chunk_tokens > 0 && job.tokens > kernels::kShortSequenceTokens) {
    return job.chunk_tokens;
  }
  return std::numeric_limits<int64_t>::max();
}

bool BlockForwardOp::Gathers(const Job& job) {
  if (!job.has_sessions()) return false;
  int64_t bytes = 0;
  for (int64_t l = job.layer_start; l < job.layer_start + job.num_layers; ++l) {
    bytes += job.model->layer_weights(l).bytes();
  }
  return BlockForwardGathers(/*session_step=*/true, bytes,
                             kernels::LastLevelCacheBytes());
}

void BlockForwardOp::RecordComputed(const Job& job, const OutputHealth& health,
                                    absl::Duration call_elapsed, Metrics& metrics) {
  metrics.AttentionEntropy(job.model->name, health.attention_entropy_nats);
  for (size_t b = 0; b < job.sessions.size(); ++b) {
    metrics.SessionTokens(job.lengths[b]);
    // Each session of a call on many made its step in the call's time.
    if (job.lengths[b] == 1) metrics.DecodeStep(kMethod, job.model->name, call_elapsed);
  }
}

void BlockForwardOp::End(Job& job, JobOutcome outcome) {
  for (size_t b = 0; b < job.sessions.size(); ++b) {
    SessionLease& session = job.sessions[b];
    if (outcome == JobOutcome::kFailed) {
      session.ReleaseFailed();
      continue;
    }
    // Stopped between chunks or layers: the chunks that ran are committed to the
    // cache, the layers of the one that stopped appended uncommitted. Both go, with
    // the blocks they took, so the lease returns what it reserved and the session
    // is as before the call (its next call can send the prefill again).
    if (outcome == JobOutcome::kStopped) {
      session.get()->cache.Truncate(job.cache_lengths[b]);
    }
    session.Release(/*computed=*/outcome == JobOutcome::kComputed);
  }
}

}  // namespace layerserve
