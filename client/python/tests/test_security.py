"""The Client against secured servers: a bearer token from token= or
token_file= (right: served; wrong or missing: UNAUTHENTICATED with the server's
message; health needs none and is sent none), mutual TLS from tls_ca/tls_cert/
tls_key files (a certificate from the CA: served; none or another CA's: refused),
sessions carrying the same credentials on every call, argument errors, and the
token never appearing in an exception, a repr or a failing program's output.

The servers are the real layerserve with tests/testing/pki.py's CA, certificates
and tokens, serving the tiny golden checkpoints so sessions can run."""
import os
import subprocess
import sys
import textwrap
import traceback

import grpc
import numpy as np
import pytest

from checks import assert_close
from conftest import MODELS, ServerProcess, stop_cleanly
from layerserve_client import Client, LayerServeError, Pipeline, RetryPolicy
from pki import TOKENS, make_pki
from proxy import FlakyProxy

# The server's messages (server/security/auth.cc).
MISSING = ('missing credentials: this server requires "authorization: Bearer <token>" '
           "metadata")
INVALID = "invalid bearer token"
WRONG = "s3cret-wrong-token-5555555555555555"  # Must not leak either.
MODEL = "tiny-llama"
X = np.random.default_rng(25).standard_normal((3, 16)).astype(np.float32)
RMS = X / np.sqrt((X * X).mean(-1, keepdims=True) + 1e-6)
NO_RETRY = RetryPolicy(max_attempts=1)  # A refused handshake is UNAVAILABLE: once is enough.


def check_rms(client):
    np.testing.assert_allclose(client.normalize(X, "rms"), RMS, rtol=1e-5, atol=1e-6)


def assert_secret_free(*texts):
    for text in texts:
        for secret in (*TOKENS, WRONG):
            assert secret not in text, f"a token leaked into: {text!r}"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def token_file(tmp_path_factory):
    """A client's token file: one token, with a trailing newline and stray spaces."""
    path = tmp_path_factory.mktemp("client") / "token"
    path.write_text(f"  {TOKENS[1]}\r\n")
    return str(path)


def models_server(*args):
    return ServerProcess(f"--model-repository={MODELS}", "--weight-dtype=float32", *args)


@pytest.fixture(scope="module")
def token_server(pki):
    """Plaintext, wants one of pki.tokens."""
    process = models_server(f"--auth-token-file={pki.tokens}")
    yield process
    stop_cleanly(process)


@pytest.fixture(scope="module")
def mtls_server(pki):
    """TLS with pki's server certificate, wants a client certificate signed by ca."""
    process = models_server(f"--tls-cert={pki.server_crt}", f"--tls-key={pki.server_key}",
                            f"--tls-client-ca={pki.ca_crt}")
    yield process
    stop_cleanly(process)


def mtls(pki, client="client"):
    """Client arguments for mutual TLS presenting `client`'s certificate."""
    return dict(tls_ca=pki.ca_crt, tls_cert=getattr(pki, f"{client}_crt"),
                tls_key=getattr(pki, f"{client}_key"))


# ---- bearer tokens

def test_the_right_token_is_served(token_server, token_file):
    with Client(token_server.target, token=TOKENS[0]) as client:
        check_rms(client)
        assert [m.name for m in client.list_models()]
    with Client(token_server.target, token_file=token_file) as client:
        check_rms(client)
        assert client.get_model(MODEL).name == MODEL


@pytest.mark.parametrize("token, details", [(None, MISSING), (WRONG, INVALID)],
                         ids=["missing", "wrong"])  # No token in a test name.
def test_a_wrong_or_missing_token_is_unauthenticated(token_server, token, details):
    with Client(token_server.target, token=token) as client:
        with pytest.raises(LayerServeError) as error:
            check_rms(client)
        assert error.value.code == grpc.StatusCode.UNAUTHENTICATED
        assert error.value.details == details
        assert error.value.attempts == 1  # Not retried: another try would fail alike.
        with pytest.raises(LayerServeError) as session_error:
            client.open_session(model=MODEL)
        assert session_error.value.code == grpc.StatusCode.UNAUTHENTICATED
    for e in (error.value, session_error.value):
        assert_secret_free(str(e), repr(e), "".join(traceback.format_exception(
            type(e), e, e.__traceback__)))


def test_health_needs_no_token_and_is_sent_none(token_server):
    with Client(token_server.target) as client:
        assert client.health() == "SERVING"
        assert client.health("layerserve.v1.LayerService") == "SERVING"
    # Through a proxy that records the authorization header: every LayerService
    # call carries it, sessions' included; the health check does not.
    proxy = FlakyProxy(token_server.target)
    try:
        with Client(proxy.target, token=TOKENS[0]) as client:
            assert client.health() == "SERVING"
            # The proxy does not pass the token on: the server refuses, as it should.
            with pytest.raises(LayerServeError):
                client.list_models()
            with pytest.raises(LayerServeError):
                client.close_session("a-session-id")  # A session call.
        bearer = f"Bearer {TOKENS[0]}"
        assert proxy.authorization == [("Check", None), ("ListModels", bearer),
                                       ("CloseSession", bearer)]
    finally:
        proxy.stop()


# ---- client certificates

def test_mutual_tls_with_a_client_certificate(mtls_server, pki):
    with Client(mtls_server.target, **mtls(pki)) as client:
        check_rms(client)
        assert client.health() == "SERVING"


@pytest.mark.parametrize("case", ["no certificate", "another CA's", "plaintext"])
def test_mutual_tls_refuses_other_clients(mtls_server, pki, case):
    arguments = {"no certificate": dict(tls_ca=pki.ca_crt),
                 "another CA's": mtls(pki, "stranger"),
                 "plaintext": {}}[case]
    with Client(mtls_server.target, retry=NO_RETRY, timeout=10, **arguments) as client:
        with pytest.raises(LayerServeError) as error:
            check_rms(client)
    # The handshake fails, so no call ever reaches the server.
    assert error.value.code == grpc.StatusCode.UNAVAILABLE, error.value


def test_credentials_argument_still_works(mtls_server, pki):
    credentials = grpc.ssl_channel_credentials(pki.pem["ca_crt"], pki.pem["client_key"],
                                               pki.pem["client_crt"])
    with Client(mtls_server.target, credentials=credentials) as client:
        check_rms(client)


# ---- sessions carry the credentials on every call

@pytest.mark.parametrize("secured", ["token", "mtls"])
def test_a_session_on_a_secured_server(request, pki, secured):
    if secured == "token":
        server = request.getfixturevalue("token_server")
        arguments = dict(token=TOKENS[0])
    else:
        server = request.getfixturevalue("mtls_server")
        arguments = mtls(pki)
    with Client(server.target, timeout=60, **arguments) as client:
        info = client.get_model(MODEL)
        x = np.random.default_rng(26).standard_normal((5, info.hidden_size)).astype(
            np.float32)
        whole = client.block_forward(x, model=MODEL, num_layers=info.num_layers)
        with client.open_session(model=MODEL, num_layers=info.num_layers) as session:
            got = [session.forward(x[:3]).hidden_states]
            for t in range(3, 5):
                step = session.forward(x[t:t + 1])
                assert step.length == t + 1
                got.append(step.hidden_states)
        assert session.closed  # CloseSession went through too.
    assert_close(np.concatenate(got), whole, 1e-4, f"session with {secured}")


# ---- the pipeline carries them too

def test_a_pipeline_on_a_secured_server(token_server):
    """Two stages (layers 0 and 1, both on the token server): every stage's
    BlockForward, OpenSession and CloseSession carries the token; a wrong token is
    UNAUTHENTICATED from the first stage and appears in no message."""
    stages = [(token_server.target, 0, 1), (token_server.target, 1, 1)]
    with Client(token_server.target, token=TOKENS[0], timeout=60) as client:
        x = np.random.default_rng(27).standard_normal(
            (4, client.get_model(MODEL).hidden_size)).astype(np.float32)
        whole = client.block_forward(x, model=MODEL, num_layers=2)
    with Pipeline(stages, model=MODEL, token=TOKENS[0], timeout=60) as pipeline:
        assert_close(pipeline.forward(x), whole, 1e-5, "pipeline with a token")
        with pipeline.open_session() as session:
            got = [session.forward(x[:3]).hidden_states, session.forward(x[3:]).hidden_states]
        assert_close(np.concatenate(got), whole, 1e-4, "pipeline session with a token")
    with Pipeline(stages, model=MODEL, token=WRONG, retry=NO_RETRY) as pipeline:
        with pytest.raises(LayerServeError) as refused:
            pipeline.forward(x)
        assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
        assert INVALID in str(refused.value)
        assert_secret_free(str(refused.value), repr(refused.value), repr(pipeline))


# ---- arguments

def test_argument_errors(pki, token_file, tmp_path):
    def refused(error, **arguments):
        with pytest.raises(error) as raised:
            Client("127.0.0.1:1", **arguments)
        message = str(raised.value)
        assert_secret_free(message, repr(raised.value))
        return message

    assert "tls_cert and tls_key" in refused(ValueError, tls_cert=pki.client_crt)
    assert "tls_cert and tls_key" in refused(ValueError, tls_ca=pki.ca_crt,
                                             tls_key=pki.client_key)
    message = refused(ValueError, credentials=grpc.ssl_channel_credentials(),
                      tls_ca=pki.ca_crt, tls_cert=pki.client_crt, tls_key=pki.client_key)
    assert "credentials or tls_ca, tls_cert, tls_key" in message
    assert "token or token_file" in refused(ValueError, token=TOKENS[0],
                                            token_file=token_file)
    missing = str(tmp_path / "no-such-token")
    message = refused(FileNotFoundError, token_file=missing)
    assert "token_file" in message and missing in message
    message = refused(IsADirectoryError, token_file=str(tmp_path))
    assert str(tmp_path) in message
    message = refused(FileNotFoundError, tls_ca=missing)
    assert "tls_ca" in message and missing in message
    empty = tmp_path / "empty"
    empty.write_text(" \n")
    assert f"{str(empty)!r}: the file is empty" in refused(ValueError, token_file=str(empty))
    # The server's token file (comments, two tokens) is not a client's: the error
    # names the file and shows none of it.
    message = refused(ValueError, token_file=pki.tokens)
    assert pki.tokens in message and "one non-empty line" in message
    binary = tmp_path / "binary"
    binary.write_bytes(TOKENS[0].encode() + b"\xff")
    assert str(binary) in refused(ValueError, token_file=str(binary))
    assert "one non-empty line" in refused(ValueError, token="")
    assert "one non-empty line" in refused(ValueError, token=f"{TOKENS[0]} {TOKENS[1]}")
    assert "must be a str" in refused(TypeError, token=TOKENS[0].encode())


def test_the_client_does_not_show_its_token(token_server):
    with Client(token_server.target, token=TOKENS[0]) as client:
        assert_secret_free(repr(client), repr(vars(client)), str(vars(client)))


FAILING_PROGRAM = textwrap.dedent("""
    import logging, sys
    logging.basicConfig(level=logging.DEBUG)
    import numpy as np
    from layerserve_client import Client
    token = sys.argv[2]
    with Client(sys.argv[1], token=token, timeout=10) as client:
        print(repr(client), vars(client))
        print(client.health())
        with client.open_session(model="tiny-llama") as session:
            pass
""")


@pytest.mark.parametrize("token", [WRONG, TOKENS[0]], ids=["wrong token", "right token"])
def test_no_token_in_a_failing_programs_output(token_server, token):
    """A program whose call fails with an uncaught LayerServeError (wrong token; or
    the right one and an unknown model) prints no token: stdout and stderr are
    grepped for every token."""
    if token == TOKENS[0]:
        program = FAILING_PROGRAM.replace('"tiny-llama"', '"no-such-model"')
    else:
        program = FAILING_PROGRAM
    result = subprocess.run([sys.executable, "-c", program, token_server.target, token],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "GRPC_VERBOSITY": "INFO"})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "LayerServeError" in result.stderr
    want = "UNAUTHENTICATED: invalid bearer token" if token == WRONG else "NOT_FOUND"
    assert want in result.stderr, result.stderr
    assert_secret_free(result.stdout, result.stderr)
