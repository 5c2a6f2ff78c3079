"""Writes the tiny Hugging Face checkpoints in tests/golden/models/ and the BlockForward
reference outputs in tests/golden/block_golden.json, computed by PyTorch the way
Hugging Face transformers computes each architecture's decoder layer.

Run from anywhere with Debian's interpreter (the one that has torch):

    /usr/bin/python3 tests/golden/make_block_golden.py [--check]

The outputs are committed; rerun only when the cases change. Seeded and
deterministic: a rerun with the same torch writes the same bytes; --check regenerates
the JSON and the checkpoints in a temporary directory and fails unless they equal
the committed ones (golden_common.py; ctest runs it as golden_check_block).

transformers is not installed (and cannot be), so each architecture's layer is written
out below in plain float32 torch ops, op by op as in transformers' modeling code, under
the HF names: LlamaRMSNorm, rotate_half, apply_rotary_pos_emb, repeat_kv,
eager_attention_forward, LlamaMLP, LlamaDecoderLayer (llama, mistral, qwen2 with q/k/v
bias); Qwen3Attention (q_norm/k_norm over each head before RoPE; attention_bias covers
q, k, v and o); GemmaRMSNorm (x * rsqrt(mean(x^2) + eps) * (1 + w)) and GemmaMLP
(hidden_activation, default gelu_pytorch_tanh); GPT2Block / GPT2Attention._attn /
Conv1D (weight [in, out], addmm) / GPT2MLP with NewGELUActivation ("gelu_new");
GPTNeoXLayer / GPTNeoXAttention (fused query_key_value viewed [.., H, 3 * Dh], partial
rotary on the first int(Dh * rotary_pct) dims, baddbmm with alpha = Dh^-0.5,
use_parallel_residual). RoPE frequencies (hf_rope.py) follow modeling_rope_utils.py
(_compute_default_rope_parameters, _compute_linear_scaling_rope_parameters,
_compute_yarn_parameters with original_max_position_embeddings taken from
rope_scaling and the default attention factor 0.1 ln(factor) + 1,
_compute_llama3_parameters) and LlamaRotaryEmbedding.forward (freqs = inv_freq @
position_ids.float(), emb = cat(freqs, freqs), cos/sin * attention_scaling).
The YaRN config here has max_position_embeddings == factor * original: there the
releases that set factor = max_position_embeddings / original when rope_scaling has
original_max_position_embeddings and those that keep rope_scaling's factor agree
(the first YaRN releases measured the correction range against
max_position_embeddings instead; no current checkpoint relies on that).

Masking: causal, plus right padding given as sequence_lengths: a padded key gets
torch.finfo(float32).min added (HF's 4-D mask built from attention_mask), so it gets
probability 0. Padded query rows are computed by HF but meaningless; the server returns
them as zeros and the expected outputs here hold zeros there. One case runs with
causal = false (padding mask only), the server's bidirectional option.

Checkpoints: config.json + model.safetensors written by hand (8-byte little-endian
header length, JSON header {name: {dtype, shape, data_offsets}} padded with spaces to 8
bytes, then the raw little-endian data), with the parameter names of the *ForCausalLM
classes ("model.", "gpt_neox." prefixes) or of the bare *Model classes (no prefix:
"layers.", GPT-2's "h."). One is sharded (model.safetensors.index.json), one is stored in BF16 and
one in F16; for those the reference computes in float32 with exactly the stored
values, as the server does ("compute is float32 inside"). The GPT-2 checkpoint carries
the `attn.bias` causal-mask buffer [1, 1, n_positions, n_positions] and the scalar
`attn.masked_bias` that old HF checkpoints hold; the loader must ignore them.
Embeddings and final norms are included as real checkpoints have them and must be
ignored as well.

Weights are scaled (about N(0, 1/in); see QK_GAIN below) so every sub-layer changes
the residual stream by ~0.5 RMS and attention is far from uniform; biases and norm
weights are far from 0 and 1, and Gemma's stored norm weights are far from 0, so
(1 + w) versus w matters.
Hidden-state inputs are exactly representable in bfloat16, so the same expected output
serves requests sent as FLOAT32 and as BFLOAT16.

Tolerances for consumers of this file (|got - expected| <= tol * max(1, |expected|),
padded rows compared as exact zeros):
  server --weight-dtype=float32:   tol = 1e-4   (float32 sums in another order through
                                                 2-3 blocks of O(1) values: ~1e-6 seen;
                                                 inv_freq may differ by 1 ulp from
                                                 torch's pow, moving angles at positions
                                                 <= 100 by ~1e-5 relative)
  server --weight-dtype=bfloat16:  tol = 3e-2   (weights and matmul inputs rounded to
                                                 8 significant bits, 2^-9 relative each,
                                                 accumulated through the blocks)
  BFLOAT16 response on the wire:   add 2^-8 to tol (rounding the output to bfloat16,
                                                 2^-9 relative, with margin)
Mean attention entropies (nats, per block and head, averaged over the real query
tokens of all sequences) compare at |got - expected| <= 1e-5 (float32 weights:
probabilities within a few float32 ulps) and 1e-2 (bfloat16 weights: scores off by
~2^-8 relative) absolute; they lie in [0, ln(T)].

Numbers are written as the shortest decimal that reads back (as a double rounded to
float32) to the exact float32 value. Schema:
  {"generator", "torch_version", "seed", "tolerance": {...},
   "models": {name: {"dir", "storage" ("F32" | "BF16" | "F16"), "sharded",
                     "prefix", "config" (the config.json written), "info" (the
                     ModelInfo fields the server must report: architecture,
                     num_layers, hidden_size, num_attention_heads,
                     num_key_value_heads, head_dim, intermediate_size, activation
                     (proto enum name), norm, norm_epsilon, max_position_embeddings,
                     rope (null, or {theta, rotary_dim, style, scaling: {type,
                     factor, original_max_position_embeddings, beta_fast, beta_slow,
                     attention_factor, low_freq_factor, high_freq_factor} with null
                     for fields that do not apply}))}},
   "cases": [{"name", "model", "layer_start", "num_layers", "shape" ([B, T, D] or
              [T, D]), "hidden_states" (flat), "sequence_lengths" ([] = none),
              "position_offset", "positions" ([] = use the offset), "causal" (null =
              the model's default), "expected" (flat, padded rows zero),
              "attention_entropy" ([num_layers][num_attention_heads])}]}
"""

import json
import math
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from safetensors_file import write_safetensors  # noqa: E402

import golden_common
from golden_common import bf16_exact, floats, golden_doc, short_float, write_json
from hf_rope import (_compute_default_rope_parameters,
                     _compute_linear_scaling_rope_parameters, _compute_llama3_parameters,
                     _compute_yarn_parameters)

SEED = 20250311
MODELS_SUBDIR = "models"  # The checkpoints' directory, next to the JSON.
OUT = "block_golden.json"

F32_MIN = torch.finfo(torch.float32).min

# ---------------------------------------------------------------------------------
# Hugging Face building blocks, same torch ops (float32 throughout).
# ---------------------------------------------------------------------------------


def llama_rms_norm(x, weight, eps):
    """LlamaRMSNorm.forward (also Qwen2RMSNorm, Qwen3RMSNorm, MistralRMSNorm)."""
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    return weight * x


def gemma_rms_norm(x, weight, eps):
    """GemmaRMSNorm.forward: the scale is (1 + weight)."""
    output = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return output * (1.0 + weight)


def layer_norm(x, weight, bias, eps):
    """nn.LayerNorm (GPT2Block.ln_1/ln_2, GPTNeoXLayer.input_layernorm...)."""
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def linear(x, weight, bias=None):
    """nn.Linear: x @ W^T + b, W [out, in]."""
    return torch.nn.functional.linear(x, weight, bias)


def conv1d(x, weight, bias):
    """GPT-2's Conv1D.forward: addmm(bias, x, W) with W stored [in, out]."""
    size_out = x.size()[:-1] + (weight.shape[1],)
    return torch.addmm(bias, x.reshape(-1, x.size(-1)), weight).view(size_out)


def new_gelu(x):
    """NewGELUActivation ("gelu_new", GPT-2)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                       (x + 0.044715 * torch.pow(x, 3.0))))


ACT2FN = {
    "silu": torch.nn.functional.silu,
    "gelu": torch.nn.functional.gelu,  # GELUActivation: the exact erf form.
    "gelu_pytorch_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "gelu_new": new_gelu,
}


def rope_parameters(config, dim):
    """ROPE_INIT_FUNCTIONS[rope_type](config) for the types the checkpoints use."""
    base = config.get("rope_theta", config.get("rotary_emb_base", 10000.0))
    rs = config.get("rope_scaling")
    kind = "default" if rs is None else rs.get("rope_type", rs.get("type"))
    if kind == "default":
        return _compute_default_rope_parameters(base, dim)
    if kind == "linear":
        return _compute_linear_scaling_rope_parameters(base, dim, rs["factor"])
    if kind == "yarn":
        return _compute_yarn_parameters(
            base, dim, rs["factor"], rs["original_max_position_embeddings"],
            rs.get("beta_fast"), rs.get("beta_slow"), rs.get("attention_factor"))
    if kind == "llama3":
        return _compute_llama3_parameters(
            base, dim, rs["factor"], rs["original_max_position_embeddings"],
            rs["low_freq_factor"], rs["high_freq_factor"])
    raise ValueError(kind)


def rotary_cos_sin(inv_freq, attention_scaling, position_ids):
    """LlamaRotaryEmbedding.forward: cos, sin [B, T, dim]."""
    inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].float()
    freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * attention_scaling, emb.sin() * attention_scaling


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    """modeling_llama.apply_rotary_pos_emb; partial rotary as modeling_gpt_neox's:
    the first cos.shape[-1] dims rotate, the rest pass through."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]
    q_embed = (q_rot * cos) + (rotate_half(q_rot) * sin)
    k_embed = (k_rot * cos) + (rotate_half(k_rot) * sin)
    return torch.cat((q_embed, q_pass), dim=-1), torch.cat((k_embed, k_pass), dim=-1)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep,
                                                           slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def additive_mask(lengths, T, causal):
    """HF's 4-D float mask [B, 1, T, T] from a right-padded attention_mask: 0 where
    query i may see key j, finfo.min elsewhere."""
    keys_valid = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # [B, T]
    allowed = keys_valid[:, None, None, :].expand(len(lengths), 1, T, T)
    if causal:
        allowed = allowed & torch.tril(torch.ones(T, T, dtype=torch.bool))[None, None]
    zero = torch.zeros((), dtype=torch.float32)
    return torch.where(allowed, zero, torch.tensor(F32_MIN))


def eager_attention_forward(query, key, value, attention_mask, scaling, groups):
    """modeling_llama.eager_attention_forward; also returns the probabilities."""
    key_states = repeat_kv(key, groups)
    value_states = repeat_kv(value, groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    attn_weights = attn_weights + attention_mask
    attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32)
    attn_output = torch.matmul(attn_weights, value_states)
    return attn_output.transpose(1, 2).contiguous(), attn_weights


# ---------------------------------------------------------------------------------
# Decoder layers. `w` maps the layer's HF parameter names (without the layer prefix)
# to float32 tensors; each returns (hidden_states, attention probabilities).
# ---------------------------------------------------------------------------------


def llama_family_layer(cfg, w, x, cos, sin, mask):
    """LlamaDecoderLayer (llama, mistral, qwen2), Qwen3DecoderLayer, GemmaDecoderLayer."""
    model_type = cfg["model_type"]
    eps = cfg["rms_norm_eps"]
    norm = gemma_rms_norm if model_type == "gemma" else llama_rms_norm
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    B, T, _ = x.shape
    hidden_shape = (B, T, -1, head_dim)

    residual = x
    h = norm(x, w["input_layernorm.weight"], eps)
    q = linear(h, w["self_attn.q_proj.weight"], w.get("self_attn.q_proj.bias"))
    k = linear(h, w["self_attn.k_proj.weight"], w.get("self_attn.k_proj.bias"))
    v = linear(h, w["self_attn.v_proj.weight"], w.get("self_attn.v_proj.bias"))
    q, k, v = q.view(hidden_shape), k.view(hidden_shape), v.view(hidden_shape)
    if model_type == "qwen3":
        q = llama_rms_norm(q, w["self_attn.q_norm.weight"], eps)
        k = llama_rms_norm(k, w["self_attn.k_norm.weight"], eps)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    attn, probs = eager_attention_forward(q, k, v, mask, head_dim ** -0.5,
                                          heads // kv_heads)
    attn = attn.reshape(B, T, -1)
    attn = linear(attn, w["self_attn.o_proj.weight"], w.get("self_attn.o_proj.bias"))
    x = residual + attn

    residual = x
    h = norm(x, w["post_attention_layernorm.weight"], eps)
    if model_type == "gemma":
        act = ACT2FN[cfg.get("hidden_activation") or "gelu_pytorch_tanh"]
    else:
        act = ACT2FN[cfg["hidden_act"]]
    gate = linear(h, w["mlp.gate_proj.weight"], w.get("mlp.gate_proj.bias"))
    up = linear(h, w["mlp.up_proj.weight"], w.get("mlp.up_proj.bias"))
    h = linear(act(gate) * up, w["mlp.down_proj.weight"], w.get("mlp.down_proj.bias"))
    return residual + h, probs


def gpt2_block(cfg, w, x, cos, sin, mask):
    """GPT2Block with GPT2Attention._attn (no layer-idx scaling) and GPT2MLP."""
    del cos, sin  # GPT-2's positions are learned and added by the client.
    eps = cfg["layer_norm_epsilon"]
    heads = cfg["n_head"]
    B, T, D = x.shape
    head_dim = D // heads
    residual = x
    h = layer_norm(x, w["ln_1.weight"], w["ln_1.bias"], eps)
    query, key, value = conv1d(h, w["attn.c_attn.weight"], w["attn.c_attn.bias"]).split(
        D, dim=2)

    def split_heads(t):
        return t.view(B, T, heads, head_dim).permute(0, 2, 1, 3)

    query, key, value = split_heads(query), split_heads(key), split_heads(value)
    attn_weights = torch.matmul(query, key.transpose(-1, -2))
    attn_weights = attn_weights / torch.full([], value.size(-1) ** 0.5,
                                             dtype=attn_weights.dtype)
    # The causal part of `mask` plays the role of the `bias` buffer (torch.where with
    # finfo.min), the padding part that of the additive attention_mask.
    attn_weights = attn_weights + mask
    attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1)
    attn = torch.matmul(attn_weights, value)
    attn = attn.permute(0, 2, 1, 3).contiguous().view(B, T, D)
    attn = conv1d(attn, w["attn.c_proj.weight"], w["attn.c_proj.bias"])
    x = attn + residual
    residual = x
    h = layer_norm(x, w["ln_2.weight"], w["ln_2.bias"], eps)
    h = conv1d(h, w["mlp.c_fc.weight"], w["mlp.c_fc.bias"])
    h = ACT2FN[cfg.get("activation_function", "gelu_new")](h)
    h = conv1d(h, w["mlp.c_proj.weight"], w["mlp.c_proj.bias"])
    return residual + h, attn_weights


def gpt_neox_layer(cfg, w, x, cos, sin, mask):
    """GPTNeoXLayer with GPTNeoXAttention (fused qkv per head, partial rotary)."""
    eps = cfg["layer_norm_eps"]
    heads = cfg["num_attention_heads"]
    B, T, D = x.shape
    head_size = D // heads
    attn_in = layer_norm(x, w["input_layernorm.weight"], w["input_layernorm.bias"], eps)
    qkv = linear(attn_in, w["attention.query_key_value.weight"],
                 w["attention.query_key_value.bias"])
    qkv = qkv.view(B, T, heads, 3 * head_size)
    query = qkv[..., :head_size].permute(0, 2, 1, 3)
    key = qkv[..., head_size:2 * head_size].permute(0, 2, 1, 3)
    value = qkv[..., 2 * head_size:].permute(0, 2, 1, 3)
    query, key = apply_rotary_pos_emb(query, key, cos, sin)
    q = query.reshape(B * heads, T, head_size)
    k = key.reshape(B * heads, T, head_size)
    scores = torch.baddbmm(torch.zeros(B * heads, T, T), q, k.transpose(1, 2), beta=1.0,
                           alpha=head_size ** -0.5).view(B, heads, T, T)
    scores = scores + mask
    probs = torch.nn.functional.softmax(scores, dim=-1)
    attn = torch.matmul(probs, value).permute(0, 2, 1, 3).contiguous().view(B, T, D)
    attn_output = linear(attn, w["attention.dense.weight"], w["attention.dense.bias"])
    act = ACT2FN[cfg["hidden_act"]]

    def mlp(h):
        h = linear(h, w["mlp.dense_h_to_4h.weight"], w["mlp.dense_h_to_4h.bias"])
        return linear(act(h), w["mlp.dense_4h_to_h.weight"], w["mlp.dense_4h_to_h.bias"])

    if cfg["use_parallel_residual"]:
        mlp_output = mlp(layer_norm(x, w["post_attention_layernorm.weight"],
                                    w["post_attention_layernorm.bias"], eps))
        return mlp_output + attn_output + x, probs
    attn_output = attn_output + x
    mlp_output = mlp(layer_norm(attn_output, w["post_attention_layernorm.weight"],
                                w["post_attention_layernorm.bias"], eps))
    return mlp_output + attn_output, probs


# ---------------------------------------------------------------------------------
# Safetensors, written by hand.
# ---------------------------------------------------------------------------------


def to_storage(t, storage):
    """(safetensors dtype, raw little-endian bytes, the float32 values stored)."""
    t = t.contiguous()
    if storage == "F32":
        return "F32", t.numpy().astype("<f4").tobytes(), t
    if storage == "BF16":
        b = t.to(torch.bfloat16)
        return "BF16", b.view(torch.int16).numpy().astype("<i2").tobytes(), b.float()
    if storage == "F16":
        h = t.to(torch.float16)
        return "F16", h.numpy().astype("<f2").tobytes(), h.float()
    raise ValueError(storage)


# ---------------------------------------------------------------------------------
# The tiny models.
# ---------------------------------------------------------------------------------

rng = torch.Generator().manual_seed(SEED)
# Gains over N(0, 1/in): q/k and the MLP input keep unit-scale activations (scores of
# O(1), attention neither uniform nor one-hot); the projections back into the residual
# stream (o_proj, down_proj and their GPT-2 / NeoX twins) are halved so each
# sub-layer moves the stream by ~0.5 RMS: enough to test, and small enough that
# bfloat16 weights stay within their 3e-2 tolerance (worst seen 0.024; with gains
# 1.6 / 1.5 / 1 it was 0.13, the bfloat16 error itself, not a server fault).
QK_GAIN = 1.0
MLP_GAIN = 1.0
OUT_GAIN = 0.5


def randn(*shape, std=1.0, mean=0.0):
    return torch.randn(*shape, generator=rng) * std + mean


def dense(out, inp, gain=1.0):
    return randn(out, inp, std=gain / math.sqrt(inp))


def llama_family_weights(cfg, with_embeddings):
    """HF parameter names and values of every layer, as LlamaForCausalLM saves them."""
    D, F = cfg["hidden_size"], cfg["intermediate_size"]
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    dh = cfg.get("head_dim") or D // heads
    model_type = cfg["model_type"]
    gemma = model_type == "gemma"
    qkv_bias = cfg.get("attention_bias", False) or model_type == "qwen2"
    o_bias = cfg.get("attention_bias", False) and model_type != "qwen2"
    mlp_bias = cfg.get("mlp_bias", False)

    def norm_weight(n):
        # Gemma stores w for a scale of (1 + w): keep it far from 0 and from 1.
        return randn(n, std=0.3, mean=0.4) if gemma else randn(n, std=0.3, mean=1.0)

    layers = []
    for _ in range(cfg["num_hidden_layers"]):
        w = {"input_layernorm.weight": norm_weight(D)}
        w["self_attn.q_proj.weight"] = dense(heads * dh, D, QK_GAIN)
        w["self_attn.k_proj.weight"] = dense(kv_heads * dh, D, QK_GAIN)
        w["self_attn.v_proj.weight"] = dense(kv_heads * dh, D)
        if qkv_bias:
            w["self_attn.q_proj.bias"] = randn(heads * dh, std=0.3)
            w["self_attn.k_proj.bias"] = randn(kv_heads * dh, std=0.3)
            w["self_attn.v_proj.bias"] = randn(kv_heads * dh, std=0.3)
        w["self_attn.o_proj.weight"] = dense(D, heads * dh, OUT_GAIN)
        if o_bias:
            w["self_attn.o_proj.bias"] = randn(D, std=0.3)
        if model_type == "qwen3":
            w["self_attn.q_norm.weight"] = randn(dh, std=0.3, mean=1.0)
            w["self_attn.k_norm.weight"] = randn(dh, std=0.3, mean=1.0)
        w["post_attention_layernorm.weight"] = norm_weight(D)
        w["mlp.gate_proj.weight"] = dense(F, D, MLP_GAIN)
        w["mlp.up_proj.weight"] = dense(F, D)
        w["mlp.down_proj.weight"] = dense(D, F, OUT_GAIN)
        if mlp_bias:
            w["mlp.gate_proj.bias"] = randn(F, std=0.3)
            w["mlp.up_proj.bias"] = randn(F, std=0.3)
            w["mlp.down_proj.bias"] = randn(D, std=0.3)
        layers.append(w)
    extra = {}
    if with_embeddings:
        extra["embed_tokens.weight"] = randn(cfg["vocab_size"], D, std=0.02)
        extra["norm.weight"] = norm_weight(D)
    return layers, extra


def gpt2_weights(cfg):
    D = cfg["n_embd"]
    F = cfg.get("n_inner") or 4 * D
    n_pos = cfg["n_positions"]
    layers = []
    for _ in range(cfg["n_layer"]):
        w = {
            "ln_1.weight": randn(D, std=0.3, mean=1.0),
            "ln_1.bias": randn(D, std=0.2),
            # Conv1D stores [in, out]: q | k | v along the output axis.
            "attn.c_attn.weight": torch.cat([dense(D, D, QK_GAIN).t(), dense(D, D, QK_GAIN).t(),
                                             dense(D, D).t()], dim=1),
            "attn.c_attn.bias": randn(3 * D, std=0.3),
            "attn.c_proj.weight": dense(D, D, OUT_GAIN).t(),
            "attn.c_proj.bias": randn(D, std=0.3),
            "ln_2.weight": randn(D, std=0.3, mean=1.0),
            "ln_2.bias": randn(D, std=0.2),
            "mlp.c_fc.weight": dense(F, D, MLP_GAIN).t(),
            "mlp.c_fc.bias": randn(F, std=0.3),
            "mlp.c_proj.weight": dense(D, F, OUT_GAIN).t(),
            "mlp.c_proj.bias": randn(D, std=0.3),
        }
        layers.append(w)
    extra = {"wte.weight": randn(cfg["vocab_size"], D, std=0.02),
             "wpe.weight": randn(n_pos, D, std=0.02),
             "ln_f.weight": randn(D, std=0.3, mean=1.0), "ln_f.bias": randn(D, std=0.2)}
    return layers, extra


def gpt_neox_weights(cfg):
    D, F = cfg["hidden_size"], cfg["intermediate_size"]
    layers = []
    for _ in range(cfg["num_hidden_layers"]):
        heads = cfg["num_attention_heads"]
        dh = D // heads
        # Rows [H, 3, Dh]: per head its q, k and v rows; q and k get the larger gain.
        qkv = torch.stack([dense(heads * dh, D, QK_GAIN).view(heads, dh, D),
                           dense(heads * dh, D, QK_GAIN).view(heads, dh, D),
                           dense(heads * dh, D).view(heads, dh, D)], dim=1)
        w = {
            "input_layernorm.weight": randn(D, std=0.3, mean=1.0),
            "input_layernorm.bias": randn(D, std=0.2),
            "post_attention_layernorm.weight": randn(D, std=0.3, mean=1.0),
            "post_attention_layernorm.bias": randn(D, std=0.2),
            "attention.query_key_value.weight": qkv.reshape(3 * D, D),
            "attention.query_key_value.bias": randn(3 * D, std=0.3),
            "attention.dense.weight": dense(D, D, OUT_GAIN),
            "attention.dense.bias": randn(D, std=0.3),
            "mlp.dense_h_to_4h.weight": dense(F, D, MLP_GAIN),
            "mlp.dense_h_to_4h.bias": randn(F, std=0.3),
            "mlp.dense_4h_to_h.weight": dense(D, F, OUT_GAIN),
            "mlp.dense_4h_to_h.bias": randn(D, std=0.3),
        }
        layers.append(w)
    extra = {"embed_in.weight": randn(cfg["vocab_size"], D, std=0.02),
             "final_layer_norm.weight": randn(D, std=0.3, mean=1.0),
             "final_layer_norm.bias": randn(D, std=0.2)}
    return layers, extra


# name: (config, storage, layer prefix, prefix of the non-layer tensors, sharded)
MODELS = {
    # Llama 3.1 style: GQA 4/2, llama3 rope scaling, biases everywhere (attention_bias
    # covers q, k, v and o; mlp_bias the MLP), LlamaForCausalLM names, two shards.
    "tiny-llama": ({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 48, "intermediate_size": 72, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu",
        "max_position_embeddings": 256, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": False,
        "vocab_size": 16, "torch_dtype": "float32"},
        "F32", "model.layers.", "model.", True),
    # Mistral: GQA, linear scaling in the old {"type": ...} form, MistralModel names
    # (no prefix), no biases.
    "tiny-mistral": ({
        "architectures": ["MistralModel"], "model_type": "mistral",
        "hidden_size": 40, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu",
        "max_position_embeddings": 512, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
        "rope_scaling": {"type": "linear", "factor": 2.0}, "sliding_window": 4096,
        "vocab_size": 16, "torch_dtype": "float32"},
        "F32", "layers.", "", False),
    # Qwen2: q/k/v bias, no o bias, YaRN; stored in bfloat16.
    "tiny-qwen2": ({
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "hidden_size": 48, "intermediate_size": 72, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu",
        "max_position_embeddings": 128, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
        "rope_scaling": {"type": "yarn", "factor": 4.0,
                         "original_max_position_embeddings": 32},
        "use_sliding_window": False, "tie_word_embeddings": True, "vocab_size": 16,
        "torch_dtype": "bfloat16"},
        "BF16", "model.layers.", "model.", False),
    # Qwen3: per-head q_norm/k_norm, head_dim 16 != 40 / 4, attention_bias (which for
    # Qwen3 covers o_proj as well); stored in float16.
    "tiny-qwen3": ({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "hidden_size": 40, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "hidden_act": "silu", "max_position_embeddings": 512, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "rope_scaling": None, "attention_bias": True,
        "use_sliding_window": False, "tie_word_embeddings": True, "vocab_size": 16,
        "torch_dtype": "float16"},
        "F16", "model.layers.", "model.", False),
    # Gemma: (1 + w) RMSNorm, GeGLU with the tanh GELU, head_dim 16 free of 48 / 4,
    # one KV head (multi-query), as google/gemma-2b's config says it.
    "tiny-gemma": ({
        "architectures": ["GemmaForCausalLM"], "model_type": "gemma",
        "hidden_size": 48, "intermediate_size": 72, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16,
        "hidden_act": "gelu", "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
        "attention_bias": False, "vocab_size": 16, "torch_dtype": "float32"},
        "F32", "model.layers.", "model.", False),
    # GPT-2: Conv1D weights [in, out], n_inner unset (= 4 * n_embd), GPT2Model names
    # with the attn.bias / attn.masked_bias buffers.
    "tiny-gpt2": ({
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "n_embd": 40, "n_head": 4, "n_layer": 2, "n_inner": None, "n_positions": 16,
        "n_ctx": 16, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
        "scale_attn_weights": True, "vocab_size": 16, "torch_dtype": "float32"},
        "F32", "h.", "", False),
    # GPT-NeoX (Pythia style): parallel residual, rotary_pct 0.25 of Dh 16, exact
    # GELU, GPTNeoXForCausalLM names.
    "tiny-neox": ({
        "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox",
        "hidden_size": 48, "intermediate_size": 72, "num_hidden_layers": 3,
        "num_attention_heads": 3, "rotary_pct": 0.25, "rotary_emb_base": 10000,
        "hidden_act": "gelu", "max_position_embeddings": 2048, "layer_norm_eps": 1e-05,
        "use_parallel_residual": True, "tie_word_embeddings": False, "vocab_size": 16,
        "torch_dtype": "float32"},
        "F32", "gpt_neox.layers.", "gpt_neox.", False),
    # GPT-NeoX with the sequential residual, rotary_pct 0.4 of Dh 10, GPTNeoXModel names.
    "tiny-neox-sequential": ({
        "architectures": ["GPTNeoXModel"], "model_type": "gpt_neox",
        "hidden_size": 40, "intermediate_size": 72, "num_hidden_layers": 2,
        "num_attention_heads": 4, "rotary_pct": 0.4, "rotary_emb_base": 10000,
        "hidden_act": "gelu_new", "max_position_embeddings": 2048,
        "layer_norm_eps": 1e-05, "use_parallel_residual": False, "vocab_size": 16,
        "torch_dtype": "float32"},
        "F32", "layers.", "", False),
}


def num_layers(cfg):
    return cfg.get("num_hidden_layers") or cfg["n_layer"]


def hidden_size(cfg):
    return cfg.get("hidden_size") or cfg["n_embd"]


def model_weights(cfg):
    t = cfg["model_type"]
    if t == "gpt2":
        return gpt2_weights(cfg)
    if t == "gpt_neox":
        return gpt_neox_weights(cfg)
    return llama_family_weights(cfg, with_embeddings=True)


def head_dim_of(cfg):
    heads = cfg.get("num_attention_heads") or cfg["n_head"]
    return cfg.get("head_dim") or hidden_size(cfg) // heads


def rotary_dim_of(cfg):
    if cfg["model_type"] == "gpt2":
        return 0
    if cfg["model_type"] == "gpt_neox":
        return int(head_dim_of(cfg) * cfg["rotary_pct"])
    return head_dim_of(cfg)


def expected_info(cfg):
    """The ModelInfo fields a server must report for this config (HF defaults)."""
    t = cfg["model_type"]
    if t == "gpt2":
        D = cfg["n_embd"]
        info = {"num_layers": cfg["n_layer"], "hidden_size": D,
                "num_attention_heads": cfg["n_head"], "num_key_value_heads": cfg["n_head"],
                "head_dim": D // cfg["n_head"],
                "intermediate_size": cfg.get("n_inner") or 4 * D,
                "activation": "GELU_TANH", "norm": "LAYER_NORM",
                "norm_epsilon": cfg["layer_norm_epsilon"],
                "max_position_embeddings": cfg["n_positions"], "rope": None}
    else:
        heads = cfg["num_attention_heads"]
        info = {"num_layers": cfg["num_hidden_layers"], "hidden_size": cfg["hidden_size"],
                "num_attention_heads": heads,
                "num_key_value_heads": cfg.get("num_key_value_heads", heads),
                "head_dim": head_dim_of(cfg),
                "intermediate_size": cfg["intermediate_size"],
                "max_position_embeddings": cfg["max_position_embeddings"]}
        if t == "gpt_neox":
            info.update(activation={"gelu": "GELU", "gelu_new": "GELU_TANH"}[cfg["hidden_act"]],
                        norm="LAYER_NORM", norm_epsilon=cfg["layer_norm_eps"])
            theta = cfg["rotary_emb_base"]
        else:
            act = (cfg.get("hidden_activation") or "gelu_pytorch_tanh") if t == "gemma" \
                else cfg["hidden_act"]
            info.update(activation={"silu": "SWIGLU", "gelu_pytorch_tanh": "GEGLU_TANH"}[act],
                        norm="RMS_NORM", norm_epsilon=cfg["rms_norm_eps"])
            theta = cfg["rope_theta"]
        rs = cfg.get("rope_scaling")
        scaling = {"type": "NONE", "factor": None, "original_max_position_embeddings": None,
                   "beta_fast": None, "beta_slow": None, "attention_factor": None,
                   "low_freq_factor": None, "high_freq_factor": None}
        if rs is not None:
            kind = rs.get("rope_type", rs.get("type"))
            scaling["type"] = {"linear": "LINEAR", "yarn": "YARN", "llama3": "LLAMA3"}[kind]
            scaling["factor"] = rs["factor"]
            scaling["original_max_position_embeddings"] = rs.get(
                "original_max_position_embeddings", cfg["max_position_embeddings"])
            if kind == "yarn":
                scaling["beta_fast"] = rs.get("beta_fast") or 32.0
                scaling["beta_slow"] = rs.get("beta_slow") or 1.0
            if kind == "llama3":
                scaling["low_freq_factor"] = rs["low_freq_factor"]
                scaling["high_freq_factor"] = rs["high_freq_factor"]
        info["rope"] = {"theta": float(theta), "rotary_dim": rotary_dim_of(cfg),
                        "style": "HALF", "scaling": scaling}
    info["architecture"] = t
    return info


def write_model(models_dir, name, cfg, storage, layer_prefix, extra_prefix, sharded):
    """Writes the checkpoint; returns the float32 layer weights as stored."""
    directory = os.path.join(models_dir, name)
    os.makedirs(directory)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    layers, extra = model_weights(cfg)
    stored_layers = []
    files = [[]]
    for i, w in enumerate(layers):
        stored = {}
        for key, value in w.items():
            dtype, raw, as_stored = to_storage(value, storage)
            stored[key] = as_stored.float()
            files[-1].append((f"{layer_prefix}{i}.{key}", dtype, value.shape, raw))
        if cfg["model_type"] == "gpt2":
            # Old GPT-2 checkpoints carry the causal-mask buffers; the loader ignores them.
            n = cfg["n_positions"]
            mask = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
            files[-1].append((f"{layer_prefix}{i}.attn.bias", "F32", mask.shape,
                              mask.numpy().astype("<f4").tobytes()))
            files[-1].append((f"{layer_prefix}{i}.attn.masked_bias", "F32", (),
                              np.array(-1e4, dtype="<f4").tobytes()))
        stored_layers.append(stored)
        if sharded and i == 0:
            files.append([])
    for key, value in extra.items():
        dtype, raw, _ = to_storage(value, storage)
        files[-1].append((f"{extra_prefix}{key}", dtype, value.shape, raw))
    if not sharded:
        write_safetensors(os.path.join(directory, "model.safetensors"), files[0])
    else:
        weight_map, total = {}, 0
        for k, tensors in enumerate(files):
            shard = f"model-{k + 1:05d}-of-{len(files):05d}.safetensors"
            write_safetensors(os.path.join(directory, shard), tensors)
            for tensor_name, _, _, raw in tensors:
                weight_map[tensor_name] = shard
                total += len(raw)
        with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total},
                       "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
            f.write("\n")
    return stored_layers


# ---------------------------------------------------------------------------------
# Reference forward and cases.
# ---------------------------------------------------------------------------------

LAYER_FN = {"llama": llama_family_layer, "mistral": llama_family_layer,
            "qwen2": llama_family_layer, "qwen3": llama_family_layer,
            "gemma": llama_family_layer, "gpt2": gpt2_block, "gpt_neox": gpt_neox_layer}


def reference(cfg, layers, x, lengths, position_ids, causal, layer_start, count):
    """Runs blocks layer_start .. layer_start + count - 1 on x [B, T, D]; returns the
    output with padded rows zeroed and the mean attention entropy per block and head."""
    B, T, _ = x.shape
    if cfg["model_type"] == "gpt2":
        cos = sin = None
    else:
        inv_freq, attention_scaling = rope_parameters(cfg, rotary_dim_of(cfg))
        cos, sin = rotary_cos_sin(inv_freq, attention_scaling, position_ids)
    mask = additive_mask(lengths, T, causal)
    real = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # [B, T]
    entropies = []
    for layer in range(layer_start, layer_start + count):
        x, probs = LAYER_FN[cfg["model_type"]](cfg, layers[layer], x, cos, sin, mask)
        # -sum p ln p per (b, h, query); masked keys have p == 0 exactly.
        plogp = torch.where(probs > 0, probs.double() * probs.double().log(),
                            torch.zeros((), dtype=torch.float64))
        entropy = -plogp.sum(-1)  # [B, H, T]
        per_head = (entropy * real[:, None, :]).sum(dim=(0, 2)) / real.sum()
        entropies.append(per_head.tolist())
    x = torch.where(real[:, :, None], x, torch.zeros(()))
    return x, entropies


def make_cases(name, cfg, layers):
    D = hidden_size(cfg)
    L = num_layers(cfg)
    cases = []

    def add(suffix, shape, layer_start, count, lengths=(), offset=0, positions=(),
            causal=None):
        x = bf16_exact(randn(*shape))
        x3 = x if len(shape) == 3 else x[None]
        B, T = x3.shape[0], x3.shape[1]
        lens = list(lengths) or [T] * B
        if not positions:
            pos = torch.arange(offset, offset + T)[None].expand(B, T)
        elif len(positions) == T:
            pos = torch.tensor(positions)[None].expand(B, T)
        else:
            pos = torch.tensor(positions).view(B, T)
        out, entropy = reference(cfg, layers, x3, lens, pos,
                                 True if causal is None else causal, layer_start, count)
        cases.append({
            "name": f"{name}/{suffix}", "model": name, "layer_start": layer_start,
            "num_layers": count, "shape": list(shape), "hidden_states": floats(x),
            "sequence_lengths": list(lengths), "position_offset": offset,
            "positions": list(positions), "causal": causal,
            "expected": floats(out.reshape(shape)),
            "attention_entropy": [[short_float(e) for e in row] for row in entropy]})

    add("b2t5_padded_layer0", (2, 5, D), 0, 1, lengths=(5, 3))
    if L >= 3:
        add("b2t5_offset7_layers1-2", (2, 5, D), 1, 2, lengths=(4, 5), offset=7)
    else:
        add("b2t5_offset7_layers0-1", (2, 5, D), 0, 2, lengths=(4, 5), offset=7)
    add("t5_positions_last_layer", (5, D), L - 1, 1, positions=(3, 4, 40, 41, 90))
    add("b2t4_positions_bt_all_layers", (2, 4, D), 0, L,
        positions=(0, 1, 2, 3, 50, 51, 52, 53), lengths=(4, 2))
    if name == "tiny-llama":
        add("b2t5_bidirectional_padded", (2, 5, D), 0, 2, lengths=(5, 2), offset=2,
            causal=False)
        # Longer rows than a SIMD vector, with tails, a one-token sequence among them.
        add("b3t37_padded_all_layers", (3, 37, D), 0, L, lengths=(37, 1, 20), offset=5)
    if name == "tiny-neox":
        add("b2t19_padded_all_layers", (2, 19, D), 0, L, lengths=(19, 11))
    return cases


def generate(out_dir):
    torch.manual_seed(SEED)
    rng.manual_seed(SEED)  # The weights' and inputs' draws start over.
    models_dir = os.path.join(out_dir, MODELS_SUBDIR)
    if os.path.isdir(models_dir):
        shutil.rmtree(models_dir)
    os.makedirs(models_dir)
    models, cases = {}, []
    for name, (cfg, storage, layer_prefix, extra_prefix, sharded) in MODELS.items():
        layers = write_model(models_dir, name, cfg, storage, layer_prefix, extra_prefix,
                             sharded)
        models[name] = {"dir": name, "storage": storage, "sharded": sharded,
                        "prefix": layer_prefix, "config": cfg, "info": expected_info(cfg)}
        cases.extend(make_cases(name, cfg, layers))
    golden = golden_doc("make_block_golden.py", SEED, {
        "tolerance": {"float32_weights": 1e-4, "bfloat16_weights": 3e-2,
                      "bfloat16_wire_extra": 2.0 ** -8,
                      "entropy_float32_weights": 1e-5, "entropy_bfloat16_weights": 1e-2},
        "models": models,
        "cases": cases,
    })
    out = os.path.join(out_dir, OUT)
    write_json(out, golden)
    total = sum(os.path.getsize(os.path.join(d, f))
                for d, _, fs in os.walk(models_dir) for f in fs)
    print(f"wrote {out} ({os.path.getsize(out)} bytes, {len(cases)} cases) and "
          f"{models_dir} ({total} bytes, {len(models)} models)")


if __name__ == "__main__":
    golden_common.main(generate, [OUT, MODELS_SUBDIR])
