// The `rope` method of the PositionalEncode RPC apart from transport: validation of a
// v1::Rope message (every error names its field, prefixed "rope.") and execution.
// Called by the PositionalEncode dispatcher (server/ops/positional_encode.h). Stateless;
// safe from any thread.
#ifndef LAYERSERVE_SERVER_OPS_POSITIONAL_ENCODE_ROPE_H_
#define LAYERSERVE_SERVER_OPS_POSITIONAL_ENCODE_ROPE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "kernels/rope/rope.h"
#include "layerserve/v1/layerserve.pb.h"
#include "server/ops/tensor_codec.h"

namespace layerserve {

// A Rope message that passed validation: tensors already float32 (FLOAT32 ones view
// the message's bytes, so the message must outlive the job), positions resolved,
// frequencies computed. The cos/sin tables are built by RunRope (on the worker, not
// on the gRPC thread that parses).
struct RopeJob {
  DecodedTensor query;  // [B,Hq,T,Dh] (BHTD) or [B,T,Hq,Dh] (BTHD).
  bool has_key = false;
  DecodedTensor key;  // [B,Hkv,T,Dh] or [B,T,Hkv,Dh] when has_key.
  bool bhtd = true;   // Layout: false = BTHD.
  int64_t batch = 0;
  int64_t tokens = 0;
  int64_t query_heads = 0;
  int64_t key_heads = 0;  // 0 without a key.
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;  // Resolved: 0 in the request means head_dim.
  kernels::RopeStyle style = kernels::RopeStyle::kHalf;
  // [B*T] row-major, or [T] when every batch row has the same positions.
  std::vector<int64_t> positions;
  bool shared_positions = true;  // positions has T entries.
  kernels::RopeFrequencies frequencies;
  ElementType output_type = ElementType::kFloat32;
};

inline constexpr float kDefaultRopeTheta = 10000.0f;

// Validates `rope` (the request's Rope message; field names in errors prefixed
// "rope.") and resolves positions (ResolvePositions with prefix "rope.").
// `output_dtype` is the request's output_dtype (UNSPECIFIED: the query's dtype).
absl::StatusOr<RopeJob> ParseRope(const v1::Rope& rope, v1::DataType output_dtype);
// The job would view a message destroyed at the end of the call's full expression.
absl::StatusOr<RopeJob> ParseRope(const v1::Rope&& rope,
                                  v1::DataType output_dtype) = delete;

// Rotates query (and key) and fills response->output (rotated query) and
// response->key, in the request's shape and layout. Returns the numeric health
// (statistics of the rotated query; saturation of both).
OutputHealth RunRope(const RopeJob& job, v1::PositionalEncodeResponse* response);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_OPS_POSITIONAL_ENCODE_ROPE_H_
