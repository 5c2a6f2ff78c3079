// The BlockForward RPC apart from transport: validation against the served model
// (every error names its field) and the forward pass through the requested blocks.
// Stateless; safe from any thread.
#ifndef LAYERSERVE_SERVER_OPS_BLOCK_FORWARD_H_
#define LAYERSERVE_SERVER_OPS_BLOCK_FORWARD_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/block.h"
#include "layerserve/v1/layerserve.pb.h"
#include "server/models/model_repository.h"
#include "server/ops/tensor_codec.h"
#include "server/sessions/session_store.h"

namespace layerserve {

struct BlockForwardJob {
  const Model* model = nullptr;
  int64_t layer_start = 0;
  int64_t num_layers = 1;
  DecodedTensor hidden;            // [B, T, D] or [T, D], float32
  int64_t batch = 1, tokens = 1;   // B, T
  std::vector<int64_t> positions;  // [B * T]
  std::vector<int64_t> lengths;    // [B]: real tokens of each sequence
  bool causal = true;
  bool want_attention_stats = false;
  ElementType output_type = ElementType::kFloat32;
  // A session call (B = 1): the lease on its session, held until the call is
  // answered. Empty without a session.
  SessionLease session;
};

// A model and a valid range of its blocks.
struct LayerRange {
  const Model* model = nullptr;
  int64_t start = 0;
  int64_t count = 1;
};

// NOT_FOUND unknown model, FAILED_PRECONDITION model that failed to load,
// INVALID_ARGUMENT negative numbers, OUT_OF_RANGE layers past the model.
// num_layers 0 means 1.
absl::StatusOr<LayerRange> ResolveLayerRange(const ModelRepository& models,
                                             absl::string_view model, int64_t layer_start,
                                             int64_t num_layers);

// Positions are rounded to float32 before the RoPE angle (as Hugging Face does), so
// past 2^24 two positions would rotate alike: those are rejected.
inline constexpr int64_t kMaxPosition = int64_t{1} << 24;

// NOT_FOUND unknown model, FAILED_PRECONDITION model that failed to load,
// OUT_OF_RANGE layers past the model, INVALID_ARGUMENT anything else malformed.
// With a session_id: the errors of SessionStore::Acquire, and FAILED_PRECONDITION
// when `sessions` is null.
absl::StatusOr<BlockForwardJob> ParseBlockForwardRequest(
    const v1::BlockForwardRequest& request, const ModelRepository& models,
    SessionStore* sessions = nullptr);

// Runs the blocks for `jobs` in one pass and fills responses[i] for jobs[i]. The
// jobs must share model, layer range and `causal` (the batcher keys on them). The
// linear layers run once on the tokens of all jobs; attention runs per sequence;
// each job's result is bit-identical to running it alone. Returns each job's
// numeric health.
std::vector<OutputHealth> RunBlockForwardBatch(
    kernels::BlockKernels& kernels, const std::vector<const BlockForwardJob*>& jobs,
    const std::vector<v1::BlockForwardResponse*>& responses);

// One job alone.
OutputHealth RunBlockForward(kernels::BlockKernels& kernels, const BlockForwardJob& job,
                             v1::BlockForwardResponse* response);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_OPS_BLOCK_FORWARD_H_
