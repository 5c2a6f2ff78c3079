// The standard error details of a failed call, read from the absl::Status a Client
// method returns. The server sends them as google.rpc.Status in the
// grpc-status-details-bin trailer; FromGrpcStatus (client.h), besides code and
// message, keeps each detail as a payload of the absl::Status under its type URL
// ("type.googleapis.com/google.rpc.BadRequest"), as absl does with google.rpc
// details, and these functions decode them:
//   INVALID_ARGUMENT: FieldViolations, the request fields at fault;
//   RESOURCE_EXHAUSTED from a full queue or a KV cache that busy sessions fill:
//     RetryDelay, when to try again.
// The message stays what it was. Stateless; thread-safe.
#ifndef LAYERSERVE_CLIENT_CPP_ERROR_DETAILS_H_
#define LAYERSERVE_CLIENT_CPP_ERROR_DETAILS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace layerserve::client {

// One google.rpc.BadRequest.FieldViolation.
struct FieldViolation {
  std::string field;  // The request field path: "hidden_states.shape", "positions[2]".
  std::string description;  // The server's message.
};

// The field violations of `status`'s google.rpc.BadRequest; empty without one.
std::vector<FieldViolation> FieldViolations(const absl::Status& status);

// The retry_delay of `status`'s google.rpc.RetryInfo; nullopt without one.
std::optional<absl::Duration> RetryDelay(const absl::Status& status);

}  // namespace layerserve::client

#endif  // LAYERSERVE_CLIENT_CPP_ERROR_DETAILS_H_
