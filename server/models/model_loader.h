// Builds a model's Transformer blocks from its checkpoint: every tensor the
// architecture needs is checked for name, shape and dtype against config.json,
// converted to float32, fused where the kernels want one matmul (q|k|v, gate|up)
// and prepacked for oneDNN. Stateless; thread-safe.
#ifndef LAYERSERVE_SERVER_MODELS_MODEL_LOADER_H_
#define LAYERSERVE_SERVER_MODELS_MODEL_LOADER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "kernels/block/block.h"
#include "kernels/linear/linear.h"
#include "server/models/checkpoint.h"
#include "server/models/model_config.h"

namespace layerserve {

kernels::BlockConfig ToBlockConfig(const ModelConfig& config);

// Blocks layer_start .. layer_end - 1 (0 <= layer_start < layer_end <=
// config.num_layers). Only those blocks' tensors are read, so the memory-mapped
// pages of the others are never touched. INVALID_ARGUMENT naming the tensor (and
// the file, where it is at fault) for a missing tensor, a wrong shape or a
// non-float dtype.
absl::StatusOr<std::vector<kernels::BlockWeights>> LoadBlocks(
    const ModelConfig& config, const Checkpoint& checkpoint, kernels::WeightFormat format,
    int64_t layer_start, int64_t layer_end);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_MODELS_MODEL_LOADER_H_
