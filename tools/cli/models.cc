// health, list-models and get-model: what the server serves.
#include <algorithm>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "tools/cli/commands.h"
#include "tools/cli/common.h"

namespace layerserve::client {

int RunHealth(Client& client, const FlagValues& flags) {
  using grpc::health::v1::HealthCheckResponse;
  absl::StatusOr<HealthCheckResponse::ServingStatus> status =
      client.Health(FlagOr(flags, "service", ""));
  if (!status.ok()) return RpcError(status.status());
  HealthCheckResponse response;
  response.set_status(*status);
  if (flags.count("json") != 0) {
    std::cout << ToJson(response) << "\n";
  } else {
    std::cout << HealthCheckResponse::ServingStatus_Name(*status) << "\n";
  }
  return *status == HealthCheckResponse::SERVING ? kExitOk : kExitNotServing;
}

int RunListModels(Client& client, const FlagValues& flags) {
  absl::StatusOr<v1::ListModelsResponse> response = client.ListModels();
  if (!response.ok()) return RpcError(response.status());
  if (flags.count("json") != 0) {
    std::cout << ToJson(*response) << "\n";
    return kExitOk;
  }
  if (response->models().empty()) {
    std::cout << "no models\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "ARCHITECTURE", "STATE", "LAYERS", "HIDDEN", "HEADS", "KV_HEADS",
       "HEAD_DIM", "FFN", "ACTIVATION", "NORM", "WEIGHTS", "DEFAULT"}};
  for (const v1::ModelInfo& m : response->models()) {
    rows.push_back({m.name(), m.architecture(), v1::ModelInfo::State_Name(m.state()),
                    absl::StrCat(m.num_layers()), absl::StrCat(m.hidden_size()),
                    absl::StrCat(m.num_attention_heads()),
                    absl::StrCat(m.num_key_value_heads()), absl::StrCat(m.head_dim()),
                    absl::StrCat(m.intermediate_size()),
                    v1::Activation_Name(m.activation()), v1::NormKind_Name(m.norm()),
                    v1::DataType_Name(m.weight_dtype()), m.is_default() ? "yes" : ""});
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&line, row[i], std::string(widths[i] - row[i].size() + 2, ' '));
    }
    std::cout << absl::StripTrailingAsciiWhitespace(line) << "\n";
  }
  for (const v1::ModelInfo& m : response->models()) {
    if (!m.error().empty()) std::cout << m.name() << ": " << m.error() << "\n";
    if (!m.reload_error().empty()) {
      std::cout << m.name() << ": reload failed, version " << m.version()
                << " serves: " << m.reload_error() << "\n";
    }
  }
  return kExitOk;
}

int RunGetModel(Client& client, const FlagValues& flags) {
  absl::StatusOr<v1::ModelInfo> model = client.GetModel(FlagOr(flags, "model", ""));
  if (!model.ok()) return RpcError(model.status());
  if (flags.count("json") != 0) {
    std::cout << ToJson(*model) << "\n";
    return kExitOk;
  }
  const v1::ModelInfo& m = *model;
  std::vector<std::pair<std::string, std::string>> lines = {
      {"name", m.name()},
      {"architecture", m.architecture()},
      {"state", v1::ModelInfo::State_Name(m.state())},
      {"default", m.is_default() ? "yes" : "no"},
      {"num_layers", absl::StrCat(m.num_layers())},
      {"hidden_size", absl::StrCat(m.hidden_size())},
      {"num_attention_heads", absl::StrCat(m.num_attention_heads())},
      {"num_key_value_heads", absl::StrCat(m.num_key_value_heads())},
      {"head_dim", absl::StrCat(m.head_dim())},
      {"intermediate_size", absl::StrCat(m.intermediate_size())},
      {"activation", v1::Activation_Name(m.activation())},
      {"norm",
       absl::StrCat(v1::NormKind_Name(m.norm()), " (epsilon ", m.norm_epsilon(), ")")},
      {"rope", m.has_rope()
                   ? absl::StrCat("theta ", m.rope().theta(), ", rotary_dim ",
                                  m.rope().rotary_dim(), ", style ",
                                  v1::Rope::Style_Name(m.rope().style()), ", scaling ",
                                  v1::RopeScaling::Type_Name(m.rope().scaling().type()))
                   : "none"},
      {"max_position_embeddings", absl::StrCat(m.max_position_embeddings())},
      {"weight_dtype", v1::DataType_Name(m.weight_dtype())},
      {"version", absl::StrCat(m.version())},
  };
  if (!m.error().empty()) lines.push_back({"error", m.error()});
  if (!m.reload_error().empty()) lines.push_back({"reload_error", m.reload_error()});
  for (const auto& [key, value] : lines) std::cout << key << ": " << value << "\n";
  return kExitOk;
}

}  // namespace layerserve::client
