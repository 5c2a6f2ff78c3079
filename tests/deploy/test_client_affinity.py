"""Each of the four client packages decodes through deploy/nginx/nginx.conf over three
real replicas without losing its session: its session calls carry the
x-layerserve-session header, so nginx sends them to the replica that opened the
session. Without the header, round robin would send most steps to a replica that
does not hold the session (NOT_FOUND, tests/deploy/test_session_affinity.py), and the
example, which checks every step's session length, would fail.

Each client runs its own packaged example (`--address`, `--steps`), the program its
docs tell a user to run after installing it."""
import os
import pathlib
import subprocess

import pytest

from metrics_text import metric_samples
from server_process import SOURCE_DIR, ServerProcess
from test_nginx import Nginx

STEPS = 20


def client_commands():
    """The examples as the build made them: {client: argv without the options}."""
    build = pathlib.Path(os.environ["LAYERSERVE_BINARY_DIR"])
    return {
        "python": ["/usr/bin/python3", "-m", "layerserve_client.example"],
        "node": ["node", str(SOURCE_DIR / "client/node/examples/session_decode.js")],
        "go": [str(build / "client/go/layerserve-example")],
        "cpp": [str(build / "bin/layerserve-cpp-example")],
    }


def client_environment():
    """The build tree's packages: the Python client's source beside its generated
    stubs, the Node client's npm dependencies."""
    build = pathlib.Path(os.environ["LAYERSERVE_BINARY_DIR"])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SOURCE_DIR / "client/python"),
                                         str(build / "python")])
    env["NODE_PATH"] = str(build / "client/node/node_modules")
    return env


@pytest.fixture(scope="module")
def replicas():
    servers = [ServerProcess("--compute-threads=1") for _ in range(3)]
    yield servers
    for s in servers:
        assert s.stop() == 0, s.output()


def decode_tokens(replica):
    samples = metric_samples(replica.metrics(), "layerserve_session_tokens_total")
    return sum(v for labels, v in samples.items() if dict(labels)["phase"] == "decode")


def active_sessions(replica):
    return metric_samples(replica.metrics(), "layerserve_active_sessions")[frozenset()]


@pytest.mark.parametrize("client", ["python", "node", "go", "cpp"])
def test_client_decodes_through_nginx_on_the_replica_of_its_session(client, replicas,
                                                                    tmp_path):
    nginx = Nginx(tmp_path, replicas)
    try:
        before = [decode_tokens(r) for r in replicas]
        done = subprocess.run(
            client_commands()[client] + ["--address", f"127.0.0.1:{nginx.port}",
                                         "--steps", str(STEPS)],
            capture_output=True, text=True, timeout=240, env=client_environment())
        assert done.returncode == 0, (done.stdout, done.stderr)
        # Every step reached the one replica holding the session, and was computed
        # there once.
        decoded = [decode_tokens(r) - b for r, b in zip(replicas, before)]
        assert sorted(decoded) == [0, 0, STEPS], decoded
        session_calls = [line for line in nginx.log_lines() if "BlockForward" in line]
        assert len(session_calls) >= STEPS, nginx.log_lines()
        assert all("grpc_status=0 " in line for line in session_calls), session_calls
        # The example closed its session, on the replica that held it.
        assert [active_sessions(r) for r in replicas] == [0, 0, 0]
    finally:
        assert nginx.stop() == 0
