// open-session and close-session: KV-cache sessions for incremental decoding with
// block-forward --session.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "tools/cli/commands.h"
#include "tools/cli/common.h"

namespace layerserve::client {

int RunOpenSession(Client& client, const FlagValues& flags) {
  v1::OpenSessionRequest request;
  request.set_model(FlagOr(flags, "model", ""));
  absl::StatusOr<int64_t> layer_start = Int64Flag(flags, "layer-start", 0);
  if (!layer_start.ok()) return UsageError(layer_start.status().message());
  absl::StatusOr<int64_t> num_layers = Int64Flag(flags, "num-layers", 0);
  if (!num_layers.ok()) return UsageError(num_layers.status().message());
  absl::StatusOr<int64_t> max_length = Int64Flag(flags, "max-length", 0);
  if (!max_length.ok()) return UsageError(max_length.status().message());
  request.set_layer_start(static_cast<int32_t>(*layer_start));
  request.set_num_layers(static_cast<int32_t>(*num_layers));
  request.set_max_length(*max_length);

  absl::StatusOr<v1::OpenSessionResponse> response = client.OpenSession(request);
  if (!response.ok()) return RpcError(response.status());
  if (flags.count("json") != 0) {
    std::cout << ToJson(*response) << "\n";
  } else {
    // The id alone, so that a script can take it: S=$(layerserve-cli open-session).
    std::cout << response->session_id() << "\n";
  }
  return kExitOk;
}

int RunCloseSession(Client& client, const FlagValues& flags) {
  if (flags.count("session") == 0) return UsageError("close-session needs --session");
  if (absl::Status status = client.CloseSession(flags.at("session")); !status.ok()) {
    return RpcError(status);
  }
  return kExitOk;
}

}  // namespace layerserve::client
