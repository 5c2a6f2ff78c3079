// The one place where absl::Status becomes grpc::Status (the edge of the server).
#ifndef LAYERSERVE_SERVER_RPC_GRPC_STATUS_H_
#define LAYERSERVE_SERVER_RPC_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace layerserve {

// Same code, same message. absl and gRPC share the canonical code numbering.
inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_GRPC_STATUS_H_
