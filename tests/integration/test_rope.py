"""PositionalEncode's rope method through the real running server: the PyTorch golden
cases (tests/golden/rope_golden.json, Hugging Face's formulas) sent as FLOAT32 and
BFLOAT16, an output_dtype override, and the error codes.

Frequencies: the server rounds base ** e correctly, PyTorch's float32 pow is within
1 ulp (make_rope_golden.py). The test recomputes the server's frequencies with an
independent numpy version of HF's formulas (float32 ops, the power in float64), checks
them against PyTorch's within 4 ulp, and where an entry differs allows for the
angle it moves: |p * d_inv| + ulp(angle), times |x_a| + |x_b| and the attention
factor. Everywhere else the bound is make_rope_golden.py's tol * max(1, |want|).
"""
import json
import math
import os

import grpc
import numpy as np
import pytest

from layerserve.v1 import layerserve_pb2 as pb
from server_process import SOURCE_DIR
from wire import WIRE, tensor, values

GOLDEN = os.path.join(SOURCE_DIR, "tests", "golden", "rope_golden.json")
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2}
F32 = np.float32


@pytest.fixture(scope="module")
def cases():
    with open(GOLDEN) as f:
        return json.load(f)["cases"]






# ---- HF's frequencies (modeling_rope_utils.py) in numpy, as the server computes them.

def base_powers(base, dim):
    exponent = np.arange(0, dim, 2).astype(np.float32) / F32(dim)
    return np.power(np.float64(F32(base)), exponent.astype(np.float64)).astype(np.float32)


def default_inv_freq(base, dim):
    return F32(1) / base_powers(base, dim)


def server_frequencies(case, seq_len):
    """inv_freq (float32) and the attention factor for a golden case."""
    s = case["scaling"]
    theta, dim = case["theta"], case["rotary_dim"] or case["query_shape"][3]
    kind, factor = s["type"], s["factor"]
    m = s["original_max_position_embeddings"]
    if kind == "NONE":
        return default_inv_freq(theta, dim), 1.0
    if kind == "LINEAR":
        return default_inv_freq(theta, dim) / F32(factor), 1.0
    if kind == "DYNAMIC_NTK":
        base = theta
        if seq_len > m:
            base = theta * ((factor * seq_len / m) - (factor - 1)) ** (dim / (dim - 2))
        return default_inv_freq(base, dim), 1.0
    if kind == "YARN":
        attention = s["attention_factor"] or 0.1 * math.log(factor) + 1.0
        beta_fast, beta_slow = s["beta_fast"] or 32.0, s["beta_slow"] or 1.0

        def correction_dim(rotations):
            return dim * math.log(m / (rotations * 2 * math.pi)) / (2 * math.log(theta))
        low = max(math.floor(correction_dim(beta_fast)), 0)
        high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
        if low == high:
            high += 0.001
        pos_freqs = base_powers(theta, dim)
        extrapolation = F32(1) / pos_freqs
        interpolation = F32(1) / (F32(factor) * pos_freqs)
        ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - F32(low)) / F32(high - low),
                       F32(0), F32(1))
        ext = F32(1) - ramp
        return (interpolation * (F32(1) - ext) + extrapolation * ext).astype(np.float32), \
            F32(attention)
    assert kind == "LLAMA3", kind
    low_ff = s["low_freq_factor"] or 1.0
    high_ff = s["high_freq_factor"] or 4.0
    inv = default_inv_freq(theta, dim)
    wavelen = (F32(1) / inv) * F32(2 * math.pi)
    low_wavelen, high_wavelen = F32(m / low_ff), F32(m / high_ff)
    llama = np.where(wavelen > low_wavelen, inv / F32(factor), inv)
    smooth = ((F32(1) / wavelen) * F32(m) - F32(low_ff)) / F32(high_ff - low_ff)
    smoothed = (F32(1) - smooth) * llama / F32(factor) + smooth * llama
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, llama).astype(np.float32), 1.0


def ulps(a, b):
    return np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64))


# ---- Requests and the per-element bound.

def request_for(case, wire, output_dtype=pb.DATA_TYPE_UNSPECIFIED):
    s = case["scaling"]
    scaling = pb.RopeScaling(
        type=pb.RopeScaling.Type.Value(s["type"]), factor=s["factor"],
        original_max_position_embeddings=s["original_max_position_embeddings"])
    for field in ("beta_fast", "beta_slow", "attention_factor", "low_freq_factor",
                  "high_freq_factor"):
        if s[field] is not None:
            setattr(scaling, field, s[field])
    rope = pb.Rope(
        query=tensor(case["query"], case["query_shape"], wire),
        layout=pb.Rope.Layout.Value(case["layout"]),
        theta=case["theta"], rotary_dim=case["rotary_dim"],
        style=pb.Rope.Style.Value(case["style"]), scaling=scaling,
        position_offset=case["position_offset"], positions=case["positions"])
    if case["key"] is not None:
        rope.key.CopyFrom(tensor(case["key"], case["key_shape"], wire))
    return pb.PositionalEncodeRequest(rope=rope, output_dtype=output_dtype)


def positions_bt(case):
    """[B, T] positions of the proto's rule."""
    shape = case["query_shape"]
    b, t = shape[0], shape[2] if case["layout"] == "BHTD" else shape[1]
    if not case["positions"]:
        p = case["position_offset"] + np.arange(t)
    else:
        p = np.asarray(case["positions"], dtype=np.int64)
    return np.broadcast_to(p.reshape(-1, t), (b, t))


def bound(case, x, want, tol, ours, theirs, scale):
    """Allowed |got - want| per element, shaped as x in BHTD [B, H, T, Dh]."""
    limit = tol * np.maximum(1.0, np.abs(want))
    rot = case["rotary_dim"] or x.shape[3]
    half = case["style"] == "HALF"
    idx = np.arange(rot)
    freq = idx % (rot // 2) if half else idx // 2
    partner = np.where(idx < rot // 2, idx + rot // 2, idx - rot // 2) if half else idx ^ 1
    p = positions_bt(case).astype(np.float32).astype(np.float64)[:, None, :, None]
    d_inv = (ours.astype(np.float64) - theirs.astype(np.float64))[freq]
    angle_error = np.abs(p * d_inv) + np.abs(p * ours.astype(np.float64)[freq]) * 2.0**-23
    angle_error = np.where(d_inv != 0, angle_error, 0.0)
    extra = (np.abs(x[..., :rot]) + np.abs(x[..., partner])) * angle_error * float(scale)
    limit[..., :rot] += extra
    return limit


def to_bhtd(a, case):
    return a if case["layout"] == "BHTD" else a.transpose(0, 2, 1, 3)


def check(case, response_tensor, x_flat, want_flat, shape, wire):
    assert list(response_tensor.shape) == list(shape)
    assert response_tensor.dtype == WIRE[wire]
    positions = positions_bt(case)
    theirs = np.asarray(case["inv_freq"], dtype=np.float32)
    ours, scale = server_frequencies(case, int(positions.max()) + 1)
    assert np.all(ulps(ours, theirs) <= 4), (case["name"], ours, theirs)
    x = to_bhtd(np.asarray(x_flat, dtype=np.float64).reshape(shape), case)
    want = to_bhtd(np.asarray(want_flat, dtype=np.float64).reshape(shape), case)
    got = to_bhtd(values(response_tensor).reshape(shape), case)
    limit = bound(case, x, want, TOLERANCE[wire], ours, theirs, scale)
    excess = np.abs(got - want) - limit
    worst = np.unravel_index(np.argmax(excess), excess.shape)
    assert excess[worst] <= 0, (case["name"], worst, got[worst], want[worst], limit[worst])


@pytest.mark.parametrize("wire", ["float32", "bfloat16"])
def test_rope_golden(stub, cases, wire):
    assert len(cases) >= 20
    for case in cases:
        response = stub.PositionalEncode(request_for(case, wire), timeout=30)
        check(case, response.output, case["query"], case["expected_query"],
              case["query_shape"], wire)
        if case["key"] is None:
            assert not response.HasField("key"), case["name"]
        else:
            check(case, response.key, case["key"], case["expected_key"], case["key_shape"],
                  wire)


def test_rope_output_dtype_bfloat16_from_float32(stub, cases):
    case = next(c for c in cases if c["name"] == "half_gqa_8_2_theta5e5")
    response = stub.PositionalEncode(request_for(case, "float32", pb.BFLOAT16), timeout=30)
    check(case, response.output, case["query"], case["expected_query"],
          case["query_shape"], "bfloat16")
    check(case, response.key, case["key"], case["expected_key"], case["key_shape"],
          "bfloat16")


def test_rope_errors(stub, cases):
    case = cases[0]
    request = request_for(case, "float32")
    request.rope.ClearField("query")
    with pytest.raises(grpc.RpcError) as error:
        stub.PositionalEncode(request, timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details() == "rope.query: required"

    request = request_for(case, "float32")
    request.rope.rotary_dim = 3
    with pytest.raises(grpc.RpcError) as error:
        stub.PositionalEncode(request, timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details() == "rope.rotary_dim: 3 must be even"

    request = request_for(case, "float32")
    request.rope.scaling.type = pb.RopeScaling.YARN
    request.rope.scaling.factor = 4
    with pytest.raises(grpc.RpcError) as error:
        stub.PositionalEncode(request, timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details() == (
        "rope.scaling.original_max_position_embeddings: 0 must be >= 1 for YARN")
