"""SIGTERM and SIGINT drain the server: health turns NOT_SERVING, accepted calls
finish, new ones get UNAVAILABLE, and the process exits 0 (also as PID 1)."""
import os
import re
import signal
import subprocess
import time

import grpc
import numpy as np
import pytest

from grpc_std import health_pb2, health_pb2_grpc
from server_process import CLI, ServerProcess, wait_for

# Large enough (32 MiB) that calls queue up behind one compute thread.
ROWS, DIM = 2048, 4096
CALLS = 12
_DRAINING = re.compile(r"draining (\d+) accepted calls")


def layer_norm(x):
    """What `layerserve-cli normalize --kind layer` answers (no weight or bias)."""
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_calls_finishes_accepted_calls_and_exits_zero(sig, tmp_path):
    server = ServerProcess("--compute-threads=1", "--shutdown-grace=60s")
    x = np.random.default_rng(1).standard_normal((ROWS, DIM)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    with grpc.insecure_channel(server.target) as channel:
        health = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service="layerserve.v1.LayerService"),
            timeout=120)
        assert next(health).status == health_pb2.HealthCheckResponse.SERVING

        # Separate client processes, so the load does not wait on this
        # interpreter's GIL.
        clients = [subprocess.Popen(
            [CLI, "--target", server.target, "--timeout-ms", "120000", "normalize",
             "--kind", "layer", "--input", str(tmp_path / "x.npy"),
             "--out", str(tmp_path / f"y{i}.npy")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i in range(CALLS)]
        assert wait_for(lambda: server.metric_value("layerserve_inflight_requests") >= 2,
                        timeout=60), "calls never queued up in the server"
        server.proc.send_signal(sig)

        # Health announces the drain before the server goes away.
        statuses = []
        try:
            for reply in health:
                statuses.append(reply.status)
        except grpc.RpcError:
            pass
        assert health_pb2.HealthCheckResponse.NOT_SERVING in statuses

    results = [(c.wait(timeout=120), c.stderr.read()) for c in clients]
    assert server.stop(timeout=120) == 0, server.output()
    accepted = int(_DRAINING.search(server.output()).group(1))
    assert accepted >= 1, server.output()
    ok = [i for i, (code, _) in enumerate(results) if code == 0]
    refused = [i for i, (code, err) in enumerate(results)
               if code == 2 and ("UNAVAILABLE" in err or "CANCELLED" in err)]
    # Every call is answered: OK, or refused. A refused call is UNAVAILABLE, or
    # CANCELLED when its upload was still running as the server closed (after the
    # drain's quiet period; see kDrainQuietPeriod in server/rpc/main.cc). None is lost.
    assert len(ok) + len(refused) == CALLS, results
    # Calls accepted before the signal all finish, with the right numbers.
    assert len(ok) >= accepted, (len(ok), accepted, server.output())
    want = layer_norm(x)
    for i in ok:
        assert np.allclose(np.load(tmp_path / f"y{i}.npy"), want, rtol=1e-4, atol=1e-4)
    assert "stopped" in server.output()


def test_exits_zero_as_pid_1_on_sigterm():
    """As a container's PID 1 the kernel drops default-disposition SIGTERM; the
    server must still drain and exit 0. unshare gives it PID 1 in a new namespace."""
    if os.geteuid() != 0:
        pytest.fail("this test needs root for unshare --pid (CI runs as root)")
    server = ServerProcess(wrapper=("unshare", "--pid", "--fork", "--kill-child"))
    # The server is unshare's child.
    children = open(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children").read().split()
    assert len(children) == 1
    child = int(children[0])
    nspid = [l for l in open(f"/proc/{child}/status") if l.startswith("NSpid:")][0].split()
    assert nspid[-1] == "1", nspid
    with grpc.insecure_channel(server.target) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    os.kill(child, signal.SIGTERM)
    assert server.proc.wait(timeout=60) == 0, server.output()
    assert "stopped" in server.output()


def test_drain_waits_for_a_slow_reader_to_take_its_answer(tmp_path):
    """An accepted call counts until gRPC is done sending its answer, and the server
    closes its connections only a quiet period after that: a client that reads its
    32 MiB answer slowly (here: stopped while it is sent) still gets all of it.
    Closing as soon as the handler finished could reset the connection under the
    answer's last bytes (the client then lost them)."""
    server = ServerProcess("--compute-threads=1", "--shutdown-grace=60s")
    x = np.random.default_rng(2).standard_normal((ROWS, DIM)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    client = subprocess.Popen(
        [CLI, "--target", server.target, "--timeout-ms", "120000", "normalize",
         "--kind", "layer", "--input", str(tmp_path / "x.npy"),
         "--out", str(tmp_path / "y.npy")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Stopped once the server computes (its whole request has arrived), the
        # client reads none of the answer.
        assert wait_for(lambda: server.metric_sum("layerserve_queue_duration_seconds_count",
                                                  method="Normalize") >= 1, timeout=60), \
            "the call never reached a worker"
        client.send_signal(signal.SIGSTOP)
        server.proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: "draining" in server.output(), timeout=60)
        # The answer cannot all leave while the client reads nothing: the server
        # waits (up to its grace) instead of closing.
        assert not wait_for(lambda: server.proc.poll() is not None, timeout=1.5), \
            server.output()
    finally:
        client.send_signal(signal.SIGCONT)
    resumed = time.monotonic()
    assert client.wait(timeout=120) == 0, client.stderr.read()
    assert server.proc.wait(timeout=60) == 0, server.output()
    # The quiet period (kDrainQuietPeriod, 0.5 s) runs from when gRPC was done with
    # the answer, after the client resumed reading it.
    assert time.monotonic() - resumed >= 0.45, server.output()
    assert np.allclose(np.load(tmp_path / "y.npy"), layer_norm(x), rtol=1e-4, atol=1e-4)
