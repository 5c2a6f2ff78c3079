#include "client/cpp/error_details.h"

#include "google/rpc/error_details.pb.h"

namespace layerserve::client {
namespace {

// The detail of type `Message` FromGrpcStatus kept in `status`, if any.
template <typename Message>
std::optional<Message> Detail(const absl::Status& status) {
  const auto payload =  // absl::optional
      status.GetPayload("type.googleapis.com/" + Message::descriptor()->full_name());
  Message message;
  if (!payload || !message.ParseFromString(std::string(*payload))) return std::nullopt;
  return message;
}

}  // namespace

std::vector<FieldViolation> FieldViolations(const absl::Status& status) {
  std::vector<FieldViolation> violations;
  if (auto bad_request = Detail<google::rpc::BadRequest>(status)) {
    for (const auto& violation : bad_request->field_violations()) {
      violations.push_back({violation.field(), violation.description()});
    }
  }
  return violations;
}

std::optional<absl::Duration> RetryDelay(const absl::Status& status) {
  auto retry_info = Detail<google::rpc::RetryInfo>(status);
  if (!retry_info || !retry_info->has_retry_delay()) return std::nullopt;
  return absl::Seconds(retry_info->retry_delay().seconds()) +
         absl::Nanoseconds(retry_info->retry_delay().nanos());
}

}  // namespace layerserve::client
