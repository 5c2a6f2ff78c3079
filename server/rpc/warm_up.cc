#include "server/rpc/warm_up.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/ops/block_forward.h"
#include "server/ops/tensor_codec.h"

namespace layerserve {
namespace {

// One BlockForward of `tokens` tokens of small values through every layer `model`
// serves (its span), in `session` if not empty, run and ended as the dispatcher
// would.
absl::Status RunWarmUpCall(const ModelRepository& models, SessionStore& sessions,
                           WorkerContext& worker, const Model& model, int64_t tokens,
                           const std::string& session) {
  v1::BlockForwardRequest request;
  request.set_model(model.name);
  request.set_layer_start(static_cast<int32_t>(model.span_start));
  request.set_num_layers(static_cast<int32_t>(model.span_end - model.span_start));
  request.set_session_id(session);
  const int64_t d = model.block.hidden_size;
  std::vector<float> values(tokens * d);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.01f * (i % 17);
  EncodeTensor({tokens, d}, values.data(), tokens * d, ElementType::kFloat32,
               request.mutable_hidden_states());
  absl::StatusOr<BlockForwardJob> job =
      BlockForwardOp::Parse(request, ParseContext{&models, &sessions});
  if (!job.ok()) return job.status();
  v1::BlockForwardResponse response;
  try {
    RunBlockForward(worker.block, *job, &response);
  } catch (...) {
    BlockForwardOp::End(*job, JobOutcome::kFailed);
    throw;
  }
  BlockForwardOp::End(*job, JobOutcome::kComputed);
  return absl::OkStatus();
}

absl::Status WarmUpModel(const ModelRepository& models, SessionStore& sessions,
                         WorkerContext& worker,
                         const std::shared_ptr<const Model>& model_ptr, int64_t tokens) {
  const Model& model = *model_ptr;
  // Models with learned positions take no more tokens than they have positions (a
  // tiny GPT-2 has 16), and the session's prefill leaves room for its step.
  const int64_t positions = model.config.max_position_embeddings;
  if (positions > 1) tokens = std::min(tokens, positions - 1);
  for (const int64_t call_tokens : {std::min(tokens, kWarmUpShortTokens), tokens}) {
    absl::Status status = RunWarmUpCall(models, sessions, worker, model, call_tokens, "");
    if (!status.ok()) return status;
  }
  absl::StatusOr<std::string> session =
      sessions.Open(model_ptr, model.span_start, model.span_end - model.span_start,
                    /*max_length=*/0);
  if (!session.ok()) return session.status();
  absl::Status status = RunWarmUpCall(models, sessions, worker, model, tokens, *session);
  if (status.ok()) status = RunWarmUpCall(models, sessions, worker, model, 1, *session);
  sessions.Close(*session).IgnoreError();  // Gone already if a call failed.
  return status;
}

}  // namespace

int64_t WarmUpTokens(int64_t prefill_chunk_tokens) {
  return std::max(kWarmUpTokens, prefill_chunk_tokens);
}

int WarmUpWorker(const ModelRepository& models, SessionStore& sessions,
                 WorkerContext& worker, int64_t tokens) {
  int warmed = 0;
  for (const auto& model : models.models()) {
    if (!model->ready()) continue;
    absl::Status status;
    try {
      status = WarmUpModel(models, sessions, worker, model, tokens);
    } catch (const std::exception& e) {
      status = absl::InternalError(e.what());
    } catch (...) {
      status = absl::InternalError("unknown exception");
    }
    if (status.ok()) {
      ++warmed;
    } else {
      std::fprintf(stderr, "layerserve: warm-up of model %s failed: %s\n",
                   model->name.c_str(), std::string(status.message()).c_str());
    }
  }
  return warmed;
}

}  // namespace layerserve
