"""Writes tests/golden/positional_golden.json: PositionalEncode cases computed by PyTorch.

Run with Debian's interpreter (the one that has torch):

    /usr/bin/python3 tests/golden/make_positional_golden.py [--check]

The output is committed; rerun only when the cases change. Seeded, so a rerun with
the same torch gives the same file; --check regenerates it in a temporary directory
and fails unless it equals the committed one (golden_common.py; ctest runs it as
golden_check_positional). Hugging Face transformers is not installed here:
where a case follows HF, its formula is written below in torch ops with the HF
function it mirrors named.

What PyTorch computes (float32 unless said):
  sinusoidal  inv_freq[i] = float32(base ** (-2i / D)), the pow in float64 and
              rounded once (the value the C++ kernels pin); angle =
              positions.float()[:, None] * inv_freq[None, :] (a float32 product, as
              the PyTorch tutorial's PositionalEncoding and Transformer-XL's
              PositionalEmbedding compute it); pe = torch.sin / torch.cos of that
              float32 angle, INTERLEAVED (pe[:, 0::2] = sin, pe[:, 1::2] = cos) or
              CONCATENATED (torch.cat([sin, cos], -1)); expected = input + pe.
              Positions go up to 1e5. The script also reports how far the tutorial's
              exp-based and Transformer-XL's pow-based float32 inv_freq are from the
              pinned one, and what that does to pe at those positions (see generate()).
  learned     expected = input + table[positions] (F.embedding + add, GPT-2 style).
  alibi       slopes: the ALiBi paper's get_slopes (Python floats) as float32; the
              script checks them against HF BLOOM's build_alibi_tensor float32 pow
              (agreement to 2e-6 relative); bias = slopes[:, None, None] *
              (j - (query_offset + i)).float(), or -slopes * |..| when symmetric;
              expected = scores + bias when scores are given.
  t5_bias     bucket = HF T5Attention._relative_position_bucket (below, op by op);
              expected[h, i, j] = table[bucket(j - (query_offset + i)), h].
  t5_buckets  the same bucket function over every relative position in
              [-(2 max_distance + 20), 2 max_distance + 20] for several
              (num_buckets, max_distance, bidirectional): the C++ bucket function
              must reproduce them exactly.

Every input, table and scores value is exactly representable in bfloat16 (rounded
through torch.bfloat16 here), so the same expected output serves a request sent as
BFLOAT16. Tolerances for consumers of this file:
  FLOAT32 wire:   |got - expected| <= 1e-5 * max(1, |expected|)
  BFLOAT16 wire:  |got - expected| <= 2e-2 * max(1, |expected|)
(float32: the kernels' own error is ~1e-7 absolute for sin/cos and exact
elsewhere, while ALiBi biases reach |slope * distance| ~ 1e3, hence the relative
form; bfloat16 covers rounding the output to 8 significant bits, 2^-9 relative.)

Numbers are the shortest decimals that read back (double, then float32) as the exact
float32 values; the script checks every one. Arrays are flat, row-major.
"""

import functools
import math

import numpy as np
import torch

import golden_common
from golden_common import bf16_exact, golden_doc, seeded_generator, write_golden

SEED = 20240612
OUT = "positional_golden.json"

# Every value here is finite; a non-finite one is a bug (ValueError), not "nan".
short_float = functools.partial(golden_common.short_float, nonfinite=False)
floats = functools.partial(golden_common.floats, nonfinite=False)


# ---------------------------------------------------------------------------
# Sinusoidal
# ---------------------------------------------------------------------------


def inv_freq_pinned(dim, base):
    """float32(base ** (-2i / dim)): pow in float64, one rounding to float32."""
    i = torch.arange(0, dim // 2, dtype=torch.float64)
    return (torch.tensor(float(np.float32(base)), dtype=torch.float64) ** (-2.0 * i / dim)
            ).to(torch.float32)


def inv_freq_tutorial(dim, base):
    """The PyTorch tutorial's div_term: exp(arange(0, D, 2) * (-ln(base) / D))."""
    return torch.exp(torch.arange(0, dim, 2) * (-math.log(base) / dim))


def inv_freq_transformer_xl(dim, base):
    """Transformer-XL's PositionalEmbedding: 1 / (base ** (arange(0, D, 2.0) / D))."""
    return 1 / (base ** (torch.arange(0.0, dim, 2.0) / dim))


def sinusoidal_pe(positions, dim, base, layout, inv=None):
    inv = inv_freq_pinned(dim, base) if inv is None else inv
    angle = positions.to(torch.float32)[:, None] * inv[None, :]  # float32 product
    s, c = torch.sin(angle), torch.cos(angle)
    if layout == "interleaved":
        return torch.stack([s, c], dim=-1).reshape(len(positions), dim)
    return torch.cat([s, c], dim=-1)


def resolve_positions(offset, positions, batch, tokens):
    if not positions:
        return [offset + t for _ in range(batch) for t in range(tokens)]
    if len(positions) == tokens:
        return positions * batch
    assert len(positions) == batch * tokens
    return list(positions)


# name, layout, base, input shape (None: a table [num_positions, dim]),
# (num_positions, dim), position_offset, positions
SINUSOIDAL_CASES = [
    ("table_interleaved_d8", "interleaved", 10000.0, None, (5, 8), 0, []),
    ("table_concatenated_d6_offset", "concatenated", 10000.0, None, (4, 6), 17, []),
    ("table_interleaved_d64_large_positions", "interleaved", 10000.0, None, (8, 64), 0,
     [0, 1, 4097, 65537, 99999, 100000, 131071, 123457]),
    ("table_concatenated_d130_large_positions", "concatenated", 10000.0, None, (5, 130),
     0, [77777, 100000, 3, 0, 54321]),
    ("input_td_interleaved_base5e5", "interleaved", 500000.0, (4, 32), None, 1000, []),
    ("input_btd_concatenated_per_batch", "concatenated", 10000.0, (2, 3, 16), None, 0,
     [0, 1, 2, 90000, 90001, 90002]),
    ("input_btd_interleaved_shared", "interleaved", 10000.0, (2, 3, 10), None, 0,
     [5, 100000, 7]),
    ("input_td_concatenated_base2", "concatenated", 2.0, (3, 12), None, 40, []),
]


def make_sinusoidal(gen, name, layout, base, input_shape, table_shape, offset, positions):
    if input_shape is None:
        batch, tokens = 1, table_shape[0]
        dim = table_shape[1]
        x = None
    else:
        batch = input_shape[0] if len(input_shape) == 3 else 1
        tokens, dim = input_shape[-2], input_shape[-1]
        x = bf16_exact(torch.randn(input_shape, generator=gen) * 2.0)
    resolved = resolve_positions(offset, positions, batch, tokens)
    pe = sinusoidal_pe(torch.tensor(resolved), dim, base, layout)
    if x is None:
        expected = pe
    else:
        expected = x + pe.reshape(x.shape)
    return {
        "name": name,
        "layout": layout,
        "base": short_float(base),
        "input_shape": list(input_shape) if input_shape else None,
        "input": floats(x),
        "num_positions": table_shape[0] if table_shape else 0,
        "dim": table_shape[1] if table_shape else 0,
        "position_offset": offset,
        "positions": positions,
        "resolved_positions": resolved,
        "expected": floats(expected),
    }


def report_sinusoidal_spread():
    """How far common float32 formulas are from the pinned inv_freq (printed)."""
    dim, base = 512, 10000.0
    pinned = inv_freq_pinned(dim, base)
    positions = torch.tensor([1000, 10000, 100000])
    for label, fn in (("tutorial exp", inv_freq_tutorial),
                      ("Transformer-XL pow", inv_freq_transformer_xl)):
        other = fn(dim, base)
        ulps = ((other.view(torch.int32) - pinned.view(torch.int32)).abs().max().item())
        pe_diff = (sinusoidal_pe(positions, dim, base, "concatenated", other) -
                   sinusoidal_pe(positions, dim, base, "concatenated")).abs()
        print(f"sinusoidal D={dim}: {label} inv_freq is up to {ulps} ulp from the pinned "
              f"one; pe differs by up to {pe_diff[0].max():.2e} at p=1000, "
              f"{pe_diff[1].max():.2e} at p=1e4, {pe_diff[2].max():.2e} at p=1e5")


# ---------------------------------------------------------------------------
# Learned
# ---------------------------------------------------------------------------

# name, input shape, max_len, position_offset, positions
LEARNED_CASES = [
    ("td_offset", (5, 7), 12, 3, []),
    ("btd_per_batch", (2, 3, 8), 10, 0, [9, 0, 4, 1, 1, 2]),
    ("btd_shared", (2, 4, 64), 40, 0, [39, 0, 17, 17]),
]


def make_learned(gen, name, input_shape, max_len, offset, positions):
    batch = input_shape[0] if len(input_shape) == 3 else 1
    tokens, dim = input_shape[-2], input_shape[-1]
    x = bf16_exact(torch.randn(input_shape, generator=gen))
    table = bf16_exact(torch.randn(max_len, dim, generator=gen) * 0.5)
    resolved = resolve_positions(offset, positions, batch, tokens)
    expected = x + torch.nn.functional.embedding(torch.tensor(resolved),
                                                 table).reshape(x.shape)
    return {
        "name": name,
        "input_shape": list(input_shape),
        "input": floats(x),
        "table_shape": [max_len, dim],
        "table": floats(table),
        "position_offset": offset,
        "positions": positions,
        "resolved_positions": resolved,
        "expected": floats(expected),
    }


# ---------------------------------------------------------------------------
# ALiBi
# ---------------------------------------------------------------------------


def get_slopes(n):
    """The ALiBi paper's reference get_slopes (github.com/ofirpress/attention_with_
    linear_biases), in Python floats."""

    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + get_slopes(2 * closest)[0::2][: n - closest]


def bloom_slopes(num_heads):
    """HF BloomModel's build_alibi_tensor slopes: float32 torch.pow."""
    closest = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest) - 3))), dtype=torch.float32)
    slopes = torch.pow(base, torch.arange(1, 1 + closest, dtype=torch.int32))
    if closest != num_heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest) - 3))),
                                  dtype=torch.float32)
        remaining = min(closest, num_heads - closest)
        extra = torch.pow(extra_base, torch.arange(1, 1 + 2 * remaining, 2,
                                                   dtype=torch.int32))
        slopes = torch.cat([slopes, extra], dim=0)
    return slopes


# name, num_heads, query_length, key_length, query_offset, symmetric, scores batch
# (None: no scores; 0: scores [H, Tq, Tk]; b: scores [b, H, Tq, Tk])
ALIBI_CASES = [
    ("bias_h8_causal", 8, 4, 6, 2, False, None),
    ("bias_h5_symmetric", 5, 3, 5, 0, True, None),
    ("bias_h12_decode", 12, 1, 40, 39, False, None),
    ("bias_h1_long_offset", 1, 2, 3, 1000, False, None),
    ("scores_bhqk_h4", 4, 3, 7, 4, False, 2),
    ("scores_hqk_h3_symmetric", 3, 2, 9, 7, True, 0),
]


def make_alibi(gen, name, heads, tq, tk, offset, symmetric, scores_batch):
    slopes = torch.tensor(get_slopes(heads), dtype=torch.float32)
    bloom = bloom_slopes(heads)
    rel_diff = ((bloom - slopes).abs() / slopes).max().item()
    assert rel_diff <= 2e-6, (name, rel_diff)
    rel = (torch.arange(tk)[None, :] - (offset + torch.arange(tq)[:, None])).to(torch.float32)
    if symmetric:
        bias = -slopes[:, None, None] * rel.abs()[None]
    else:
        bias = slopes[:, None, None] * rel[None]
    scores = None
    scores_shape = None
    expected = bias
    if scores_batch is not None:
        scores_shape = [heads, tq, tk] if scores_batch == 0 else [scores_batch, heads, tq, tk]
        scores = bf16_exact(torch.randn(scores_shape, generator=gen) * 4.0)
        expected = scores + bias
    return {
        "name": name,
        "num_heads": heads,
        "query_length": tq,
        "key_length": tk,
        "query_offset": offset,
        "symmetric": symmetric,
        "scores_shape": scores_shape,
        "scores": floats(scores),
        "slopes": floats(slopes),
        "expected_shape": list(expected.shape),
        "expected": floats(expected),
    }


# ---------------------------------------------------------------------------
# T5
# ---------------------------------------------------------------------------


def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32,
                             max_distance=128):
    """transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket,
    op by op."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position,
                                       torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large,
                                                    num_buckets - 1))
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


# name, num_buckets, heads, bidirectional, num_buckets field (0 = default),
# max_distance field (0 = default 128), query_length, key_length, query_offset
T5_CASES = [
    ("encoder_32x4", 32, 4, True, 0, 0, 5, 9, 0),
    ("decoder_32x3_decode", 32, 3, False, 32, 128, 1, 300, 299),
    ("encoder_long_range", 32, 2, True, 0, 0, 2, 400, 100),
    ("decoder_64x2_md256", 64, 2, False, 0, 256, 3, 270, 267),
    ("encoder_odd_8x3_md20", 8, 3, True, 8, 20, 6, 30, 10),
]

# (num_buckets, max_distance, bidirectional) for the exhaustive bucket lists.
T5_BUCKET_CONFIGS = [
    (32, 128, True), (32, 128, False), (64, 256, True), (64, 256, False),
    (16, 64, False), (8, 20, True), (5, 3, True), (2, 2, False), (4, 2, True),
    (32, 17, False), (48, 1000, True),
]


def make_t5(gen, name, buckets, heads, bidirectional, nb_field, md_field, tq, tk, offset):
    max_distance = md_field or 128
    table = bf16_exact(torch.randn(buckets, heads, generator=gen))
    context = (offset + torch.arange(tq))[:, None]
    memory = torch.arange(tk)[None, :]
    bucket = relative_position_bucket(memory - context, bidirectional, buckets, max_distance)
    # HF compute_bias: embedding(bucket) [q, k, H] -> permute to [H, q, k].
    expected = torch.nn.functional.embedding(bucket, table).permute(2, 0, 1)
    return {
        "name": name,
        "table_shape": [buckets, heads],
        "table": floats(table),
        "bidirectional": bidirectional,
        "num_buckets": nb_field,
        "max_distance": md_field,
        "query_length": tq,
        "key_length": tk,
        "query_offset": offset,
        "expected": floats(expected.contiguous()),
    }


def make_bucket_list(num_buckets, max_distance, bidirectional):
    reach = 2 * max_distance + 20
    rel = torch.arange(-reach, reach + 1)
    buckets = relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
    return {
        "num_buckets": num_buckets,
        "max_distance": max_distance,
        "bidirectional": bidirectional,
        "min_relative_position": -reach,
        "buckets": buckets.tolist(),
    }


def generate(out_dir):
    gen = seeded_generator(SEED)
    report_sinusoidal_spread()
    sections = {
        "sinusoidal": [make_sinusoidal(gen, *c) for c in SINUSOIDAL_CASES],
        "learned": [make_learned(gen, *c) for c in LEARNED_CASES],
        "alibi": [make_alibi(gen, *c) for c in ALIBI_CASES],
        "t5_bias": [make_t5(gen, *c) for c in T5_CASES],
        "t5_buckets": [make_bucket_list(*c) for c in T5_BUCKET_CONFIGS],
    }
    write_golden(out_dir, OUT, golden_doc("make_positional_golden.py", SEED, sections))


if __name__ == "__main__":
    golden_common.main(generate, [OUT])
