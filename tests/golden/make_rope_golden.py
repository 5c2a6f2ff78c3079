"""Writes tests/golden/rope_golden.json: rotary position embedding cases computed by
PyTorch the way Hugging Face transformers computes them.

Run from anywhere with Debian's interpreter (the one that has torch):

    /usr/bin/python3 tests/golden/make_rope_golden.py [--check]

The output is committed; rerun only when the cases change. Seeded, so a rerun with
the same torch gives the same file; --check regenerates it in a temporary directory
and fails unless it equals the committed one (golden_common.py; ctest runs it as
golden_check_rope). transformers itself is not installed: the HF
functions are written out in the same torch ops, each under HF's name (the
frequency functions in hf_rope.py, shared with make_block_golden.py; the rest
below).

What is computed (float32 throughout, as HF's LlamaRotaryEmbedding, which runs its
frequency math in float32 even under autocast):
  inv_freq     modeling_rope_utils.py: _compute_default_rope_parameters,
               _compute_linear_scaling_rope_parameters, _compute_dynamic_ntk_parameters
               (seq_len = max(position_ids) + 1, as LlamaRotaryEmbedding's
               _dynamic_frequency_update; max_position_embeddings =
               original_max_position_embeddings), _compute_yarn_parameters (floor/ceil
               correction range), _compute_llama3_parameters.
  cos, sin     LlamaRotaryEmbedding.forward: freqs = inv_freq @ position_ids.float(),
               emb = cat(freqs, freqs), cos = emb.cos() * attention_scaling.
  HALF         modeling_llama.apply_rotary_pos_emb: q * cos + rotate_half(q) * sin;
               partial rotary as GPT-NeoX: rotate q[..., :rotary_dim], pass the rest.
  INTERLEAVED  modeling_gptj.apply_rotary_pos_emb: sin/cos repeat_interleave(2),
               tensor * cos + rotate_every_two(tensor) * sin, with the same
               frequencies (and attention factor) as HALF.
  BHTD/BTHD    unsqueeze_dim 1 or 2 of apply_rotary_pos_emb.

inv_freq in the file is PyTorch's own float32 (what HF holds in its buffer on this
machine). PyTorch's float32 `base ** e` is within 1 ulp, not correctly rounded (SLEEF
powf u10 in vector lanes, libm powf in the tail), so an implementation that rounds
the power correctly can differ by 1 ulp in a few entries; at a position p that moves
the float32 angle by up to p * ulp(inv_freq) + ulp(angle). Consumers compare their
frequencies to `inv_freq` within a few ulp, and their rotation (fed this inv_freq) to
`expected_*` at the tolerance below.

Every query and key value is exactly representable in bfloat16 (rounded through
torch.bfloat16 here), so the same expected output serves a test that sends the
inputs as BFLOAT16. Tolerances for consumers of this file:
  FLOAT32 wire:   |got - expected| <= 1e-5 * max(1, |expected|)
  BFLOAT16 wire:  |got - expected| <= 2e-2 * max(1, |expected|)
(float32: two products and a sum rounded, and cos/sin within a few ulp, on values of
magnitude <~ 5; bfloat16: rounding the output to 8 significant bits, 2^-9 relative,
with margin.)

Numbers: each is written as the shortest decimal that, read as a double and then
rounded to float32, gives back the exact float32 value. Schema:
  {"generator", "torch_version", "seed", "cases": [{"name", "style" ("HALF" |
   "INTERLEAVED"), "layout" ("BHTD" | "BTHD"), "query_shape", "key_shape"|null,
   "theta", "rotary_dim" (0 = Dh), "scaling": {"type" ("NONE" | "LINEAR" |
   "DYNAMIC_NTK" | "YARN" | "LLAMA3"), "factor", "original_max_position_embeddings",
   "beta_fast"|null, "beta_slow"|null, "attention_factor"|null,
   "low_freq_factor"|null, "high_freq_factor"|null}, "position_offset",
   "positions" (list, [] = use the offset), "inv_freq", "attention_scaling",
   "query", "key"|null, "expected_query", "expected_key"|null}]}
Arrays are flat, row-major in the case's layout. null scaling fields mean "not set"
(the defaults apply).
"""

import torch

import golden_common
from golden_common import (bf16_exact, floats, golden_doc, seeded_generator, short_float,
                           write_golden)
from hf_rope import (_compute_default_rope_parameters, _compute_dynamic_ntk_parameters,
                     _compute_linear_scaling_rope_parameters, _compute_llama3_parameters,
                     _compute_yarn_parameters)

SEED = 20240612
OUT = "rope_golden.json"


# ---------------------------------------------------------------------------------
# Hugging Face's frequency functions (modeling_rope_utils.py: hf_rope.py) by type.
# ---------------------------------------------------------------------------------


def rope_parameters(theta, dim, s, seq_len):
    t = s["type"]
    if t == "NONE":
        return _compute_default_rope_parameters(theta, dim)
    if t == "LINEAR":
        return _compute_linear_scaling_rope_parameters(theta, dim, s["factor"])
    if t == "DYNAMIC_NTK":
        return _compute_dynamic_ntk_parameters(
            theta, dim, s["factor"], s["original_max_position_embeddings"], seq_len)
    if t == "YARN":
        return _compute_yarn_parameters(
            theta, dim, s["factor"], s["original_max_position_embeddings"],
            s.get("beta_fast"), s.get("beta_slow"), s.get("attention_factor"))
    if t == "LLAMA3":
        return _compute_llama3_parameters(
            theta, dim, s["factor"], s["original_max_position_embeddings"],
            s.get("low_freq_factor"), s.get("high_freq_factor"))
    raise ValueError(t)


# ---------------------------------------------------------------------------------
# Application: LlamaRotaryEmbedding.forward, apply_rotary_pos_emb (Llama, GPT-J).
# ---------------------------------------------------------------------------------


def rotary_freqs(inv_freq, position_ids):
    """LlamaRotaryEmbedding.forward up to the angles: [B, T, dim/2] float32."""
    inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].float()
    return (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)


def apply_half(x, freqs, attention_scaling, unsqueeze_dim):
    """modeling_llama: emb = cat(freqs, freqs); q * cos + rotate_half(q) * sin."""
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = (emb.cos() * attention_scaling).unsqueeze(unsqueeze_dim)
    sin = (emb.sin() * attention_scaling).unsqueeze(unsqueeze_dim)
    return (x * cos) + (rotate_half(x) * sin)


def apply_interleaved(x, freqs, attention_scaling, unsqueeze_dim):
    """modeling_gptj: sin/cos repeat_interleave(2); x * cos + rotate_every_two(x) * sin."""
    sin = (freqs.sin() * attention_scaling).unsqueeze(unsqueeze_dim)
    cos = (freqs.cos() * attention_scaling).unsqueeze(unsqueeze_dim)
    sin = torch.repeat_interleave(sin, 2, -1)
    cos = torch.repeat_interleave(cos, 2, -1)
    return (x * cos) + (rotate_every_two(x) * sin)


def rotate(x, rotary_dim, style, freqs, attention_scaling, unsqueeze_dim):
    """Partial rotary as GPT-NeoX: the first rotary_dim dims rotate, the rest pass."""
    x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
    fn = apply_half if style == "HALF" else apply_interleaved
    return torch.cat((fn(x_rot, freqs, attention_scaling, unsqueeze_dim), x_pass), dim=-1)


# ---------------------------------------------------------------------------------
# Cases.
# ---------------------------------------------------------------------------------


def scaling(type_="NONE", factor=1.0, original=0, **optional):
    s = {"type": type_, "factor": factor, "original_max_position_embeddings": original}
    for k in ("beta_fast", "beta_slow", "attention_factor", "low_freq_factor",
              "high_freq_factor"):
        s[k] = optional.get(k)
    return s


LARGE = [0, 1, 4097, 65535, 100000]

# name, style, layout, (B, Hq, Hkv or 0, T, Dh), theta, rotary_dim, scaling,
# position_offset, positions
CASES = [
    ("half_bhtd_offset0", "HALF", "BHTD", (2, 2, 1, 3, 16), 10000.0, 0, scaling(), 0, []),
    ("interleaved_bhtd_offset5", "INTERLEAVED", "BHTD", (2, 2, 1, 3, 16), 10000.0, 0,
     scaling(), 5, []),
    ("half_bthd_positions_t", "HALF", "BTHD", (2, 2, 2, 3, 16), 10000.0, 0, scaling(), 0,
     [7, 3, 11]),
    ("interleaved_bthd_positions_bt", "INTERLEAVED", "BTHD", (2, 2, 1, 3, 16), 10000.0, 0,
     scaling(), 0, [0, 1, 2, 40, 41, 42]),
    ("half_partial_8_of_16", "HALF", "BHTD", (1, 2, 2, 3, 16), 10000.0, 8, scaling(), 2,
     []),
    ("interleaved_partial_6_of_16", "INTERLEAVED", "BTHD", (1, 2, 1, 3, 16), 10000.0, 6,
     scaling(), 9, []),
    ("half_gqa_8_2_theta5e5", "HALF", "BHTD", (1, 8, 2, 4, 32), 500000.0, 0, scaling(), 3,
     []),
    ("interleaved_gqa_8_2_bthd", "INTERLEAVED", "BTHD", (1, 8, 2, 2, 16), 10000.0, 0,
     scaling(), 0, [5, 6]),
    ("half_large_positions_d128_theta1e6", "HALF", "BHTD", (1, 1, 0, 5, 128), 1000000.0, 0,
     scaling(), 0, LARGE),
    ("interleaved_large_positions_d64", "INTERLEAVED", "BTHD", (1, 1, 1, 5, 64), 10000.0,
     0, scaling(), 0, LARGE),
    ("half_query_only_d7_rot6", "HALF", "BHTD", (1, 2, 0, 3, 7), 10000.0, 6, scaling(), 1,
     []),
    ("half_linear_4", "HALF", "BHTD", (1, 2, 1, 3, 16), 10000.0, 0,
     scaling("LINEAR", 4.0), 0, [0, 100, 4000]),
    ("interleaved_linear_2.5_bthd", "INTERLEAVED", "BTHD", (1, 2, 1, 3, 16), 10000.0, 0,
     scaling("LINEAR", 2.5), 7, []),
    ("half_dynamic_ntk_active", "HALF", "BHTD", (1, 2, 1, 3, 16), 10000.0, 0,
     scaling("DYNAMIC_NTK", 2.0, 8), 0, [3, 9, 20]),
    ("half_dynamic_ntk_inactive", "HALF", "BHTD", (1, 2, 1, 3, 16), 10000.0, 0,
     scaling("DYNAMIC_NTK", 2.0, 64), 0, [3, 9, 20]),
    ("interleaved_dynamic_ntk_large", "INTERLEAVED", "BHTD", (1, 1, 1, 5, 32), 10000.0, 0,
     scaling("DYNAMIC_NTK", 4.0, 4096), 0, LARGE),
    ("half_yarn_defaults", "HALF", "BHTD", (1, 2, 1, 3, 16), 10000.0, 0,
     scaling("YARN", 4.0, 4096), 0, [0, 1000, 9000]),
    ("interleaved_yarn_custom_bthd", "INTERLEAVED", "BTHD", (1, 2, 1, 3, 32), 10000.0, 0,
     scaling("YARN", 8.0, 2048, beta_fast=16.0, beta_slow=2.0, attention_factor=1.25), 0,
     [2, 500, 30000]),
    ("half_yarn_tiny_context_low_eq_high", "HALF", "BHTD", (1, 1, 1, 3, 16), 10000.0, 0,
     scaling("YARN", 2.0, 4), 0, [0, 5, 17]),
    ("half_yarn_partial_large", "HALF", "BTHD", (1, 2, 0, 5, 32), 1000000.0, 16,
     scaling("YARN", 16.0, 32768), 0, LARGE),
    ("half_llama3_defaults", "HALF", "BHTD", (1, 2, 1, 3, 16), 500000.0, 0,
     scaling("LLAMA3", 8.0, 8192), 0, [0, 1000, 60000]),
    ("interleaved_llama3_custom", "INTERLEAVED", "BHTD", (2, 2, 1, 2, 16), 500000.0, 0,
     scaling("LLAMA3", 4.0, 2048, low_freq_factor=2.0, high_freq_factor=8.0), 0,
     [1, 2, 3000, 4000]),
    ("half_llama3_d128_large", "HALF", "BHTD", (1, 1, 0, 5, 128), 500000.0, 0,
     scaling("LLAMA3", 8.0, 8192), 0, LARGE),
]


def layout_shape(layout, b, h, t, dh):
    return [b, h, t, dh] if layout == "BHTD" else [b, t, h, dh]


def make_case(gen, name, style, layout, dims, theta, rotary_dim, s, offset, positions):
    b, hq, hkv, t, dh = dims
    rot = rotary_dim or dh
    q = bf16_exact(torch.randn(layout_shape(layout, b, hq, t, dh), generator=gen) * 1.5)
    k = None
    if hkv:
        k = bf16_exact(torch.randn(layout_shape(layout, b, hkv, t, dh), generator=gen) * 1.5)

    if positions:
        pos = torch.tensor(positions, dtype=torch.int64).reshape(-1, t)  # [1 or B, T]
    else:
        pos = (offset + torch.arange(t, dtype=torch.int64))[None, :]
    seq_len = int(pos.max()) + 1
    inv_freq, attention_scaling = rope_parameters(theta, rot, s, seq_len)
    assert inv_freq.dtype == torch.float32 and inv_freq.shape == (rot // 2,)
    freqs = rotary_freqs(inv_freq, pos)  # [1 or B, T, rot/2]
    # cos/sin [B, T, .] go next to the head dim: 1 for BHTD, 2 for BTHD.
    unsqueeze_dim = 1 if layout == "BHTD" else 2
    eq = rotate(q, rot, style, freqs, attention_scaling, unsqueeze_dim)
    ek = rotate(k, rot, style, freqs, attention_scaling, unsqueeze_dim) if hkv else None
    assert eq.dtype == torch.float32 and torch.isfinite(eq).all()
    return {
        "name": name,
        "style": style,
        "layout": layout,
        "query_shape": list(q.shape),
        "key_shape": list(k.shape) if hkv else None,
        "theta": short_float(theta),
        "rotary_dim": rotary_dim,
        "scaling": {key: (short_float(v) if isinstance(v, float) else v)
                    for key, v in s.items()},
        "position_offset": offset,
        "positions": positions,
        "inv_freq": floats(inv_freq),
        "attention_scaling": short_float(attention_scaling),
        "query": floats(q),
        "key": floats(k),
        "expected_query": floats(eq),
        "expected_key": floats(ek),
    }


def generate(out_dir):
    torch.set_num_threads(1)
    gen = seeded_generator(SEED)
    cases = [make_case(gen, *c) for c in CASES]
    write_golden(out_dir, OUT, golden_doc("make_rope_golden.py", SEED, {"cases": cases}))


if __name__ == "__main__":
    golden_common.main(generate, [OUT])
