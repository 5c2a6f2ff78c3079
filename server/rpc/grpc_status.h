// The one place where absl::Status becomes grpc::Status (the edge of the server),
// with the standard error details (google.rpc.Status in the grpc-status-details-bin
// trailer) that clients read without parsing messages:
//   INVALID_ARGUMENT: google.rpc.BadRequest, one field violation per field the
//     message names (see FieldPathsOfMessage), each with the whole message;
//   a status carrying a retry delay (common/retry_delay.h; RESOURCE_EXHAUSTED from
//     a full queue, a KV cache that busy sessions fill, or the server out of
//     memory): google.rpc.RetryInfo.
//     None where no retry can succeed (a request over --max-request-elements, a
//     response over --max-message-bytes, a step bigger than the whole KV cache).
// Code and message are unchanged.
#ifndef LAYERSERVE_SERVER_RPC_GRPC_STATUS_H_
#define LAYERSERVE_SERVER_RPC_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace layerserve {

grpc::Status ToGrpcStatus(const absl::Status& status);

// The request field paths an INVALID_ARGUMENT message names. Every parse error
// starts with them, then ": " (docs/ARCHITECTURE.md: "every error names its
// field"): "hidden_states.shape: ..." names hidden_states.shape, "positions[3]:
// ..." positions[3], "layer_start, num_layers: ..." both. A message that does
// not start so names the request as a whole: {""}. Never empty.
std::vector<std::string> FieldPathsOfMessage(absl::string_view message);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_GRPC_STATUS_H_
