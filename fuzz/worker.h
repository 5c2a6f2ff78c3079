// Process-wide state the RPC fuzz targets share: one WorkerContext (built on first
// use, on the fuzzing thread, as a batcher worker builds its own) and the parse of
// the fuzzer's bytes into a request message.
#ifndef LAYERSERVE_FUZZ_WORKER_H_
#define LAYERSERVE_FUZZ_WORKER_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "server/ops/worker_context.h"

namespace layerserve::fuzz {

// The one WorkerContext of this (single-threaded) fuzzing process.
inline WorkerContext& Worker() {
  static WorkerContext* const worker = new WorkerContext;  // Never destroyed.
  return *worker;
}

// The bytes as a serialized `Request`, or nothing if they are not one.
template <typename Request>
std::optional<Request> ParseRequest(const uint8_t* data, size_t size) {
  Request request;
  if (size > static_cast<size_t>(INT32_MAX) ||
      !request.ParseFromArray(data, static_cast<int>(size))) {
    return std::nullopt;
  }
  return request;
}

}  // namespace layerserve::fuzz

#endif  // LAYERSERVE_FUZZ_WORKER_H_
