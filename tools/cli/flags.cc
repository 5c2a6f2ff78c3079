#include "tools/cli/flags.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/descriptor.h"

namespace layerserve::client {

absl::StatusOr<FlagValues> ParseFlags(const std::vector<std::string>& args, size_t* pos,
                                      absl::Span<const FlagSpec> specs) {
  FlagValues values;
  for (; *pos < args.size() && absl::StartsWith(args[*pos], "--"); ++*pos) {
    absl::string_view arg = absl::string_view(args[*pos]).substr(2);
    absl::string_view name = arg.substr(0, arg.find('='));
    auto spec = std::find_if(specs.begin(), specs.end(),
                             [&](const FlagSpec& s) { return s.name == name; });
    if (spec == specs.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (values.count(name) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " is given twice"));
    }
    std::string value = "true";
    if (name.size() < arg.size()) {
      if (!spec->takes_value) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      }
      value = std::string(arg.substr(name.size() + 1));
    } else if (spec->takes_value) {
      if (++*pos == args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      value = args[*pos];
    }
    values.emplace(std::string(name), std::move(value));
  }
  return values;
}

std::string FlagOr(const FlagValues& flags, absl::string_view name,
                   absl::string_view fallback) {
  auto it = flags.find(name);
  return it == flags.end() ? std::string(fallback) : it->second;
}

absl::StatusOr<int64_t> Int64Flag(const FlagValues& flags, absl::string_view name,
                                  int64_t fallback) {
  auto it = flags.find(name);
  if (it == flags.end()) return fallback;
  int64_t value;
  if (!absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " must be an integer, not '", it->second, "'"));
  }
  return value;
}

absl::StatusOr<double> DoubleFlag(const FlagValues& flags, absl::string_view name,
                                  double fallback) {
  auto it = flags.find(name);
  if (it == flags.end()) return fallback;
  double value;
  if (!absl::SimpleAtod(it->second, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " must be a number, not '", it->second, "'"));
  }
  return value;
}

absl::StatusOr<bool> BoolFlag(const FlagValues& flags, absl::string_view name,
                              bool fallback) {
  auto it = flags.find(name);
  if (it == flags.end()) return fallback;
  bool value;
  if (!absl::SimpleAtob(it->second, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " must be true or false, not '", it->second, "'"));
  }
  return value;
}

absl::StatusOr<absl::Duration> DurationFlag(const FlagValues& flags,
                                            absl::string_view name,
                                            absl::Duration fallback) {
  auto it = flags.find(name);
  if (it == flags.end()) return fallback;
  absl::Duration value;
  if (!absl::ParseDuration(it->second, &value) || value < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", name, " must be a duration such as 10s or 500ms, not '", it->second, "'"));
  }
  return value;
}

namespace {

template <typename T, typename Parse>
absl::StatusOr<std::vector<T>> ParseList(absl::string_view flag, absl::string_view value,
                                         const char* what, Parse parse) {
  std::vector<T> list;
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    T parsed;
    if (!parse(absl::StripAsciiWhitespace(item), &parsed)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, " must be a comma list of ", what, ", not '", value, "'"));
    }
    list.push_back(parsed);
  }
  return list;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ParseInt64List(absl::string_view flag,
                                                    absl::string_view value) {
  return ParseList<int64_t>(flag, value, "integers", [](absl::string_view s, int64_t* v) {
    return absl::SimpleAtoi(s, v);
  });
}

absl::StatusOr<std::vector<double>> ParseDoubleList(absl::string_view flag,
                                                    absl::string_view value) {
  return ParseList<double>(flag, value, "numbers", [](absl::string_view s, double* v) {
    return absl::SimpleAtod(s, v);
  });
}

std::string FlagNameOfEnum(absl::string_view enum_name) {
  return absl::StrReplaceAll(absl::AsciiStrToLower(enum_name), {{"_", "-"}});
}

absl::Status EnumFromName(const google::protobuf::EnumDescriptor* descriptor,
                          absl::string_view flag, absl::string_view value,
                          bool allow_zero, int* number) {
  const std::string name =
      absl::StrReplaceAll(absl::AsciiStrToUpper(value), {{"-", "_"}});
  const google::protobuf::EnumValueDescriptor* found = descriptor->FindValueByName(name);
  if (found != nullptr && (allow_zero || found->number() != 0)) {
    *number = found->number();
    return absl::OkStatus();
  }
  std::vector<std::string> names;
  for (int i = 0; i < descriptor->value_count(); ++i) {
    const google::protobuf::EnumValueDescriptor* v = descriptor->value(i);
    if (allow_zero || v->number() != 0) names.push_back(FlagNameOfEnum(v->name()));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--", flag, " must be one of ", absl::StrJoin(names, ", "), ", not '", value, "'"));
}

}  // namespace layerserve::client
