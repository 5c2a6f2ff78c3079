"""A Normalize call whose answer is checked, for the tests that only need to know a
server (or the balancer in front of it) answers correctly."""
import numpy as np

import wire
from layerserve.v1 import layerserve_pb2 as pb


def layer_norm(x, eps=1e-5):
    """LayerNorm without weight or bias, in float64."""
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + eps)


def checked_normalize(stub, rng, rows=4, dim=64, timeout=30):
    """One LayerNorm call; its output must match numpy."""
    x = rng.standard_normal((rows, dim)).astype(np.float32)
    reply = stub.Normalize(pb.NormalizeRequest(kind=pb.LAYER_NORM,
                                               input=wire.array_tensor(x, "float32")),
                           timeout=timeout)
    got = wire.values(reply.output).reshape(rows, dim)
    np.testing.assert_allclose(got, layer_norm(x), rtol=1e-4, atol=1e-4)
