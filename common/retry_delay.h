// How long a client should wait before sending a refused request again, carried
// inside an absl::Status (as a payload) from where the refusal is decided (the
// batcher's queue, the session store) to the edge of the server, which sends it as
// google.rpc.RetryInfo (server/rpc/grpc_status.h). A plain payload rather than the
// proto message: the layers that refuse know no protobuf. Stateless; thread-safe.
#ifndef LAYERSERVE_COMMON_RETRY_DELAY_H_
#define LAYERSERVE_COMMON_RETRY_DELAY_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/time/time.h"

namespace layerserve {

// The payload's type URL; its value is absl::FormatDuration text ("100ms").
inline constexpr char kRetryDelayPayload[] = "layerserve.v1/retry-delay";

// `status` saying: the same request may succeed after `delay`.
inline absl::Status WithRetryDelay(absl::Status status, absl::Duration delay) {
  status.SetPayload(kRetryDelayPayload, absl::Cord(absl::FormatDuration(delay)));
  return status;
}

// The delay WithRetryDelay put in `status`, if any.
inline std::optional<absl::Duration> RetryDelayOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kRetryDelayPayload);  // absl::optional
  absl::Duration delay;
  if (!payload || !absl::ParseDuration(std::string(*payload), &delay)) {
    return std::nullopt;
  }
  return delay;
}

}  // namespace layerserve

#endif  // LAYERSERVE_COMMON_RETRY_DELAY_H_
