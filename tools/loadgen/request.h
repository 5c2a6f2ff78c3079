// The request layerserve-bench sends: built once from BenchOptions with seeded
// random inputs, then sent any number of times from any number of threads (the
// message is only read).
#ifndef LAYERSERVE_TOOLS_LOADGEN_REQUEST_H_
#define LAYERSERVE_TOOLS_LOADGEN_REQUEST_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cpp/client.h"
#include "tools/loadgen/load_generator.h"
#include "tools/loadgen/options.h"

namespace layerserve::client {

struct BenchRequest {
  // The RPC's name, which is also the `method` label of the server's metrics
  // ("Normalize"); "Health.Check" for health, which the server does not count.
  std::string rpc;
  // What is sent, for the report: "Normalize RMS_NORM input [8,768] FLOAT32".
  std::string description;
  int64_t request_bytes = 0;  // Serialized size.
  // Sends the request once (decode: the thread's next prefill or step). Thread-safe.
  std::function<SendOutcome(Client& client, const CallOptions& call)> send;
};

// INVALID_ARGUMENT for a shape the method cannot take. block-forward first asks the
// server for the model's hidden size (GetModel through `client`), so its errors
// come from there.
absl::StatusOr<BenchRequest> MakeBenchRequest(const BenchOptions& options,
                                              Client& client);

}  // namespace layerserve::client

#endif  // LAYERSERVE_TOOLS_LOADGEN_REQUEST_H_
