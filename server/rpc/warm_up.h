// The warm-up before serving (--warm-up, on by default). Each compute worker runs,
// for every model that loaded, one BlockForward of kWarmUpTokens tokens through
// all of the model's layers this server serves (--layers), and a session's prefill of as
// many tokens followed by one decode step. So what a worker's first calls would otherwise
// pay (oneDNN creating and JIT-compiling its matmul primitives, the worker's buffers, the
// KV cache's first blocks) is paid before the health service says SERVING. A call with
// another number of tokens still creates the primitives of its own shape on first use
// (about 20 ms on the demo model); what the warm-up saves is the one-time part, many
// times that (docs/OPERATIONS.md, "Warm-up").
#ifndef LAYERSERVE_SERVER_RPC_WARM_UP_H_
#define LAYERSERVE_SERVER_RPC_WARM_UP_H_

#include <cstdint>

#include "server/models/model_repository.h"
#include "server/ops/worker_context.h"
#include "server/sessions/session_store.h"

namespace layerserve {

// Long enough for the batched matmul path (kernels::kShortSequenceTokens is the
// few-rows path's bound), short enough to cost little on large models.
inline constexpr int64_t kWarmUpTokens = 16;

// Runs the warm-up of every ready model on `worker` (the calling worker's
// context), with sessions opened in and closed from `sessions`. Returns the
// number of models warmed; a model whose warm-up fails is reported on stderr and
// skipped (its calls will say what is wrong). Never throws.
int WarmUpWorker(const ModelRepository& models, SessionStore& sessions,
                 WorkerContext& worker);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_WARM_UP_H_
