// The models a server serves: one per sub-directory of --model-repository (Hugging
// Face layout), or the built-in `demo` model. A model whose checkpoint fails to load
// is listed as FAILED with its error; the others serve. Immutable after
// construction: safe to read from any thread.
#ifndef LAYERSERVE_SERVER_MODELS_MODEL_REPOSITORY_H_
#define LAYERSERVE_SERVER_MODELS_MODEL_REPOSITORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/block.h"
#include "kernels/linear.h"
#include "layerserve/v1/layerserve.pb.h"
#include "server/models/layer_span.h"
#include "server/models/model_config.h"

namespace layerserve {

struct Model {
  std::string name;
  ModelConfig config;
  kernels::BlockConfig block;
  kernels::WeightType weight_type = kernels::WeightType::kFloat32;
  // The layers served, span_start .. span_end - 1 of config.num_layers: all of
  // them unless --layers names fewer. blocks holds exactly those.
  int64_t span_start = 0;
  int64_t span_end = 0;
  // kInt8 weights' inputs per scale as asked for (--weight-group-size; 0: one scale
  // per output). 0 for the other types.
  int64_t weight_group_size = 0;
  std::vector<kernels::BlockWeights> blocks;  // Empty when loading failed.
  std::string error;                          // Why loading failed; empty if ready.

  bool ready() const { return error.empty(); }
  // Block `layer` of the model, span_start <= layer < span_end.
  const kernels::BlockWeights& layer_weights(int64_t layer) const {
    return blocks[layer - span_start];
  }
};

// How ModelInfo.weight_dtype names `type` (FLOAT32, BFLOAT16, INT8).
v1::DataType WeightDtype(kernels::WeightType type);

class ModelRepository {
 public:
  // Loads every sub-directory of `dir` that holds a config.json. Fails only if
  // `dir` cannot be listed; each model's own failure is kept in that model.
  // `span`: the layers of each model to load and serve; a model with fewer
  // layers than span.end is FAILED.
  static absl::StatusOr<std::unique_ptr<ModelRepository>> Load(
      const std::string& dir, kernels::WeightFormat format, LayerSpan span = {});
  // The built-in `demo` model: Llama-style, hidden 512, 8 heads, 2 KV heads,
  // d_ff 1408, 4 layers, weights from a fixed seed (the same weights per layer
  // whatever `span` holds).
  static std::unique_ptr<ModelRepository> Demo(kernels::WeightFormat format,
                                               LayerSpan span = {});
  // One model from a checkpoint directory (used by Load and by tests).
  static std::unique_ptr<Model> LoadModel(const std::string& name, const std::string& dir,
                                          kernels::WeightFormat format,
                                          LayerSpan span = {});

  // NOT_FOUND for an unknown name; FAILED_PRECONDITION for a model that failed to
  // load. An empty name is the default model.
  absl::StatusOr<const Model*> Find(absl::string_view name) const;
  const std::vector<std::unique_ptr<Model>>& models() const { return models_; }
  // The model used for an empty name: the first ready one by name. Null if none.
  const Model* default_model() const { return default_; }

  void Describe(const Model& model, v1::ModelInfo* info) const;

 private:
  explicit ModelRepository(std::vector<std::unique_ptr<Model>> models);

  std::vector<std::unique_ptr<Model>> models_;
  const Model* default_ = nullptr;
};

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_MODELS_MODEL_REPOSITORY_H_
