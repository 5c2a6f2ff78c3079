"""The package as a user installs it, offline, with Debian's tools
(docs/clients/python.md, "Install"): a wheel built from client/python with
`pip wheel --no-build-isolation` (setuptools 66; setup.py puts the generated stubs
in it) without writing into the source tree, installed into a fresh virtual
environment, then used from an empty directory with nothing of the repository on
the path: its version, where it was imported from, and the example it installs
(`layerserve-client-example`) against a real server on an ephemeral loopback port.

CTest entry python_client_wheel (client/python/CMakeLists.txt)."""
import contextlib
import os
import re
import socket
import subprocess
import zipfile

import pytest

from conftest import SOURCE_DIR, documented_commands, stop_cleanly
from server_process import ServerProcess

PACKAGE_DIR = os.path.join(SOURCE_DIR, "client", "python")
STEPS = 20  # The example's default.

# Run by the venv's interpreter: what a user's program sees.
USER_SCRIPT = """
import importlib.metadata, sys
import numpy as np
import layerserve_client
from layerserve.v1 import layerserve_pb2
from google.rpc import error_details_pb2
print(layerserve_client.__version__)
print(importlib.metadata.version("layerserve-client"))
for module in (layerserve_client, layerserve_pb2, error_details_pb2):
    print(module.__file__)
with layerserve_client.Client(sys.argv[1], timeout=10) as client:
    # The google.rpc stubs came along: the server's error details are read.
    try:
        client.normalize(np.ones((2, 4)), "rms", weight=np.ones(3))
        raise AssertionError("no error")
    except layerserve_client.LayerServeError as e:
        assert e.field_violations == [("weight.shape", e.details)], e.field_violations
"""


def package_files():
    """Every file under client/python but compiled bytecode, with its mtime."""
    files = {}
    for root, dirs, names in os.walk(PACKAGE_DIR):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            path = os.path.join(root, name)
            files[os.path.relpath(path, PACKAGE_DIR)] = os.stat(path).st_mtime_ns
    return files


def user_env(home):
    """A clean environment: no PYTHONPATH, HOME a temporary directory (the docs'
    commands build and install under ~)."""
    return {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": str(home)}


@contextlib.contextmanager
def socket_without_server():
    """A loopback address that refuses connections: a port bound, never listened on
    (so no other process takes it meanwhile)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{s.getsockname()[1]}"


def run(args, **kwargs):
    result = subprocess.run(args, capture_output=True, text=True, timeout=180, **kwargs)
    assert result.returncode == 0, f"{args}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(home, venv, wheel): docs/clients/python.md's install commands as written,
    run from the repository root with HOME a temporary directory: the wheel built
    from the source tree (protoc and grpc_python_plugin found on PATH) and
    installed into a fresh venv."""
    home = tmp_path_factory.mktemp("home")
    commands = documented_commands("install")
    assert len(commands) == 3 and " wheel " in commands[0], commands
    before = package_files()
    for command in commands:
        run(["/bin/bash", "-euc", command], env=user_env(home), cwd=SOURCE_DIR)
    assert package_files() == before, "the build wrote into client/python"
    (wheel,) = (home / "layerserve-dist").iterdir()
    return home, home / "layerserve-venv", wheel


@pytest.fixture(scope="module")
def demo_server():
    """Its own server, so that its session metrics count the example's alone."""
    process = ServerProcess()
    yield process
    stop_cleanly(process)


def test_wheel_contents(installed):
    _, _, wheel = installed
    names = zipfile.ZipFile(wheel).namelist()
    for name in ("layerserve_client/client.py", "layerserve_client/py.typed",
                 "layerserve_client/example.py",
                 "layerserve_client/_generated/layerserve/v1/layerserve_pb2.py",
                 "layerserve_client/_generated/layerserve/v1/layerserve_pb2_grpc.py",
                 "layerserve_client/_generated/google/rpc/status_pb2.py",
                 "layerserve_client/_generated/google/rpc/error_details_pb2.py"):
        assert name in names, names
    assert not any(n.startswith(("tests/", "examples/")) for n in names), names
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert ("layerserve-client-example = layerserve_client.example:main"
            in zipfile.ZipFile(wheel).read(entry_points).decode())


def test_imported_from_the_venv(installed, demo_server, tmp_path):
    home, venv, wheel = installed
    out = run([str(venv / "bin" / "python"), "-c", USER_SCRIPT, demo_server.target],
              env=user_env(home), cwd=tmp_path).stdout.splitlines()
    version, metadata_version, *files = out
    wheel_version = re.fullmatch(r"layerserve_client-(.+)-py3-none-any\.whl",
                                 wheel.name).group(1)
    assert version == metadata_version == wheel_version, (version, metadata_version, wheel)
    site = os.path.join(os.path.realpath(venv), "lib")
    for path in files:
        assert os.path.realpath(path).startswith(site + os.sep), (path, venv)


def test_example_runs_from_the_venv(installed, demo_server, tmp_path):
    home, venv, _ = installed
    tokens = {phase: demo_server.metric_sum("layerserve_session_tokens_total", phase=phase)
              for phase in ("prefill", "decode")}
    result = run([str(venv / "bin" / "layerserve-client-example"),
                  "--address", demo_server.target], env=user_env(home), cwd=tmp_path)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("model demo: llama, 4 layers, hidden 512, READY (default)")
    assert re.match(r"normalize: RMSNorm of \[2, 8\], max \|server - numpy\| = ", lines[1])
    assert lines[-1].startswith(
        f"ok: 1 model(s), normalize checked, session on demo layers 0-3: prefill 4 tokens "
        f"+ {STEPS} decode steps, length {4 + STEPS}, closed"), lines[-1]
    assert result.stderr == ""
    # The server saw the prefill and every step, and the session is closed.
    assert demo_server.metric_sum("layerserve_session_tokens_total",
                                  phase="prefill") - tokens["prefill"] == 4
    assert demo_server.metric_sum("layerserve_session_tokens_total",
                                  phase="decode") - tokens["decode"] == STEPS
    assert demo_server.metric_value("layerserve_active_sessions") == 0


def test_example_reports_errors(installed, tmp_path):
    home, venv, _ = installed
    with socket_without_server() as address:
        result = subprocess.run(
            [str(venv / "bin" / "layerserve-client-example"), "--address", address,
             "--timeout", "5"], capture_output=True, text=True, timeout=60,
            env=user_env(home), cwd=tmp_path)
    assert result.returncode == 2, result
    assert result.stderr.startswith(f"error: {address}: UNAVAILABLE: "), result.stderr
    assert "ok:" not in result.stdout
