// Command-line flags of layerserve-cli and layerserve-bench: "--name VALUE",
// "--name=VALUE" or a bare "--name" for booleans, parsed per command against a list
// of the flags it takes (absl flags are process-global and would let every command
// accept every other command's flags), and the value parsers both tools share.
// Pure functions; safe to call from any thread.
#ifndef LAYERSERVE_TOOLS_CLI_FLAGS_H_
#define LAYERSERVE_TOOLS_CLI_FLAGS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "google/protobuf/generated_enum_reflection.h"

namespace layerserve::client {

struct FlagSpec {
  absl::string_view name;  // Without the leading "--".
  bool takes_value;
};

// Parsed flags: name -> value ("true" for a flag without a value).
using FlagValues = std::map<std::string, std::string, std::less<>>;

// Consumes flags from args[*pos], stopping at the first argument that is not a flag.
// INVALID_ARGUMENT for a flag not in `specs`, one given twice, a value missing or
// given to a flag that takes none.
absl::StatusOr<FlagValues> ParseFlags(const std::vector<std::string>& args, size_t* pos,
                                      absl::Span<const FlagSpec> specs);

std::string FlagOr(const FlagValues& flags, absl::string_view name,
                   absl::string_view fallback);

// Typed values of flag `name`, `fallback` when it is absent. INVALID_ARGUMENT names
// the flag and the bad value.
absl::StatusOr<int64_t> Int64Flag(const FlagValues& flags, absl::string_view name,
                                  int64_t fallback);
absl::StatusOr<double> DoubleFlag(const FlagValues& flags, absl::string_view name,
                                  double fallback);
// "true"/"false" (also "1"/"0", "yes"/"no"); a bare --name is true.
absl::StatusOr<bool> BoolFlag(const FlagValues& flags, absl::string_view name,
                              bool fallback);
// An absl duration: "10s", "500ms", "1m30s".
absl::StatusOr<absl::Duration> DurationFlag(const FlagValues& flags,
                                            absl::string_view name,
                                            absl::Duration fallback);

// "1,8,64" -> {1, 8, 64}; an empty list is an error.
absl::StatusOr<std::vector<int64_t>> ParseInt64List(absl::string_view flag,
                                                    absl::string_view value);
absl::StatusOr<std::vector<double>> ParseDoubleList(absl::string_view flag,
                                                    absl::string_view value);

// A proto enum value by name, case-insensitive, '-' for '_': "gelu-tanh" is
// GELU_TANH. The zero value (the UNSPECIFIED of most enums) only if `allow_zero`.
// The error lists the accepted names.
absl::Status EnumFromName(const google::protobuf::EnumDescriptor* descriptor,
                          absl::string_view flag, absl::string_view value,
                          bool allow_zero, int* number);

template <typename E>
absl::StatusOr<E> EnumFlag(absl::string_view flag, absl::string_view value,
                           bool allow_zero = false) {
  int number = 0;
  absl::Status status = EnumFromName(google::protobuf::GetEnumDescriptor<E>(), flag,
                                     value, allow_zero, &number);
  if (!status.ok()) return status;
  return static_cast<E>(number);
}

// An enum value's name as a flag value: GELU_TANH -> "gelu-tanh".
std::string FlagNameOfEnum(absl::string_view enum_name);

}  // namespace layerserve::client

#endif  // LAYERSERVE_TOOLS_CLI_FLAGS_H_
