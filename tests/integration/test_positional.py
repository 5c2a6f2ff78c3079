"""PositionalEncode through the real running server: sinusoidal, learned, ALiBi and
T5 bias on the PyTorch golden cases (tests/golden/positional_golden.json), sent as
FLOAT32 and as BFLOAT16, an independent numpy check, and the error codes."""
import json
import os

import grpc
import numpy as np
import pytest

from layerserve.v1 import layerserve_pb2 as pb
from server_process import SOURCE_DIR
from wire import WIRE, tensor, values

GOLDEN = os.path.join(SOURCE_DIR, "tests", "golden", "positional_golden.json")
# make_positional_golden.py: |got - want| <= tol * max(1, |want|).
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2}


@pytest.fixture(scope="module")
def golden():
    with open(GOLDEN) as f:
        return json.load(f)


def check(response_tensor, want, shape, wire):
    assert list(response_tensor.shape) == list(shape)
    assert response_tensor.dtype == WIRE[wire]
    got = values(response_tensor)
    want = np.asarray(want, dtype=np.float64)
    bound = TOLERANCE[wire] * np.maximum(1.0, np.abs(want))
    worst = np.max(np.abs(got - want) - bound)
    assert worst <= 0, f"max excess over tolerance {worst}"


def call(stub, request):
    return stub.PositionalEncode(request, timeout=30)


@pytest.mark.parametrize("wire", ["float32", "bfloat16"])
def test_sinusoidal_golden(stub, golden, wire):
    for case in golden["sinusoidal"]:
        s = pb.Sinusoidal(
            base=case["base"],
            layout=pb.Sinusoidal.INTERLEAVED if case["layout"] == "interleaved"
            else pb.Sinusoidal.CONCATENATED,
            position_offset=case["position_offset"], positions=case["positions"])
        if case["input"] is None:
            s.num_positions = case["num_positions"]
            s.dim = case["dim"]
            shape = [case["num_positions"], case["dim"]]
            request = pb.PositionalEncodeRequest(sinusoidal=s, output_dtype=WIRE[wire])
        else:
            shape = case["input_shape"]
            s.input.CopyFrom(tensor(case["input"], shape, wire))
            request = pb.PositionalEncodeRequest(sinusoidal=s)
        check(call(stub, request).output, case["expected"], shape, wire)


@pytest.mark.parametrize("wire", ["float32", "bfloat16"])
def test_learned_golden(stub, golden, wire):
    for case in golden["learned"]:
        learned = pb.Learned(input=tensor(case["input"], case["input_shape"], wire),
                             table=tensor(case["table"], case["table_shape"], wire),
                             position_offset=case["position_offset"],
                             positions=case["positions"])
        response = call(stub, pb.PositionalEncodeRequest(learned=learned))
        check(response.output, case["expected"], case["input_shape"], wire)


@pytest.mark.parametrize("wire", ["float32", "bfloat16"])
def test_alibi_golden(stub, golden, wire):
    for case in golden["alibi"]:
        alibi = pb.Alibi(query_offset=case["query_offset"], symmetric=case["symmetric"])
        if case["scores"] is None:
            alibi.num_heads = case["num_heads"]
            alibi.query_length = case["query_length"]
            alibi.key_length = case["key_length"]
            request = pb.PositionalEncodeRequest(alibi=alibi, output_dtype=WIRE[wire])
        else:
            alibi.scores.CopyFrom(tensor(case["scores"], case["scores_shape"], wire))
            request = pb.PositionalEncodeRequest(alibi=alibi)
        check(call(stub, request).output, case["expected"], case["expected_shape"], wire)


@pytest.mark.parametrize("wire", ["float32", "bfloat16"])
def test_t5_bias_golden(stub, golden, wire):
    for case in golden["t5_bias"]:
        t5 = pb.T5Bias(table=tensor(case["table"], case["table_shape"], wire),
                       bidirectional=case["bidirectional"],
                       num_buckets=case["num_buckets"], max_distance=case["max_distance"],
                       query_length=case["query_length"], key_length=case["key_length"],
                       query_offset=case["query_offset"])
        response = call(stub, pb.PositionalEncodeRequest(t5_bias=t5))
        heads = case["table_shape"][1]
        check(response.output, case["expected"],
              [heads, case["query_length"], case["key_length"]], wire)


def test_sinusoidal_matches_numpy_double(stub):
    """Independent of the golden file: the paper's formula in float64 at small
    positions, where float32 angles are accurate to ~1e-7 (tolerance 1e-5)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 24)).astype(np.float32)
    request = pb.PositionalEncodeRequest(sinusoidal=pb.Sinusoidal(
        input=tensor(x, x.shape, "float32"), layout=pb.Sinusoidal.CONCATENATED,
        position_offset=3))
    pos = np.arange(3, 8, dtype=np.float64)[:, None]
    angle = pos * 10000.0 ** (-np.arange(0, 24, 2) / 24.0)
    pe = np.concatenate([np.sin(angle), np.cos(angle)], axis=-1)
    check(call(stub, request).output, (x + pe).reshape(-1), x.shape, "float32")


def test_errors_carry_their_codes(stub):
    with pytest.raises(grpc.RpcError) as error:
        call(stub, pb.PositionalEncodeRequest())
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "method: set one of sinusoidal, learned, rope, alibi, t5_bias" in \
        error.value.details()

    learned = pb.Learned(input=tensor(np.zeros((4, 8)), (4, 8), "float32"),
                         table=tensor(np.zeros((512, 8)), (512, 8), "float32"),
                         positions=[0, 1, 2, 600])
    with pytest.raises(grpc.RpcError) as error:
        call(stub, pb.PositionalEncodeRequest(learned=learned))
    assert error.value.code() == grpc.StatusCode.OUT_OF_RANGE
    assert error.value.details() == \
        "learned.positions[3]: position 600 is past the table's 512 rows"

    with pytest.raises(grpc.RpcError) as error:
        call(stub, pb.PositionalEncodeRequest(
            alibi=pb.Alibi(num_heads=64, query_length=8192, key_length=8192)))
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "limit of 33554432 elements" in error.value.details()

    with pytest.raises(grpc.RpcError) as error:
        call(stub, pb.PositionalEncodeRequest(
            sinusoidal=pb.Sinusoidal(num_positions=4, dim=7)))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details().startswith("sinusoidal.dim: 7 must be even")


def test_numeric_health_counts_what_was_sent(server, stub):
    """The kernels take their output's statistics as they write it; an input is
    read for its own only when the output shows NaN or Inf (an add or a rotation
    keeps them), except T5's table, whose unused buckets never reach the output."""
    nan, inf = float("nan"), float("inf")

    def moved(request, want):
        assert server.nonfinite_moved("PositionalEncode", lambda: call(stub, request)) == want

    # Learned add: a NaN and an Inf in the input stay in the output.
    x = np.array([[nan, 1, 2, inf], [1, 2, 3, 4]], np.float32)
    moved(pb.PositionalEncodeRequest(learned=pb.Learned(
              input=tensor(x, x.shape, "float32"),
              table=tensor(np.zeros((4, 4)), (4, 4), "float32"))),
          {("input", "nan"): 1, ("input", "inf"): 1, ("output", "nan"): 1,
           ("output", "inf"): 1})
    # ALiBi added to scores masked with -inf: both sides count the two -inf.
    scores = np.zeros((1, 2, 2), np.float32)
    scores[0, 0, 1] = scores[0, 1, 1] = -inf
    moved(pb.PositionalEncodeRequest(alibi=pb.Alibi(
              scores=tensor(scores, scores.shape, "float32"))),
          {("input", "inf"): 2, ("output", "inf"): 2})
    # RoPE: the key's +Inf at position 0 becomes Inf and, in its partner, Inf * 0 =
    # NaN. Only the query's output is exported (finite here), but the key's
    # non-finite output sends both inputs to be read: one Inf.
    query = np.ones((1, 1, 1, 4), np.float32)
    key = np.ones((1, 1, 1, 4), np.float32)
    key[0, 0, 0, 1] = inf
    moved(pb.PositionalEncodeRequest(rope=pb.Rope(
              query=tensor(query, query.shape, "float32"),
              key=tensor(key, key.shape, "float32"))),
          {("input", "inf"): 1})
    # T5: a NaN in a bucket no query-key distance selects is in the input only.
    table = np.ones((4, 1), np.float32)
    table[3, 0] = nan
    moved(pb.PositionalEncodeRequest(t5_bias=pb.T5Bias(
              table=tensor(table, table.shape, "float32"), bidirectional=False,
              num_buckets=4, max_distance=8, query_length=1, key_length=1)),
          {("input", "nan"): 1})
    # Finite sends move nothing.
    moved(pb.PositionalEncodeRequest(learned=pb.Learned(
              input=tensor(np.ones((2, 4)), (2, 4), "float32"),
              table=tensor(np.zeros((4, 4)), (4, 4), "float32"))), {})

    # The table [[sin 0, cos 0], [sin 1, cos 1]]: abs-max 1, RMS sqrt(1/2).
    abs_max = server.metric_sum("layerserve_output_abs_max_sum", method="PositionalEncode")
    rms = server.metric_sum("layerserve_output_rms_sum", method="PositionalEncode")
    call(stub, pb.PositionalEncodeRequest(sinusoidal=pb.Sinusoidal(num_positions=2, dim=2)))
    assert server.metric_sum("layerserve_output_abs_max_sum", method="PositionalEncode") - \
        abs_max == pytest.approx(1.0, rel=1e-6)
    assert server.metric_sum("layerserve_output_rms_sum", method="PositionalEncode") - \
        rms == pytest.approx(np.sqrt(0.5), rel=1e-6)
