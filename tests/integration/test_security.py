"""Access control through the real server: TLS and mutual TLS with certificates made
by openssl here (a CA, a server certificate for 127.0.0.1, client certificates from
that CA and from another one), bearer tokens from a file (UNAUTHENTICATED without
or with a wrong one, health exempt, reflection not), refusals before anything is
computed or counted, clear start-up errors, certificates and tokens rotated under
load with no restart and no failed call, and /metrics on its own address."""
import os
import socket
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest

from grpc_std import health_pb2, health_pb2_grpc
from grpc_std import reflection_pb2, reflection_pb2_grpc
from layerserve.v1 import layerserve_pb2 as pb
from layerserve.v1 import layerserve_pb2_grpc as pb_grpc
from pki import TOKENS, make_leaf, make_pki, openssl
from server_process import CLI, SERVER, ServerProcess, wait_for
from wire import array_tensor, values

MISSING = ('missing credentials: this server requires "authorization: Bearer <token>" '
           "metadata")
INVALID = "invalid bearer token"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """tests/testing/pki.py's files: ca, server (127.0.0.1), client (signed by ca),
    other_ca and stranger (a client certificate signed by other_ca), tokens."""
    made = make_pki(tmp_path_factory.mktemp("pki"))
    made.dir = Path(made.dir)
    return made


def credentials(pki, root="ca", client=None):
    """TLS channel credentials trusting `root`, presenting `client`'s certificate."""
    return grpc.ssl_channel_credentials(
        root_certificates=pki.pem[f"{root}_crt"],
        private_key=pki.pem[f"{client}_key"] if client else None,
        certificate_chain=pki.pem[f"{client}_crt"] if client else None)


def normalize(channel, metadata=None):
    """One RMSNorm call, checked against numpy; raises grpc.RpcError if refused."""
    x = np.random.default_rng(7).standard_normal((3, 16)).astype(np.float32)
    reply = pb_grpc.LayerServiceStub(channel).Normalize(
        pb.NormalizeRequest(kind=pb.RMS_NORM, input=array_tensor(x, "float32")),
        metadata=metadata, timeout=10)
    want = x / np.sqrt(np.mean(x.astype(np.float64) ** 2, -1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(values(reply.output).reshape(3, 16), want, rtol=1e-5,
                               atol=1e-6)


def refused(channel, metadata=None):
    """The status code and message a Normalize call on `channel` was answered."""
    with pytest.raises(grpc.RpcError) as error:
        normalize(channel, metadata)
    return error.value.code(), error.value.details()


def requests_total(server):
    return server.metric_sum("layerserve_requests_total")


def health_status(channel, metadata=None):
    return health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service="layerserve.v1.LayerService"),
        metadata=metadata, timeout=10).status


def test_tls_serves_trusting_clients_and_refuses_plaintext(pki):
    server = ServerProcess(f"--tls-cert={pki.server_crt}", f"--tls-key={pki.server_key}")
    try:
        assert f"gRPC listening on {server.target} (TLS)" in server.output()
        with grpc.secure_channel(server.target, credentials(pki)) as channel:
            normalize(channel)
            assert health_status(channel) == health_pb2.HealthCheckResponse.SERVING
        # A plaintext client cannot even complete the HTTP/2 preface.
        with grpc.insecure_channel(server.target) as channel:
            assert refused(channel)[0] == grpc.StatusCode.UNAVAILABLE
        # A client that trusts another CA rejects the server's certificate.
        with grpc.secure_channel(server.target, credentials(pki, root="other_ca")) as channel:
            assert refused(channel)[0] == grpc.StatusCode.UNAVAILABLE
        with grpc.secure_channel(server.target, credentials(pki)) as channel:
            normalize(channel)
        assert requests_total(server) == 2  # Refused connections never reach a handler.
    finally:
        assert server.stop() == 0, server.output()


def test_cli_connects_with_tls_ca(pki):
    server = ServerProcess(f"--tls-cert={pki.server_crt}", f"--tls-key={pki.server_key}")
    try:
        ok = subprocess.run([CLI, "--target", server.target, "--tls-ca", pki.ca_crt, "health"],
                            capture_output=True, text=True, timeout=60)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        plain = subprocess.run([CLI, "--target", server.target, "--timeout-ms", "3000",
                                "health"], capture_output=True, text=True, timeout=60)
        assert plain.returncode != 0
    finally:
        assert server.stop() == 0, server.output()


def test_mutual_tls_refuses_clients_without_a_certificate_from_the_ca(pki):
    server = ServerProcess(f"--tls-cert={pki.server_crt}", f"--tls-key={pki.server_key}",
                           f"--tls-client-ca={pki.ca_crt}")
    try:
        assert f"gRPC listening on {server.target} (mutual TLS)" in server.output()
        with grpc.secure_channel(server.target, credentials(pki, client="client")) as channel:
            normalize(channel)
        for name, creds in [("no client certificate", credentials(pki)),
                            ("certificate from another CA",
                             credentials(pki, client="stranger")),
                            # The server's own certificate is not for client auth.
                            ("server certificate as client", credentials(pki, client="server"))]:
            with grpc.secure_channel(server.target, creds) as channel:
                code, _ = refused(channel)
                assert code == grpc.StatusCode.UNAVAILABLE, name
        with grpc.insecure_channel(server.target) as channel:
            assert refused(channel)[0] == grpc.StatusCode.UNAVAILABLE
        # The refusals left the server serving, and uncounted.
        with grpc.secure_channel(server.target, credentials(pki, client="client")) as channel:
            normalize(channel)
            assert health_status(channel) == health_pb2.HealthCheckResponse.SERVING
        assert requests_total(server) == 2
    finally:
        assert server.stop() == 0, server.output()


@pytest.fixture(scope="module")
def token_server(pki):
    """A plaintext server that wants a bearer token."""
    server = ServerProcess(f"--auth-token-file={pki.tokens}")
    yield server
    assert server.stop() == 0, server.output()


def bearer(token):
    return [("authorization", f"Bearer {token}")]


def test_token_server_says_so_and_warns_about_plaintext(token_server):
    out = token_server.output()
    assert f"gRPC listening on {token_server.target} (plaintext, bearer token)" in out
    assert "warning: bearer tokens without --tls-cert cross the network in cleartext" in out


def test_calls_without_the_right_token_are_unauthenticated_and_never_counted(token_server):
    before = requests_total(token_server)
    cases = [
        (None, MISSING),
        (bearer("wrong"), INVALID),
        (bearer(TOKENS[0][:-1]), INVALID),  # A prefix of a token.
        (bearer(TOKENS[0] + "x"), INVALID),  # A token and more.
        (bearer(TOKENS[0].upper()), INVALID),  # Tokens are case-sensitive.
        ([("authorization", TOKENS[0])], 'authorization metadata must be "Bearer <token>"'),
        ([("authorization", f"Basic {TOKENS[0]}")],
         'authorization metadata must be "Bearer <token>"'),
        ([("authorization", "Bearer ")], 'authorization metadata must be "Bearer <token>"'),
        (bearer(TOKENS[0]) + bearer("wrong"),
         "more than one authorization metadata entry (2); send exactly one"),
        ([("x-api-key", TOKENS[0])], MISSING),
    ]
    with grpc.insecure_channel(token_server.target) as channel:
        for metadata, message in cases:
            assert refused(channel, metadata) == (grpc.StatusCode.UNAUTHENTICATED, message), \
                metadata
        # Every accepted token works, the scheme in any case.
        normalize(channel, bearer(TOKENS[0]))
        normalize(channel, bearer(TOKENS[1]))
        normalize(channel, [("authorization", f"bearer {TOKENS[1]}")])
    # Refused calls never reached the service: only the three good ones count.
    assert requests_total(token_server) - before == 3


def test_health_is_exempt_and_reflection_is_not(token_server):
    with grpc.insecure_channel(token_server.target) as channel:
        assert health_status(channel) == health_pb2.HealthCheckResponse.SERVING
        assert health_status(channel, bearer("wrong")) == health_pb2.HealthCheckResponse.SERVING
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()

        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)

        def list_services(metadata):
            replies = reflection.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                metadata=metadata, timeout=10)
            return {s.name for r in replies for s in r.list_services_response.service}

        with pytest.raises(grpc.RpcError) as error:
            list_services(None)
        assert (error.value.code(), error.value.details()) == (
            grpc.StatusCode.UNAUTHENTICATED, MISSING)
        assert "layerserve.v1.LayerService" in list_services(bearer(TOKENS[1]))


def test_mutual_tls_and_token_together(pki):
    server = ServerProcess(f"--tls-cert={pki.server_crt}", f"--tls-key={pki.server_key}",
                           f"--tls-client-ca={pki.ca_crt}", f"--auth-token-file={pki.tokens}")
    try:
        assert f"gRPC listening on {server.target} (mutual TLS, bearer token)" in \
            server.output()
        assert "cleartext" not in server.output()
        with grpc.secure_channel(server.target, credentials(pki, client="client")) as channel:
            assert refused(channel) == (grpc.StatusCode.UNAUTHENTICATED, MISSING)
            assert refused(channel, bearer("wrong")) == (grpc.StatusCode.UNAUTHENTICATED,
                                                         INVALID)
            assert health_status(channel) == health_pb2.HealthCheckResponse.SERVING
            normalize(channel, bearer(TOKENS[0]))
        # The token does not stand in for the client certificate.
        with grpc.secure_channel(server.target, credentials(pki)) as channel:
            assert refused(channel, bearer(TOKENS[0]))[0] == grpc.StatusCode.UNAVAILABLE
        assert requests_total(server) == 1
    finally:
        assert server.stop() == 0, server.output()


def replace(path, data):
    """Writes `data` over `path` as operators (and Kubernetes) rotate files: a new
    file renamed over the old, never a half-written one."""
    new = f"{path}.new"
    with open(new, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    os.replace(new, path)


def served_certificate(pki, target):
    """The certificate (DER) a new TLS connection to `target` is shown, presenting
    pki's client certificate as mutual TLS asks."""
    host, port = target.rsplit(":", 1)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=pki.pem["ca_crt"].decode())
    context.load_cert_chain(pki.client_crt, pki.client_key)
    context.set_alpn_protocols(["h2"])
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            return tls.getpeercert(binary_form=True)


def der(pem):
    return ssl.PEM_cert_to_DER_cert(pem.decode())


def test_certificates_and_tokens_rotate_under_load_without_a_failed_call(pki, tmp_path):
    renewed = "renewed"  # A second server certificate for 127.0.0.1 from the same CA.
    make_leaf(pki.dir, renewed, "ca",
              "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    renewed_crt = (pki.dir / f"{renewed}.crt").read_bytes()
    renewed_key = (pki.dir / f"{renewed}.key").read_bytes()
    cert, key, tokens = tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "tokens"
    replace(cert, pki.pem["server_crt"])
    replace(key, pki.pem["server_key"])
    replace(tokens, f"{TOKENS[0]}\n")
    new_token = "rotated-token-0123456789"
    server = ServerProcess(f"--tls-cert={cert}", f"--tls-key={key}",
                           f"--tls-client-ca={pki.ca_crt}", f"--auth-token-file={tokens}")
    creds = credentials(pki, client="client")
    token = [TOKENS[0]]  # What the clients send; switched during the test.
    calls, failures, stop = [0], [], threading.Event()

    def load():
        """Calls on one connection kept open and on a new one (a handshake) each."""
        with grpc.secure_channel(server.target, creds) as kept:
            while not stop.is_set():
                try:
                    normalize(kept, bearer(token[0]))
                    with grpc.secure_channel(server.target, creds) as fresh:
                        normalize(fresh, bearer(token[0]))
                    calls[0] += 2
                except Exception as error:  # noqa: BLE001 -- every failure counts
                    failures.append(error)

    def accepted(value):
        with grpc.secure_channel(server.target, creds) as channel:
            try:
                normalize(channel, bearer(value))
                return True
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.UNAUTHENTICATED, error
                return False

    def calls_go_on():
        """Waits for both load threads to finish calls begun after this point."""
        seen = calls[0]
        assert wait_for(lambda: calls[0] >= seen + 8, timeout=30), failures

    threads = [threading.Thread(target=load, daemon=True) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        calls_go_on()
        # Tokens: add the new one, move the clients to it, remove the old one.
        replace(tokens, f"{TOKENS[0]}\n{new_token}\n")
        assert wait_for(lambda: accepted(new_token), timeout=10, interval=0.1)
        token[0] = new_token
        calls_go_on()
        replace(tokens, f"{new_token}\n")
        assert wait_for(lambda: not accepted(TOKENS[0]), timeout=10, interval=0.1)
        calls_go_on()
        # Certificates: a certificate without its key first (as a copy of one file at
        # a time leaves them), which must not be taken; then the key too.
        assert served_certificate(pki, server.target) == der(pki.pem["server_crt"])
        replace(cert, renewed_crt)
        assert served_certificate(pki, server.target) == der(pki.pem["server_crt"])
        assert wait_for(lambda: "the TLS files changed but cannot be used: --tls-key: "
                        f"{key} is not the key of the certificate in {cert}" in
                        server.output())
        calls_go_on()
        replace(key, renewed_key)
        assert wait_for(lambda: served_certificate(pki, server.target) == der(renewed_crt),
                        interval=0.1)
        calls_go_on()
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        code = server.stop()
    assert failures == []
    assert code == 0, server.output()
    output = server.output()
    assert f"--auth-token-file: read 2 token(s) again from {tokens}" in output
    assert f"--auth-token-file: read 1 token(s) again from {tokens}" in output
    assert f"TLS certificate read again from {cert}" in output
    # Never a token in the log.
    assert TOKENS[0] not in output and new_token not in output


def start_failure(*args):
    """Exit code and output of a server that must refuse to start."""
    result = subprocess.run([SERVER, "--host=127.0.0.1", "--port=0", "--metrics-port=0",
                             *args], capture_output=True, text=True, timeout=60)
    return result.returncode, result.stdout + result.stderr


def test_bad_access_control_flags_stop_the_server_with_a_clear_message(pki, tmp_path):
    (tmp_path / "empty").write_text("# no token here\n\n")
    (tmp_path / "spaces").write_text("two tokens on one line\n")
    (tmp_path / "not-pem").write_text("hello\n")
    encrypted = tmp_path / "encrypted.key"
    openssl("pkey", "-in", pki.server_key, "-aes256", "-passout", "pass:x", "-out",
            str(encrypted), cwd=tmp_path)
    cert, key = f"--tls-cert={pki.server_crt}", f"--tls-key={pki.server_key}"
    cases = [
        ([f"--auth-token-file={tmp_path}/none"],
         f"--auth-token-file: cannot read {tmp_path}/none"),
        ([f"--auth-token-file={tmp_path}/empty"],
         f"--auth-token-file: {tmp_path}/empty holds no token"),
        ([f"--auth-token-file={tmp_path}/spaces"],
         f"--auth-token-file: {tmp_path}/spaces:1: a token must be printable ASCII "
         "without spaces"),
        ([cert], "--tls-cert needs --tls-key"),
        ([key], "--tls-key needs --tls-cert"),
        ([f"--tls-client-ca={pki.ca_crt}"],
         "--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)"),
        ([f"--tls-cert={tmp_path}/none", key], f"--tls-cert: cannot read {tmp_path}/none"),
        ([f"--tls-cert={tmp_path}/not-pem", key],
         f"--tls-cert: {tmp_path}/not-pem holds no PEM certificate"),
        ([cert, f"--tls-key={encrypted}"],
         f"--tls-key: {encrypted} holds no unencrypted PEM private key"),
        ([cert, f"--tls-key={pki.client_key}"],
         f"--tls-key: {pki.client_key} is not the key of the certificate in "
         f"{pki.server_crt}"),
        ([cert, key, f"--tls-client-ca={tmp_path}/not-pem"],
         f"--tls-client-ca: {tmp_path}/not-pem holds no PEM certificate"),
    ]
    for args, message in cases:
        code, output = start_failure(*args)
        assert (code, output) == (2, f"layerserve: {message}\n"), args


def _hold_port(host, port):
    """A socket bound (not listening) to host:port, so connections there are refused
    and no other process can listen there; None if something already holds it."""
    holder = socket.socket()
    try:
        holder.bind((host, port))
        return holder
    except OSError:
        holder.close()
        return None


def test_metrics_listener_binds_its_own_address():
    # All of 127.0.0.0/8 is loopback on Linux: 127.0.0.2 stands for an internal
    # interface, 127.0.0.1 for the public one. The port the OS gave 127.0.0.2 may be
    # in use on 127.0.0.1 by another process (tests run in parallel): then this
    # takes another server.
    for _ in range(5):
        server = ServerProcess("--metrics-host=127.0.0.2")
        port = int(server.metrics_url.split(":")[2].split("/")[0])
        holder = _hold_port("127.0.0.1", port)
        if holder is not None:
            break
        assert server.stop() == 0, server.output()
    assert holder is not None, "127.0.0.1 had every port the metrics listener got"
    try:
        assert server.metrics_url == f"http://127.0.0.2:{port}/metrics"
        with grpc.insecure_channel(server.target) as channel:
            normalize(channel)
        assert requests_total(server) == 1  # Read through 127.0.0.2.
        with pytest.raises(urllib.error.URLError) as error:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert isinstance(error.value.reason, ConnectionRefusedError)
        grpc_port = server.target.split(":")[1]
        with grpc.insecure_channel(f"127.0.0.2:{grpc_port}") as channel:
            assert refused(channel)[0] == grpc.StatusCode.UNAVAILABLE
    finally:
        holder.close()
        assert server.stop() == 0, server.output()
