#include "server/rpc/exception_status.h"

#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/retry_delay.h"
#include "server/rpc/grpc_status.h"

namespace layerserve {

grpc::Status StatusOfCurrentException(absl::string_view method) {
  grpc::Status status;
  try {
    throw;
  } catch (const std::bad_alloc&) {
    status = ToGrpcStatus(
        WithRetryDelay(absl::ResourceExhaustedError(absl::StrCat(
                           method,
                           ": the server ran out of memory computing this request; send "
                           "smaller requests (fewer rows or tokens), or retry later")),
                       kOutOfMemoryRetryDelay));
  } catch (const std::exception& e) {
    status = grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrCat(method, " failed on the server: ", e.what()));
  } catch (...) {
    status = grpc::Status(
        grpc::StatusCode::INTERNAL,
        absl::StrCat(method, " failed on the server: an exception of unknown type"));
  }
  std::fprintf(stderr, "layerserve: %s\n", status.error_message().c_str());
  return status;
}

}  // namespace layerserve
