// How a served model is described on the wire: v1.ModelInfo (GetModel, ListModels)
// and the v1 names of its weight type.
#ifndef LAYERSERVE_SERVER_MODELS_MODEL_INFO_PROTO_H_
#define LAYERSERVE_SERVER_MODELS_MODEL_INFO_PROTO_H_

#include <string>

#include "layerserve/v1/layerserve.pb.h"
#include "server/models/model_repository.h"

namespace layerserve {

// How ModelInfo.weight_dtype names `type` (FLOAT32, BFLOAT16, INT8).
v1::DataType WeightDtype(kernels::WeightType type);

// Fills `info` with `model`: its state and error, its dimensions (those its config
// gave, for a FAILED model whose config parsed), its span and weights. `is_default`:
// the repository serves it for an empty name. `reload_error`: why the last reload of
// its files failed while this version kept serving; empty if none did.
void DescribeModel(const Model& model, bool is_default, const std::string& reload_error,
                   v1::ModelInfo* info);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_MODELS_MODEL_INFO_PROTO_H_
