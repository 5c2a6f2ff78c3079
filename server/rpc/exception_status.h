// The exception boundary of the server: what an RPC answers when computing it threw
// (oneDNN's dnnl::error, std::bad_alloc, anything), so that an exception on a
// worker or a gRPC thread fails the calls it concerns instead of ending the
// process, and every client's calls with it. Used by server/rpc/call.h and
// server/rpc/dispatch.h. Thread-safe.
#ifndef LAYERSERVE_SERVER_RPC_EXCEPTION_STATUS_H_
#define LAYERSERVE_SERVER_RPC_EXCEPTION_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace layerserve {

// How long RetryInfo asks a client to wait after an out-of-memory failure: about
// as long as the calls that held the memory take to finish.
inline constexpr absl::Duration kOutOfMemoryRetryDelay = absl::Seconds(1);

// The status of the exception being handled, naming the RPC `method`:
// RESOURCE_EXHAUSTED for std::bad_alloc (the server ran out of memory; smaller
// requests may fit, and the same one may once others finish: it carries
// google.rpc.RetryInfo of kOutOfMemoryRetryDelay), INTERNAL with what() for any other
// std::exception (dnnl::error is one), INTERNAL for anything else. Logs it to stderr: the
// metrics count the code, not the cause. Call only inside a catch block.
grpc::Status StatusOfCurrentException(absl::string_view method);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_EXCEPTION_STATUS_H_
