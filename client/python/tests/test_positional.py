"""The positional methods of Client against numpy/torch versions of the published
formulas (Hugging Face's where it has one): sinusoidal added and as a table, learned,
RoPE (GQA, both layouts, both styles, partial, linear and Llama 3 scaling), ALiBi
(power-of-two and other head counts, causal and symmetric, added to scores), T5
bias (encoder and decoder), and their errors."""
import math

import grpc
import numpy as np
import pytest
import torch

from checks import assert_close, bf16, t
from layerserve_client import LayerServeError, RopeResult

RNG = np.random.default_rng(23)


# ---- sinusoidal and learned

def sinusoidal_table(positions, dim, base=10000.0, interleaved=True):
    angle = np.asarray(positions, np.float64)[:, None] * \
        base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    if not interleaved:
        return np.concatenate([np.sin(angle), np.cos(angle)], axis=-1)
    table = np.empty((len(positions), dim))
    table[:, 0::2], table[:, 1::2] = np.sin(angle), np.cos(angle)
    return table


def test_sinusoidal_table(client):
    table = client.sinusoidal(num_positions=12, dim=16)
    assert table.shape == (12, 16) and table.dtype == np.float32
    assert_close(table, sinusoidal_table(range(12), 16), 1e-5, "interleaved table")
    table = client.sinusoidal(num_positions=7, dim=10, base=500.0, layout="concatenated",
                              position_offset=4)
    assert_close(table, sinusoidal_table(range(4, 11), 10, 500.0, False), 1e-5,
                 "concatenated table, base 500, offset 4")


def test_sinusoidal_added_to_input(client):
    x = RNG.standard_normal((2, 6, 24)).astype(np.float32)
    positions = [5, 0, 3, 9, 1, 2]
    y = client.sinusoidal(x, positions=positions)
    assert_close(y, x + sinusoidal_table(positions, 24), 1e-5, "x + pe")
    y = client.sinusoidal(x, dtype="bfloat16", layout="CONCATENATED")
    assert_close(y, bf16(x) + sinusoidal_table(range(6), 24, interleaved=False), 2.0 ** -7,
                 "bf16 x + pe")


def test_learned(client):
    x = RNG.standard_normal((2, 3, 8)).astype(np.float32)
    table = RNG.standard_normal((10, 8)).astype(np.float32)
    np.testing.assert_array_equal(client.learned(x, table, position_offset=2),
                                  x + table[2:5])
    positions = np.array([[9, 0, 4], [1, 1, 7]])  # [B, T], one row per sequence
    np.testing.assert_array_equal(client.learned(x, table, positions=positions),
                                  x + table[positions])
    with pytest.raises(LayerServeError) as error:
        client.learned(x, table, position_offset=8)
    assert error.value.code == grpc.StatusCode.OUT_OF_RANGE
    assert "past the table's 10 rows" in error.value.details


# ---- RoPE, as Hugging Face's modeling code does it

def hf_inv_freq(theta, dim):
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def hf_llama3_inv_freq(theta, dim, factor, low_ff, high_ff, original):
    inv_freq = hf_inv_freq(theta, dim)
    low_wavelen, high_wavelen = original / low_ff, original / high_ff
    wavelen = 2 * math.pi / inv_freq
    llama = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (original / wavelen - low_ff) / (high_ff - low_ff)
    smoothed = (1 - smooth) * llama / factor + smooth * llama
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, llama)


def torch_rope(x, positions, inv_freq, rotary_dim, interleaved):
    """x [B, H, T, Dh]; positions [B, T]."""
    x = t(x)
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    freqs = torch.from_numpy(np.asarray(positions, np.float32))[:, None, :, None] * inv_freq
    if interleaved:  # GPT-J: pairs (2i, 2i + 1)
        cos, sin = freqs.cos().repeat_interleave(2, -1), freqs.sin().repeat_interleave(2, -1)
        other = torch.stack((-rot[..., 1::2], rot[..., 0::2]), dim=-1).flatten(-2)
    else:  # rotate_half: pairs (i, i + rotary_dim / 2)
        cos, sin = torch.cat((freqs.cos(),) * 2, -1), torch.cat((freqs.sin(),) * 2, -1)
        half = rotary_dim // 2
        other = torch.cat((-rot[..., half:], rot[..., :half]), -1)
    return torch.cat((rot * cos + other * sin, rest), -1).numpy()


Q = RNG.standard_normal((2, 4, 6, 16)).astype(np.float32)   # [B, Hq, T, Dh]
K = RNG.standard_normal((2, 2, 6, 16)).astype(np.float32)   # [B, Hkv, T, Dh]


def test_rope_half_gqa_with_key(client):
    result = client.rope(Q, K, position_offset=3)
    assert isinstance(result, RopeResult)
    positions = np.broadcast_to(np.arange(3, 9), (2, 6))
    inv = hf_inv_freq(10000.0, 16)
    assert_close(result.query, torch_rope(Q, positions, inv, 16, False), 1e-5, "query")
    assert_close(result.key, torch_rope(K, positions, inv, 16, False), 1e-5, "key")


def test_rope_bthd_layout_is_the_transpose(client):
    bhtd = client.rope(Q, K, theta=500000.0)
    bthd = client.rope(Q.transpose(0, 2, 1, 3), K.transpose(0, 2, 1, 3), theta=500000.0,
                       layout="bthd")
    assert_close(bthd.query, bhtd.query.transpose(0, 2, 1, 3), 1e-6, "BTHD query")
    assert_close(bthd.key, bhtd.key.transpose(0, 2, 1, 3), 1e-6, "BTHD key")
    positions = np.broadcast_to(np.arange(6), (2, 6))
    assert_close(bhtd.query, torch_rope(Q, positions, hf_inv_freq(500000.0, 16), 16, False),
                 1e-5, "theta 5e5")


def test_rope_interleaved_partial_query_only(client):
    positions = np.array([[0, 2, 4, 6, 8, 10], [7, 6, 5, 4, 3, 2]])  # [B, T]
    y = client.rope(Q, positions=positions, style="interleaved", rotary_dim=8)
    assert isinstance(y, np.ndarray)
    want = torch_rope(Q, positions, hf_inv_freq(10000.0, 8), 8, True)
    assert_close(y, want, 1e-5, "GPT-J partial")
    np.testing.assert_array_equal(y[..., 8:], Q[..., 8:])  # pass-through dims untouched


def test_rope_linear_and_llama3_scaling(client):
    positions = np.broadcast_to(np.arange(10, 16), (2, 6))
    y = client.rope(Q, position_offset=10, scaling={"type": "linear", "factor": 4.0})
    assert_close(y, torch_rope(Q, positions, hf_inv_freq(10000.0, 16) / 4.0, 16, False),
                 1e-5, "linear scaling")
    hf_config = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                 "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    y = client.rope(Q, position_offset=10, theta=500000.0, scaling=hf_config)
    inv = hf_llama3_inv_freq(500000.0, 16, 8.0, 1.0, 4.0, 64)
    assert_close(y, torch_rope(Q, positions, inv, 16, False), 1e-5, "llama3 scaling")
    unscaled = client.rope(Q, position_offset=10, theta=500000.0)
    assert not np.allclose(y, unscaled, atol=1e-3)  # the scaling did something


def test_rope_errors(client):
    with pytest.raises(LayerServeError) as error:
        client.rope(Q[0])  # rank 3
    assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details.startswith("rope.query")
    with pytest.raises(LayerServeError) as error:
        client.rope(Q, style="diagonal")
    assert error.value.details.startswith("rope.style: unknown value 'diagonal'")


# ---- ALiBi

def hf_alibi_slopes(heads):
    closest = 2 ** math.floor(math.log2(heads))
    base = 2 ** (-(2 ** -(math.log2(closest) - 3)))
    slopes = [base ** p for p in range(1, 1 + closest)]
    if closest != heads:
        extra = 2 ** (-(2 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra ** p for p in range(1, 1 + 2 * min(closest, heads - closest), 2)]
    return np.array(slopes)


def alibi_bias(heads, tq, tk, offset=0, symmetric=False):
    distance = np.arange(tk)[None, :] - (offset + np.arange(tq))[:, None]
    slopes = hf_alibi_slopes(heads)[:, None, None]
    return -slopes * np.abs(distance) if symmetric else slopes * distance


@pytest.mark.parametrize("heads", [8, 6, 12])
def test_alibi_bias(client, heads):
    bias = client.alibi(num_heads=heads, query_length=3, key_length=7, query_offset=4)
    assert bias.shape == (heads, 3, 7) and bias.dtype == np.float32
    assert_close(bias, alibi_bias(heads, 3, 7, 4), 1e-6, f"{heads} heads causal")
    bias = client.alibi(num_heads=heads, query_length=5, key_length=5, symmetric=True)
    assert_close(bias, alibi_bias(heads, 5, 5, symmetric=True), 1e-6, "symmetric")


def test_alibi_added_to_scores(client):
    scores = RNG.standard_normal((2, 6, 4, 4)).astype(np.float32)
    y = client.alibi(scores)
    assert_close(y, scores + alibi_bias(6, 4, 4), 1e-6, "scores + bias")


# ---- T5

def hf_t5_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """transformers' T5Attention._relative_position_bucket."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    large = max_exact + (torch.log(relative_position.float() / max_exact)
                         / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return relative_buckets + torch.where(is_small, relative_position, large)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_bias(client, bidirectional):
    table = RNG.standard_normal((32, 3)).astype(np.float32)  # [num_buckets, H]
    tq, tk, offset = 5, 40, 30
    bias = client.t5_bias(table, tq, tk, bidirectional=bidirectional, max_distance=64,
                          query_offset=offset)
    relative = torch.arange(tk)[None, :] - (offset + torch.arange(tq))[:, None]
    buckets = hf_t5_bucket(relative, bidirectional, 32, 64).numpy()
    want = table[buckets].transpose(2, 0, 1)  # [H, Tq, Tk]
    assert len(np.unique(buckets)) > 8  # exact and logarithmic buckets both used
    np.testing.assert_array_equal(bias, want)
