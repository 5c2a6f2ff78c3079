"""Session affinity through deploy/nginx/nginx.conf over three real replicas: every
call that carries the x-layerserve-session header lands on the replica that opened
the session (each replica's session token counters hold exactly its own sessions'
tokens, and decoding through nginx equals one forward pass), while calls without
the header, OpenSession included, are still balanced round robin. Without the
header the same session calls hit other replicas and get the server's NOT_FOUND
"was not opened on this replica": the affinity comes from the header."""
import collections

import grpc
import numpy as np
import pytest

import wire
from checked_normalize import checked_normalize
from layerserve.v1 import layerserve_pb2 as pb
from layerserve.v1 import layerserve_pb2_grpc as pb_grpc
from metrics_text import metric_samples, requests_ok
from server_process import ServerProcess
from test_nginx import Nginx

HEADER = "x-layerserve-session"
SESSIONS, PREFILL, STEPS, LAYERS = 12, 3, 4, 2


@pytest.fixture
def replicas():
    servers = [ServerProcess("--compute-threads=1") for _ in range(3)]
    yield servers
    for s in servers:
        assert s.stop() == 0, s.output()


def forward(stub, x, session_id="", header=True, **fields):
    metadata = ((HEADER, session_id),) if session_id and header else None
    return stub.BlockForward(pb.BlockForwardRequest(
        hidden_states=wire.array_tensor(x, "float32"), session_id=session_id, **fields),
        timeout=30, metadata=metadata)


def session_tokens(replica):
    samples = metric_samples(replica.metrics(), "layerserve_session_tokens_total")
    return {dict(labels)["phase"]: value for labels, value in samples.items()}


def active_sessions(replica):
    return metric_samples(replica.metrics(), "layerserve_active_sessions")[frozenset()]


def test_session_calls_stay_on_their_replica_and_plain_calls_round_robin(replicas,
                                                                          tmp_path):
    nginx = Nginx(tmp_path, replicas)
    rng = np.random.default_rng(21)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{nginx.port}") as channel:
            stub = pb_grpc.LayerServiceStub(channel)
            # OpenSession has no header: round robin spreads the sessions.
            ids = [stub.OpenSession(pb.OpenSessionRequest(num_layers=LAYERS),
                                    timeout=30).session_id for _ in range(SESSIONS)]
            opened = [active_sessions(r) for r in replicas]
            assert sum(opened) == SESSIONS and min(opened) >= 2, opened
            owner = {s: next(r for r in replicas if s.startswith(_replica_name(s, r)))
                     for s in ids}

            for s in ids:
                x = rng.standard_normal((PREFILL + STEPS, 512)).astype(np.float32)
                got = [wire.values(forward(stub, x[:PREFILL], s).hidden_states)]
                for t in range(PREFILL, PREFILL + STEPS):
                    reply = forward(stub, x[t:t + 1], s)
                    assert reply.session_length == t + 1
                    got.append(wire.values(reply.hidden_states))
                whole = wire.values(forward(stub, x, num_layers=LAYERS).hidden_states)
                got = np.concatenate(got)
                bound = 1e-4 * np.maximum(1.0, np.abs(whole))
                assert np.all(np.abs(got - whole) <= bound), s

            # Each replica computed exactly its own sessions' tokens.
            per_replica = collections.Counter(owner[s] for s in ids)
            for r in replicas:
                tokens = session_tokens(r)
                assert tokens.get("prefill", 0) == PREFILL * per_replica[r], tokens
                assert tokens.get("decode", 0) == STEPS * per_replica[r], tokens

            # The same session calls without the header are balanced round robin:
            # most reach a replica that does not hold the session.
            s = ids[0]
            codes = []
            for _ in range(6):
                try:
                    forward(stub, np.ones((1, 512), np.float32), s, header=False)
                    codes.append("OK")
                except grpc.RpcError as error:
                    assert error.code() == grpc.StatusCode.NOT_FOUND, error
                    assert "was not opened on this replica" in error.details()
                    codes.append("NOT_FOUND")
            assert 2 <= codes.count("NOT_FOUND") <= 5, codes

            # Plain calls still spread over all three replicas.
            before = [requests_ok(r.metrics()) for r in replicas]
            for _ in range(30):
                checked_normalize(stub, rng)
            served = [requests_ok(r.metrics()) - b for r, b in zip(replicas, before)]
            assert sum(served) == 30 and min(served) >= 5, served

            # CloseSession carries the header too: each reaches its session.
            for s in ids:
                stub.CloseSession(pb.CloseSessionRequest(session_id=s), timeout=30,
                                  metadata=((HEADER, s),))
            assert [active_sessions(r) for r in replicas] == [0, 0, 0]
    finally:
        assert nginx.stop() == 0


def _replica_name(session_id, replica):
    """The replica part of a session id ("<host>-<pid>.<hex>") if `replica` made
    it, else a string no id starts with."""
    name = session_id[:session_id.rfind(".")]
    return name if name.endswith(f"-{replica.proc.pid}") else "\0"
