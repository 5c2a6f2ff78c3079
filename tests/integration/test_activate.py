"""Activate through the real running server: every element-wise and gated activation
on the PyTorch golden cases (tests/golden/activation_golden.json, non-finite values
included), sent as FLOAT32 and as BFLOAT16; large requests (the oneDNN path, the
streaming-store path) against an independent numpy computation; output_dtype; and
the INVALID_ARGUMENT errors."""
import json
import math
import os

import grpc
import numpy as np
import pytest

from layerserve.v1 import layerserve_pb2 as pb
from layerserve.v1 import layerserve_pb2_grpc as pb_grpc
from server_process import SOURCE_DIR
from wire import WIRE, array_tensor, values

GOLDEN = os.path.join(SOURCE_DIR, "tests", "golden", "activation_golden.json")
# make_activation_golden.py: |got - want| <= tol * max(1, |want|); NaN is NaN and an
# infinity the same infinity.
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2}


@pytest.fixture(scope="module")
def golden():
    with open(GOLDEN) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def stub(server):
    # Room for the 10 MB response of the streaming-store test (default 4 MiB).
    options = [("grpc.max_receive_message_length", 64 << 20)]
    with grpc.insecure_channel(server.target, options=options) as channel:
        yield pb_grpc.LayerServiceStub(channel)


def floats(values):
    """Golden numbers (non-finite ones are the strings nan, inf, -inf) as float32."""
    return np.array([float(v) for v in values], dtype=np.float32)






def check(got_tensor, want, shape, wire):
    assert list(got_tensor.shape) == list(shape)
    assert got_tensor.dtype == WIRE[wire]
    got = values(got_tensor)
    want = np.asarray(want, dtype=np.float64).reshape(-1)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), "NaN where PyTorch has none, or missing"
    inf = np.isinf(want)
    assert np.array_equal(got[inf], want[inf]), "infinities differ"
    finite = ~nan & ~inf
    bound = TOLERANCE[wire] * np.maximum(1.0, np.abs(want[finite]))
    excess = np.abs(got[finite] - want[finite]) - bound
    assert np.all(excess <= 0), f"max excess over tolerance {excess.max()}"


@pytest.mark.parametrize("wire", ["float32", "bfloat16"])
def test_golden_cases(stub, golden, wire):
    assert len(golden["cases"]) >= 30
    for case in golden["cases"]:
        shape = case["shape"]
        request = pb.ActivateRequest(
            activation=pb.Activation.Value(case["activation"]),
            input=array_tensor(floats(case["input"]).reshape(shape), wire))
        if case["form"] == "gated":
            request.gate.CopyFrom(array_tensor(floats(case["gate"]).reshape(shape), wire))
        response = stub.Activate(request, timeout=30)
        try:
            check(response.output, floats(case["expected"]), case["expected_shape"], wire)
        except AssertionError as e:
            raise AssertionError(f"{case['name']} ({wire}): {e}") from e


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def test_large_elementwise_gelu_matches_numpy(stub):
    # 3 x 50000: past one oneDNN chunk (65536 values), so the server runs oneDNN
    # and a Highway tail.
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((3, 50000)) * 3).astype(np.float32)
    response = stub.Activate(pb.ActivateRequest(activation=pb.GELU,
                                                input=array_tensor(x, "float32")), timeout=60)
    check(response.output, gelu(x.astype(np.float64)), x.shape, "float32")


def test_large_packed_swiglu_matches_numpy(stub):
    # [2, 3, 2 x 5000] packed (vLLM SiluAndMul layout): 60000 outputs.
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((2, 3, 10000)) * 2).astype(np.float32)
    response = stub.Activate(pb.ActivateRequest(activation=pb.SWIGLU,
                                                input=array_tensor(x, "float32")), timeout=60)
    g = x[..., :5000].astype(np.float32)
    u = x[..., 5000:].astype(np.float64)
    # act(gate) rounded to float32 before the product, as PyTorch does.
    want = silu(g.astype(np.float64)).astype(np.float32).astype(np.float64) * u
    check(response.output, want, (2, 3, 5000), "float32")


def test_streamed_large_output_two_tensor_reglu(stub):
    # 2.5M outputs (10 MB): the kernels write them with streaming stores.
    rng = np.random.default_rng(13)
    gate = (rng.standard_normal((500, 5000)) * 2).astype(np.float32)
    up = rng.standard_normal((500, 5000)).astype(np.float32)
    request = pb.ActivateRequest(activation=pb.REGLU, input=array_tensor(up, "float32"),
                                 gate=array_tensor(gate, "float32"))
    response = stub.Activate(request, timeout=120)
    want = np.maximum(gate, 0).astype(np.float64) * up
    check(response.output, want, gate.shape, "float32")


def test_output_dtype_bfloat16_from_float32(stub):
    x = np.linspace(-4, 4, 33, dtype=np.float32).reshape(3, 11)
    response = stub.Activate(pb.ActivateRequest(activation=pb.SILU,
                                                input=array_tensor(x, "float32"),
                                                output_dtype=pb.BFLOAT16), timeout=30)
    check(response.output, silu(x.astype(np.float64)), x.shape, "bfloat16")


@pytest.mark.parametrize("mutate,message", [
    (lambda r: r.gate.CopyFrom(array_tensor(np.zeros((2, 3), np.float32), "float32")),
     "gate.shape: [2,3] must equal input.shape [2,4]"),
    (lambda r: r.input.CopyFrom(array_tensor(np.zeros((1, 7), np.float32), "float32")),
     "input.shape: packed gate+up needs an even last dim, got 7"),
    (lambda r: setattr(r, "activation", pb.ACTIVATION_UNSPECIFIED),
     "activation: ACTIVATION_UNSPECIFIED"),
    (lambda r: r.input.CopyFrom(pb.Tensor(shape=[2, 4], dtype=pb.FLOAT32,
                                          data=b"\0" * 28)),
     "input.data: shape [2,4] FLOAT32 needs 32 bytes, got 28"),
])
def test_invalid_argument_names_the_field(stub, mutate, message):
    request = pb.ActivateRequest(activation=pb.SWIGLU,
                                 input=array_tensor(np.ones((2, 4), np.float32), "float32"))
    mutate(request)
    with pytest.raises(grpc.RpcError) as error:
        stub.Activate(request, timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in error.value.details()


def test_gate_with_elementwise_activation_is_rejected(stub):
    x = array_tensor(np.ones((2, 4), np.float32), "float32")
    with pytest.raises(grpc.RpcError) as error:
        stub.Activate(pb.ActivateRequest(activation=pb.TANH, input=x, gate=x), timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details().startswith("gate: TANH is element-wise")


def test_numeric_health_counts_inputs_the_output_hides(server, stub):
    """The loops check their inputs as they read them: ReLU sends -Inf to 0 and
    sigmoid NaN to NaN, and both inputs are counted; a gate of its own is an input
    too; finite requests move nothing."""
    nan, inf = float("nan"), float("inf")

    def moved(request):
        return server.nonfinite_moved(
            "Activate", lambda: stub.Activate(request, timeout=30))

    x = np.array([[-inf, 1, 2, 3]], np.float32)
    assert moved(pb.ActivateRequest(activation=pb.RELU, input=array_tensor(x, "float32"))) \
        == {("input", "inf"): 1}
    x = np.array([[nan, -inf, 2, 3]], np.float32)
    assert moved(pb.ActivateRequest(activation=pb.SIGMOID,
                                    input=array_tensor(x, "float32"))) \
        == {("input", "nan"): 1, ("input", "inf"): 1, ("output", "nan"): 1}
    gate = np.array([[nan, 1, 2, 3]], np.float32)
    up = np.array([[1, 1, 1, inf]], np.float32)
    assert moved(pb.ActivateRequest(activation=pb.SWIGLU, input=array_tensor(up, "float32"),
                                    gate=array_tensor(gate, "float32"))) \
        == {("input", "nan"): 1, ("input", "inf"): 1, ("output", "nan"): 1,
            ("output", "inf"): 1}
    finite = np.linspace(-3, 3, 4096, dtype=np.float32).reshape(4, 1024)
    assert moved(pb.ActivateRequest(activation=pb.GELU,
                                    input=array_tensor(finite, "float32"))) == {}
