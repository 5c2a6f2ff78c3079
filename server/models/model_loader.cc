#include "server/models/model_loader.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace layerserve {
namespace {

using kernels::LinearWeights;

kernels::Activation ToKernelActivation(HiddenActivation a) {
  switch (a) {
    case HiddenActivation::kSilu:
      return kernels::Activation::kSilu;
    case HiddenActivation::kGeluTanh:
      return kernels::Activation::kGeluTanh;
    case HiddenActivation::kGelu:
      return kernels::Activation::kGelu;
    case HiddenActivation::kRelu:
      return kernels::Activation::kRelu;
  }
  return kernels::Activation::kSilu;
}

// Reads tensors of one checkpoint with the checks every load error needs.
class TensorReader {
 public:
  TensorReader(const Checkpoint& checkpoint, std::string prefix)
      : checkpoint_(checkpoint), prefix_(std::move(prefix)) {}

  // The tensor `prefix + name` as float32, after checking it is there with `shape`.
  absl::StatusOr<std::vector<float>> Read(const std::string& name,
                                          const std::vector<int64_t>& shape) const {
    const std::string full = prefix_ + name;
    const Checkpoint::Found found = checkpoint_.Find(full);
    if (found.tensor == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(checkpoint_.source(), ": missing tensor \"", full, "\""));
    }
    const SafetensorsTensor& t = *found.tensor;
    if (!t.dtype.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(found.file->path(), ": tensor \"",
                                                     full, "\": dtype ", t.dtype_name,
                                                     " is not F32, BF16 or F16"));
    }
    if (t.shape != shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(found.file->path(), ": tensor \"", full, "\": shape [",
                       absl::StrJoin(t.shape, ","), "], config.json implies [",
                       absl::StrJoin(shape, ","), "]"));
    }
    std::vector<float> values(t.elements());
    ConvertToFloat32(*t.dtype, t.data, t.elements(), values.data());
    return values;
  }

  // Read(name) when `present`, else `count` zeros (a layer without that bias).
  absl::StatusOr<std::vector<float>> ReadOrZeros(bool present, const std::string& name,
                                                 int64_t count) const {
    if (!present) return std::vector<float>(count, 0.0f);
    return Read(name, {count});
  }

 private:
  const Checkpoint& checkpoint_;
  const std::string prefix_;
};

void Append(std::vector<float>& to, const std::vector<float>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

// Checkpoints saved from the bare model lack the task wrapper's prefix. Probing
// layer 0 reads only the header, whichever layers are loaded.
std::string LayerPrefix(const Checkpoint& checkpoint, const std::string& wrapped,
                        const std::string& bare, const std::string& probe) {
  return checkpoint.Has(wrapped + "0." + probe) ? wrapped : bare;
}

absl::StatusOr<kernels::BlockWeights> LoadLlamaBlock(const ModelConfig& c,
                                                     const TensorReader& r,
                                                     kernels::WeightFormat format) {
  const int64_t d = c.hidden_size, dh = c.head_dim, f = c.intermediate_size;
  const int64_t qw = c.num_heads * dh, kvw = c.num_kv_heads * dh;
  kernels::BlockWeights w;
  ASSIGN_OR_RETURN(w.attn_norm_weight, r.Read("input_layernorm.weight", {d}));
  ASSIGN_OR_RETURN(w.mlp_norm_weight, r.Read("post_attention_layernorm.weight", {d}));
  if (c.qk_norm) {
    ASSIGN_OR_RETURN(w.q_norm_weight, r.Read("self_attn.q_norm.weight", {dh}));
    ASSIGN_OR_RETURN(w.k_norm_weight, r.Read("self_attn.k_norm.weight", {dh}));
  }
  std::vector<float> qkv, qkv_bias;
  for (auto [name, width] : {std::pair{"q", qw}, {"k", kvw}, {"v", kvw}}) {
    ASSIGN_OR_RETURN(
        std::vector<float> part,
        r.Read(absl::StrCat("self_attn.", name, "_proj.weight"), {width, d}));
    Append(qkv, part);
    ASSIGN_OR_RETURN(
        part,
        r.ReadOrZeros(c.qkv_bias, absl::StrCat("self_attn.", name, "_proj.bias"), width));
    Append(qkv_bias, part);
  }
  w.qkv = std::make_unique<LinearWeights>(qkv.data(), qw + 2 * kvw, d, false,
                                          qkv_bias.data(), format);
  ASSIGN_OR_RETURN(std::vector<float> o, r.Read("self_attn.o_proj.weight", {d, qw}));
  ASSIGN_OR_RETURN(std::vector<float> o_bias,
                   r.ReadOrZeros(c.output_bias, "self_attn.o_proj.bias", d));
  w.output =
      std::make_unique<LinearWeights>(o.data(), d, qw, false, o_bias.data(), format);
  std::vector<float> gate_up, gate_up_bias;
  for (const char* name : {"gate", "up"}) {
    ASSIGN_OR_RETURN(std::vector<float> part,
                     r.Read(absl::StrCat("mlp.", name, "_proj.weight"), {f, d}));
    Append(gate_up, part);
    ASSIGN_OR_RETURN(
        part, r.ReadOrZeros(c.mlp_bias, absl::StrCat("mlp.", name, "_proj.bias"), f));
    Append(gate_up_bias, part);
  }
  w.up = std::make_unique<LinearWeights>(gate_up.data(), 2 * f, d, false,
                                         gate_up_bias.data(), format);
  ASSIGN_OR_RETURN(std::vector<float> down, r.Read("mlp.down_proj.weight", {d, f}));
  ASSIGN_OR_RETURN(std::vector<float> down_bias,
                   r.ReadOrZeros(c.mlp_bias, "mlp.down_proj.bias", d));
  w.down =
      std::make_unique<LinearWeights>(down.data(), d, f, false, down_bias.data(), format);
  return w;
}

absl::StatusOr<kernels::BlockWeights> LoadGpt2Block(const ModelConfig& c,
                                                    const TensorReader& r,
                                                    kernels::WeightFormat format) {
  const int64_t d = c.hidden_size, f = c.intermediate_size;
  kernels::BlockWeights w;
  ASSIGN_OR_RETURN(w.attn_norm_weight, r.Read("ln_1.weight", {d}));
  ASSIGN_OR_RETURN(w.attn_norm_bias, r.Read("ln_1.bias", {d}));
  ASSIGN_OR_RETURN(w.mlp_norm_weight, r.Read("ln_2.weight", {d}));
  ASSIGN_OR_RETURN(w.mlp_norm_bias, r.Read("ln_2.bias", {d}));
  // Conv1D weights are stored [in, out].
  auto conv1d = [&](const std::string& name, int64_t in,
                    int64_t out) -> absl::StatusOr<std::unique_ptr<LinearWeights>> {
    ASSIGN_OR_RETURN(std::vector<float> weight, r.Read(name + ".weight", {in, out}));
    ASSIGN_OR_RETURN(std::vector<float> bias, r.Read(name + ".bias", {out}));
    return std::make_unique<LinearWeights>(weight.data(), out, in, true, bias.data(),
                                           format);
  };
  ASSIGN_OR_RETURN(w.qkv, conv1d("attn.c_attn", d, 3 * d));
  ASSIGN_OR_RETURN(w.output, conv1d("attn.c_proj", d, d));
  ASSIGN_OR_RETURN(w.up, conv1d("mlp.c_fc", d, f));
  ASSIGN_OR_RETURN(w.down, conv1d("mlp.c_proj", f, d));
  return w;
}

absl::StatusOr<kernels::BlockWeights> LoadNeoxBlock(const ModelConfig& c,
                                                    const TensorReader& r,
                                                    kernels::WeightFormat format) {
  const int64_t d = c.hidden_size, f = c.intermediate_size, h = c.num_heads;
  const int64_t dh = c.head_dim;
  kernels::BlockWeights w;
  ASSIGN_OR_RETURN(w.attn_norm_weight, r.Read("input_layernorm.weight", {d}));
  ASSIGN_OR_RETURN(w.attn_norm_bias, r.Read("input_layernorm.bias", {d}));
  ASSIGN_OR_RETURN(w.mlp_norm_weight, r.Read("post_attention_layernorm.weight", {d}));
  ASSIGN_OR_RETURN(w.mlp_norm_bias, r.Read("post_attention_layernorm.bias", {d}));
  // query_key_value rows are grouped per head, [H, 3, Dh]; the kernels want
  // [3, H, Dh] (all q heads, then k, then v).
  ASSIGN_OR_RETURN(std::vector<float> fused,
                   r.Read("attention.query_key_value.weight", {3 * h * dh, d}));
  ASSIGN_OR_RETURN(
      std::vector<float> fused_bias,
      r.ReadOrZeros(c.qkv_bias, "attention.query_key_value.bias", 3 * h * dh));
  std::vector<float> qkv(fused.size()), qkv_bias(fused_bias.size());
  for (int64_t head = 0; head < h; ++head) {
    for (int64_t part = 0; part < 3; ++part) {
      for (int64_t i = 0; i < dh; ++i) {
        const int64_t from = (head * 3 + part) * dh + i, to = (part * h + head) * dh + i;
        std::copy(fused.begin() + from * d, fused.begin() + (from + 1) * d,
                  qkv.begin() + to * d);
        qkv_bias[to] = fused_bias[from];
      }
    }
  }
  w.qkv = std::make_unique<LinearWeights>(qkv.data(), 3 * h * dh, d, false,
                                          qkv_bias.data(), format);
  auto linear = [&](const std::string& name, int64_t out, int64_t in,
                    bool bias) -> absl::StatusOr<std::unique_ptr<LinearWeights>> {
    ASSIGN_OR_RETURN(std::vector<float> weight, r.Read(name + ".weight", {out, in}));
    ASSIGN_OR_RETURN(std::vector<float> b, r.ReadOrZeros(bias, name + ".bias", out));
    return std::make_unique<LinearWeights>(weight.data(), out, in, false, b.data(),
                                           format);
  };
  ASSIGN_OR_RETURN(w.output, linear("attention.dense", d, h * dh, c.output_bias));
  ASSIGN_OR_RETURN(w.up, linear("mlp.dense_h_to_4h", f, d, c.mlp_bias));
  ASSIGN_OR_RETURN(w.down, linear("mlp.dense_4h_to_h", d, f, c.mlp_bias));
  return w;
}

}  // namespace

kernels::BlockConfig ToBlockConfig(const ModelConfig& c) {
  kernels::BlockConfig b;
  b.hidden_size = c.hidden_size;
  b.num_heads = c.num_heads;
  b.num_kv_heads = c.num_kv_heads;
  b.head_dim = c.head_dim;
  b.intermediate_size = c.intermediate_size;
  b.activation = ToKernelActivation(c.activation);
  b.gated_mlp = c.gated_mlp;
  b.rms_norm = c.rms_norm;
  b.norm_weight_offset = c.norm_weight_offset;
  b.norm_epsilon = c.norm_epsilon;
  b.qk_norm = c.qk_norm;
  b.parallel_residual = c.parallel_residual;
  b.has_rope = c.has_rope;
  b.rope_theta = c.rope_theta;
  b.rotary_dim = c.rotary_dim;
  b.rope_scaling = c.rope_scaling;
  b.attention_scale = c.attention_scale;
  return b;
}

absl::StatusOr<std::vector<kernels::BlockWeights>> LoadBlocks(
    const ModelConfig& c, const Checkpoint& checkpoint, kernels::WeightFormat format,
    int64_t layer_start, int64_t layer_end) {
  std::string prefix;
  switch (c.family) {
    case BlockFamily::kLlama:
      prefix =
          LayerPrefix(checkpoint, "model.layers.", "layers.", "input_layernorm.weight");
      break;
    case BlockFamily::kGpt2:
      prefix = LayerPrefix(checkpoint, "transformer.h.", "h.", "ln_1.weight");
      break;
    case BlockFamily::kGptNeox:
      prefix = LayerPrefix(checkpoint, "gpt_neox.layers.", "layers.",
                           "input_layernorm.weight");
      break;
  }
  std::vector<kernels::BlockWeights> blocks;
  for (int64_t i = layer_start; i < layer_end; ++i) {
    const TensorReader reader(checkpoint, absl::StrCat(prefix, i, "."));
    absl::StatusOr<kernels::BlockWeights> block;
    switch (c.family) {
      case BlockFamily::kLlama:
        block = LoadLlamaBlock(c, reader, format);
        break;
      case BlockFamily::kGpt2:
        block = LoadGpt2Block(c, reader, format);
        break;
      case BlockFamily::kGptNeox:
        block = LoadNeoxBlock(c, reader, format);
        break;
    }
    if (!block.ok()) return block.status();
    blocks.push_back(std::move(*block));
  }
  return blocks;
}

}  // namespace layerserve
