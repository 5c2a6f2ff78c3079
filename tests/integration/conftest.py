"""Fixtures of the end-to-end tests: one real layerserve per test module, and a stub
on it. The helpers (ServerProcess, wait_for...) are in tests/testing/, which
PYTHONPATH holds (tests/integration/CMakeLists.txt), as it holds the generated
stubs.
"""
import grpc
import pytest

from layerserve.v1 import layerserve_pb2_grpc as pb_grpc
from server_process import ServerProcess


@pytest.fixture(scope="module")
def stub(server):
    """A LayerService stub on the module's server."""
    with grpc.insecure_channel(server.target) as channel:
        yield pb_grpc.LayerServiceStub(channel)


@pytest.fixture(scope="module")
def server():
    """One server for a test module; it must shut down cleanly (exit 0) afterwards."""
    process = ServerProcess()
    yield process
    code = process.stop()
    assert code == 0, process.output()
