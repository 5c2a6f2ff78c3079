#include "server/rpc/usage.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/rpc/server_flags.h"

namespace layerserve {
namespace {

// "INT" for `--name=INT` in the help text; empty for a bool (a bare --name).
std::string FlagValueName(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<bool>()) return "";
  if (flag.IsOfType<int>() || flag.IsOfType<int64_t>()) return "INT";
  if (flag.IsOfType<absl::Duration>()) return "DURATION";
  if (flag.IsOfType<std::string>()) return "STRING";
  return "VALUE";
}

// `text` as lines of at most `width` columns, each indented by `indent`.
std::string Wrapped(absl::string_view text, int indent, size_t width) {
  std::string out;
  std::string line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) {
      absl::StrAppend(&out, std::string(indent, ' '), line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  if (!line.empty()) absl::StrAppend(&out, std::string(indent, ' '), line, "\n");
  return out;
}

}  // namespace

void SetUpUsage() {
  absl::SetProgramUsageMessage(
      "Serves Transformer layer computations over gRPC (layerserve.v1.LayerService, and "
      "the Open Inference Protocol's inference.GRPCInferenceService on the same port).");
  absl::FlagsUsageConfig config;
  config.contains_helpshort_flags = IsServerFlagFile;
  config.contains_help_flags = IsServerFlagFile;
  config.contains_helppackage_flags = IsServerFlagFile;
  config.version_string = [] {
    return std::string("layerserve " LAYERSERVE_VERSION "\n");
  };
  absl::SetFlagsUsageConfig(config);
}

bool AsksForHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") return false;
    if (arg == "--help" || arg == "-help" || arg == "-h") return true;
  }
  return false;
}

std::string Usage() {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (IsServerFlagFile(flag->Filename())) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  std::string out = absl::StrCat(
      "Usage: layerserve [--flag=VALUE ...]\n\n", absl::ProgramUsageMessage(),
      "\n\nFlags (\"--flag VALUE\" and --flag_name work too):\n");
  for (const absl::CommandLineFlag* flag : flags) {
    const std::string value_name = FlagValueName(*flag);
    std::string default_value = flag->DefaultValue();
    if (flag->IsOfType<std::string>())
      default_value = absl::StrCat("\"", default_value, "\"");
    absl::StrAppend(&out, "  --", absl::StrReplaceAll(flag->Name(), {{"_", "-"}}),
                    value_name.empty() ? "" : "=", value_name, "  (default ",
                    default_value, ")\n", Wrapped(flag->Help(), 6, 80));
  }
  absl::StrAppend(&out,
                  "  --help\n      Print this text and exit.\n"
                  "  --version\n      Print the version and exit.\n");
  return out;
}

}  // namespace layerserve
