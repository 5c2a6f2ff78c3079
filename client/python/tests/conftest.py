"""Fixtures: real layerserve servers on ephemeral loopback ports, started with
tests/testing/server_process.py's ServerProcess (the one the end-to-end tests use),
and Clients on them.

Environment (set by CTest, client/python/CMakeLists.txt): LAYERSERVE_SERVER,
LAYERSERVE_SOURCE_DIR, PYTHONPATH = client/python, the generated stubs and
tests/testing.
"""
import os

import pytest

from layerserve_client import Client
from server_process import ServerProcess

SOURCE_DIR = os.environ.get(
    "LAYERSERVE_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))
GOLDEN_DIR = os.path.join(SOURCE_DIR, "tests", "golden")
MODELS = os.path.join(GOLDEN_DIR, "models")


def documented_commands(marker):
    """The shell lines of docs/clients/python.md's block marked `<!-- tested:
    marker -->`, backslash continuations joined."""
    with open(os.path.join(SOURCE_DIR, "docs", "clients", "python.md")) as f:
        text = f.read()
    block = text.split(f"<!-- tested: {marker} -->", 1)[1].split("```sh\n", 1)[1]
    block = block.split("```", 1)[0].replace("\\\n", " ")
    return [" ".join(line.split()) for line in block.splitlines() if line.strip()]


def stop_cleanly(process):
    """Stops a server that must still be running, and must then exit 0."""
    early = process.proc.poll()
    code = process.stop()
    assert early is None, f"layerserve ended before the tests did ({early}):\n" + \
        process.output()
    assert code == 0, process.output()


@pytest.fixture(scope="session")
def server():
    """The built-in demo model; must exit 0 at the end."""
    process = ServerProcess()
    yield process
    stop_cleanly(process)


@pytest.fixture(scope="session")
def golden_server():
    """The tiny checkpoints of tests/golden/models, float32 weights."""
    process = ServerProcess(f"--model-repository={MODELS}", "--weight-dtype=float32")
    yield process
    stop_cleanly(process)


@pytest.fixture(scope="session")
def client(server):
    with Client(server.target, timeout=60) as c:
        yield c


@pytest.fixture(scope="session")
def golden_client(golden_server):
    with Client(golden_server.target, timeout=60) as c:
        yield c
