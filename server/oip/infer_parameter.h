// The values of the Open Inference Protocol's request parameters
// (inference.InferParameter: a bool, int64, uint64, double or string) read as the
// type a field needs, as clients send them: a number may come as an int64, a uint64,
// a double or a string ("1e-6"), a bool as a bool, 0/1 or "true"/"false". Every error
// is INVALID_ARGUMENT and starts with the parameter's name ("epsilon: ..."), so that
// the standard error details name it. Stateless.
#ifndef LAYERSERVE_SERVER_OIP_INFER_PARAMETER_H_
#define LAYERSERVE_SERVER_OIP_INFER_PARAMETER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_service.pb.h"

namespace layerserve::oip {

absl::StatusOr<bool> ParameterAsBool(const inference::InferParameter& value,
                                     absl::string_view name);
// Integral values only: a double must be a whole number, a string must parse whole.
absl::StatusOr<int64_t> ParameterAsInt64(const inference::InferParameter& value,
                                         absl::string_view name);
absl::StatusOr<double> ParameterAsDouble(const inference::InferParameter& value,
                                         absl::string_view name);
// string_param as it is; an int64 or uint64 in decimal (Triton's sequence ids may
// be either); anything else is an error.
absl::StatusOr<std::string> ParameterAsString(const inference::InferParameter& value,
                                              absl::string_view name);

// "int64 7", "string \"abc\"", "bool true": a value as error messages show it.
std::string DescribeParameter(const inference::InferParameter& value);

}  // namespace layerserve::oip

#endif  // LAYERSERVE_SERVER_OIP_INFER_PARAMETER_H_
