#include "server/oip/infer_parameter.h"

#include <cmath>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace layerserve::oip {
namespace {

using inference::InferParameter;

absl::Status WrongType(const InferParameter& value, absl::string_view name,
                       absl::string_view wanted) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": parameter \"", name,
                                                 "\" must be ", wanted, ", got ",
                                                 DescribeParameter(value)));
}

}  // namespace

std::string DescribeParameter(const InferParameter& value) {
  switch (value.parameter_choice_case()) {
    case InferParameter::kBoolParam:
      return value.bool_param() ? "bool true" : "bool false";
    case InferParameter::kInt64Param:
      return absl::StrCat("int64 ", value.int64_param());
    case InferParameter::kUint64Param:
      return absl::StrCat("uint64 ", value.uint64_param());
    case InferParameter::kDoubleParam:
      return absl::StrCat("double ", value.double_param());
    case InferParameter::kStringParam:
      return absl::StrCat("string \"", value.string_param(), "\"");
    case InferParameter::PARAMETER_CHOICE_NOT_SET:
      break;
  }
  return "no value";
}

absl::StatusOr<bool> ParameterAsBool(const InferParameter& value,
                                     absl::string_view name) {
  switch (value.parameter_choice_case()) {
    case InferParameter::kBoolParam:
      return value.bool_param();
    case InferParameter::kInt64Param:
      if (value.int64_param() == 0 || value.int64_param() == 1) {
        return value.int64_param() == 1;
      }
      break;
    case InferParameter::kUint64Param:
      if (value.uint64_param() <= 1) return value.uint64_param() == 1;
      break;
    case InferParameter::kStringParam: {
      bool parsed = false;
      if (absl::SimpleAtob(value.string_param(), &parsed)) return parsed;
      break;
    }
    default:
      break;
  }
  return WrongType(value, name, "a bool (true or false)");
}

absl::StatusOr<int64_t> ParameterAsInt64(const InferParameter& value,
                                         absl::string_view name) {
  switch (value.parameter_choice_case()) {
    case InferParameter::kInt64Param:
      return value.int64_param();
    case InferParameter::kUint64Param:
      if (value.uint64_param() <=
          static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return static_cast<int64_t>(value.uint64_param());
      }
      break;
    case InferParameter::kDoubleParam: {
      const double d = value.double_param();
      // 2^63 itself does not fit; every double below it that is whole does.
      if (std::trunc(d) == d && std::abs(d) < 9.2233720368547758e18) {
        return static_cast<int64_t>(d);
      }
      break;
    }
    case InferParameter::kStringParam: {
      int64_t parsed = 0;
      if (absl::SimpleAtoi(value.string_param(), &parsed)) return parsed;
      break;
    }
    default:
      break;
  }
  return WrongType(value, name, "a whole number");
}

absl::StatusOr<double> ParameterAsDouble(const InferParameter& value,
                                         absl::string_view name) {
  switch (value.parameter_choice_case()) {
    case InferParameter::kDoubleParam:
      return value.double_param();
    case InferParameter::kInt64Param:
      return static_cast<double>(value.int64_param());
    case InferParameter::kUint64Param:
      return static_cast<double>(value.uint64_param());
    case InferParameter::kStringParam: {
      double parsed = 0;
      if (absl::SimpleAtod(value.string_param(), &parsed)) return parsed;
      break;
    }
    default:
      break;
  }
  return WrongType(value, name, "a number");
}

absl::StatusOr<std::string> ParameterAsString(const InferParameter& value,
                                              absl::string_view name) {
  switch (value.parameter_choice_case()) {
    case InferParameter::kStringParam:
      return value.string_param();
    case InferParameter::kInt64Param:
      return absl::StrCat(value.int64_param());
    case InferParameter::kUint64Param:
      return absl::StrCat(value.uint64_param());
    default:
      break;
  }
  return WrongType(value, name, "a string");
}

}  // namespace layerserve::oip
