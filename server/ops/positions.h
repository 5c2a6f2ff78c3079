// Token positions of the PositionalEncode methods and BlockForward, resolved from
// the request's `position_offset` / `positions` fields as the proto documents:
//   positions[b * T + t]  if `positions` has B*T entries,
//   positions[t]          if it has T entries (shared by every batch row),
//   position_offset + t   if it is empty.
// Stateless; safe from any thread.
#ifndef LAYERSERVE_SERVER_OPS_POSITIONS_H_
#define LAYERSERVE_SERVER_OPS_POSITIONS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/repeated_field.h"

namespace layerserve {

// Returns B*T positions, row-major [B, T]. INVALID_ARGUMENT naming
// `<prefix>positions` or `<prefix>position_offset` for a count that is neither T
// nor B*T, a negative position or offset, or an offset + T that overflows.
// `prefix` is the path of the message holding the fields, e.g. "rope.".
absl::StatusOr<std::vector<int64_t>> ResolvePositions(
    int64_t position_offset, const google::protobuf::RepeatedField<int64_t>& positions,
    int64_t batch, int64_t tokens, absl::string_view prefix);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_OPS_POSITIONS_H_
