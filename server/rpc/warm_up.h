// The warm-up before serving (--warm-up, on by default). Each compute worker runs,
// for every model that loaded, BlockForward calls of kWarmUpShortTokens and of
// WarmUpTokens() tokens through all of the model's layers this server serves
// (--layers), and a session's prefill of as many tokens followed by one decode step. So
// what a worker's first calls would otherwise pay is paid before the health service says
// SERVING: oneDNN creating and JIT-compiling its matmul primitives, and above all the
// worker's buffers growing to the call's size. Growing is the large part: fresh pages
// fault in as they are zeroed, and on the 2-vCPU VM a first 128-token call on the demo
// model took 2.6x a warm one after a 16-token warm-up, most of it in those faults (perf,
// 2026-12-02). Buffers keep their size, so every call up to WarmUpTokens() tokens starts
// warm; a longer one grows them once. A token count not seen before still creates its
// primitives (under 1 ms each). docs/operations/scaling.md, "Warm-up".
#ifndef LAYERSERVE_SERVER_RPC_WARM_UP_H_
#define LAYERSERVE_SERVER_RPC_WARM_UP_H_

#include <cstdint>

#include "server/models/model_repository.h"
#include "server/ops/worker_context.h"
#include "server/sessions/session_store.h"

namespace layerserve {

// The warm-up's long calls when prefills are not chunked: the prompt lengths most
// calls stay under (the longest the benchmarks send).
inline constexpr int64_t kWarmUpTokens = 512;
// Its short call: the batched matmul path's primitives at a small M
// (kernels::kShortSequenceTokens is the few-rows path's bound).
inline constexpr int64_t kWarmUpShortTokens = 16;

// The warm-up's token count for prefill chunks of `prefill_chunk_tokens`
// (--prefill-chunk-tokens, 0: not chunked): at least a whole chunk, so a chunked
// prefill of any length starts warm.
int64_t WarmUpTokens(int64_t prefill_chunk_tokens);

// Runs the warm-up of every ready model on `worker` (the calling worker's
// context), with calls of `tokens` tokens (fewer for models with fewer positions)
// and sessions opened in and closed from `sessions`. Returns the number of models
// warmed; a model whose warm-up fails is reported on stderr and skipped (its calls
// will say what is wrong). Never throws.
int WarmUpWorker(const ModelRepository& models, SessionStore& sessions,
                 WorkerContext& worker, int64_t tokens);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_WARM_UP_H_
