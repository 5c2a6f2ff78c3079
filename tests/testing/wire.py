"""numpy <-> layerserve.v1.Tensor for the end-to-end tests, in FLOAT32 and
BFLOAT16. Golden inputs are bfloat16-exact, so a BFLOAT16 request carries exactly
the values the float32 one does."""
import numpy as np

from layerserve.v1 import layerserve_pb2 as pb

WIRE = {"float32": pb.FLOAT32, "bfloat16": pb.BFLOAT16}


def tensor(values, shape, wire):
    """A pb.Tensor; values must be exact in bfloat16 when wire is bfloat16."""
    a = np.asarray(values, dtype=np.float32).reshape(shape)
    if wire == "float32":
        data = a.astype("<f4").tobytes()
    else:
        bits = a.view(np.uint32)
        assert np.all(bits & 0xFFFF == 0), "not bfloat16-exact"
        data = (bits >> 16).astype("<u2").tobytes()
    return pb.Tensor(shape=list(shape), dtype=WIRE[wire], data=data)


def array_tensor(a, wire):
    """tensor() of an array, in its own shape."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    return tensor(a, a.shape, wire)


def values(t):
    """A response tensor's values as float64, flat."""
    if t.dtype == pb.FLOAT32:
        return np.frombuffer(t.data, dtype="<f4").astype(np.float64)
    assert t.dtype == pb.BFLOAT16, t.dtype
    bits = np.frombuffer(t.data, dtype="<u2").astype(np.uint32) << 16
    return bits.view(np.float32).astype(np.float64)
