"""layerserve-cli end to end against the real server: every command round-trips
.npy files (float32 and float16 files, FLOAT32/BFLOAT16/FLOAT16 on the wire) and
its numbers are checked against numpy; block-forward against the PyTorch golden
outputs of tests/golden/block_golden.json; the Client library's retry on
UNAVAILABLE (a server that starts after the first attempts) and no retry on
INVALID_ARGUMENT (counted by the server's /metrics); sessions (open-session,
block-forward --session, close-session) against one block-forward call."""
import json
import math
import os
import re
import socket
import subprocess

import numpy as np
import pytest

from server_process import CLI, SOURCE_DIR, ServerProcess, run_cli

RNG = np.random.default_rng(11)


def _round_bf16(a):
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


def _cli(server, *args):
    result = run_cli("--target", server.target, *args)
    assert result.returncode == 0, result.stderr
    return result


def _save(tmp_path, name, array, dtype=np.float32):
    path = tmp_path / name
    np.save(path, np.asarray(array).astype(dtype))
    return str(path)


def _close(got, want, rtol):
    """|got - want| <= rtol * max(1, |want|) everywhere."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    excess = np.abs(got - want) - rtol * np.maximum(1.0, np.abs(want))
    worst = np.unravel_index(np.argmax(excess), excess.shape)
    assert excess[worst] <= 0, f"at {worst}: got {got[worst]}, want {want[worst]}"


# ---------------------------------------------------------------------------
# Activate

_ERF = np.vectorize(math.erf)


def _gelu(x):
    return 0.5 * x * (1 + _ERF(x / math.sqrt(2)))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


ELEMENTWISE = {
    "relu": lambda x: np.maximum(x, 0),
    "gelu": _gelu,
    "gelu-tanh": _gelu_tanh,
    "silu": lambda x: x * _sigmoid(x),
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "quick-gelu": lambda x: x * _sigmoid(1.702 * x),
}
GATED = {"swiglu": "silu", "geglu": "gelu", "geglu-tanh": "gelu-tanh", "reglu": "relu"}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_activate_elementwise(server, tmp_path, name):
    x = RNG.standard_normal((3, 4, 17)) * 3
    out = tmp_path / "y.npy"
    result = _cli(server, "activate", "--activation", name,
                  "--input", _save(tmp_path, "x.npy", x), "--out", str(out), "--json")
    report = json.loads(result.stdout)
    assert report["output"] == {"path": str(out), "shape": [3, 4, 17], "dtype": "float32"}
    y = np.load(out)
    assert y.dtype == np.float32
    _close(y, ELEMENTWISE[name](x.astype(np.float32).astype(np.float64)), 1e-5)


@pytest.mark.parametrize("name", sorted(GATED))
@pytest.mark.parametrize("packed", [False, True], ids=["two-tensors", "packed"])
def test_activate_gated(server, tmp_path, name, packed):
    gate = RNG.standard_normal((2, 6, 9)).astype(np.float32).astype(np.float64)
    up = RNG.standard_normal((2, 6, 9)).astype(np.float32).astype(np.float64)
    out = tmp_path / "y.npy"
    if packed:
        args = ["--input", _save(tmp_path, "gu.npy", np.concatenate([gate, up], -1))]
    else:
        args = ["--input", _save(tmp_path, "up.npy", up),
                "--gate", _save(tmp_path, "gate.npy", gate)]
    _cli(server, "activate", "--activation", name, *args, "--out", str(out))
    _close(np.load(out), ELEMENTWISE[GATED[name]](gate) * up, 1e-5)


def test_activate_bfloat16_wire(server, tmp_path):
    x = RNG.standard_normal((5, 32))
    out = tmp_path / "y.npy"
    _cli(server, "activate", "--activation", "silu", "--input", _save(tmp_path, "x.npy", x),
         "--wire-dtype", "bfloat16", "--out", str(out))
    xb = _round_bf16(x)
    # Input rounded to bfloat16 on the way in, output on the way out (2^-8 relative).
    _close(np.load(out), ELEMENTWISE["silu"](xb), 2 ** -8)


def test_activate_float16_files(server, tmp_path):
    x = RNG.standard_normal((4, 8)).astype(np.float16)
    out = tmp_path / "y.npy"
    result = _cli(server, "activate", "--activation", "tanh",
                  "--input", _save(tmp_path, "x.npy", x, np.float16), "--out-dtype",
                  "float16", "--out", str(out))
    assert "output: shape [4, 8] float16 -> " in result.stdout
    y = np.load(out)
    assert y.dtype == np.float16  # FLOAT16 on the wire (the file's dtype), float16 out.
    _close(y, np.tanh(x.astype(np.float64)), 2 ** -10)


# ---------------------------------------------------------------------------
# Normalize (the existing command, now on the Client library)

def test_normalize_residual_float16_wire(server, tmp_path):
    x = RNG.standard_normal((3, 16))
    r = RNG.standard_normal((3, 16))
    w = RNG.standard_normal(16)
    out, res = tmp_path / "y.npy", tmp_path / "s.npy"
    _cli(server, "normalize", "--kind", "rms", "--input", _save(tmp_path, "x.npy", x),
         "--residual", _save(tmp_path, "r.npy", r), "--weight", _save(tmp_path, "w.npy", w),
         "--residual-out", str(res), "--wire-dtype", "float16", "--eps", "1e-6",
         "--out", str(out))
    h = lambda a: np.asarray(a, np.float16).astype(np.float64)  # noqa: E731
    s = h(x) + h(r)
    _close(np.load(res), s, 2 ** -10)
    want = s / np.sqrt((s * s).mean(-1, keepdims=True) + 1e-6) * h(w)
    _close(np.load(out), want, 2 ** -9)


# ---------------------------------------------------------------------------
# PositionalEncode

def _angles(positions, dim, base):
    i = np.arange(dim // 2)
    return np.asarray(positions, np.float64)[:, None] * base ** (-2.0 * i / dim)


@pytest.mark.parametrize("layout", ["interleaved", "concatenated"])
def test_sinusoidal_table(server, tmp_path, layout):
    out = tmp_path / "pe.npy"
    _cli(server, "positional-encode", "--method", "sinusoidal", "--num-positions", "12",
         "--dim", "16", "--base", "500", "--layout", layout, "--position-offset", "3",
         "--out", str(out))
    a = _angles(np.arange(3, 15), 16, 500.0)
    want = np.empty((12, 16))
    if layout == "interleaved":
        want[:, 0::2], want[:, 1::2] = np.sin(a), np.cos(a)
    else:
        want[:, :8], want[:, 8:] = np.sin(a), np.cos(a)
    _close(np.load(out), want, 1e-5)


def test_sinusoidal_added_to_input_at_positions(server, tmp_path):
    x = RNG.standard_normal((4, 8))
    out = tmp_path / "y.npy"
    _cli(server, "positional-encode", "--method", "sinusoidal",
         "--input", _save(tmp_path, "x.npy", x), "--positions", "0,5,2,9", "--out", str(out))
    a = _angles([0, 5, 2, 9], 8, 10000.0)
    pe = np.empty((4, 8))
    pe[:, 0::2], pe[:, 1::2] = np.sin(a), np.cos(a)
    _close(np.load(out), x.astype(np.float32) + pe, 1e-5)


def test_learned(server, tmp_path):
    x = RNG.standard_normal((2, 3, 8))
    table = RNG.standard_normal((10, 8))
    out = tmp_path / "y.npy"
    _cli(server, "positional-encode", "--method", "learned", "--input",
         _save(tmp_path, "x.npy", x), "--table", _save(tmp_path, "t.npy", table),
         "--position-offset", "6", "--out", str(out))
    want = x.astype(np.float32) + table.astype(np.float32)[6:9][None]
    _close(np.load(out), want, 1e-6)
    # Position 9 + 1 is past the table: the server's OUT_OF_RANGE, exit 2.
    result = run_cli("--target", server.target, "positional-encode", "--method", "learned",
                     "--input", str(tmp_path / "x.npy"), "--table", str(tmp_path / "t.npy"),
                     "--position-offset", "8", "--out", str(out))
    assert result.returncode == 2
    assert result.stderr.startswith("error: OUT_OF_RANGE: ")


def _rope_half(x, positions, theta, rotary_dim):
    """x [B, H, T, Dh]; the first rotary_dim dims rotate (rotate_half)."""
    inv = theta ** (-np.arange(0, rotary_dim, 2) / rotary_dim)
    f = np.asarray(positions, np.float64)[:, None] * inv  # [T, rotary_dim / 2]
    cos = np.concatenate([np.cos(f), np.cos(f)], -1)
    sin = np.concatenate([np.sin(f), np.sin(f)], -1)
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    half = rotary_dim // 2
    rotated = np.concatenate([-rot[..., half:], rot[..., :half]], -1)
    return np.concatenate([rot * cos + rotated * sin, rest], -1)


def test_rope_query_and_key(server, tmp_path):
    q = RNG.standard_normal((2, 4, 5, 16)).astype(np.float32).astype(np.float64)
    k = RNG.standard_normal((2, 2, 5, 16)).astype(np.float32).astype(np.float64)
    out, key_out = tmp_path / "q2.npy", tmp_path / "k2.npy"
    result = _cli(server, "positional-encode", "--method", "rope",
                  "--query", _save(tmp_path, "q.npy", q), "--key", _save(tmp_path, "k.npy", k),
                  "--key-out", str(key_out), "--theta", "10000", "--rotary-dim", "8",
                  "--style", "half", "--position-offset", "4", "--out", str(out), "--json")
    report = json.loads(result.stdout)
    assert report["key"]["shape"] == [2, 2, 5, 16]
    positions = np.arange(4, 9)
    _close(np.load(out), _rope_half(q, positions, 10000.0, 8), 1e-5)
    _close(np.load(key_out), _rope_half(k, positions, 10000.0, 8), 1e-5)


def test_rope_linear_scaling(server, tmp_path):
    q = RNG.standard_normal((1, 2, 3, 8)).astype(np.float32).astype(np.float64)
    out = tmp_path / "q2.npy"
    _cli(server, "positional-encode", "--method", "rope", "--query", _save(tmp_path, "q.npy", q),
         "--scaling", "linear", "--factor", "4", "--positions", "8,12,40", "--out", str(out))
    # Position interpolation: positions divided by the factor.
    _close(np.load(out), _rope_half(q, np.array([8, 12, 40]) / 4, 10000.0, 8), 1e-5)


def test_alibi_bias(server, tmp_path):
    out = tmp_path / "b.npy"
    _cli(server, "positional-encode", "--method", "alibi", "--num-heads", "4",
         "--query-length", "3", "--key-length", "6", "--query-offset", "3", "--out", str(out))
    slopes = 2.0 ** (-8.0 * np.arange(1, 5) / 4)
    i = np.arange(3)[:, None]
    j = np.arange(6)[None, :]
    want = slopes[:, None, None] * (j - (3 + i))[None]
    _close(np.load(out), want, 1e-6)


def _t5_bucket(rel, bidirectional, num_buckets, max_distance):
    """Hugging Face T5Attention._relative_position_bucket in numpy."""
    ret = np.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        ret += (rel > 0) * num_buckets
        n = np.abs(rel)
    else:
        n = -np.minimum(rel, 0)
    max_exact = num_buckets // 2
    with np.errstate(divide="ignore"):
        large = max_exact + (np.log(np.maximum(n, 1) / max_exact) /
                             math.log(max_distance / max_exact) *
                             (num_buckets - max_exact)).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return ret + np.where(n < max_exact, n, large)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_t5_bias(server, tmp_path, bidirectional):
    table = RNG.standard_normal((32, 3))
    out = tmp_path / "b.npy"
    args = ["positional-encode", "--method", "t5-bias",
            "--table", _save(tmp_path, "t.npy", table), "--max-distance", "20",
            "--query-length", "4", "--key-length", "40", "--query-offset", "30",
            "--out", str(out)]
    if bidirectional:
        args.append("--bidirectional")
    _cli(server, *args)
    rel = np.arange(40)[None, :] - (30 + np.arange(4)[:, None])
    buckets = _t5_bucket(rel, bidirectional, 32, 20)
    want = table.astype(np.float32)[buckets].transpose(2, 0, 1)  # [H, Tq, Tk]
    _close(np.load(out), want, 0)


def test_positional_refuses_flags_of_another_method(server, tmp_path):
    result = run_cli("--target", server.target, "positional-encode", "--method", "alibi",
                     "--num-heads", "2", "--theta", "10", "--out", str(tmp_path / "b.npy"))
    assert result.returncode == 1
    assert result.stderr.startswith("error: --theta does not apply to --method alibi")


# ---------------------------------------------------------------------------
# Models and health

def test_get_model_and_list_models(server):
    info = json.loads(_cli(server, "get-model", "--json").stdout)
    assert info["name"] == "demo" and info["isDefault"] is True
    assert (int(info["hiddenSize"]), info["numAttentionHeads"], info["numKeyValueHeads"],
            int(info["intermediateSize"]), info["numLayers"]) == (512, 8, 2, 1408, 4)
    text = _cli(server, "get-model", "--model", "demo").stdout
    assert "hidden_size: 512\n" in text and "num_key_value_heads: 2\n" in text
    listed = json.loads(_cli(server, "list-models", "--json").stdout)
    assert [m["name"] for m in listed["models"]] == ["demo"]
    missing = run_cli("--target", server.target, "get-model", "--model", "nope")
    assert missing.returncode == 2
    assert missing.stderr.startswith("error: NOT_FOUND: ")


def test_health_json(server):
    assert json.loads(_cli(server, "health", "--json").stdout) == {"status": "SERVING"}
    unknown = run_cli("--target", server.target, "health", "--service", "no.such.Service")
    assert unknown.returncode == 3 and unknown.stdout == "SERVICE_UNKNOWN\n"


# ---------------------------------------------------------------------------
# BlockForward: the demo model's consistency, and golden checkpoints

def test_block_forward_demo_batch_equals_single_rows(server, tmp_path):
    h = RNG.standard_normal((2, 5, 512)) * 0.5
    both, first, second = (tmp_path / n for n in ("both.npy", "a.npy", "b.npy"))
    _cli(server, "block-forward", "--input", _save(tmp_path, "h.npy", h),
         "--num-layers", "2", "--out", str(both))
    _cli(server, "block-forward", "--input", _save(tmp_path, "h0.npy", h[0]),
         "--num-layers", "2", "--out", str(first))
    _cli(server, "block-forward", "--input", _save(tmp_path, "h1.npy", h[1:]),
         "--num-layers", "2", "--out", str(second))
    y = np.load(both)
    assert y.shape == (2, 5, 512)
    _close(y[0], np.load(first), 1e-5)
    _close(y[1:], np.load(second), 1e-5)
    assert np.max(np.abs(y - h)) > 1e-2  # The blocks did something.


GOLDEN = os.path.join(SOURCE_DIR, "tests", "golden", "block_golden.json")
with open(GOLDEN) as _f:
    GOLDEN_DATA = json.load(_f)
CLI_CASES = ["tiny-llama/b2t5_padded_layer0", "tiny-llama/b2t5_offset7_layers1-2",
             "tiny-llama/b2t4_positions_bt_all_layers", "tiny-llama/b2t5_bidirectional_padded",
             "tiny-gpt2/t5_positions_last_layer", "tiny-neox/b2t5_offset7_layers1-2"]


@pytest.fixture(scope="module")
def golden_server():
    process = ServerProcess("--model-repository=" +
                            os.path.join(SOURCE_DIR, "tests", "golden", "models"))
    yield process
    assert process.stop() == 0, process.output()


@pytest.mark.parametrize("name", CLI_CASES)
def test_block_forward_golden(golden_server, tmp_path, name):
    case = next(c for c in GOLDEN_DATA["cases"] if c["name"] == name)
    out = tmp_path / "y.npy"
    args = ["block-forward", "--model", case["model"],
            "--layer-start", str(case["layer_start"]), "--num-layers", str(case["num_layers"]),
            "--input", _save(tmp_path, "h.npy",
                             np.asarray(case["hidden_states"]).reshape(case["shape"])),
            "--out", str(out), "--attention-stats", "--json"]
    if case["positions"]:
        args += ["--positions", ",".join(map(str, case["positions"]))]
    else:
        args += ["--position-offset", str(case["position_offset"])]
    if case["sequence_lengths"]:
        args += ["--sequence-lengths", ",".join(map(str, case["sequence_lengths"]))]
    if case["causal"] is not None:
        args += ["--causal", "true" if case["causal"] else "false"]
    report = json.loads(_cli(golden_server, *args).stdout)
    want = np.asarray(case["expected"]).reshape(case["shape"])
    _close(np.load(out), want, GOLDEN_DATA["tolerance"]["float32_weights"])
    stats = report["attention_stats"]
    assert [s["layer"] for s in stats] == list(
        range(case["layer_start"], case["layer_start"] + case["num_layers"]))
    for s, entropy in zip(stats, case["attention_entropy"]):
        np.testing.assert_allclose(s["head_entropy_nats"], entropy, rtol=0,
                                   atol=GOLDEN_DATA["tolerance"]["entropy_float32_weights"])


# ---------------------------------------------------------------------------
# Retries of the Client library, seen through the CLI

def _counter(server, method, code):
    pattern = re.compile(r'^layerserve_requests_total\{code="%s",method="%s"\} (\S+)$'
                         % (code, method), re.M)
    m = pattern.search(server.metrics())
    return float(m.group(1)) if m else 0.0


def test_retries_unavailable_until_the_server_listens(tmp_path):
    with socket.socket() as s:  # A free port; nothing listens on it yet.
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    x = RNG.standard_normal((2, 8))
    out = tmp_path / "y.npy"
    cli = subprocess.Popen(
        [CLI, "--target", f"127.0.0.1:{port}", "--retries", "30", "--timeout-ms", "60000",
         "normalize", "--kind", "layer", "--input", _save(tmp_path, "x.npy", x),
         "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The first attempt is refused before any server exists.
        first = cli.stderr.readline()
        assert first.startswith("retry: Normalize attempt 1 failed with UNAVAILABLE"), first
        server = ServerProcess(f"--port={port}")
    except BaseException:
        cli.kill()
        raise
    try:
        stdout, stderr = cli.communicate(timeout=60)
        assert cli.returncode == 0, first + stderr
        assert "output: shape [2, 8] float32" in stdout
        # Every retry was for UNAVAILABLE, and one call reached the server.
        assert all(l.startswith("retry: Normalize attempt ") and "UNAVAILABLE" in l
                   for l in stderr.splitlines()), stderr
        assert _counter(server, "Normalize", "OK") == 1
    finally:
        assert server.stop() == 0, server.output()
    x32 = x.astype(np.float32).astype(np.float64)
    mean = x32.mean(-1, keepdims=True)
    want = (x32 - mean) / np.sqrt(x32.var(-1, keepdims=True) + 1e-5)
    _close(np.load(out), want, 1e-5)


def test_no_retry_on_invalid_argument(server, tmp_path):
    x = _save(tmp_path, "x.npy", np.ones((2, 4)))
    w = _save(tmp_path, "w.npy", np.ones(5))
    before = _counter(server, "Normalize", "INVALID_ARGUMENT")
    result = run_cli("--target", server.target, "--retries", "5", "normalize", "--kind",
                     "rms", "--input", x, "--weight", w, "--out", str(tmp_path / "y.npy"))
    assert result.returncode == 2
    assert result.stderr.startswith("error: INVALID_ARGUMENT: ")
    assert "retry:" not in result.stderr
    assert _counter(server, "Normalize", "INVALID_ARGUMENT") - before == 1


def test_unreachable_server_gives_up_after_the_retries():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run_cli("--target", f"127.0.0.1:{port}", "--retries", "2", "health")
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert [l.split(" failed")[0] for l in lines[:2]] == [
        "retry: Health.Check attempt 1", "retry: Health.Check attempt 2"]
    assert lines[2].startswith("error: UNAVAILABLE: ")


# ---------------------------------------------------------------------------
# Sessions: open-session, block-forward --session, close-session


def test_session_prefill_and_steps_equal_one_block_forward(server, tmp_path):
    h = RNG.standard_normal((6, 512)) * 0.5
    opened = _cli(server, "open-session", "--num-layers", "2", "--max-length", "6")
    session = opened.stdout.strip()
    assert re.fullmatch(r"\S+-\d+\.[0-9a-f]+", session), opened.stdout
    prefill = _cli(server, "block-forward", "--session", session, "--input",
                   _save(tmp_path, "p.npy", h[:4]), "--out", str(tmp_path / "p_out.npy"))
    assert "session_length: 4\n" in prefill.stdout
    outputs = [np.load(tmp_path / "p_out.npy")]
    for t in (4, 5):
        step = _cli(server, "block-forward", "--session", session, "--json", "--input",
                    _save(tmp_path, f"s{t}.npy", h[t:t + 1]),
                    "--out", str(tmp_path / f"s{t}_out.npy"))
        assert json.loads(step.stdout)["session_length"] == t + 1
        outputs.append(np.load(tmp_path / f"s{t}_out.npy"))
    _cli(server, "block-forward", "--num-layers", "2", "--input",
         _save(tmp_path, "h.npy", h), "--out", str(tmp_path / "whole.npy"))
    # Float32: the same sums in another order (attention over 1 vs 6 keys).
    _close(np.concatenate(outputs), np.load(tmp_path / "whole.npy"), 1e-4)

    # max_length 6 is reached: one more token is OUT_OF_RANGE, and not retried.
    full = run_cli("--target", server.target, "block-forward", "--session", session,
                   "--input", _save(tmp_path, "x.npy", h[:1]), "--out",
                   str(tmp_path / "x_out.npy"))
    assert full.returncode == 2
    assert full.stderr == (f'error: OUT_OF_RANGE: hidden_states: session "{session}" '
                           "holds 6 tokens; 1 more would pass its max_length 6\n")

    assert _cli(server, "close-session", "--session", session).stdout == ""
    again = run_cli("--target", server.target, "close-session", "--session", session)
    assert again.returncode == 2
    assert again.stderr.startswith("error: NOT_FOUND: session_id: no session")
    closed = run_cli("--target", server.target, "block-forward", "--session", session,
                     "--input", str(tmp_path / "x.npy"), "--out", str(tmp_path / "y.npy"))
    assert closed.returncode == 2
    assert closed.stderr == (f'error: NOT_FOUND: session_id: session "{session}" was '
                             "closed; open a new session and prefill again\n")


def test_open_session_json_and_usage_errors(server):
    opened = json.loads(_cli(server, "open-session", "--json").stdout)
    assert opened["ttlMs"] == "300000"  # proto3 JSON writes int64 as a string.
    assert _cli(server, "close-session", "--session", opened["sessionId"]).returncode == 0
    missing = run_cli("--target", server.target, "close-session")
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: close-session needs --session")
    far = run_cli("--target", server.target, "open-session", "--layer-start", "9")
    assert far.returncode == 2 and far.stderr.startswith("error: OUT_OF_RANGE: ")


def test_help_and_version_exit_0():
    for args in (["--help"], ["-h"], ["help"]):
        result = run_cli(*args)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("Usage: layerserve-cli "), args
        for command in ("health", "normalize", "block-forward", "open-session"):
            assert f"\n  {command} " in result.stdout, (args, command)
        assert "--version" in result.stdout
    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"layerserve-cli \d+\.\d+\.\d+\n", result.stdout), result.stdout
    unknown = run_cli("--no-such-flag")
    assert unknown.returncode == 1
    assert unknown.stderr.startswith("error: unknown flag --no-such-flag\n"), unknown.stderr


def test_block_forward_through_a_pipeline_of_span_servers(server, tmp_path):
    """--pipeline: the demo model's 4 layers split 0:1 and 1:4 (given out of
    order) equal the module's server running all 4, bit for bit; each stage's time
    is printed; layer flags are refused beside --pipeline."""
    first, rest = ServerProcess("--layers=0:1"), ServerProcess("--layers=1:4")
    try:
        h = np.random.default_rng(8).standard_normal((5, 512)).astype(np.float32)
        src = _save(tmp_path, "h.npy", h)
        _cli(server, "block-forward", "--input", src, "--out", str(tmp_path / "full.npy"),
             "--num-layers", "4")
        result = run_cli("block-forward", "--pipeline", f"{rest.target},{first.target}",
                         "--input", src, "--out", str(tmp_path / "piped.npy"), "--json")
        assert result.returncode == 0, result.stderr
        assert np.array_equal(np.load(tmp_path / "piped.npy"), np.load(tmp_path / "full.npy"))
        stages = json.loads(result.stdout)["stages"]
        assert [(s["layers"], s["targets"]) for s in stages] == [
            ("0..0", [first.target]), ("1..3", [rest.target])]
        assert all(s["milliseconds"] > 0 for s in stages)

        refused = run_cli("block-forward", "--pipeline", first.target, "--num-layers", "2",
                          "--input", src, "--out", str(tmp_path / "x.npy"))
        assert refused.returncode == 1
        assert "--pipeline runs every layer of the model across its servers: it takes no " \
               "--num-layers" in refused.stderr
        gap = run_cli("block-forward", "--pipeline", first.target, "--input", src,
                      "--out", str(tmp_path / "x.npy"))
        assert gap.returncode == 2
        assert "INVALID_ARGUMENT: targets: the spans end at layer 0; the model has 4 layers" \
            in gap.stderr
    finally:
        for process in (first, rest):
            assert process.stop() == 0, process.output()
