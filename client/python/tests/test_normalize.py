"""Client.normalize against torch: LayerNorm and RMSNorm, weight, bias, epsilon and
its defaults, Gemma's weight_offset, the fused residual, each wire dtype, and the
errors."""
import grpc
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from checks import assert_close, bf16, t
from layerserve_client import LayerServeError, NormalizeResult

RNG = np.random.default_rng(21)
X = (RNG.standard_normal((2, 5, 48)) * 3 + 1).astype(np.float32)
W = RNG.standard_normal(48).astype(np.float32)
B = RNG.standard_normal(48).astype(np.float32)


def torch_layer_norm(x, w, b, eps):
    return F.layer_norm(t(x), (x.shape[-1],), None if w is None else t(w),
                        None if b is None else t(b), eps).numpy()


def torch_rms_norm(x, w, eps):
    x = t(x)
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return (y if w is None else y * t(w)).numpy()


def test_layer_norm(client):
    y = client.normalize(X, "layer", weight=W, bias=B, epsilon=1e-5)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == X.shape
    assert_close(y, torch_layer_norm(X, W, B, 1e-5), 1e-5, "layer norm")


def test_rms_norm(client):
    y = client.normalize(X, "rms", weight=W, epsilon=1e-6)
    assert_close(y, torch_rms_norm(X, W, 1e-6), 1e-5, "rms norm")


def test_epsilon_defaults(client):
    # Rows of variance ~1e-6, where the epsilon changes the result by ~30%.
    x = (RNG.standard_normal((4, 64)) * 1e-3).astype(np.float32)
    assert_close(client.normalize(x, "layer_norm"), torch_layer_norm(x, None, None, 1e-5),
                 1e-5, "LAYER_NORM default eps 1e-5")
    assert_close(client.normalize(x, "RMS_NORM"), torch_rms_norm(x, None, 1e-6), 1e-5,
                 "RMS_NORM default eps 1e-6")
    assert not np.allclose(torch_rms_norm(x, None, 1e-6), torch_rms_norm(x, None, 1e-5),
                           rtol=1e-2)


def test_weight_offset_scales_by_one_plus_weight(client):
    y = client.normalize(X, "rms", weight=W, weight_offset=True, epsilon=1e-6)
    assert_close(y, torch_rms_norm(X, 1 + W, 1e-6), 1e-5, "gemma rms norm")


def test_residual_returns_the_sum_and_its_norm(client):
    r = RNG.standard_normal(X.shape).astype(np.float32)
    result = client.normalize(X, "rms", weight=W, residual=r, epsilon=1e-6)
    assert isinstance(result, NormalizeResult)
    np.testing.assert_array_equal(result.residual, X + r)  # One float32 add each.
    assert_close(result.output, torch_rms_norm(X + r, W, 1e-6), 1e-5, "fused add + norm")


def test_bfloat16_wire(client):
    # The server sees the inputs rounded to bfloat16 and rounds the output again.
    y = client.normalize(X, "layer", weight=W, bias=B, dtype="bfloat16")
    want = torch_layer_norm(bf16(X), bf16(W), bf16(B), 1e-5)
    assert_close(y, want, 2.0 ** -8, "bf16 layer norm")
    assert np.array_equal(y, bf16(y)), "the response was not bfloat16"


def test_float16_arrays_travel_as_float16(client):
    x16 = X.astype(np.float16)
    y = client.normalize(x16, "rms", weight=W, epsilon=1e-6)
    assert np.array_equal(y, y.astype(np.float16).astype(np.float32)), "not float16"
    assert_close(y, torch_rms_norm(x16.astype(np.float32), W, 1e-6), 2.0 ** -10, "f16 rms")


def test_output_dtype(client):
    y = client.normalize(X, "rms", weight=W, epsilon=1e-6, output_dtype="bfloat16")
    assert np.array_equal(y, bf16(y))
    assert_close(y, torch_rms_norm(X, W, 1e-6), 2.0 ** -8, "bf16 output")


def test_server_errors_carry_code_and_message(client):
    with pytest.raises(LayerServeError) as error:
        client.normalize(np.ones((2, 4)), "rms", weight=np.ones(5))
    assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details.startswith(
        "weight.shape: length 5 does not match input's last dimension 4")
    assert error.value.attempts == 1
    assert str(error.value).startswith("INVALID_ARGUMENT: weight.shape")
    with pytest.raises(LayerServeError) as error:
        client.normalize(np.ones((2, 4)), "rms", bias=np.ones(4))
    assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "bias" in error.value.details


def test_client_side_errors_use_the_same_exception(client):
    with pytest.raises(LayerServeError) as error:
        client.normalize(np.float32(1), "rms")
    assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details == "input: needs rank >= 1, got a scalar"
    assert error.value.attempts == 0  # Never sent.
    with pytest.raises(LayerServeError) as error:
        client.normalize(X, "batch")
    assert error.value.details.startswith("kind: unknown value 'batch'")
    with pytest.raises(LayerServeError) as error:
        client.normalize(X, "rms", dtype="int4")
    assert "unknown dtype 'int4'" in error.value.details
