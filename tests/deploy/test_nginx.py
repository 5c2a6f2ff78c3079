"""deploy/nginx/nginx.conf balances gRPC calls over three real replicas on loopback:
every replica serves (its own /metrics counts them), the access log carries the gRPC
status, and when a replica is stopped (SIGTERM) traffic goes on without errors."""
import json
import re
import signal
import socket
import subprocess

import grpc
import numpy as np
import pytest

from checked_normalize import checked_normalize
from conftest import DEPLOY_DIR
from layerserve.v1 import layerserve_pb2_grpc as pb_grpc
from metrics_text import requests_ok
from server_process import ServerProcess, free_port, wait_for

CONFIG = DEPLOY_DIR / "nginx" / "nginx.conf"
# Bounded traffic: this many calls per phase, sequential.
CALLS = 60


def loopback_config(replicas, port, access_log):
    """nginx.conf with the compose hostnames and ports replaced by loopback ones,
    and the session map's replica names ("layerserve-N-<pid>") by the replicas'
    own (this host's name and their pids)."""
    text = CONFIG.read_text()
    servers = sorted(set(re.findall(r"layerserve-\d:50051", text)))
    assert len(servers) == len(replicas)
    for n, (old, replica) in enumerate(zip(servers, replicas), start=1):
        text = text.replace(old, replica.target)
        name = re.escape(f"{socket.gethostname()}-{replica.proc.pid}")
        assert f"layerserve-{n}-[0-9]+" in text
        text = text.replace(f"layerserve-{n}-[0-9]+", name)
    assert "listen 50051 http2;" in text and "access_log /dev/stdout grpc;" in text
    text = text.replace("listen 50051 http2;", f"listen 127.0.0.1:{port} http2;")
    text = text.replace("access_log /dev/stdout grpc;", f"access_log {access_log} grpc;")
    return text


class Nginx:
    def __init__(self, tmp_path, replicas):
        self.log = tmp_path / "access.log"
        self.conf = tmp_path / "nginx.conf"
        for _ in range(5):  # The free port can be taken before nginx binds it.
            self.port = free_port()
            conf = self.conf
            conf.write_text(loopback_config(replicas, self.port, self.log))
            self.proc = subprocess.Popen(
                ["nginx", "-p", str(tmp_path), "-c", str(conf), "-e", "stderr",
                 "-g", f"daemon off; pid {tmp_path}/nginx.pid;"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if wait_for(self._listening, timeout=10) and self.proc.poll() is None:
                return
            self.stop()
        raise RuntimeError("nginx did not start")

    def _listening(self):
        out = subprocess.run(["ss", "-Hltn", f"sport = :{self.port}"], capture_output=True,
                             text=True).stdout
        return f"127.0.0.1:{self.port}" in out

    def reload(self, config_text):
        """Writes a new config and reloads it as `nginx -s reload` does (SIGHUP):
        old workers finish their calls, new ones use the new config."""
        self.conf.write_text(config_text)
        check = subprocess.run(["nginx", "-t", "-p", str(self.conf.parent), "-c", str(self.conf),
                                "-e", "stderr"], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
        self.proc.send_signal(signal.SIGHUP)

    def log_lines(self):
        return self.log.read_text().splitlines() if self.log.exists() else []

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(timeout=30)


# Calls that reach a draining replica get UNAVAILABLE: the client retries them, as
# deploy/ docs tell clients to; nginx then sends the retry to another replica.
RETRY_CONFIG = json.dumps({"methodConfig": [{
    "name": [{"service": "layerserve.v1.LayerService"}],
    "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.05s", "maxBackoff": "0.5s",
                    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]})


@pytest.fixture
def replicas():
    servers = [ServerProcess("--compute-threads=1", "--shutdown-grace=30s") for _ in range(3)]
    yield servers
    for s in servers:
        assert s.stop() == 0, s.output()


def test_calls_reach_every_replica_and_survive_a_stopped_one(replicas, tmp_path):
    nginx = Nginx(tmp_path, replicas)
    rng = np.random.default_rng(7)
    try:
        before = [requests_ok(r.metrics()) for r in replicas]
        with grpc.insecure_channel(f"127.0.0.1:{nginx.port}") as channel:
            stub = pb_grpc.LayerServiceStub(channel)
            for _ in range(CALLS):
                checked_normalize(stub, rng)
        served = [requests_ok(r.metrics()) - b for r, b in zip(replicas, before)]
        # Every call was served once, and nginx spread them over all three.
        assert sum(served) == CALLS, served
        assert min(served) >= CALLS // 6, served
        lines = nginx.log_lines()
        assert len(lines) == CALLS
        assert all("grpc_status=0 " in line for line in lines), lines[:3]
        upstreams = {re.search(r"upstream=(\S+)", line).group(1) for line in lines}
        assert upstreams == {r.target for r in replicas}

        # Stop replica 3 between calls: SIGTERM makes it drain (health NOT_SERVING,
        # new calls UNAVAILABLE), then close its port and exit.
        stopped = replicas[2]
        stopped_ok = requests_ok(stopped.metrics())
        survivors = [requests_ok(r.metrics()) for r in replicas[:2]]
        stopped.proc.terminate()
        # Until the replica has taken the signal, a call may still be served by it.
        assert wait_for(lambda: "draining" in stopped.output(), timeout=30)
        options = [("grpc.service_config", RETRY_CONFIG)]
        with grpc.insecure_channel(f"127.0.0.1:{nginx.port}", options=options) as channel:
            stub = pb_grpc.LayerServiceStub(channel)
            for _ in range(CALLS):
                checked_normalize(stub, rng)
        assert stopped.stop() == 0, stopped.output()
        assert "stopped" in stopped.output()

        # Once it is gone nginx takes it out by itself: no retries needed.
        options = [("grpc.enable_retries", 0)]
        with grpc.insecure_channel(f"127.0.0.1:{nginx.port}", options=options) as channel:
            stub = pb_grpc.LayerServiceStub(channel)
            for _ in range(CALLS):
                checked_normalize(stub, rng)
        served = [requests_ok(r.metrics()) - b for r, b in zip(replicas[:2], survivors)]
        # All 120 calls since the SIGTERM were answered OK by the two others; the
        # stopped replica finished none after it (it had none running).
        assert sum(served) == 2 * CALLS, served
        assert min(served) > 0, served
        statuses = [re.search(r"grpc_status=(\d*)", line).group(1)
                    for line in nginx.log_lines()[CALLS:]]
        # Retried calls show as 14 (UNAVAILABLE) from the draining replica; every
        # other log line is OK.
        assert set(statuses) <= {"0", "14"}, statuses
        assert statuses.count("0") == 2 * CALLS
    finally:
        assert nginx.stop() == 0
    assert stopped_ok >= 1


def test_a_replica_marked_down_and_reloaded_gets_no_calls_then_drains(replicas, tmp_path):
    """The documented way to take a replica out: `down` in the config, reload, then
    SIGTERM. No call is refused, none reaches it after the reload."""
    nginx = Nginx(tmp_path, replicas)
    rng = np.random.default_rng(9)
    try:
        leaving = replicas[0]
        text = nginx.conf.read_text()
        server_line = f"server {leaving.target} max_fails=1 fail_timeout=10s;"
        assert server_line in text
        nginx.reload(text.replace(server_line, f"server {leaving.target} down;"))
        # Reloaded when a new worker serves: wait until calls stop reaching it. The
        # old worker closes this client's connection with GOAWAY; gRPC's transparent
        # retry (on by default) resends calls it had not started on the new one.
        with grpc.insecure_channel(f"127.0.0.1:{nginx.port}") as channel:
            stub = pb_grpc.LayerServiceStub(channel)
            assert wait_for(lambda: "down" in nginx.conf.read_text()
                            and _new_worker_serves(nginx, stub, rng, leaving), timeout=30)
            before = [requests_ok(r.metrics()) for r in replicas]
            for _ in range(CALLS):
                checked_normalize(stub, rng)
            served = [requests_ok(r.metrics()) - b for r, b in zip(replicas, before)]
            assert served[0] == 0 and sum(served) == CALLS and min(served[1:]) > 0, served
            assert leaving.stop() == 0, leaving.output()
            assert "draining 0 accepted calls" in leaving.output()
            for _ in range(CALLS // 2):
                checked_normalize(stub, rng)
    finally:
        assert nginx.stop() == 0


def _new_worker_serves(nginx, stub, rng, leaving):
    """True once three calls in a row skip `leaving` (the reload has taken effect)."""
    before = requests_ok(leaving.metrics())
    for _ in range(3):
        checked_normalize(stub, rng)
    return requests_ok(leaving.metrics()) == before
