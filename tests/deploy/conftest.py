"""Shared helpers of the deployment tests (tests/deploy): the integration suite's
ServerProcess and wire helpers, a checked Normalize call, a /metrics parser, free
loopback ports and the npm packages of deploy/package.json.

Paths come from CTest's environment (tests/deploy/CMakeLists.txt), as for
tests/integration.
"""
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SOURCE_DIR = Path(os.environ.get("LAYERSERVE_SOURCE_DIR", Path(__file__).parents[2]))
DEPLOY_DIR = SOURCE_DIR / "deploy"
_INTEGRATION = SOURCE_DIR / "tests" / "integration"

# The integration suite's helpers: its conftest is loaded under another module name
# so it does not collide with this conftest.
sys.path.insert(0, str(_INTEGRATION))
_spec = importlib.util.spec_from_file_location("integration_conftest",
                                               _INTEGRATION / "conftest.py")
integration = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(integration)
ServerProcess = integration.ServerProcess
wait_for = integration.wait_for
SERVER = integration.SERVER
CLI = integration.CLI

import wire  # noqa: E402  (tests/integration/wire.py)
from layerserve.v1 import layerserve_pb2 as pb  # noqa: E402

# Names a server must know: the readiness probe and client-side health checks ask
# for it.
SERVICE_NAME = "layerserve.v1.LayerService"


def layer_norm(x, eps=1e-5):
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


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def metric_samples(text, name):
    """{frozenset(labels.items()): value} of every sample of `name` in exposition
    text."""
    samples = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) == name:
            labels = frozenset(_LABEL.findall(m.group(2) or ""))
            samples[labels] = float(m.group(3))
    return samples


def requests_ok(metrics_text, method="Normalize"):
    """layerserve_requests_total{method, code="OK"} (0 before the first call)."""
    key = frozenset({("method", method), ("code", "OK")})
    return metric_samples(metrics_text, "layerserve_requests_total").get(key, 0.0)


def free_port():
    """A loopback port the OS just handed out, for programs that cannot bind port 0
    themselves (nginx, podman health checks). Callers retry if it is taken."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def node_modules():
    """deploy/package.json's packages, installed with `npm ci` from the committed
    lock file into the build tree (not the source tree); reinstalled only when the
    lock file changes."""
    npm_dir = Path(os.environ.get("LAYERSERVE_DEPLOY_NPM_DIR", "/tmp/layerserve-deploy-npm"))
    npm_dir.mkdir(parents=True, exist_ok=True)
    lock = (DEPLOY_DIR / "package-lock.json").read_bytes()
    stamp = npm_dir / "installed-lock.json"
    if not stamp.exists() or stamp.read_bytes() != lock:
        for name in ("package.json", "package-lock.json"):
            shutil.copy(DEPLOY_DIR / name, npm_dir / name)
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                       cwd=npm_dir, check=True, timeout=600)
        stamp.write_bytes(lock)
    return npm_dir / "node_modules"
