// activate: an element-wise or gated activation of a .npy file.
#include <string>

#include "absl/strings/str_cat.h"
#include "tools/cli/commands.h"
#include "tools/cli/common.h"

namespace layerserve::client {

int RunActivate(Client& client, const FlagValues& flags) {
  for (const char* required : {"activation", "input", "out"}) {
    if (flags.count(required) == 0) {
      return UsageError(absl::StrCat("activate needs --", required));
    }
  }
  v1::ActivateRequest request;
  absl::StatusOr<v1::Activation> activation =
      EnumFlag<v1::Activation>("activation", flags.at("activation"));
  if (!activation.ok()) return UsageError(activation.status().message());
  request.set_activation(*activation);
  absl::StatusOr<TensorFormats> formats = ParseTensorFormats(flags);
  if (!formats.ok()) return UsageError(formats.status().message());

  v1::DataType wire = formats->wire;
  if (!LoadTensor(flags.at("input"), &wire, request.mutable_input())) {
    return kExitUsageOrFile;
  }
  if (flags.count("gate") != 0 &&
      !LoadTensor(flags.at("gate"), &wire, request.mutable_gate())) {
    return kExitUsageOrFile;
  }
  absl::StatusOr<v1::ActivateResponse> response = client.Activate(request);
  if (!response.ok()) return RpcError(response.status());
  return SaveOutputs(flags, formats->out, {{"output", &response->output(), "out"}});
}

}  // namespace layerserve::client
