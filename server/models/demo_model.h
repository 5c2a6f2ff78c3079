// The built-in `demo` model, served when the server has no --model-repository:
// Llama-style, hidden 512, 8 heads, 2 KV heads, d_ff 1408, 4 layers, with weights
// from a fixed seed, so every build and platform serves the same numbers.
#ifndef LAYERSERVE_SERVER_MODELS_DEMO_MODEL_H_
#define LAYERSERVE_SERVER_MODELS_DEMO_MODEL_H_

#include <memory>

#include "server/models/layer_span.h"
#include "server/models/model_repository.h"

namespace layerserve {

// The demo model, its weights held as `format`, only `span`'s layers loaded (the
// same weights per layer whatever `span` holds). FAILED (Model::error) when the span
// ends past its last layer.
std::unique_ptr<Model> MakeDemoModel(kernels::WeightFormat format, LayerSpan span);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_MODELS_DEMO_MODEL_H_
