// normalize: LayerNorm or RMSNorm of a .npy file, optionally fused with a residual.
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tools/cli/commands.h"
#include "tools/cli/common.h"

namespace layerserve::client {

int RunNormalize(Client& client, const FlagValues& flags) {
  for (const char* required : {"kind", "input", "out"}) {
    if (flags.count(required) == 0) {
      return UsageError(absl::StrCat("normalize needs --", required));
    }
  }
  if (flags.count("residual") != flags.count("residual-out")) {
    return UsageError("--residual and --residual-out go together");
  }
  v1::NormalizeRequest request;
  const std::string& kind = flags.at("kind");
  if (kind == "layer") {
    request.set_kind(v1::LAYER_NORM);
  } else if (kind == "rms") {
    request.set_kind(v1::RMS_NORM);
  } else {
    return UsageError(absl::StrCat("--kind must be layer or rms, not '", kind, "'"));
  }
  if (flags.count("eps") != 0) {
    float eps;
    if (!absl::SimpleAtof(flags.at("eps"), &eps)) {
      return UsageError(
          absl::StrCat("--eps must be a number, not '", flags.at("eps"), "'"));
    }
    request.set_epsilon(eps);
  }
  request.set_weight_offset(flags.count("weight-offset") != 0);
  absl::StatusOr<TensorFormats> formats = ParseTensorFormats(flags);
  if (!formats.ok()) return UsageError(formats.status().message());

  v1::DataType wire = formats->wire;
  if (!LoadTensor(flags.at("input"), &wire, request.mutable_input())) {
    return kExitUsageOrFile;
  }
  // Optional tensors: only touch the fields whose flag is given, so absent ones
  // stay unset.
  if (flags.count("weight") != 0 &&
      !LoadTensor(flags.at("weight"), &wire, request.mutable_weight())) {
    return kExitUsageOrFile;
  }
  if (flags.count("bias") != 0 &&
      !LoadTensor(flags.at("bias"), &wire, request.mutable_bias())) {
    return kExitUsageOrFile;
  }
  if (flags.count("residual") != 0 &&
      !LoadTensor(flags.at("residual"), &wire, request.mutable_residual())) {
    return kExitUsageOrFile;
  }

  absl::StatusOr<v1::NormalizeResponse> response = client.Normalize(request);
  if (!response.ok()) return RpcError(response.status());

  return SaveOutputs(flags, formats->out,
                     {{"output", &response->output(), "out"},
                      {"residual_out",
                       response->has_residual_out() ? &response->residual_out() : nullptr,
                       "residual-out"}});
}

}  // namespace layerserve::client
