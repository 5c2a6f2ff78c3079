// A model's config.json (Hugging Face layout) read into the fields the blocks need,
// with each architecture's names and defaults resolved. Stateless; thread-safe.
#ifndef LAYERSERVE_SERVER_MODELS_MODEL_CONFIG_H_
#define LAYERSERVE_SERVER_MODELS_MODEL_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/rope/rope.h"

namespace layerserve {

// Block layouts served; model_type values map onto them.
enum class BlockFamily {
  kLlama,    // llama, mistral, qwen2, qwen3 (QK-norm), gemma ((1+w) norms, GeGLU)
  kGpt2,     // gpt2: LayerNorm, fused Conv1D c_attn [in, out], GELU-tanh MLP
  kGptNeox,  // gpt_neox: LayerNorm, fused QKV per head, parallel residual, partial RoPE
};

enum class HiddenActivation { kSilu, kGeluTanh, kGelu, kRelu };

struct ModelConfig {
  std::string model_type;  // As in config.json.
  BlockFamily family = BlockFamily::kLlama;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  HiddenActivation activation = HiddenActivation::kSilu;
  bool gated_mlp = true;  // act(gate) * up (llama family) or act(fc) (gpt2, neox).
  bool rms_norm = true;   // RMSNorm, else LayerNorm (with bias).
  bool norm_weight_offset = false;  // Gemma: scale = 1 + weight.
  float norm_epsilon = 1e-6f;
  bool qkv_bias = false;           // Bias on the q, k and v projections.
  bool output_bias = false;        // Bias on the attention output projection.
  bool mlp_bias = false;           // Bias on the MLP projections.
  bool qk_norm = false;            // Qwen3: RMSNorm over each head of q and k.
  bool parallel_residual = false;  // NeoX: x + attn(ln1(x)) + mlp(ln2(x)).
  bool has_rope = true;            // False for gpt2 (learned positions, the client's).
  float rope_theta = 10000;
  int64_t rotary_dim = 0;  // Leading dims of each head that rotate.
  kernels::RopeScaling rope_scaling;
  int64_t max_position_embeddings = 0;
  float attention_scale = 0;  // Multiplies q·k: head_dim^-0.5 (1 for GPT-2 with
                              // scale_attn_weights false).
  // Keys further back than this are not attended (Mistral, Qwen2 with
  // use_sliding_window); 0 = no window. The blocks do not implement the window, so
  // requests with positions at or past it are refused rather than computed wrongly.
  int64_t sliding_window = 0;
};

// Parses config.json text. INVALID_ARGUMENT naming `source` and the key for a
// missing or contradictory field or an unserved model_type.
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text,
                                             const std::string& source);

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_MODELS_MODEL_CONFIG_H_
