#include "server/rpc/grpc_status.h"

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/retry_delay.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

namespace layerserve {
namespace {

// A field path as the parse errors write it: names joined by '.', each name
// optionally indexed ("rope.scaling.factor", "t5_bias.table.shape[0]").
bool IsFieldPath(absl::string_view path) {
  if (path.empty()) return false;
  for (absl::string_view name : absl::StrSplit(path, '.')) {
    size_t i = 0;
    if (name.empty() || !(absl::ascii_isalpha(name[0]) || name[0] == '_')) return false;
    while (i < name.size() && (absl::ascii_isalnum(name[i]) || name[i] == '_')) ++i;
    while (i < name.size()) {  // [digits] ...
      if (name[i] != '[') return false;
      const size_t start = ++i;
      while (i < name.size() && absl::ascii_isdigit(name[i])) ++i;
      if (i == start || i == name.size() || name[i] != ']') return false;
      ++i;
    }
  }
  return true;
}

}  // namespace

std::vector<std::string> FieldPathsOfMessage(absl::string_view message) {
  const size_t colon = message.find(": ");
  if (colon != absl::string_view::npos) {
    std::vector<std::string> paths =
        absl::StrSplit(message.substr(0, colon), absl::ByString(", "));
    bool all = true;
    for (const std::string& path : paths) all = all && IsFieldPath(path);
    if (all) return paths;
  }
  return {""};
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbering.
  const auto code = static_cast<grpc::StatusCode>(status.code());
  std::string message(status.message());
  google::rpc::Status details;
  if (status.code() == absl::StatusCode::kInvalidArgument) {
    google::rpc::BadRequest bad_request;
    for (std::string& path : FieldPathsOfMessage(message)) {
      google::rpc::BadRequest::FieldViolation* violation =
          bad_request.add_field_violations();
      violation->set_field(std::move(path));
      violation->set_description(message);
    }
    details.add_details()->PackFrom(bad_request);
  }
  if (const std::optional<absl::Duration> delay = RetryDelayOf(status)) {
    google::rpc::RetryInfo retry_info;
    absl::Duration nanos;
    const int64_t seconds = absl::IDivDuration(*delay, absl::Seconds(1), &nanos);
    retry_info.mutable_retry_delay()->set_seconds(seconds);
    retry_info.mutable_retry_delay()->set_nanos(
        static_cast<int32_t>(absl::ToInt64Nanoseconds(nanos)));
    details.add_details()->PackFrom(retry_info);
  }
  if (details.details_size() == 0) return grpc::Status(code, std::move(message));
  details.set_code(static_cast<int>(code));
  details.set_message(message);
  return grpc::Status(code, message, details.SerializeAsString());
}

}  // namespace layerserve
