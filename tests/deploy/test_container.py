"""The layerserve image, as built by scripts/container-build, run with podman on
the host network like any container runtime would: its metadata (non-root user,
ports, health check, stop signal, volume), a runtime stage without compilers,
health through grpc.health.v1 and through the image's HEALTHCHECK, /metrics, a
computed result, the model repository volume, the documented reload (`kill -HUP 1`
run inside the container, as `kubectl exec POD -- kill -HUP 1` does), and a SIGTERM
drain to exit 0.
Run by scripts/container-test, which builds the image and sets LAYERSERVE_IMAGE."""
import json
import os
import subprocess
import time
import urllib.request
import uuid

import grpc
import numpy as np
import pytest

from checked_normalize import checked_normalize
from conftest import SERVICE_NAME
from grpc_std import health_pb2, health_pb2_grpc
from layerserve.v1 import layerserve_pb2 as pb
from layerserve.v1 import layerserve_pb2_grpc as pb_grpc
from metrics_text import requests_ok
from server_process import SOURCE_DIR, free_port, wait_for

IMAGE = os.environ.get("LAYERSERVE_IMAGE")
MODELS = SOURCE_DIR / "tests" / "golden" / "models"


def podman(*args, timeout=120, check=True):
    result = subprocess.run(["podman", *args], capture_output=True, text=True,
                            timeout=timeout)
    if check:
        assert result.returncode == 0, (args, result.stderr)
    return result


@pytest.fixture(scope="module")
def image():
    assert IMAGE, "set LAYERSERVE_IMAGE (scripts/container-test builds it)"
    return json.loads(podman("image", "inspect", IMAGE).stdout)[0]


def test_image_metadata(image):
    config = image["Config"]
    assert config["User"] == "10001"
    assert set(config["ExposedPorts"]) == {"50051/tcp", "9464/tcp"}
    assert config["StopSignal"] == "SIGTERM"
    assert "/models" in config["Volumes"]
    assert config["Entrypoint"][0] == "layerserve"
    # Kept because the image is built with --format docker (OCI has no HEALTHCHECK).
    assert image["ManifestType"] == "application/vnd.docker.distribution.manifest.v2+json"
    health = image["Healthcheck"]["Test"]
    assert health[0] == "CMD-SHELL" and "layerserve-cli" in health[1] and " health" in health[1]


def test_runtime_stage_has_the_binaries_and_no_toolchain():
    out = podman("run", "--rm", "--pull=never", "--network=host", "--entrypoint", "sh",
                 IMAGE, "-c",
                 "ls /usr/local/bin; command -v g++ cmake protoc || true; id -u").stdout
    lines = out.split()
    assert lines == ["layerserve", "layerserve-cli", "10001"], out


class Container:
    """The image run detached with --network=host on ports picked now."""

    def __init__(self, *args, volumes=()):
        self.name = f"layerserve-test-{uuid.uuid4().hex[:8]}"
        self.port, self.metrics_port = free_port(), free_port()
        mounts = [f"--volume={v}" for v in volumes]
        podman("run", "--detach", "--pull=never", "--network=host", f"--name={self.name}",
               # The image's HEALTHCHECK reads the gRPC port from here.
               f"--env=LAYERSERVE_PORT={self.port}", *mounts, IMAGE,
               "--host=127.0.0.1", f"--port={self.port}",
               f"--metrics-port={self.metrics_port}", *args)
        self.target = f"127.0.0.1:{self.port}"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"

    def metrics(self):
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            return response.read().decode()

    def logs(self):
        result = podman("logs", self.name, check=False)
        return result.stdout + result.stderr

    def health(self):
        try:
            with grpc.insecure_channel(self.target) as channel:
                return health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=2).status
        except grpc.RpcError:
            return None

    def remove(self):
        podman("rm", "--force", "--time=0", self.name, check=False)


@pytest.fixture
def container(request):
    started = []

    def start(*args, **kwargs):
        started.append(Container(*args, **kwargs))
        return started[-1]

    yield start
    for c in started:
        c.remove()


def test_serves_from_outside_and_drains_to_exit_zero_on_sigterm(container):
    c = container("--shutdown-grace=20s")
    serving = health_pb2.HealthCheckResponse.SERVING
    assert wait_for(lambda: c.health() == serving, timeout=60), c.logs()
    assert f"gRPC listening on 127.0.0.1:{c.port}" in c.logs()

    # The image's own HEALTHCHECK, run by podman inside the container.
    result = podman("healthcheck", "run", c.name, check=False)
    assert result.returncode == 0, result.stdout + result.stderr

    rng = np.random.default_rng(5)
    with grpc.insecure_channel(c.target) as channel:
        stub = pb_grpc.LayerServiceStub(channel)
        for _ in range(10):
            checked_normalize(stub, rng)
    text = c.metrics()
    assert requests_ok(text) == 10
    assert 'layerserve_build_info{' in text

    start = time.monotonic()
    podman("stop", "--time=30", c.name, timeout=60)
    stopped_in = time.monotonic() - start
    state = json.loads(podman("inspect", c.name).stdout)[0]["State"]
    assert state["ExitCode"] == 0, c.logs()
    # SIGTERM drained it (no SIGKILL after podman's 30 s).
    assert stopped_in < 25, stopped_in
    logs = c.logs()
    assert "draining 0 accepted calls" in logs and "layerserve: stopped" in logs, logs


def test_serves_a_mounted_model_repository(container):
    c = container("--model-repository=/models", volumes=[f"{MODELS}:/models:ro"])
    assert wait_for(lambda: c.health() == health_pb2.HealthCheckResponse.SERVING,
                    timeout=60), c.logs()
    with grpc.insecure_channel(c.target) as channel:
        models = pb_grpc.LayerServiceStub(channel).ListModels(pb.ListModelsRequest(),
                                                              timeout=10).models
    expected = {}
    for d in sorted(MODELS.iterdir()):
        config = json.loads((d / "config.json").read_text())
        expected[d.name] = config.get("num_hidden_layers", config.get("n_layer"))
    assert {m.name: m.num_layers for m in models} == expected
    assert all(m.state == pb.ModelInfo.READY for m in models), models


def test_the_documented_reload_command_works_in_the_image(container):
    """docs/operations/deploy.md's reload, `kubectl exec POD -- kill -HUP 1`: the
    image has a kill executable and the server, PID 1, reloads on the signal."""
    c = container("--model-repository=/models", volumes=[f"{MODELS}:/models:ro"])
    assert wait_for(lambda: c.health() == health_pb2.HealthCheckResponse.SERVING,
                    timeout=60), c.logs()
    result = podman("exec", c.name, "kill", "-HUP", "1", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert wait_for(lambda: "reload (SIGHUP)" in c.logs(), timeout=30), c.logs()
    assert "reload (SIGHUP): no change" in c.logs(), c.logs()
    # Still serving after the reload.
    assert c.health() == health_pb2.HealthCheckResponse.SERVING
