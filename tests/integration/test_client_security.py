"""layerserve-cli and layerserve-bench against a secured real server
(tests/testing/pki.py's files): a bearer token from --token-file or from
LAYERSERVE_TOKEN, the right one accepted, a wrong or missing one answered
UNAUTHENTICATED with the server's message, health without one, session calls with
it; mutual TLS with --tls-cert/--tls-key, refused without a certificate from the
server's CA. No output of a failing call holds the token."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pki import TOKENS, make_pki
from server_process import CLI, ServerProcess

BENCH = os.environ.get("LAYERSERVE_BENCH",
                       os.path.join(os.path.dirname(CLI), "layerserve-bench"))
MISSING = ('missing credentials: this server requires "authorization: Bearer <token>" '
           "metadata")
INVALID = "invalid bearer token"
WRONG = "s3cret-token-zzz-not-one-of-the-servers"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    made = make_pki(tmp_path_factory.mktemp("pki"))
    made.dir = Path(made.dir)
    # A client's token file holds one token, with the newline an editor adds.
    made.right = made.dir / "right-token"
    made.right.write_text(TOKENS[0] + "\n")
    made.wrong = made.dir / "wrong-token"
    made.wrong.write_text(WRONG + "\n")
    return made


@pytest.fixture(scope="module")
def token_server(pki):
    """A plaintext server that wants a bearer token."""
    server = ServerProcess(f"--auth-token-file={pki.tokens}")
    yield server
    assert server.stop() == 0, server.output()


@pytest.fixture(scope="module")
def mtls_server(pki):
    """A server that wants a client certificate from ca and a bearer token."""
    server = ServerProcess(f"--tls-cert={pki.server_crt}", f"--tls-key={pki.server_key}",
                           f"--tls-client-ca={pki.ca_crt}", f"--auth-token-file={pki.tokens}")
    yield server
    assert server.stop() == 0, server.output()


def run(tool, *args, env_token=None):
    """Runs `tool` with LAYERSERVE_TOKEN set to `env_token` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "LAYERSERVE_TOKEN"}
    if env_token is not None:
        env["LAYERSERVE_TOKEN"] = env_token
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=120,
                          env=env)


def cli(server, *args, env_token=None):
    return run(CLI, "--target", server.target, "--retries", "0", *args,
               env_token=env_token)


def bench(server, *args, env_token=None):
    return run(BENCH, "--target", server.target, "--json", "--requests", "4",
               "--warmup", "0s", "--timeout-ms", "10000", *args, env_token=env_token)


def assert_secret_not_shown(result, *secrets):
    for secret in secrets:
        assert secret not in result.stdout + result.stderr


def mtls_flags(pki, client="client"):
    flags = ["--tls-ca", pki.ca_crt]
    if client:
        flags += ["--tls-cert", getattr(pki, f"{client}_crt"),
                  "--tls-key", getattr(pki, f"{client}_key")]
    return flags


# layerserve-cli


def test_cli_right_token_from_the_flag_or_the_environment(token_server, pki):
    ok = cli(token_server, "--token-file", str(pki.right), "list-models", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["models"]
    ok = cli(token_server, "list-models", env_token=TOKENS[1])
    assert ok.returncode == 0, ok.stderr
    # The flag wins over the variable; the flag may also follow the command.
    ok = cli(token_server, "get-model", "--token-file", str(pki.right), env_token=WRONG)
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("how", ["file", "environment"])
def test_cli_wrong_token_is_unauthenticated_and_not_shown(token_server, pki, how):
    if how == "file":
        result = cli(token_server, "--token-file", str(pki.wrong), "list-models")
    else:
        result = cli(token_server, "list-models", env_token=WRONG)
    assert result.returncode == 2
    assert result.stderr == f"error: UNAUTHENTICATED: {INVALID}\n"
    assert_secret_not_shown(result, WRONG)


def test_cli_missing_token_is_unauthenticated_but_health_needs_none(token_server):
    result = cli(token_server, "list-models")
    assert result.returncode == 2
    assert result.stderr == f"error: UNAUTHENTICATED: {MISSING}\n"
    health = cli(token_server, "health")
    assert health.returncode == 0, health.stderr
    assert health.stdout.strip() == "SERVING"


def test_cli_session_calls_carry_the_token(token_server, pki, tmp_path):
    token = ["--token-file", str(pki.right)]
    model = json.loads(cli(token_server, *token, "get-model", "--json").stdout)
    opened = cli(token_server, *token, "open-session", "--num-layers", "1", "--json")
    assert opened.returncode == 0, opened.stderr
    session = json.loads(opened.stdout)["sessionId"]
    x = np.random.default_rng(3).standard_normal((2, int(model["hiddenSize"])))
    np.save(tmp_path / "x.npy", x.astype(np.float32))
    step = cli(token_server, *token, "block-forward", "--input", str(tmp_path / "x.npy"),
               "--out", str(tmp_path / "y.npy"), "--session", session)
    assert step.returncode == 0, step.stderr
    assert np.load(tmp_path / "y.npy").shape == x.shape
    refused = cli(token_server, "block-forward", "--input", str(tmp_path / "x.npy"),
                  "--out", str(tmp_path / "z.npy"), "--session", session)
    assert refused.returncode == 2 and MISSING in refused.stderr
    closed = cli(token_server, *token, "close-session", "--session", session)
    assert closed.returncode == 0, closed.stderr


def test_cli_mutual_tls(mtls_server, pki):
    ok = cli(mtls_server, *mtls_flags(pki), "--token-file", str(pki.right), "list-models")
    assert ok.returncode == 0, ok.stderr
    for client in (None, "stranger"):
        refused = cli(mtls_server, *mtls_flags(pki, client), "--timeout-ms", "10000",
                      "list-models", env_token=TOKENS[0])
        assert refused.returncode == 2, client
        assert refused.stderr.startswith("error: UNAVAILABLE: "), refused.stderr
        assert_secret_not_shown(refused, TOKENS[0])


def test_cli_flag_errors_name_the_flag_not_the_token(pki, tmp_path):
    result = run(CLI, "--tls-cert", pki.client_crt, "list-models")
    assert result.returncode == 1
    assert result.stderr.startswith("error: --tls-cert needs --tls-key")
    result = run(CLI, "--token-file", str(tmp_path / "none"), "list-models")
    assert result.returncode == 1
    assert result.stderr == f"error: --token-file: cannot read {tmp_path / 'none'}\n"
    two = tmp_path / "two-tokens"
    two.write_text(f"{TOKENS[0]}\n{TOKENS[1]}\n")
    result = run(CLI, "--token-file", str(two), "list-models")
    assert result.returncode == 1 and "--token-file" in result.stderr
    assert_secret_not_shown(result, *TOKENS)
    result = run(CLI, "list-models", env_token="hunter2 hunter3")
    assert result.returncode == 1 and "LAYERSERVE_TOKEN" in result.stderr
    assert_secret_not_shown(result, "hunter2")


def test_cli_help_lists_the_security_flags():
    usage = run(CLI, "--help").stdout
    for flag in ("--tls-ca", "--tls-cert", "--tls-key", "--token-file",
                 "LAYERSERVE_TOKEN"):
        assert flag in usage, flag


# layerserve-bench


def bench_level(result):
    [level] = json.loads(result.stdout)["levels"]
    return level


def test_bench_right_token_from_the_flag_or_the_environment(token_server, pki):
    for args, env in ((["--token-file", str(pki.right)], None), ([], TOKENS[1])):
        result = bench(token_server, *args, env_token=env)
        assert result.returncode == 0, result.stderr
        assert bench_level(result)["ok"] == 4


@pytest.mark.parametrize("token,message", [(WRONG, INVALID), (None, MISSING)])
def test_bench_wrong_or_missing_token_is_unauthenticated(token_server, token, message):
    result = bench(token_server, env_token=token)
    assert result.returncode == 2
    level = bench_level(result)
    assert level["errors"] == {"UNAUTHENTICATED": 4}
    assert level["error_messages"]["UNAUTHENTICATED"] == message
    assert_secret_not_shown(result, WRONG)


def test_bench_health_needs_no_token_and_decode_sessions_carry_it(token_server, pki):
    result = bench(token_server, "--method", "health")
    assert result.returncode == 0, result.stderr
    result = bench(token_server, "--method", "decode", "--tokens", "4", "--steps", "2",
                   "--token-file", str(pki.right))
    assert result.returncode == 0, result.stderr
    assert bench_level(result)["ok"] == 4


def test_bench_mutual_tls(mtls_server, pki):
    ok = bench(mtls_server, *mtls_flags(pki), "--token-file", str(pki.right))
    assert ok.returncode == 0, ok.stderr
    assert bench_level(ok)["ok"] == 4
    refused = bench(mtls_server, *mtls_flags(pki, None), env_token=TOKENS[0])
    assert refused.returncode == 2
    assert list(bench_level(refused)["errors"]) == ["UNAVAILABLE"]
    assert_secret_not_shown(refused, TOKENS[0])


def test_bench_flag_errors_and_help(pki, tmp_path):
    result = run(BENCH, "--tls-key", pki.client_key)
    assert result.returncode == 1
    assert result.stderr.startswith("error: --tls-key needs --tls-cert")
    result = run(BENCH, "--token-file", str(tmp_path / "none"), "--requests", "1")
    assert result.returncode == 1
    assert result.stderr == f"error: --token-file: cannot read {tmp_path / 'none'}\n"
    usage = run(BENCH, "--help").stdout
    for flag in ("--tls-ca", "--tls-cert", "--tls-key", "--token-file",
                 "LAYERSERVE_TOKEN"):
        assert flag in usage, flag
