"""Client.block_forward: every case of tests/golden/block_golden.json (PyTorch
outputs of the tiny checkpoints in tests/golden/models, 7 architectures) on a server
holding them, then the built-in demo model checked against itself: 4 layers in one
call equal 2 + 2 layers in two calls, a padded batch equals its sequences sent
alone, positions equal position_offset, causality, and the errors."""
import json
import math
import os

import grpc
import numpy as np
import pytest

from checks import assert_close, bf16
from conftest import GOLDEN_DIR
from layerserve_client import BlockForwardResult, LayerServeError

with open(os.path.join(GOLDEN_DIR, "block_golden.json")) as _f:
    GOLDEN = json.load(_f)
CASES = GOLDEN["cases"]
TOL = GOLDEN["tolerance"]


def run_case(client, case, dtype, stats):
    return client.block_forward(
        np.asarray(case["hidden_states"], np.float32).reshape(case["shape"]),
        model=case["model"], layer_start=case["layer_start"],
        num_layers=case["num_layers"], position_offset=case["position_offset"],
        positions=case["positions"] or None, sequence_lengths=case["sequence_lengths"],
        causal=case["causal"], attention_stats=stats, dtype=dtype)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden_case(golden_client, case):
    result = run_case(golden_client, case, "float32", stats=True)
    assert isinstance(result, BlockForwardResult)
    want = np.asarray(case["expected"], np.float64).reshape(case["shape"])
    assert_close(result.hidden_states, want, TOL["float32_weights"], case["name"])
    layers = range(case["layer_start"], case["layer_start"] + case["num_layers"])
    assert sorted(result.attention_entropy) == list(layers)
    for layer, entropy in zip(layers, case["attention_entropy"]):
        assert_close(result.attention_entropy[layer], entropy,
                     TOL["entropy_float32_weights"], f"{case['name']} layer {layer}")

    # The same request as BFLOAT16 (golden inputs are bfloat16-exact): the output
    # is rounded to bfloat16 once more.
    hidden = run_case(golden_client, case, "bfloat16", stats=False)
    assert isinstance(hidden, np.ndarray)
    assert np.array_equal(hidden, bf16(hidden))
    assert_close(hidden, want, TOL["float32_weights"] + TOL["bfloat16_wire_extra"],
                 case["name"] + " bf16 wire")


# ---- the demo model

def demo_input(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_demo_all_layers_equal_two_requests_of_two(client):
    info = client.get_model("demo")
    assert info.num_layers == 4
    x = demo_input((2, 7, info.hidden_size), 31)
    whole = client.block_forward(x, num_layers=4, position_offset=3)
    first = client.block_forward(x, model="demo", layer_start=0, num_layers=2,
                                 position_offset=3)
    second = client.block_forward(first, model="demo", layer_start=2, num_layers=2,
                                  position_offset=3)
    assert whole.shape == x.shape and np.all(np.isfinite(whole))
    assert not np.allclose(whole, x, atol=1e-2)  # the blocks changed the stream
    assert_close(second, whole, 1e-6, "layers 0-1 then 2-3 vs 0-3")


def test_demo_padded_batch_equals_sequences_alone(client):
    x = demo_input((2, 6, 512), 32)
    batched = client.block_forward(x, num_layers=2, sequence_lengths=[6, 4])
    assert np.all(batched[1, 4:] == 0), "padded rows are not zeros"
    for b, length in enumerate([6, 4]):
        alone = client.block_forward(x[b, :length], num_layers=2)  # [T, D]
        assert alone.shape == (length, 512)
        assert_close(batched[b, :length], alone, 1e-5, f"sequence {b}")


def test_demo_positions_equal_offset_and_matter(client):
    x = demo_input((1, 4, 512), 33)
    by_offset = client.block_forward(x, position_offset=5)
    by_positions = client.block_forward(x, positions=[5, 6, 7, 8])
    assert_close(by_positions, by_offset, 1e-6, "positions 5..8 vs offset 5")
    by_bt = client.block_forward(x, positions=[[5, 6, 7, 8]])  # [B, T] form
    assert_close(by_bt, by_offset, 1e-6, "[B, T] positions vs offset 5")
    # Positions reach the rotary embedding: another spacing, another output.
    spaced = client.block_forward(x, positions=[0, 3, 6, 9])
    assert not np.allclose(spaced, by_offset, atol=1e-4)


def test_demo_causality(client):
    x = demo_input((1, 5, 512), 34)
    causal = client.block_forward(x)
    first_alone = client.block_forward(x[:, :1])
    assert_close(causal[:, :1], first_alone, 1e-5, "token 0 sees only itself")
    bidirectional = client.block_forward(x, causal=False)
    assert_close(bidirectional[:, 4:], causal[:, 4:], 1e-5, "last token sees all either way")
    assert not np.allclose(bidirectional[:, 0], causal[:, 0], atol=1e-3)


def test_demo_attention_stats_and_output_dtype(client):
    x = demo_input((1, 6, 512), 35)
    result = client.block_forward(x, layer_start=1, num_layers=3, attention_stats=True,
                                  output_dtype="bfloat16")
    assert sorted(result.attention_entropy) == [1, 2, 3]
    for entropy in result.attention_entropy.values():
        assert entropy.shape == (8,) and entropy.dtype == np.float32
        assert np.all(entropy >= 0) and np.all(entropy <= math.log(6) + 1e-6)
    plain = client.block_forward(x, layer_start=1, num_layers=3)
    assert np.array_equal(result.hidden_states, bf16(result.hidden_states))
    assert_close(result.hidden_states, plain, 2.0 ** -8, "bf16 output vs float32")


def test_errors(client):
    x = demo_input((1, 2, 512), 36)
    with pytest.raises(LayerServeError) as error:
        client.block_forward(x, model="no-such-model")
    assert error.value.code == grpc.StatusCode.NOT_FOUND
    assert 'no model "no-such-model"' in error.value.details
    with pytest.raises(LayerServeError) as error:
        client.block_forward(x, layer_start=4)
    assert error.value.code == grpc.StatusCode.OUT_OF_RANGE
    assert error.value.details.startswith("layer_start: 4 is past the last layer")
    with pytest.raises(LayerServeError) as error:
        client.block_forward(x[..., :500])
    assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "hidden_size 512" in error.value.details
