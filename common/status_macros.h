// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status, which Abseil 20220623 lacks
// (Triton's core defines the same pair). Kept to these two.
#ifndef LAYERSERVE_COMMON_STATUS_MACROS_H_
#define LAYERSERVE_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define LS_STATUS_CONCAT_INNER_(a, b) a##b
#define LS_STATUS_CONCAT_(a, b) LS_STATUS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                \
  do {                                       \
    ::absl::Status ls_status_ = (expr);      \
    if (!ls_status_.ok()) return ls_status_; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(LS_STATUS_CONCAT_(ls_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                           \
  if (!statusor.ok()) return statusor.status();     \
  lhs = std::move(statusor).value()

#endif  // LAYERSERVE_COMMON_STATUS_MACROS_H_
