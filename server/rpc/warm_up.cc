#include "server/rpc/warm_up.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/metrics/metrics.h"
#include "server/ops/block_forward.h"
#include "server/ops/tensor_codec.h"
#include "server/rpc/call.h"
#include "server/rpc/call_tracker.h"
#include "server/rpc/dispatch.h"

namespace layerserve {
namespace {

// Where a warm-up call's answer goes: kept for the warm-up to read.
class WarmUpAnswer final : public CallAnswer {
 public:
  explicit WarmUpAnswer(CallTracker* tracker) : tracker_(tracker) {}
  void Admitted() override { admitted_ = true; }
  void Send(const grpc::Status& status) override {
    status_ = status;
    tracker_->Finished(admitted_);
  }
  absl::Status status() const {
    return absl::Status(static_cast<absl::StatusCode>(status_.error_code()),
                        status_.error_message());
  }

 private:
  CallTracker* const tracker_;
  bool admitted_ = false;
  grpc::Status status_;
};

// One BlockForward of `tokens` tokens of small values through every layer `model`
// serves (its span), in `session` if not empty: a call admitted and run on
// `worker` through the dispatcher's path (RunAdmittedOn), as a client's would be
// run there, but with no client (its server context is never cancelled).
absl::Status RunWarmUpCall(const DispatchContext& dispatch, WorkerContext& worker,
                           const Model& model, int64_t tokens,
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
  v1::BlockForwardResponse response;
  grpc::CallbackServerContext context;
  WarmUpAnswer answer(dispatch.calls);
  Call call(&context, BlockForwardOp::kMethod, dispatch.metrics, dispatch.calls, &request,
            &response, &answer);
  if (AdmitCall(dispatch, call)) {
    RunAdmittedOn<BlockForwardOp>(worker, dispatch, std::move(call), request, &response);
  }
  return answer.status();
}

absl::Status WarmUpModel(const DispatchContext& dispatch, SessionStore& sessions,
                         WorkerContext& worker,
                         const std::shared_ptr<const Model>& model_ptr, int64_t tokens) {
  const Model& model = *model_ptr;
  // Models with learned positions take no more tokens than they have positions (a
  // tiny GPT-2 has 16), and the session's prefill leaves room for its step.
  const int64_t positions = model.config.max_position_embeddings;
  if (positions > 1) tokens = std::min(tokens, positions - 1);
  for (const int64_t call_tokens : {std::min(tokens, kWarmUpShortTokens), tokens}) {
    absl::Status status = RunWarmUpCall(dispatch, worker, model, call_tokens, "");
    if (!status.ok()) return status;
  }
  absl::StatusOr<std::string> session =
      sessions.Open(model_ptr, model.span_start, model.span_end - model.span_start,
                    /*max_length=*/0);
  if (!session.ok()) return session.status();
  absl::Status status = RunWarmUpCall(dispatch, worker, model, tokens, *session);
  if (status.ok()) status = RunWarmUpCall(dispatch, worker, model, 1, *session);
  sessions.Close(*session).IgnoreError();  // Gone already if a call failed.
  return status;
}

}  // namespace

int64_t WarmUpTokens(int64_t prefill_chunk_tokens) {
  return std::max(kWarmUpTokens, prefill_chunk_tokens);
}

int WarmUpWorker(const ModelRepository& models, SessionStore& sessions,
                 WorkerContext& worker, int64_t tokens) {
  // The warm-up's calls are its own: counted in metrics and a tracker nobody reads,
  // never refused as draining, and under no request or response limit (it is no
  // client's). Its jobs run whole (no BlockForwardOptions: no chunks), so they
  // never go back to a batcher's queue.
  Metrics metrics;
  CallTracker calls;
  const std::atomic<bool> draining{false};
  const DispatchContext dispatch{&metrics,
                                 &calls,
                                 &draining,
                                 /*batcher=*/nullptr,
                                 ParseContext{&models, &sessions},
                                 std::numeric_limits<int64_t>::max(),
                                 std::numeric_limits<int64_t>::max()};
  int warmed = 0;
  for (const auto& model : models.models()) {
    if (!model->ready()) continue;
    absl::Status status;
    try {
      status = WarmUpModel(dispatch, sessions, worker, model, tokens);
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
