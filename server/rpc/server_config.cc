#include "server/rpc/server_config.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "server/models/layer_span.h"

namespace layerserve {

absl::Status ServerConfig::Validate() const {
  // gRPC takes message sizes in an int.
  if (max_message_bytes < 1 || max_message_bytes > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-message-bytes must be in [1, ", INT32_MAX, "]"));
  }
  if (weight_dtype != "float32" && weight_dtype != "bfloat16" && weight_dtype != "int8") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--weight-dtype must be float32, bfloat16 or int8, not ", weight_dtype));
  }
  // Bounded so that ModelInfo's int32 field holds it.
  if (weight_group_size < 0 || weight_group_size > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("--weight-group-size must be 0 (one scale per output) or in [1, ",
                     INT32_MAX, "], not ", weight_group_size));
  }
  if (repository_poll_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--repository-poll-interval must be >= 0 (0: only on SIGHUP), not ",
                     absl::FormatDuration(repository_poll_interval)));
  }
  if (const absl::StatusOr<LayerSpan> span = ParseLayerSpan(layers); !span.ok()) {
    return span.status();
  }
  if (max_batch_rows < 1 || max_queue_size < 1 || max_request_elements < 1 ||
      max_queue_delay_us < 0 || max_gather_delay_us < 0) {
    return absl::InvalidArgumentError(
        "--max-batch-rows, --max-queue-size and --max-request-elements must be >= 1, "
        "--max-queue-delay-us and --max-gather-delay-us >= 0");
  }
  if (prefill_chunk_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefill-chunk-tokens must be >= 0 (0: prefills run whole), not ",
                     prefill_chunk_tokens));
  }
  if (kv_cache_dtype != "float32" && kv_cache_dtype != "bfloat16") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-cache-dtype must be float32 or bfloat16, not ", kv_cache_dtype));
  }
  return absl::OkStatus();
}

}  // namespace layerserve
