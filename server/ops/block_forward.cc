#include "server/ops/block_forward.h"

#include <algorithm>
#include <limits>

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

// Leases the request's session and takes the model and layers from it: the
// request may repeat them (or leave them empty/0) but not contradict them.
absl::Status LeaseSession(const v1::BlockForwardRequest& request, SessionStore* sessions,
                          BlockForwardJob& job) {
  if (sessions == nullptr) {
    return absl::FailedPreconditionError(
        "session_id: this server does not keep sessions");
  }
  ASSIGN_OR_RETURN(const TensorInfo info,
                   ValidateTensor(request.hidden_states(), "hidden_states", {2, 3}));
  if (info.shape.size() == 3 && info.shape[0] != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hidden_states.shape: ", ShapeToString(info.shape), " holds ", info.shape[0],
        " sequences; a session call takes one ([T, D] or "
        "[1, T, D])"));
  }
  const int64_t tokens = info.shape[info.shape.size() - 2];
  ASSIGN_OR_RETURN(job.session, sessions->Acquire(request.session_id(), tokens));
  const Session& session = *job.session.get();
  if (!request.model().empty() && request.model() != session.model->name) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model: \"", request.model(), "\" differs from ", DescribeSession(session.id),
        "'s model \"", session.model->name, "\""));
  }
  if ((request.layer_start() != 0 && request.layer_start() != session.layer_start) ||
      (request.num_layers() != 0 && request.num_layers() != session.num_layers)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer_start, num_layers: ", request.layer_start(), ", ", request.num_layers(),
        " differ from ", DescribeSession(session.id), "'s layers ", session.layer_start,
        "..", session.layer_start + session.num_layers - 1,
        " (leave them 0 or repeat them)"));
  }
  job.model = session.model;
  job.layer_start = session.layer_start;
  job.num_layers = session.num_layers;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BlockForwardJob> ParseBlockForwardRequest(
    const v1::BlockForwardRequest& request, const ModelRepository& models,
    SessionStore* sessions, int64_t prefill_chunk_tokens) {
  BlockForwardJob job;
  if (!request.has_hidden_states()) {
    return absl::InvalidArgumentError("hidden_states: required");
  }
  if (request.session_id().empty()) {
    ASSIGN_OR_RETURN(const LayerRange range,
                     ResolveLayerRange(models, request.model(), request.layer_start(),
                                       request.num_layers()));
    job.model = range.model;
    job.layer_start = range.start;
    job.num_layers = range.count;
  } else {
    RETURN_IF_ERROR(LeaseSession(request, sessions, job));
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
  if (request.sequence_lengths().empty()) {
    job.lengths.assign(job.batch, job.tokens);
  } else {
    if (request.sequence_lengths_size() != job.batch) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence_lengths: ", request.sequence_lengths_size(),
                       " entries; expected B = ", job.batch));
    }
    for (int64_t b = 0; b < job.batch; ++b) {
      const int64_t length = request.sequence_lengths(b);
      if (length < 1 || length > job.tokens) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence_lengths[", b, "]: ", length,
                         " must be in [1, T = ", job.tokens, "]"));
      }
      job.lengths.push_back(length);
    }
    if (job.session && job.lengths[0] != job.tokens) {
      return absl::InvalidArgumentError(
          "sequence_lengths: a session call has no padding (leave it empty)");
    }
  }
  // A session continues from its cached length unless positions are given.
  const int64_t offset = job.session && request.position_offset() == 0
                             ? job.session.get()->cache.length()
                             : request.position_offset();
  ASSIGN_OR_RETURN(job.positions, ResolvePositions(offset, request.positions(), job.batch,
                                                   job.tokens, ""));
  const int64_t max_position =
      *std::max_element(job.positions.begin(), job.positions.end());
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
  if (job.session) {
    job.chunk_tokens = prefill_chunk_tokens;
    job.cache_length = job.session.get()->cache.length();
  }
  return job;
}

namespace {

// Fills `response` for a job whose last part has run: `out` holds its output
// [B, T, D], `job.entropy` its sums.
OutputHealth FinishBlockForward(BlockForwardJob& job, float* out,
                                v1::BlockForwardResponse* response) {
  const kernels::BlockConfig& config = job.model->block;
  const int64_t d = config.hidden_size, heads = config.num_heads;
  if (Session* session = job.session.get()) {
    response->set_session_length(session->cache.length());
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

  // The sequences of all jobs, one after another: each job's next part (a job in
  // chunks has one sequence).
  kernels::BlockBatch batch;
  batch.causal = first.causal;
  std::vector<int64_t> job_row(jobs.size()), job_sequence(jobs.size()), part(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    const BlockForwardJob& job = *jobs[j];
    part[j] = job.PartTokens();
    job_row[j] = batch.rows;
    job_sequence[j] = static_cast<int64_t>(batch.starts.size());
    Session* session = job.session.get();
    for (int64_t b = 0; b < job.batch; ++b) {
      batch.caches.push_back(session == nullptr ? nullptr : &session->cache);
      batch.starts.push_back(batch.rows + b * part[j]);
      batch.tokens.push_back(part[j]);
      // Only whole calls have padding.
      batch.lengths.push_back(job.InChunks() ? part[j] : job.lengths[b]);
    }
    batch.rows += job.batch * part[j];
  }
  // A part's rows of a job: [done, done + part) of its one sequence, or all of them.
  std::vector<float> x(batch.rows * d);
  for (size_t j = 0; j < jobs.size(); ++j) {
    const float* in = jobs[j]->hidden.values.data() + jobs[j]->done * d;
    std::copy(in, in + jobs[j]->batch * part[j] * d, x.begin() + job_row[j] * d);
  }
  std::vector<float> cos, sin;
  if (config.has_rope) {
    cos.resize(batch.rows * rotary_dim);
    sin.resize(batch.rows * rotary_dim);
    for (size_t j = 0; j < jobs.size(); ++j) {
      // Per job: dynamic NTK scales by the job's own longest sequence (max position
      // + 1), so a job's angles never depend on its batch mates, nor a chunk's on
      // where the call was cut.
      const std::vector<int64_t>& positions = jobs[j]->positions;
      const int64_t seq_len = *std::max_element(positions.begin(), positions.end()) + 1;
      const kernels::RopeFrequencies frequencies = kernels::ComputeRopeFrequencies(
          config.rope_theta, rotary_dim, config.rope_scaling, seq_len);
      kernels::ComputeRopeTables(
          frequencies, kernels::RopeStyle::kHalf, positions.data() + jobs[j]->done,
          jobs[j]->batch * part[j], cos.data() + job_row[j] * rotary_dim,
          sin.data() + job_row[j] * rotary_dim);
    }
    batch.cos = cos.data();
    batch.sin = sin.data();
  }

  // Entropy is nearly free (the softmax pass sums it), so it is always taken: the
  // metrics export it for every request.
  for (BlockForwardJob* job : jobs) job->entropy.resize(job->num_layers * heads);
  std::vector<double> entropy(batch.starts.size() * heads);
  for (int64_t l = 0; l < first.num_layers; ++l) {
    // A layer of a long prefill takes up to hundreds of milliseconds: a call
    // cancelled or expired meanwhile frees the worker after the layer it is in.
    if (l > 0 && abandoned && abandoned()) return std::vector<OutputHealth>(jobs.size());
    std::fill(entropy.begin(), entropy.end(), 0.0);
    batch.cache_layer = l;
    kernels::BlockForward(config, model.layer_weights(first.layer_start + l), batch,
                          kernels, x.data(), entropy.data());
    for (size_t j = 0; j < jobs.size(); ++j) {
      BlockForwardJob& job = *jobs[j];
      for (int64_t h = 0; h < heads; ++h) {
        double sum = 0;
        for (int64_t b = 0; b < job.batch; ++b) {
          sum += entropy[(job_sequence[j] + b) * heads + h];
        }
        job.entropy[l * heads + h] += sum;
      }
    }
  }

  std::vector<OutputHealth> health(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    BlockForwardJob& job = *jobs[j];
    if (Session* session = job.session.get()) session->cache.Commit(part[j]);
    float* out = x.data() + job_row[j] * d;
    if (job.InChunks()) {
      job.output.resize(job.tokens * d);
      std::copy(out, out + part[j] * d, job.output.begin() + job.done * d);
      out = job.output.data();
    }
    job.done += part[j];
    if (job.done == job.tokens) health[j] = FinishBlockForward(job, out, responses[j]);
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
  return absl::StrCat(
      "BlockForward/", job.model->name, "/v", job.model->version, "/", job.layer_start,
      "/", job.num_layers, job.causal ? "/causal" : "/bidirectional",
      job.tokens <= kernels::kShortSequenceTokens ? "/steps" : "/sequences");
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
  if (!job.session) return false;
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
  if (job.session) {
    metrics.SessionTokens(job.tokens);
    if (job.tokens == 1) metrics.DecodeStep(kMethod, job.model->name, call_elapsed);
  }
}

void BlockForwardOp::End(Job& job, JobOutcome outcome) {
  if (outcome == JobOutcome::kFailed) {
    job.session.ReleaseFailed();
    return;
  }
  // Stopped between chunks or layers: the chunks that ran are committed to the
  // cache, the layers of the one that stopped appended uncommitted. Both go, with
  // the blocks they took, so the lease returns what it reserved and the session is
  // as before the call (its next call can send the prefill again).
  if (outcome == JobOutcome::kStopped && job.session) {
    job.session.get()->cache.Truncate(job.cache_length);
  }
  job.session.Release(/*computed=*/outcome == JobOutcome::kComputed);
}

}  // namespace layerserve
