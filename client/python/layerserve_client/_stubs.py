"""Finds the gRPC stubs generated from proto/layerserve/v1/layerserve.proto.

The stubs keep their canonical module name `layerserve.v1` (the generated
layerserve_pb2_grpc.py imports it by that name, and the descriptor's file name
"layerserve/v1/layerserve.proto" is what server reflection reports). They are
taken from
  1. sys.path, when a `layerserve.v1` is importable there (e.g. build/python, where
     CMake generates them; PYTHONPATH), so a process never holds two copies;
  2. otherwise layerserve_client/_generated/ inside this package: where a wheel
     built from pyproject.toml carries them and the documented protoc command
     puts them.
"""
import os
import sys

_GENERATED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_generated")

PROTOC_HINT = (
    "generate them with protoc 3.21 and Debian's gRPC Python plugin, from the "
    "repository root (docs/clients/python.md):\n"
    "  mkdir -p client/python/layerserve_client/_generated\n"
    "  protoc -I proto --python_out=client/python/layerserve_client/_generated "
    "--grpc_python_out=client/python/layerserve_client/_generated "
    "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin "
    "proto/layerserve/v1/layerserve.proto\n"
    "  protoc -I /usr/share/gocode/src/github.com/gogo/googleapis "
    "--python_out=client/python/layerserve_client/_generated "
    "google/rpc/status.proto google/rpc/error_details.proto\n"
    "or put a directory holding layerserve/v1/layerserve_pb2.py on PYTHONPATH "
    "(CMake builds one in build/python)")

if (os.path.exists(os.path.join(_GENERATED, "layerserve", "v1", "layerserve_pb2.py"))
        and _GENERATED not in sys.path):
    # Appended, not prepended: stubs already on the path take precedence.
    sys.path.append(_GENERATED)

try:
    from layerserve.v1 import layerserve_pb2 as pb  # noqa: E402
    from layerserve.v1 import layerserve_pb2_grpc as pb_grpc  # noqa: E402
except ImportError as error:
    raise ImportError(f"layerserve_client: no layerserve.v1 stubs ({error}); "
                      f"{PROTOC_HINT}") from error

__all__ = ["pb", "pb_grpc", "PROTOC_HINT"]
