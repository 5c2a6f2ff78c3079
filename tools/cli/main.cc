// layerserve-cli: a command-line client of a layerserve server, built on
// layerserve::Client. Tensors go in and out as .npy files. Each command parses its
// own flags (cli_flags.h) and lives in its own file (cli_commands.h); the help text
// is cli_usage.cc.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cpp/client.h"
#include "tools/cli/commands.h"
#include "tools/cli/common.h"
#include "tools/cli/flags.h"
#include "tools/cli/security_flags.h"

namespace layerserve::client {
namespace {

// Flags every command takes, before or after its name: these and the security
// flags (--tls, --tls-ca, --tls-cert, --tls-key, --token-file).
constexpr FlagSpec kConnectionFlags[] = {
    {"target", true}, {"timeout-ms", true}, {"retries", true}};

const std::vector<FlagSpec>& GlobalFlags() {
  static const auto* flags = [] {
    auto* all = new std::vector<FlagSpec>(std::begin(kConnectionFlags),
                                          std::end(kConnectionFlags));
    all->insert(all->end(), std::begin(kSecurityFlags), std::end(kSecurityFlags));
    return all;
  }();
  return *flags;
}

// Flags of the tensor commands besides their own.
constexpr FlagSpec kTensorFlags[] = {
    {"wire-dtype", true}, {"out-dtype", true}, {"json", false}};

struct Command {
  absl::string_view name;
  std::vector<FlagSpec> flags;
  bool tensor;  // Takes kTensorFlags.
  int (*run)(Client&, const FlagValues&);
};

const std::vector<Command>& Commands() {
  static const auto* commands = new std::vector<Command>{
      {"health", {{"service", true}, {"json", false}}, false, &RunHealth},
      {"list-models", {{"json", false}}, false, &RunListModels},
      {"get-model", {{"model", true}, {"json", false}}, false, &RunGetModel},
      {"normalize",
       {{"kind", true},
        {"input", true},
        {"out", true},
        {"weight", true},
        {"bias", true},
        {"eps", true},
        {"weight-offset", false},
        {"residual", true},
        {"residual-out", true}},
       true,
       &RunNormalize},
      {"activate",
       {{"activation", true}, {"input", true}, {"gate", true}, {"out", true}},
       true,
       &RunActivate},
      {"positional-encode",
       {{"method", true},
        {"out", true},
        // sinusoidal, learned
        {"input", true},
        {"num-positions", true},
        {"dim", true},
        {"base", true},
        {"layout", true},
        {"table", true},
        {"position-offset", true},
        {"positions", true},
        // rope
        {"query", true},
        {"key", true},
        {"key-out", true},
        {"theta", true},
        {"rotary-dim", true},
        {"style", true},
        {"scaling", true},
        {"factor", true},
        {"original-max-position-embeddings", true},
        {"beta-fast", true},
        {"beta-slow", true},
        {"attention-factor", true},
        {"low-freq-factor", true},
        {"high-freq-factor", true},
        // alibi, t5-bias
        {"num-heads", true},
        {"query-length", true},
        {"key-length", true},
        {"query-offset", true},
        {"symmetric", false},
        {"scores", true},
        {"bidirectional", false},
        {"num-buckets", true},
        {"max-distance", true}},
       true,
       &RunPositionalEncode},
      {"block-forward",
       {{"input", true},
        {"out", true},
        {"model", true},
        {"layer-start", true},
        {"num-layers", true},
        {"position-offset", true},
        {"positions", true},
        {"sequence-lengths", true},
        {"causal", true},
        {"attention-stats", false},
        {"session", true},
        {"pipeline", true}},
       true,
       &RunBlockForward},
      {"open-session",
       {{"model", true},
        {"layer-start", true},
        {"num-layers", true},
        {"max-length", true},
        {"json", false}},
       false,
       &RunOpenSession},
      {"close-session", {{"session", true}}, false, &RunCloseSession},
  };
  return *commands;
}

int Main(const std::vector<std::string>& args) {
  if (std::find(args.begin(), args.end(), "--help") != args.end() ||
      std::find(args.begin(), args.end(), "-h") != args.end() ||
      (!args.empty() && args[0] == "help")) {
    std::cout << kCliUsage;
    return kExitOk;
  }
  if (std::find(args.begin(), args.end(), "--version") != args.end()) {
    std::cout << "layerserve-cli " LAYERSERVE_VERSION "\n";
    return kExitOk;
  }
  size_t pos = 0;
  absl::StatusOr<FlagValues> global = ParseFlags(args, &pos, GlobalFlags());
  if (!global.ok()) return UsageError(global.status().message());
  if (pos == args.size()) return UsageError("no command given");

  const std::string& name = args[pos++];
  const Command* command = nullptr;
  for (const Command& c : Commands()) {
    if (c.name == name) command = &c;
  }
  if (command == nullptr) return UsageError(absl::StrCat("unknown command '", name, "'"));
  std::vector<FlagSpec> specs = command->flags;
  if (command->tensor) {
    specs.insert(specs.end(), std::begin(kTensorFlags), std::end(kTensorFlags));
  }
  specs.insert(specs.end(), GlobalFlags().begin(), GlobalFlags().end());
  absl::StatusOr<FlagValues> flags = ParseFlags(args, &pos, specs);
  if (!flags.ok()) {
    return UsageError(absl::StrCat(name, ": ", flags.status().message()));
  }
  if (pos != args.size()) {
    return UsageError(absl::StrCat(name, ": unexpected argument '", args[pos], "'"));
  }
  // Global flags given after the command join those given before it.
  for (const FlagSpec& spec : GlobalFlags()) {
    auto it = flags->find(spec.name);
    if (it == flags->end()) continue;
    if (!global->emplace(it->first, it->second).second) {
      return UsageError(absl::StrCat("--", spec.name, " is given twice"));
    }
    flags->erase(it);
  }

  absl::StatusOr<ClientOptions> options =
      ClientOptionsFromFlags(*global, std::getenv(kTokenEnvironmentVariable));
  if (options.status().code() == absl::StatusCode::kInvalidArgument) {
    return UsageError(options.status().message());
  }
  if (!options.ok()) return FileError(options.status());
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(*std::move(options));
  if (!client.ok()) return UsageError(client.status().message());
  return command->run(**client, *flags);
}

}  // namespace
}  // namespace layerserve::client

int main(int argc, char** argv) {
  return layerserve::client::Main(std::vector<std::string>(argv + 1, argv + argc));
}
