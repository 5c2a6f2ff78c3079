"""Client.activate against torch: every element-wise activation, every gated one as
two tensors and packed, and a bfloat16 wire."""
import grpc
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from checks import assert_close, bf16, t
from layerserve_client import LayerServeError

ELEMENTWISE = {
    "relu": F.relu,
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
}
GATED = {"swiglu": "silu", "geglu": "gelu", "geglu_tanh": "gelu_tanh", "reglu": "relu"}

RNG = np.random.default_rng(22)
X = (RNG.standard_normal((3, 4, 40)) * 3).astype(np.float32)
X[0, 0, :6] = [0.0, -0.0, 30.0, -30.0, 1e-20, -1e-20]


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise(client, name):
    y = client.activate(X, name)
    assert y.shape == X.shape and y.dtype == np.float32
    assert_close(y, ELEMENTWISE[name](t(X)).numpy(), 1e-5, name)


@pytest.mark.parametrize("name", sorted(GATED))
def test_gated_two_tensors_and_packed(client, name):
    gate, up = X[..., :20], X[..., 20:]
    want = (ELEMENTWISE[GATED[name]](t(gate)) * t(up)).numpy()
    assert_close(client.activate(up, name, gate=gate), want, 1e-5, f"{name} two tensors")
    packed = client.activate(X, name.upper())  # gate first, then up
    assert packed.shape == (3, 4, 20)
    assert_close(packed, want, 1e-5, f"{name} packed")


def test_bfloat16_wire(client):
    y = client.activate(X, "gelu", dtype="bf16")
    assert np.array_equal(y, bf16(y))
    assert_close(y, F.gelu(t(bf16(X))).numpy(), 2.0 ** -8, "bf16 gelu")


def test_errors(client):
    with pytest.raises(LayerServeError) as error:
        client.activate(X, "tanh", gate=X)
    assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details.startswith("gate: TANH is element-wise")
    with pytest.raises(LayerServeError) as error:
        client.activate(np.ones((1, 7)), "swiglu")
    assert "packed gate+up needs an even last dim, got 7" in error.value.details
    with pytest.raises(LayerServeError) as error:
        client.activate(X, "mish")
    assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.attempts == 0
