// block-forward: hidden states from a .npy file through blocks of a served model.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cpp/pipeline.h"
#include "tools/cli/commands.h"
#include "tools/cli/common.h"

namespace layerserve::client {

int RunBlockForward(Client& client, const FlagValues& flags) {
  for (const char* required : {"input", "out"}) {
    if (flags.count(required) == 0) {
      return UsageError(absl::StrCat("block-forward needs --", required));
    }
  }
  v1::BlockForwardRequest request;
  request.set_model(FlagOr(flags, "model", ""));
  absl::StatusOr<int64_t> layer_start = Int64Flag(flags, "layer-start", 0);
  if (!layer_start.ok()) return UsageError(layer_start.status().message());
  absl::StatusOr<int64_t> num_layers = Int64Flag(flags, "num-layers", 0);
  if (!num_layers.ok()) return UsageError(num_layers.status().message());
  request.set_layer_start(static_cast<int32_t>(*layer_start));
  request.set_num_layers(static_cast<int32_t>(*num_layers));
  absl::StatusOr<Positions> positions = ParsePositions(flags);
  if (!positions.ok()) return UsageError(positions.status().message());
  request.set_position_offset(positions->offset);
  request.mutable_positions()->Add(positions->positions.begin(),
                                   positions->positions.end());
  if (flags.count("sequence-lengths") != 0) {
    absl::StatusOr<std::vector<int64_t>> lengths =
        ParseInt64List("sequence-lengths", flags.at("sequence-lengths"));
    if (!lengths.ok()) return UsageError(lengths.status().message());
    request.mutable_sequence_lengths()->Add(lengths->begin(), lengths->end());
  }
  if (flags.count("causal") != 0) {
    absl::StatusOr<bool> causal = BoolFlag(flags, "causal", true);
    if (!causal.ok()) return UsageError(causal.status().message());
    request.set_causal(*causal);
  }
  request.set_want_attention_stats(flags.count("attention-stats") != 0);
  request.set_session_id(FlagOr(flags, "session", ""));
  absl::StatusOr<TensorFormats> formats = ParseTensorFormats(flags);
  if (!formats.ok()) return UsageError(formats.status().message());
  v1::DataType wire = formats->wire;
  if (!LoadTensor(flags.at("input"), &wire, request.mutable_hidden_states())) {
    return kExitUsageOrFile;
  }

  absl::StatusOr<v1::BlockForwardResponse> response;
  std::vector<absl::Duration> stage_times;
  std::vector<PipelineStage> stages;
  if (flags.count("pipeline") != 0) {
    for (const char* alone :
         {"layer-start", "num-layers", "session", "attention-stats"}) {
      if (flags.count(alone) != 0) {
        return UsageError(
            absl::StrCat("--pipeline runs every layer of the model across its "
                         "servers: it takes no --",
                         alone));
      }
    }
    const std::vector<std::string> targets =
        absl::StrSplit(flags.at("pipeline"), ',', absl::SkipEmpty());
    if (targets.empty()) return UsageError("--pipeline needs HOST:PORT,HOST:PORT,...");
    absl::StatusOr<std::unique_ptr<Pipeline>> pipeline =
        Pipeline::FromServers(targets, request.model(), client.options());
    if (!pipeline.ok()) return RpcError(pipeline.status());
    stages = (*pipeline)->stages();
    response = (*pipeline)->Forward(request, &stage_times);
  } else {
    response = client.BlockForward(request);
  }
  if (!response.ok()) return RpcError(response.status());
  std::vector<WrittenTensor> written;
  if (int code = SaveTensor(response->hidden_states(), "hidden_states", flags.at("out"),
                            formats->out, &written);
      code != kExitOk) {
    return code;
  }
  const bool json = flags.count("json") != 0;
  nlohmann::json extra = nlohmann::json::object();
  if (request.want_attention_stats()) {
    nlohmann::json stats = nlohmann::json::array();
    for (const v1::AttentionStats& s : response->attention_stats()) {
      std::vector<float> entropy(s.head_entropy_nats().begin(),
                                 s.head_entropy_nats().end());
      stats.push_back({{"layer", s.layer()}, {"head_entropy_nats", entropy}});
      if (!json) {
        std::cout << "layer " << s.layer()
                  << " attention entropy (nats) per head: " << absl::StrJoin(entropy, " ")
                  << "\n";
      }
    }
    extra["attention_stats"] = stats;
  }
  if (!stages.empty()) {
    nlohmann::json hops = nlohmann::json::array();
    for (size_t i = 0; i < stages.size(); ++i) {
      const double ms = absl::ToDoubleMilliseconds(stage_times[i]);
      const std::string layers = absl::StrCat(
          stages[i].layer_start, "..", stages[i].layer_start + stages[i].num_layers - 1);
      hops.push_back(
          {{"layers", layers}, {"targets", stages[i].targets}, {"milliseconds", ms}});
      if (!json) {
        std::cout << "stage " << i << " layers " << layers << " on "
                  << absl::StrJoin(stages[i].targets, ",") << ": " << ms << " ms\n";
      }
    }
    extra["stages"] = hops;
  }
  if (!request.session_id().empty()) {
    extra["session_length"] = response->session_length();
    if (!json) std::cout << "session_length: " << response->session_length() << "\n";
  }
  PrintWritten(written, json, extra);
  return kExitOk;
}

}  // namespace layerserve::client
