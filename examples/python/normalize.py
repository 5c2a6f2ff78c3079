#!/usr/bin/env python3
"""Calls layerserve's Normalize from Python with stubs generated from the .proto.

Generate the stubs once (scripts/build does it into build/python):
  protoc -I proto --python_out=gen --grpc_python_out=gen \
      --plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin \
      proto/layerserve/v1/layerserve.proto
then run with that directory on PYTHONPATH:
  PYTHONPATH=build/python /usr/bin/python3 examples/python/normalize.py
"""
import argparse
import sys

import grpc
import numpy as np

from layerserve.v1 import layerserve_pb2 as pb
from layerserve.v1 import layerserve_pb2_grpc as pb_grpc


def to_tensor(array: np.ndarray) -> pb.Tensor:
    array = np.ascontiguousarray(array, dtype="<f4")
    return pb.Tensor(shape=array.shape, dtype=pb.FLOAT32, data=array.tobytes())


def from_tensor(tensor: pb.Tensor) -> np.ndarray:
    assert tensor.dtype == pb.FLOAT32, pb.DataType.Name(tensor.dtype)
    return np.frombuffer(tensor.data, dtype="<f4").reshape(tuple(tensor.shape))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:50051")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)  # [B, T, D]
    weight = rng.standard_normal(8).astype(np.float32)

    with grpc.insecure_channel(args.target) as channel:
        stub = pb_grpc.LayerServiceStub(channel)
        request = pb.NormalizeRequest(kind=pb.RMS_NORM, input=to_tensor(x),
                                      weight=to_tensor(weight), epsilon=1e-6)
        try:
            response = stub.Normalize(request, timeout=10)
        except grpc.RpcError as error:
            print(f"error: {error.code().name}: {error.details()}", file=sys.stderr)
            return 2

    y = from_tensor(response.output)
    expected = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * weight
    error = float(np.max(np.abs(y - expected)))
    print(f"RMSNorm of {list(x.shape)}: max |server - numpy| = {error:.2e}")
    return 0 if error < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
