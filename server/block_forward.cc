#include "server/block_forward.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/rope.h"
#include "server/positions.h"
#include "server/status_macros.h"

namespace layerserve {

absl::StatusOr<BlockForwardJob> ParseBlockForwardRequest(
    const v1::BlockForwardRequest& request, const ModelRepository& models) {
  if (!request.session_id().empty()) {
    return absl::UnimplementedError(
        "session_id: KV-cache sessions are not served by this version yet; send the "
        "whole sequence without a session");
  }
  BlockForwardJob job;
  ASSIGN_OR_RETURN(job.model, models.Find(request.model()));
  const ModelConfig& config = job.model->config;
  const int64_t layers = config.num_layers;
  if (request.layer_start() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer_start: ", request.layer_start(), " must be >= 0"));
  }
  if (request.num_layers() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_layers: ", request.num_layers(), " must be >= 0"));
  }
  job.layer_start = request.layer_start();
  job.num_layers = request.num_layers() == 0 ? 1 : request.num_layers();
  if (job.layer_start >= layers) {
    return absl::OutOfRangeError(absl::StrCat("layer_start: ", job.layer_start,
                                              " is past the last layer of model \"",
                                              job.model->name, "\" (", layers, " layers)"));
  }
  if (job.layer_start + job.num_layers > layers) {
    return absl::OutOfRangeError(absl::StrCat(
        "num_layers: layers ", job.layer_start, "..", job.layer_start + job.num_layers - 1,
        " run past the last layer of model \"", job.model->name, "\" (", layers,
        " layers)"));
  }
  if (!request.has_hidden_states()) {
    return absl::InvalidArgumentError("hidden_states: required");
  }
  ASSIGN_OR_RETURN(job.hidden, DecodeTensor(request.hidden_states(), "hidden_states", {2, 3}));
  const std::vector<int64_t>& shape = job.hidden.info.shape;
  if (shape.back() != config.hidden_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hidden_states.shape: last dimension ", shape.back(), " of ", ShapeToString(shape),
        " must equal model \"", job.model->name, "\"'s hidden_size ", config.hidden_size));
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
            absl::StrCat("sequence_lengths[", b, "]: ", length, " must be in [1, T = ",
                         job.tokens, "]"));
      }
      job.lengths.push_back(length);
    }
  }
  ASSIGN_OR_RETURN(job.positions,
                   ResolvePositions(request.position_offset(), request.positions(),
                                    job.batch, job.tokens, ""));
  const int64_t max_position = *std::max_element(job.positions.begin(), job.positions.end());
  if (config.has_rope && max_position >= kMaxPosition) {
    return absl::InvalidArgumentError(absl::StrCat(
        request.positions().empty() ? "position_offset" : "positions", ": position ",
        max_position, " is past ", kMaxPosition,
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
  ASSIGN_OR_RETURN(job.output_type, ResolveOutputType(request.output_dtype(),
                                                      job.hidden.info.dtype,
                                                      "output_dtype"));
  return job;
}

int64_t RunBlockForward(kernels::BlockKernels& kernels, const BlockForwardJob& job,
                        v1::BlockForwardResponse* response) {
  const Model& model = *job.model;
  const kernels::BlockConfig& config = model.block;
  const int64_t rows = job.batch * job.tokens, d = config.hidden_size;
  std::vector<float> x = job.hidden.values;

  kernels::BlockBatch batch;
  batch.rows = rows;
  batch.causal = job.causal;
  for (int64_t b = 0; b < job.batch; ++b) {
    batch.starts.push_back(b * job.tokens);
    batch.tokens.push_back(job.tokens);
    batch.lengths.push_back(job.lengths[b]);
  }
  std::vector<float> cos, sin;
  if (config.has_rope) {
    // Dynamic NTK scales by the longest sequence of the call: max position + 1.
    const int64_t seq_len =
        *std::max_element(job.positions.begin(), job.positions.end()) + 1;
    const kernels::RopeFrequencies frequencies = kernels::ComputeRopeFrequencies(
        config.rope_theta, config.rotary_dim, config.rope_scaling, seq_len);
    cos.resize(rows * config.rotary_dim);
    sin.resize(rows * config.rotary_dim);
    kernels::ComputeRopeTables(frequencies, kernels::RopeStyle::kHalf, job.positions.data(),
                               rows, cos.data(), sin.data());
    batch.cos = cos.data();
    batch.sin = sin.data();
  }
  int64_t real_tokens = 0;
  for (int64_t length : job.lengths) real_tokens += length;
  std::vector<double> entropy(config.num_heads);
  for (int64_t layer = job.layer_start; layer < job.layer_start + job.num_layers; ++layer) {
    std::fill(entropy.begin(), entropy.end(), 0.0);
    kernels::BlockForward(config, model.blocks[layer], batch, kernels, x.data(),
                          job.want_attention_stats ? entropy.data() : nullptr);
    if (job.want_attention_stats) {
      v1::AttentionStats* stats = response->add_attention_stats();
      stats->set_layer(static_cast<int32_t>(layer));
      for (double sum : entropy) {
        stats->add_head_entropy_nats(static_cast<float>(sum / real_tokens));
      }
    }
  }
  // Padded rows come back as zeros, as the proto promises.
  for (int64_t b = 0; b < job.batch; ++b) {
    std::fill(x.begin() + (b * job.tokens + job.lengths[b]) * d,
              x.begin() + (b + 1) * job.tokens * d, 0.0f);
  }
  return EncodeTensor(job.hidden.info.shape, x.data(), rows * d, job.output_type,
                      response->mutable_hidden_states());
}

}  // namespace layerserve
