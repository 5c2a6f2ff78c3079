"""A Llama-shaped checkpoint of random weights, written as Hugging Face lays it out
(config.json and one model.safetensors), for tests and benchmarks that need a model
of a given size rather than the golden ones' numbers: the server's split paths only
run on layers large enough to split.

    write_random_llama(directory, hidden=1024, heads=16, kv_heads=4, ffn=2816)
"""
import json
import os

import numpy as np

from safetensors_file import write_safetensors


def bfloat16_bits(values):
    """float32 array -> uint16 bfloat16 bits, rounded to nearest even."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    return (rounded >> 16).astype(np.uint16)


def write_random_llama(directory, hidden, heads, kv_heads, ffn, layers=1,
                       dtype="bfloat16", seed=0, rope_theta=500000.0,
                       max_position_embeddings=8192):
    """Writes config.json and model.safetensors into `directory` (created), weights
    normal with standard deviation 0.02 (norm weights 1), stored as `dtype`
    ("bfloat16" or "float32"). Returns the directory."""
    os.makedirs(directory, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": hidden, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "intermediate_size": ffn,
        "num_hidden_layers": layers, "rms_norm_eps": 1e-5, "rope_theta": rope_theta,
        "max_position_embeddings": max_position_embeddings, "hidden_act": "silu",
        "vocab_size": 32, "torch_dtype": dtype, "tie_word_embeddings": False,
    }
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    rng = np.random.default_rng(seed)
    head_dim = hidden // heads

    def tensor(shape, ones=False):
        values = (np.ones(shape, np.float32) if ones
                  else (rng.standard_normal(shape, np.float32) * 0.02))
        if dtype == "bfloat16":
            return "BF16", shape, bfloat16_bits(values).tobytes()
        return "F32", shape, values.tobytes()

    tensors = {}
    for layer in range(layers):
        p = f"model.layers.{layer}."
        tensors[p + "input_layernorm.weight"] = tensor((hidden,), ones=True)
        tensors[p + "self_attn.q_proj.weight"] = tensor((heads * head_dim, hidden))
        tensors[p + "self_attn.k_proj.weight"] = tensor((kv_heads * head_dim, hidden))
        tensors[p + "self_attn.v_proj.weight"] = tensor((kv_heads * head_dim, hidden))
        tensors[p + "self_attn.o_proj.weight"] = tensor((hidden, heads * head_dim))
        tensors[p + "post_attention_layernorm.weight"] = tensor((hidden,), ones=True)
        tensors[p + "mlp.gate_proj.weight"] = tensor((ffn, hidden))
        tensors[p + "mlp.up_proj.weight"] = tensor((ffn, hidden))
        tensors[p + "mlp.down_proj.weight"] = tensor((hidden, ffn))
    write_safetensors(os.path.join(directory, "model.safetensors"),
                      [(name, *entry) for name, entry in tensors.items()])
    return directory
