// The config.json reader: the bytes as JSON text -> ParseModelConfig. An accepted
// config must satisfy what the model loader and the blocks rely on.
#include <cmath>
#include <string>

#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_targets.h"
#include "server/models/model_config.h"

namespace layerserve::fuzz {

Outcome FuzzModelConfig(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ModelConfig> config = ParseModelConfig(text, "fuzz/config.json");
  if (!config.ok()) {
    FUZZ_CHECK(config.status().code() == absl::StatusCode::kInvalidArgument,
               config.status().ToString());
    FUZZ_CHECK(
        config.status().message().find("fuzz/config.json") != absl::string_view::npos,
        "error does not name the file: " + config.status().ToString());
    return Outcome::kRejected;
  }
  const ModelConfig& c = *config;
  FUZZ_CHECK(c.hidden_size >= 1 && c.num_layers >= 1 && c.num_heads >= 1 &&
                 c.num_kv_heads >= 1 && c.head_dim >= 1 && c.intermediate_size >= 1 &&
                 c.max_position_embeddings >= 1,
             "a dimension < 1");
  FUZZ_CHECK(c.num_heads % c.num_kv_heads == 0, "kv heads do not divide heads");
  FUZZ_CHECK(std::isfinite(c.norm_epsilon) && c.norm_epsilon >= 0, "norm_epsilon");
  FUZZ_CHECK(std::isfinite(c.attention_scale) && c.attention_scale > 0,
             "attention_scale");
  FUZZ_CHECK(c.sliding_window >= 0, "sliding_window");
  if (c.has_rope) {
    FUZZ_CHECK(c.rotary_dim >= 2 && c.rotary_dim % 2 == 0 && c.rotary_dim <= c.head_dim,
               "rotary_dim " + std::to_string(c.rotary_dim));
    FUZZ_CHECK(std::isfinite(c.rope_theta) && c.rope_theta > 0, "rope_theta");
    FUZZ_CHECK(c.rope_scaling.type == kernels::RopeScalingType::kNone ||
                   (std::isfinite(c.rope_scaling.factor) && c.rope_scaling.factor >= 1),
               "rope_scaling.factor");
  }
  return Outcome::kAccepted;
}

}  // namespace layerserve::fuzz
