#include "server/ops/positions.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace layerserve {

absl::StatusOr<std::vector<int64_t>> ResolvePositions(
    int64_t position_offset, const google::protobuf::RepeatedField<int64_t>& positions,
    int64_t batch, int64_t tokens, absl::string_view prefix) {
  std::vector<int64_t> resolved(batch * tokens);
  if (positions.empty()) {
    if (position_offset < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "position_offset: ", position_offset, " must be >= 0"));
    }
    if (position_offset > std::numeric_limits<int64_t>::max() - tokens) {
      return absl::InvalidArgumentError(absl::StrCat(prefix,
                                                     "position_offset: ", position_offset,
                                                     " + ", tokens, " tokens overflows"));
    }
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t t = 0; t < tokens; ++t) resolved[b * tokens + t] = position_offset + t;
    }
    return resolved;
  }
  const int64_t count = positions.size();
  if (count != tokens && count != batch * tokens) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "positions: ", count,
                                                   " entries; expected T = ", tokens,
                                                   " or B*T = ", batch * tokens));
  }
  for (int64_t i = 0; i < count; ++i) {
    if (positions[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "positions[", i, "]: ", positions[i], " must be >= 0"));
    }
  }
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < tokens; ++t) {
      resolved[b * tokens + t] =
          count == tokens ? positions[t] : positions[b * tokens + t];
    }
  }
  return resolved;
}

}  // namespace layerserve
