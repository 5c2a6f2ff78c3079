"""What the Client does around the calls: retries of UNAVAILABLE only (through a
proxy that fails on purpose, and a port where nothing listens yet), the deadline of
a call and of its retries, round_robin over two replicas, TLS, and the message size
limit. Every call that succeeds has its numbers checked."""
import random
import re
import socket
import subprocess
import time

import grpc
import numpy as np
import pytest

from conftest import ServerProcess, stop_cleanly
from layerserve_client import Client, LayerServeError, RetryPolicy
from proxy import FlakyProxy

X = np.random.default_rng(51).standard_normal((3, 16)).astype(np.float32)
RMS = X / np.sqrt((X * X).mean(-1, keepdims=True) + 1e-6)


def check_rms(y):
    np.testing.assert_allclose(y, RMS, rtol=1e-5, atol=1e-6)


class Sleeps(list):
    """Records the waits between retries instead of sleeping (injected clock)."""

    def __call__(self, seconds):
        self.append(seconds)


@pytest.fixture
def proxies(server):
    started = []

    def start(**kwargs):
        started.append(FlakyProxy(server.target, **kwargs))
        return started[-1]
    yield start
    for p in started:
        p.stop()


def test_unavailable_is_retried_with_backoff(proxies):
    proxy = proxies(fail_first=2)
    sleeps = Sleeps()
    policy = RetryPolicy(max_attempts=4, initial_backoff=0.1, max_backoff=1.0)
    with Client(proxy.target, retry=policy, sleep=sleeps, rng=random.Random(1)) as client:
        check_rms(client.normalize(X, "rms"))
    assert proxy.count("/Normalize") == 3
    assert len(sleeps) == 2
    assert 0 <= sleeps[0] <= 0.1 and 0 <= sleeps[1] <= 0.2  # full jitter under the caps
    assert sleeps[0] != sleeps[1]


def test_retries_are_bounded(proxies):
    proxy = proxies(fail_first=100)
    sleeps = Sleeps()
    with Client(proxy.target, retry=RetryPolicy(max_attempts=3), sleep=sleeps) as client:
        with pytest.raises(LayerServeError) as error:
            client.normalize(X, "rms")
    assert error.value.code == grpc.StatusCode.UNAVAILABLE
    assert error.value.details == "proxy: failing call 3 of 100"
    assert error.value.attempts == 3 and proxy.count("/Normalize") == 3
    assert len(sleeps) == 2


@pytest.mark.parametrize("code", [grpc.StatusCode.RESOURCE_EXHAUSTED,
                                  grpc.StatusCode.INTERNAL, grpc.StatusCode.CANCELLED])
def test_other_codes_are_not_retried(proxies, code):
    proxy = proxies(fail_first=1, fail_code=code)
    sleeps = Sleeps()
    with Client(proxy.target, sleep=sleeps) as client:
        with pytest.raises(LayerServeError) as error:
            client.normalize(X, "rms")
        assert error.value.code == code and error.value.attempts == 1
        check_rms(client.normalize(X, "rms"))  # the proxy's next call goes through
    assert proxy.count("/Normalize") == 2 and sleeps == []


def test_invalid_argument_from_the_server_is_not_retried(proxies):
    proxy = proxies()
    sleeps = Sleeps()
    with Client(proxy.target, sleep=sleeps) as client:
        with pytest.raises(LayerServeError) as error:
            client.normalize(X, "rms", weight=np.ones(5))
    assert error.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details.startswith("weight.shape: length 5")
    assert proxy.count("/Normalize") == 1 and sleeps == []


def free_port():
    """A loopback port the OS just handed out, with nothing listening on it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_nothing_listening_then_a_real_server(server):
    port = free_port()
    started = []

    def sleep(seconds):
        # The first attempt found nothing on the port: now a server comes up there
        # (a proxy to the real one), as when a replica restarts.
        if not started:
            started.append(FlakyProxy(server.target, port=port))
        time.sleep(seconds)

    policy = RetryPolicy(max_attempts=8, initial_backoff=0.05, max_backoff=0.2)
    try:
        with Client(f"127.0.0.1:{port}", retry=policy, sleep=sleep) as client:
            check_rms(client.normalize(X, "rms", timeout=10))
        assert started and started[0].count("/Normalize") == 1
    finally:
        for p in started:
            p.stop()


def test_nothing_listening_at_all(server):
    sleeps = Sleeps()
    with Client(f"127.0.0.1:{free_port()}", retry=RetryPolicy(max_attempts=3),
                sleep=sleeps) as client:
        with pytest.raises(LayerServeError) as error:
            client.health(timeout=5)
    assert error.value.code == grpc.StatusCode.UNAVAILABLE
    assert error.value.attempts == 3 and len(sleeps) == 2


def test_deadline_is_honoured_and_not_retried(proxies):
    proxy = proxies(delay=2.0)
    with Client(proxy.target) as client:
        start = time.monotonic()
        with pytest.raises(LayerServeError) as error:
            client.normalize(X, "rms", timeout=0.2)
        elapsed = time.monotonic() - start
    assert error.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert 0.2 <= elapsed < 1.5, elapsed  # the proxy would answer after 2 s
    assert error.value.attempts == 1 and proxy.count("/Normalize") == 1
    # The client-wide default deadline works the same way.
    with Client(proxy.target, timeout=0.2) as client:
        with pytest.raises(LayerServeError) as error:
            client.health()
    assert error.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


def test_deadline_bounds_the_retries(proxies):
    proxy = proxies(fail_first=1000)
    policy = RetryPolicy(max_attempts=1000, initial_backoff=0.05, max_backoff=0.1)
    with Client(proxy.target, retry=policy) as client:  # real sleeps
        start = time.monotonic()
        with pytest.raises(LayerServeError) as error:
            client.normalize(X, "rms", timeout=0.5)
        elapsed = time.monotonic() - start
    # The last answer: UNAVAILABLE when the time ran out between attempts, or
    # DEADLINE_EXCEEDED when it did during the last attempt.
    assert error.value.code in (grpc.StatusCode.UNAVAILABLE,
                                grpc.StatusCode.DEADLINE_EXCEEDED)
    assert 2 <= error.value.attempts < 1000
    assert elapsed < 1.5, elapsed  # 0.5 s, with room for a loaded machine


def test_deadline_on_the_real_server(client):
    with pytest.raises(LayerServeError) as error:
        client.block_forward(np.ones((1, 64, 512), np.float32), num_layers=4,
                             timeout=0.0005)
    assert error.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


def normalize_count(process):
    m = re.search(r'^layerserve_requests_total\{code="OK",method="Normalize"\} (\S+)$',
                  process.metrics(), re.M)
    return float(m.group(1)) if m else 0.0


def test_round_robin_over_two_replicas(server):
    second = ServerProcess()
    try:
        def served(since):
            return [normalize_count(server) - since[0], normalize_count(second) - since[1]]

        before = [normalize_count(server), normalize_count(second)]
        with Client([server.target, second.target]) as client:
            calls = 0
            # Until both replicas answered (normally 2 calls): round_robin connects
            # to each on its own, and sends only to those connected so far.
            while calls < 200 and min(served(before)) < 1:
                check_rms(client.normalize(X, "rms"))
                calls += 1
            assert min(served(before)) >= 1, served(before)
            assert sum(served(before)) == calls
            # Both connected: round_robin alternates between them.
            both_ready = [normalize_count(server), normalize_count(second)]
            for _ in range(20):
                check_rms(client.normalize(X, "rms"))
            assert sorted(served(both_ready)) in ([10, 10], [9, 11], [8, 12]), \
                served(both_ready)
    finally:
        stop_cleanly(second)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tls")
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1",
                    "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return key.read_bytes(), cert.read_bytes()


def test_tls(proxies, certificate):
    key, cert = certificate
    proxy = proxies(server_credentials=grpc.ssl_server_credentials([(key, cert)]))
    with Client(proxy.target, credentials=grpc.ssl_channel_credentials(cert)) as client:
        check_rms(client.normalize(X, "rms"))
        assert client.health() == "SERVING"
    with Client(proxy.target, retry=RetryPolicy(max_attempts=1)) as plaintext:
        with pytest.raises(LayerServeError) as error:
            plaintext.health(timeout=5)
    assert error.value.code == grpc.StatusCode.UNAVAILABLE
    assert proxy.count("/Normalize") == 1


def test_message_size_limit(client, server):
    # 1.5 M floats (6 MB) each way: over gRPC's 4 MiB default, under ours.
    x = np.random.default_rng(52).standard_normal((3, 500_000)).astype(np.float32)
    np.testing.assert_array_equal(client.activate(x, "relu"), np.maximum(x, 0))
    with Client(server.target, max_message_bytes=1 << 20) as small:
        with pytest.raises(LayerServeError) as error:
            small.activate(x, "relu")
    assert error.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    # A channel argument of the caller's replaces the client's own.
    options = [("grpc.max_receive_message_length", 1 << 20)]
    with Client(server.target, options=options) as small_replies:
        assert small_replies.activate(x[:, :1000], "relu").shape == (3, 1000)
        with pytest.raises(LayerServeError) as error:
            small_replies.activate(x, "relu")
    assert error.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
