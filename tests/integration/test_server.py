"""The running server seen from outside: health, reflection, the CLI, the Python
example and /metrics; the warm-up before serving; and the binaries' --help and
--version."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import numpy as np
import pytest

from grpc_std import health_pb2, health_pb2_grpc
from layerserve.v1 import layerserve_pb2 as pb
from layerserve.v1 import layerserve_pb2_grpc as pb_grpc
from grpc_std import reflection_pb2, reflection_pb2_grpc
from metrics_text import parse_samples
from server_process import CLI, SERVER, SOURCE_DIR, ServerProcess, run_cli
from wire import array_tensor

SERVICE = "layerserve.v1.LayerService"


def test_health_is_serving(server):
    with grpc.insecure_channel(server.target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, service
        watch = stub.Watch(health_pb2.HealthCheckRequest(service=SERVICE), timeout=10)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()
        with pytest.raises(grpc.RpcError) as error:
            stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10)
        assert error.value.code() == grpc.StatusCode.NOT_FOUND


def test_reflection_lists_and_describes_the_service(server):
    with grpc.insecure_channel(server.target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        requests = [
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE),
        ]
        replies = list(stub.ServerReflectionInfo(iter(requests), timeout=10))
    services = {s.name for s in replies[0].list_services_response.service}
    assert SERVICE in services
    assert "grpc.health.v1.Health" in services
    files = replies[1].file_descriptor_response.file_descriptor_proto
    assert files, replies[1]
    from google.protobuf import descriptor_pb2
    names = [descriptor_pb2.FileDescriptorProto.FromString(f).name for f in files]
    assert "layerserve/v1/layerserve.proto" in names


def test_cli_health(server):
    result = run_cli("--target", server.target, "health")
    assert result.returncode == 0, result.stderr
    assert "SERVING" in result.stdout


def test_cli_list_models(server):
    result = run_cli("--target", server.target, "list-models")
    assert result.returncode == 0, result.stderr


def _layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def _rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


@pytest.mark.parametrize("kind", ["layer", "rms"])
@pytest.mark.parametrize("wire", ["float32", "bfloat16"])
def test_cli_normalize_round_trips_npy(server, tmp_path, kind, wire):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 5, 33)).astype(np.float64)
    w = rng.standard_normal(33)
    b = rng.standard_normal(33)
    np.save(tmp_path / "x.npy", x.astype(np.float32))
    np.save(tmp_path / "w.npy", w.astype(np.float32))
    np.save(tmp_path / "b.npy", b.astype(np.float32))
    args = ["--target", server.target, "normalize", "--kind", kind,
            "--input", str(tmp_path / "x.npy"), "--weight", str(tmp_path / "w.npy"),
            "--eps", "1e-5", "--wire-dtype", wire, "--out", str(tmp_path / "y.npy")]
    if kind == "layer":
        args += ["--bias", str(tmp_path / "b.npy")]
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    y = np.load(tmp_path / "y.npy")
    assert y.dtype == np.float32 and y.shape == x.shape
    if wire == "bfloat16":  # The server saw inputs rounded to bfloat16.
        x = _round_bf16(x)
        w = _round_bf16(w)
        b = _round_bf16(b)
    want = _layer_norm(x, w, b, 1e-5) if kind == "layer" else _rms_norm(x, w, 1e-5)
    tolerance = 1e-5 if wire == "float32" else 2e-2
    assert np.all(np.abs(y - want) <= tolerance * np.maximum(1, np.abs(want)))


def _round_bf16(a):
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


def test_cli_reports_invalid_argument(server, tmp_path):
    np.save(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    np.save(tmp_path / "w.npy", np.ones(5, np.float32))
    result = run_cli("--target", server.target, "normalize", "--kind", "rms",
                     "--input", str(tmp_path / "x.npy"), "--weight", str(tmp_path / "w.npy"),
                     "--out", str(tmp_path / "y.npy"))
    assert result.returncode == 2
    assert "INVALID_ARGUMENT" in result.stderr
    assert "weight.shape: length 5 does not match input's last dimension 4" in result.stderr
    assert not (tmp_path / "y.npy").exists()


def test_python_example(server):
    example = os.path.join(SOURCE_DIR, "examples", "python", "normalize.py")
    result = subprocess.run([sys.executable, example, "--target", server.target],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "max |server - numpy|" in result.stdout


def test_metrics_pass_promtool_and_count_requests(server, tmp_path):
    run_cli("--target", server.target, "health")  # Not a LayerService call.
    np.save(tmp_path / "x.npy", np.ones((3, 8), np.float32))
    assert run_cli("--target", server.target, "normalize", "--kind", "layer", "--input",
                   str(tmp_path / "x.npy"), "--out", str(tmp_path / "y.npy")).returncode == 0
    text = server.metrics()
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is required"
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    assert 'layerserve_requests_total{code="OK",method="Normalize"}' in text
    assert 'layerserve_request_duration_seconds_bucket{method="Normalize",le="+Inf"}' in text
    assert "layerserve_build_info{" in text


def test_warm_up_runs_every_model_before_serving_and_leaves_no_trace():
    models = Path(SOURCE_DIR) / "tests" / "golden" / "models"
    count = sum(1 for d in models.iterdir() if (d / "config.json").is_file())
    server = ServerProcess(f"--model-repository={models}", "--compute-threads=2")
    try:
        out = server.output()
        assert re.search(rf"^layerserve: warm-up: {count} model\(s\) on 2 compute "
                         r"thread\(s\) in \d+ms$", out, re.M), out
        assert out.index("warm-up:") < out.index("gRPC listening"), "before serving"
        assert "failed" not in out
        # Its calls and sessions were its own: nothing counted, nothing left.
        assert server.metric_sum("layerserve_requests_total") == 0
        assert server.metric_sum("layerserve_compute_duration_seconds_count") == 0
        assert server.metric_value("layerserve_active_sessions") == 0
        assert server.metric_value("layerserve_kv_cache_bytes") == 0
    finally:
        assert server.stop() == 0, server.output()
    cold = ServerProcess("--warm-up=false")
    try:
        assert "warm-up" not in cold.output()
    finally:
        assert cold.stop() == 0, cold.output()


def _first_calls_creating_primitives(*flags):
    """Starts a server on the demo model with ONEDNN_VERBOSE=2 (oneDNN logs each
    primitive it makes: "create:cache_miss"), sends BlockForward calls of 512 and 16
    tokens, and returns (the matmul primitives made before serving, those the calls
    made)."""
    server = ServerProcess("--compute-threads=2", *flags,
                           wrapper=("env", "ONEDNN_VERBOSE=2"))

    def created(lines):
        return [line for line in lines if "create:cache_miss" in line and ",matmul," in line]

    try:
        at_start = server.output()
        with grpc.insecure_channel(server.target) as channel:
            stub = pb_grpc.LayerServiceStub(channel)
            for tokens in (512, 16):
                x = np.random.default_rng(tokens).standard_normal((1, tokens, 512),
                                                                  dtype=np.float32)
                stub.BlockForward(pb.BlockForwardRequest(
                    num_layers=4, hidden_states=array_tensor(x, "float32")), timeout=120)
        after = server.output()[len(at_start):].splitlines()
        assert any(",matmul," in line and "exec" in line for line in after), "no matmul ran"
        return created(at_start.splitlines()), created(after)
    finally:
        assert server.stop() == 0, server.output()[-2000:]


def test_after_the_warm_up_first_calls_up_to_512_tokens_create_no_primitive():
    """What the warm-up leaves a first call of 16 or 512 tokens to do: no oneDNN
    primitive to create, and its buffers already that large (not visible here;
    timed by bench/first_call_bench.py). Without the warm-up the same calls create
    theirs."""
    before_serving, by_the_calls = _first_calls_creating_primitives()
    for rows in (16, 512):  # The demo model's first matmul: [rows, 512] x [512, 768].
        assert any(f",{rows}x512:512x768:" in line for line in before_serving), before_serving
    assert by_the_calls == []

    before_serving, by_the_calls = _first_calls_creating_primitives("--warm-up=false")
    assert before_serving == []
    for rows in (16, 512):
        assert any(f",{rows}x512:512x768:" in line for line in by_the_calls), by_the_calls


@pytest.mark.parametrize("flag", ["--max-batch-rows=0", "--max-queue-size=0",
                                  "--max-queue-delay-us=-1", "--max-gather-delay-us=-1",
                                  "--kv-cache-dtype=float16", "--prefill-chunk-tokens=-1",
                                  "--weight-dtype=int4", "--weight-group-size=-1",
                                  "--weight-group-size=4294967296"])
def test_bad_batching_flags_exit_2_naming_the_flag(flag):
    result = subprocess.run([SERVER, "--host=127.0.0.1", "--port=0", "--metrics-port=-1", flag],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert flag.split("=")[0] in result.stderr


def _run(*args):
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def test_help_lists_every_flag_as_the_docs_write_it():
    result = _run(SERVER, "--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "No flags matched" not in text
    assert text.startswith("Usage: layerserve ")
    # Each flag as "--name=TYPE  (default D)", its help below it.
    listed = dict(re.findall(r"^  (--[a-z0-9-]+)(?:=[A-Z]+)?  \(default (.*)\)$", text, re.M))
    assert listed["--model-repository"] == '""'
    assert listed["--compute-threads"] == "0"
    assert listed["--metrics-port"] == "9464"
    assert listed["--max-batch-rows"] == "512"
    assert listed["--shutdown-grace"] == "30s"
    assert listed["--weight-dtype"] == '"float32"'
    assert listed["--weight-group-size"] == "64"
    assert "Worker threads that run kernels; 0 = one per online CPU." in text
    assert not re.search(r"^ *--\w*_", text, re.M), "a flag named with underscores"
    # Every flag README's "Server flags" names is listed (the whole reference,
    # docs/operations/configuration.md, has a check of its own: docs_flag_reference).
    readme = (Path(SOURCE_DIR) / "README.md").read_text()
    section = readme.split("## Server flags")[1].split("\n## ")[0]
    documented = set(re.findall(r"`(--[a-z0-9-]+)`", section)) - {"--help", "--version"}
    assert len(documented) >= 5
    assert documented <= set(listed), documented - set(listed)
    assert {"--help", "--version"} <= set(re.findall(r"^  (--[a-z]+)$", text, re.M))
    assert _run(SERVER, "-h").stdout == text


def test_an_unknown_flag_is_still_an_error():
    result = _run(SERVER, "--no-such-flag=1", "--port=0", "--metrics-port=-1")
    assert result.returncode == 1
    assert "Unknown command line flag 'no_such_flag'" in result.stderr


def test_every_binary_reports_the_same_version(server):
    """layerserve, layerserve-cli and layerserve-bench print "NAME VERSION" for
    --version and exit 0; VERSION is the CMake project's and build_info's."""
    bench = os.path.join(os.path.dirname(CLI), "layerserve-bench")
    versions = {}
    for binary in (SERVER, CLI, bench):
        result = _run(binary, "--version")
        assert result.returncode == 0, result.stderr
        name = os.path.basename(binary)
        m = re.fullmatch(rf"{re.escape(name)} (\S+)\n", result.stdout)
        assert m, result.stdout
        versions[name] = m.group(1)
    [version] = set(versions.values())
    assert version == (Path(SOURCE_DIR) / "VERSION").read_text().strip()
    [(labels, value)] = parse_samples(server.metrics(), "layerserve_build_info")
    assert labels["version"] == version and value == 1


def _configured_allocator():
    """The allocator the server binary was built with, from its build tree's
    CMakeCache.txt: "jemalloc" (the default), or "glibc malloc" for
    -DLAYERSERVE_ALLOCATOR=system and for sanitizer builds, whose runtime replaces
    malloc itself."""
    cache = (Path(SERVER).resolve().parents[1] / "CMakeCache.txt").read_text()
    settings = dict(re.findall(r"^(LAYERSERVE_\w+):\w+=(.*)$", cache, re.M))
    if settings.get("LAYERSERVE_SANITIZE") or settings.get("LAYERSERVE_FUZZ") == "ON":
        return "glibc malloc"
    return "glibc malloc" if settings.get("LAYERSERVE_ALLOCATOR") == "system" else "jemalloc"


def test_server_runs_on_the_configured_allocator_with_its_settings(server):
    """The start-up log names the allocator; jemalloc's settings (server/rpc/allocator.cc)
    took effect: its background thread returns unused pages, also while idle."""
    allocator = _configured_allocator()
    assert re.search(rf"^layerserve: memory allocator {allocator}", server.output(),
                     re.M), server.output()
    tasks = Path(f"/proc/{server.proc.pid}/task")
    threads = [(task / "comm").read_text().strip() for task in tasks.iterdir()]
    assert ("jemalloc_bg_thd" in threads) == (allocator == "jemalloc"), threads
