// The blocks a replica serves (--layers=START:END): a half-open range of layer
// indices, so several replicas can each hold part of a model too large for one
// machine and a client chains them (docs/operations/deploy.md).
#ifndef LAYERSERVE_SERVER_MODELS_LAYER_SPAN_H_
#define LAYERSERVE_SERVER_MODELS_LAYER_SPAN_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace layerserve {

struct LayerSpan {
  int64_t start = 0;
  int64_t end = -1;  // -1: through the model's last layer.

  bool all() const { return start == 0 && end < 0; }
  // "3:6", or "" for all layers: how --layers would spell it.
  std::string ToString() const;
};

// Parses --layers: "" (every layer) or "START:END" with 0 <= START < END.
// INVALID_ARGUMENT naming the flag and the text otherwise.
absl::StatusOr<LayerSpan> ParseLayerSpan(absl::string_view text);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_MODELS_LAYER_SPAN_H_
