#include "server/models/model_config.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace layerserve {
namespace {

constexpr int64_t kMaxConfigInt = (int64_t{1} << 31) - 1;

using nlohmann::json;

// Reads config keys with the file name in every error.
class ConfigReader {
 public:
  ConfigReader(const json& root, std::string source)
      : root_(root), source_(std::move(source)) {}

  absl::Status Error(const std::string& key, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", key, ": ", what));
  }

  bool Has(const std::string& key) const {
    return root_.contains(key) && !root_[key].is_null();
  }

  // The first of `keys` present, as a positive integer below 2^31: dimensions and
  // counts, which later arithmetic (4 * hidden_size, products of dimensions) must
  // not overflow.
  absl::StatusOr<int64_t> PositiveInt(std::initializer_list<const char*> keys) const {
    for (const char* key : keys) {
      if (!Has(key)) continue;
      const json& v = root_[key];
      if (!v.is_number_integer() || v.get<int64_t>() < 1 ||
          v.get<int64_t>() > kMaxConfigInt) {
        return Error(
            key, absl::StrCat("must be a positive integer below 2^31, got ", v.dump()));
      }
      return v.get<int64_t>();
    }
    return Error(*keys.begin(), "required");
  }

  absl::StatusOr<int64_t> PositiveIntOr(std::initializer_list<const char*> keys,
                                        int64_t fallback) const {
    for (const char* key : keys) {
      if (Has(key)) return PositiveInt({key});
    }
    return fallback;
  }

  absl::StatusOr<float> FloatOr(std::initializer_list<const char*> keys,
                                float fallback) const {
    ASSIGN_OR_RETURN(const double value, DoubleOr(keys, fallback));
    // Beyond float's range the cast would give infinity (undefined behaviour in
    // C++): a model that loads and computes nonsense.
    if (std::fabs(value) > std::numeric_limits<float>::max()) {
      for (const char* key : keys) {
        if (Has(key)) {
          return Error(key, absl::StrCat(value, " is beyond the float32 range"));
        }
      }
    }
    return static_cast<float>(value);
  }

  absl::StatusOr<double> DoubleOr(std::initializer_list<const char*> keys,
                                  double fallback) const {
    for (const char* key : keys) {
      if (!Has(key)) continue;
      const json& v = root_[key];
      if (!v.is_number() || !std::isfinite(v.get<double>())) {
        return Error(key, absl::StrCat("must be a finite number, got ", v.dump()));
      }
      return v.get<double>();
    }
    return fallback;
  }

  absl::StatusOr<bool> BoolOr(const char* key, bool fallback) const {
    if (!Has(key)) return fallback;
    if (!root_[key].is_boolean()) return Error(key, "must be true or false");
    return root_[key].get<bool>();
  }

  absl::StatusOr<std::string> StringOr(std::initializer_list<const char*> keys,
                                       const std::string& fallback) const {
    for (const char* key : keys) {
      if (!Has(key)) continue;
      if (!root_[key].is_string()) return Error(key, "must be a string");
      return root_[key].get<std::string>();
    }
    return fallback;
  }

  const json& root() const { return root_; }
  const std::string& source() const { return source_; }

 private:
  const json& root_;
  const std::string source_;  // A copy: callers pass temporaries.
};

absl::StatusOr<HiddenActivation> ParseActivation(const ConfigReader& reader,
                                                 const std::string& key,
                                                 const std::string& name) {
  if (name == "silu" || name == "swish") return HiddenActivation::kSilu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast" ||
      name == "gelu_tanh")
    return HiddenActivation::kGeluTanh;
  if (name == "gelu") return HiddenActivation::kGelu;
  if (name == "relu") return HiddenActivation::kRelu;
  return reader.Error(key, absl::StrCat("activation \"", name, "\" is not served"));
}

absl::Status ParseRopeScaling(const ConfigReader& reader, int64_t max_positions,
                              kernels::RopeScaling* scaling) {
  if (!reader.Has("rope_scaling")) return absl::OkStatus();
  const json& rs = reader.root()["rope_scaling"];
  if (!rs.is_object()) return reader.Error("rope_scaling", "must be an object");
  ConfigReader sub(rs, absl::StrCat(reader.source(), ": rope_scaling"));
  // Newer configs say rope_type, older ones type.
  ASSIGN_OR_RETURN(std::string type, sub.StringOr({"rope_type", "type"}, "default"));
  if (type == "default") return absl::OkStatus();
  if (type == "linear") {
    scaling->type = kernels::RopeScalingType::kLinear;
  } else if (type == "dynamic") {
    scaling->type = kernels::RopeScalingType::kDynamicNtk;
  } else if (type == "yarn") {
    scaling->type = kernels::RopeScalingType::kYarn;
  } else if (type == "llama3") {
    scaling->type = kernels::RopeScalingType::kLlama3;
  } else {
    return reader.Error("rope_scaling.rope_type",
                        absl::StrCat("\"", type, "\" is not served"));
  }
  ASSIGN_OR_RETURN(scaling->factor, sub.FloatOr({"factor"}, 0));
  if (!(scaling->factor >= 1)) {
    return reader.Error("rope_scaling.factor",
                        absl::StrCat(scaling->factor, " must be >= 1"));
  }
  ASSIGN_OR_RETURN(
      scaling->original_max_position_embeddings,
      sub.PositiveIntOr({"original_max_position_embeddings"}, max_positions));
  ASSIGN_OR_RETURN(scaling->beta_fast, sub.FloatOr({"beta_fast"}, 32));
  ASSIGN_OR_RETURN(scaling->beta_slow, sub.FloatOr({"beta_slow"}, 1));
  if (sub.Has("attention_factor")) {
    scaling->has_attention_factor = true;
    ASSIGN_OR_RETURN(scaling->attention_factor, sub.FloatOr({"attention_factor"}, 1));
  }
  ASSIGN_OR_RETURN(scaling->low_freq_factor, sub.FloatOr({"low_freq_factor"}, 1));
  ASSIGN_OR_RETURN(scaling->high_freq_factor, sub.FloatOr({"high_freq_factor"}, 4));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text,
                                             const std::string& source) {
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  ConfigReader r(root, source);
  ModelConfig c;
  bool scale_attention = true;
  ASSIGN_OR_RETURN(c.model_type, r.StringOr({"model_type"}, ""));
  const std::string& type = c.model_type;
  const bool llama_like = type == "llama" || type == "mistral" || type == "qwen2" ||
                          type == "qwen3" || type == "gemma";
  if (llama_like) {
    c.family = BlockFamily::kLlama;
  } else if (type == "gpt2") {
    c.family = BlockFamily::kGpt2;
  } else if (type == "gpt_neox") {
    c.family = BlockFamily::kGptNeox;
  } else {
    return r.Error("model_type",
                   absl::StrCat("\"", type,
                                "\" is not served (llama, mistral, qwen2, qwen3, gemma, "
                                "gpt2, gpt_neox)"));
  }

  if (c.family == BlockFamily::kGpt2) {
    ASSIGN_OR_RETURN(c.hidden_size, r.PositiveInt({"n_embd", "hidden_size"}));
    ASSIGN_OR_RETURN(c.num_layers, r.PositiveInt({"n_layer", "num_hidden_layers"}));
    ASSIGN_OR_RETURN(c.num_heads, r.PositiveInt({"n_head", "num_attention_heads"}));
    ASSIGN_OR_RETURN(c.intermediate_size,
                     r.PositiveIntOr({"n_inner"}, 4 * c.hidden_size));
    ASSIGN_OR_RETURN(c.max_position_embeddings,
                     r.PositiveIntOr({"n_positions", "max_position_embeddings"}, 1024));
    ASSIGN_OR_RETURN(std::string act, r.StringOr({"activation_function"}, "gelu_new"));
    ASSIGN_OR_RETURN(c.activation, ParseActivation(r, "activation_function", act));
    ASSIGN_OR_RETURN(c.norm_epsilon, r.FloatOr({"layer_norm_epsilon"}, 1e-5f));
    c.num_kv_heads = c.num_heads;
    c.gated_mlp = false;
    c.rms_norm = false;
    c.qkv_bias = c.output_bias = c.mlp_bias = true;
    c.has_rope = false;
    ASSIGN_OR_RETURN(scale_attention, r.BoolOr("scale_attn_weights", true));
    ASSIGN_OR_RETURN(const bool by_layer,
                     r.BoolOr("scale_attn_by_inverse_layer_idx", false));
    if (by_layer) {
      return r.Error("scale_attn_by_inverse_layer_idx", "true is not served");
    }
  } else {
    ASSIGN_OR_RETURN(c.hidden_size, r.PositiveInt({"hidden_size"}));
    ASSIGN_OR_RETURN(c.num_layers, r.PositiveInt({"num_hidden_layers"}));
    ASSIGN_OR_RETURN(c.num_heads, r.PositiveInt({"num_attention_heads"}));
    ASSIGN_OR_RETURN(c.num_kv_heads,
                     r.PositiveIntOr({"num_key_value_heads"}, c.num_heads));
    ASSIGN_OR_RETURN(c.intermediate_size, r.PositiveInt({"intermediate_size"}));
    ASSIGN_OR_RETURN(c.max_position_embeddings,
                     r.PositiveIntOr({"max_position_embeddings"}, 2048));
    // Gemma's MLP uses `hidden_activation` when set and otherwise gelu_pytorch_tanh,
    // whatever `hidden_act` says (Hugging Face's GemmaMLP). Elsewhere hidden_act,
    // defaulting as the HF config classes do (GPTNeoXConfig: "gelu", the erf form).
    std::string act;
    std::string act_key = "hidden_act";
    if (type == "gemma") {
      act_key = "hidden_activation";
      ASSIGN_OR_RETURN(act, r.StringOr({"hidden_activation"}, "gelu_pytorch_tanh"));
    } else {
      ASSIGN_OR_RETURN(act,
                       r.StringOr({"hidden_act"}, type == "gpt_neox" ? "gelu" : "silu"));
    }
    ASSIGN_OR_RETURN(c.activation, ParseActivation(r, act_key, act));
  }
  if (c.family == BlockFamily::kLlama) {
    ASSIGN_OR_RETURN(c.norm_epsilon, r.FloatOr({"rms_norm_eps"}, 1e-6f));
    ASSIGN_OR_RETURN(c.rope_theta, r.FloatOr({"rope_theta"}, 10000));
    ASSIGN_OR_RETURN(const bool attention_bias, r.BoolOr("attention_bias", false));
    // Llama's (and Qwen3's) attention_bias covers o_proj too; Qwen2 has q/k/v bias
    // always, o none.
    c.qkv_bias = attention_bias || type == "qwen2";
    c.output_bias = attention_bias && type != "qwen2";
    ASSIGN_OR_RETURN(c.mlp_bias, r.BoolOr("mlp_bias", false));
    c.qk_norm = type == "qwen3";
    c.norm_weight_offset = type == "gemma";
    const bool free_head_dim = type == "gemma" || type == "qwen3" || r.Has("head_dim");
    if (free_head_dim) {
      ASSIGN_OR_RETURN(c.head_dim,
                       r.PositiveIntOr({"head_dim"}, c.hidden_size / c.num_heads));
    }
  }
  if (c.family == BlockFamily::kGptNeox) {
    ASSIGN_OR_RETURN(c.norm_epsilon, r.FloatOr({"layer_norm_eps"}, 1e-5f));
    ASSIGN_OR_RETURN(c.rope_theta, r.FloatOr({"rotary_emb_base", "rope_theta"}, 10000));
    ASSIGN_OR_RETURN(c.parallel_residual, r.BoolOr("use_parallel_residual", true));
    ASSIGN_OR_RETURN(const bool attention_bias, r.BoolOr("attention_bias", true));
    c.qkv_bias = c.output_bias = attention_bias;
    c.mlp_bias = true;
    c.gated_mlp = false;
    c.rms_norm = false;
  }
  if (c.head_dim == 0) {
    if (c.hidden_size % c.num_heads != 0) {
      return r.Error("num_attention_heads",
                     absl::StrCat(c.num_heads, " does not divide hidden_size ",
                                  c.hidden_size, " and there is no head_dim"));
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return r.Error("num_key_value_heads",
                   absl::StrCat(c.num_kv_heads, " does not divide num_attention_heads ",
                                c.num_heads));
  }
  if (c.has_rope) {
    c.rotary_dim = c.head_dim;
    if (c.family == BlockFamily::kGptNeox) {
      ASSIGN_OR_RETURN(const double pct,
                       r.DoubleOr({"rotary_pct", "partial_rotary_factor"}, 1));
      if (!(pct > 0 && pct <= 1)) {
        return r.Error("rotary_pct", absl::StrCat(pct, " must be in (0, 1]"));
      }
      // HF: rotary_ndims = int(head_size * rotary_pct), in Python's double.
      c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * pct);
    }
    if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0) {
      return r.Error("rotary_pct", absl::StrCat("gives rotary_dim ", c.rotary_dim,
                                                ", which must be even and >= 2"));
    }
    if (!(c.rope_theta > 0)) {
      return r.Error("rope_theta", absl::StrCat(c.rope_theta, " must be > 0"));
    }
    RETURN_IF_ERROR(ParseRopeScaling(r, c.max_position_embeddings, &c.rope_scaling));
  }
  if (!(c.norm_epsilon >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": norm epsilon ", c.norm_epsilon, " must be >= 0"));
  }
  c.attention_scale =
      scale_attention ? 1.0f / std::sqrt(static_cast<float>(c.head_dim)) : 1.0f;
  // Mistral always has its window when set; Qwen2 only with use_sliding_window.
  ASSIGN_OR_RETURN(const bool use_window,
                   r.BoolOr("use_sliding_window", type != "qwen2"));
  if (use_window && r.Has("sliding_window") && c.family == BlockFamily::kLlama) {
    ASSIGN_OR_RETURN(c.sliding_window, r.PositiveInt({"sliding_window"}));
  }
  return c;
}

}  // namespace layerserve
