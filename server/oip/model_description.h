// What the Open Inference Protocol tells about a model before it is called:
// ModelMetadata (versions, platform, each input and output with its datatype and
// shape, -1 for what varies) and ModelConfig (the part of Triton's configuration its
// clients and perf_analyzer read), derived from the model's OperationMapping and,
// for a model of the repository, its v1 ModelInfo. Stateless.
#ifndef LAYERSERVE_SERVER_OIP_MODEL_DESCRIPTION_H_
#define LAYERSERVE_SERVER_OIP_MODEL_DESCRIPTION_H_

#include <cstdint>
#include <string>

#include "inference/grpc_service.pb.h"
#include "inference/model_config.pb.h"
#include "layerserve/v1/layerserve.pb.h"
#include "server/oip/operation_mapping.h"

namespace layerserve::oip {

// The platform (and backend) every layerserve model reports.
inline constexpr char kPlatform[] = "layerserve";

struct ModelFacts {
  std::string name;
  std::string version;  // The version it serves now, in decimal.
  const OperationMapping* mapping = nullptr;
  // A repository model's description (ListModels'); null for the built-in
  // operations. Its fields become the configuration's parameters, and its
  // hidden_size the last dimension of its hidden_states.
  const v1::ModelInfo* info = nullptr;
  // Takes sequences (Triton's sequence extension): its configuration has
  // sequence_batching, idle sequences ending after `sequence_idle_us`. Else it has
  // dynamic_batching with `max_queue_delay_us`.
  bool sequences = false;
  int64_t sequence_idle_us = 0;
  int64_t max_queue_delay_us = 0;
  int instances = 1;  // Compute threads: one CPU instance group of this count.
};

void FillModelMetadata(const ModelFacts& model,
                       inference::ModelMetadataResponse* metadata);

// max_batch_size is 0: every input's dims include its batch dimension (B of
// BlockForward's [B, T, D]); the server batches requests itself.
void FillModelConfig(const ModelFacts& model, inference::ModelConfig* config);

}  // namespace layerserve::oip

#endif  // LAYERSERVE_SERVER_OIP_MODEL_DESCRIPTION_H_
