// StatusIs(code, message_matcher) for absl::Status and absl::StatusOr<T>, which
// Abseil 20220623 does not ship. Tests assert the exact code, never just "not OK".
#ifndef LAYERSERVE_TESTS_TESTING_STATUS_MATCHERS_H_
#define LAYERSERVE_TESTS_TESTING_STATUS_MATCHERS_H_

#include <ostream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace layerserve::testing {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

MATCHER_P2(StatusIs, code, message_matcher,
           ::testing::PrintToString(code) + " with message " +
               ::testing::DescribeMatcher<std::string>(message_matcher)) {
  const absl::Status& status = GetStatus(arg);
  *result_listener << "status is " << status;
  return status.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, std::string(status.message()),
                                       result_listener);
}

}  // namespace layerserve::testing

#endif  // LAYERSERVE_TESTS_TESTING_STATUS_MATCHERS_H_
