"""Client.list_models, get_model and health: the tiny checkpoints' descriptions
against tests/golden/block_golden.json, the demo model's documented dimensions, and
the health states."""
import json
import os

import grpc
import numpy as np
import pytest

from conftest import GOLDEN_DIR
from layerserve_client import LayerServeError, ModelInfo

with open(os.path.join(GOLDEN_DIR, "block_golden.json")) as _f:
    MODELS = json.load(_f)["models"]


def check_info(info, name):
    want = MODELS[name]["info"]
    assert isinstance(info, ModelInfo)
    assert (info.name, info.state, info.error) == (name, "READY", "")
    assert info.architecture == want["architecture"]
    for field in ("num_layers", "hidden_size", "num_attention_heads",
                  "num_key_value_heads", "head_dim", "intermediate_size",
                  "max_position_embeddings"):
        assert getattr(info, field) == want[field], (name, field)
    assert (info.activation, info.norm) == (want["activation"], want["norm"]), name
    assert info.norm_epsilon == pytest.approx(want["norm_epsilon"], rel=1e-6)
    assert info.weight_dtype == "FLOAT32"
    if want["rope"] is None:
        assert info.rope is None, name
        return
    rope = want["rope"]
    assert info.rope.theta == pytest.approx(rope["theta"], rel=1e-6)
    assert (info.rope.rotary_dim, info.rope.style) == (rope["rotary_dim"], rope["style"])
    expected_scaling = {k: v for k, v in rope["scaling"].items() if v is not None}
    if expected_scaling["type"] == "NONE":
        expected_scaling = {"type": "NONE"}
    assert info.rope.scaling.keys() == expected_scaling.keys(), name
    for key, value in expected_scaling.items():
        assert info.rope.scaling[key] == pytest.approx(value), (name, key)


def test_list_models(golden_client):
    models = golden_client.list_models()
    assert [m.name for m in models] == sorted(MODELS)
    for info in models:
        check_info(info, info.name)
    assert [m.name for m in models if m.is_default] == [sorted(MODELS)[0]]


def test_get_model(golden_client):
    for name in MODELS:
        check_info(golden_client.get_model(name), name)
    assert golden_client.get_model().name == sorted(MODELS)[0]
    with pytest.raises(LayerServeError) as error:
        golden_client.get_model("no-such-model")
    assert error.value.code == grpc.StatusCode.NOT_FOUND


def test_rope_scaling_of_a_model_feeds_rope(golden_client):
    """ModelInfo.rope.scaling goes back into Client.rope as it is, and means what
    the checkpoint's config.json rope_scaling means."""
    info = golden_client.get_model("tiny-llama")
    assert info.rope.scaling["type"] == "LLAMA3"
    q = np.random.default_rng(41).standard_normal(
        (1, info.num_attention_heads, 3, info.head_dim)).astype(np.float32)
    from_info = golden_client.rope(q, theta=info.rope.theta, scaling=info.rope.scaling,
                                   position_offset=60)
    hf_config = MODELS["tiny-llama"]["config"]
    from_config = golden_client.rope(q, theta=hf_config["rope_theta"],
                                     scaling=hf_config["rope_scaling"], position_offset=60)
    np.testing.assert_array_equal(from_info, from_config)
    unscaled = golden_client.rope(q, theta=info.rope.theta, position_offset=60)
    assert not np.allclose(from_info, unscaled, atol=1e-3)


def test_demo_model(client):
    (demo,) = client.list_models()
    assert (demo.name, demo.architecture, demo.state, demo.is_default) == \
        ("demo", "llama", "READY", True)
    assert (demo.hidden_size, demo.num_attention_heads, demo.num_key_value_heads,
            demo.intermediate_size, demo.num_layers) == (512, 8, 2, 1408, 4)
    assert demo.head_dim == 64 and demo.activation == "SWIGLU" and demo.norm == "RMS_NORM"
    assert (demo.version, demo.reload_error) == (1, "")


def test_health(client):
    assert client.health() == "SERVING"
    assert client.health("layerserve.v1.LayerService") == "SERVING"
    assert client.health("no.such.Service") == "SERVICE_UNKNOWN"
