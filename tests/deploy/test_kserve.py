"""deploy/kserve holds an InferenceService KServe can run and the server agrees with:
a custom predictor whose one port is named h2c (KServe routes gRPC there) and is the
server's --port, gRPC probes on that port asking for services the server registers,
flags the binary knows, the model repository mounted where --model-repository
points, a KV-cache cap below the memory limit, and deploy/k8s's image. No KServe
schema is available offline, so the predictor's pod part is checked as a Kubernetes
Pod (kubernetes-models' schema and TypeScript types, deploy/k8s/validate.cjs) and its
remaining fields against KServe's ComponentExtensionSpec; then the real binary runs
with the container's arguments and answers every probe SERVING."""
import os
import re
import shutil
import subprocess

import grpc
import pytest
import yaml

import kustomize
from conftest import DEPLOY_DIR, SERVICE_NAME
from grpc_std import health_pb2, health_pb2_grpc
from inference import grpc_service_pb2 as oip
from inference import grpc_service_pb2_grpc as oip_grpc
from server_process import SERVER, SOURCE_DIR, ServerProcess

KSERVE = DEPLOY_DIR / "kserve"
OIP_SERVICE = "inference.GRPCInferenceService"
# The fields of KServe's PredictorSpec that are not a Kubernetes PodSpec's
# (ComponentExtensionSpec, pkg/apis/serving/v1beta1/component.go). `protocolVersion`
# is not one: it belongs to the built-in runtimes' specs, not to `containers`.
COMPONENT_EXTENSION = {"minReplicas", "maxReplicas", "scaleTarget", "scaleMetric",
                       "autoScaling", "containerConcurrency", "timeout",
                       "canaryTrafficPercent", "logger", "batcher", "labels",
                       "annotations", "deploymentStrategy"}
QUANTITY = re.compile(r"(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?")
UNITS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
         "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def documents():
    docs = []
    for path in sorted(KSERVE.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def one(kind):
    [doc] = [d for d in documents() if d["kind"] == kind]
    return doc


def predictor():
    return one("InferenceService")["spec"]["predictor"]


def container():
    [c] = predictor()["containers"]
    return c


def args():
    """{flag: value} of the container's args, each "--flag=value"."""
    pairs = [a.split("=", 1) for a in container()["args"]]
    assert all(len(p) == 2 and p[0].startswith("--") for p in pairs), container()["args"]
    return {name[2:]: value for name, value in pairs}


def quantity_bytes(text):
    m = QUANTITY.fullmatch(str(text))
    assert m, f"not a byte quantity: {text}"
    return int(m.group(1)) * UNITS[m.group(2)]


def test_a_custom_predictor_with_one_container():
    isvc = one("InferenceService")
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
    # Raw deployment: sequences live in a pod's memory (no scale to zero, no
    # activator); newer KServe reads "RawDeployment" as its "Standard".
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == \
        "RawDeployment"
    assert set(isvc["spec"]) == {"predictor"}
    spec = predictor()
    assert len(spec["containers"]) == 1
    # KServe finds a custom predictor's container by this name.
    assert container()["name"] == "kserve-container"
    # A custom container's protocol is its PROTOCOL variable (v1 or v2, KServe's
    # validation); protocolVersion on the predictor is no field of KServe's.
    assert "protocolVersion" not in spec
    assert {e["name"]: e["value"] for e in container()["env"]}["PROTOCOL"] == "v2"
    assert spec["minReplicas"] <= spec["maxReplicas"]
    # KServe's webhook validates scaleMetric as Knative's (concurrency, rps) unless
    # the mode is spelt "Standard": `cpu` would be refused. Its HPA's default is CPU.
    assert "scaleMetric" not in spec and "scaleTarget" not in spec


def test_the_one_port_is_h2c_and_the_servers_port():
    ports = container()["ports"]
    # KServe routes gRPC (HTTP/2 cleartext) to the port named h2c; Knative allows one.
    assert [p["name"] for p in ports] == ["h2c"]
    assert ports[0]["containerPort"] == int(args()["port"])


def test_grpc_probes_on_that_port_ask_for_services_the_server_knows():
    port = int(args()["port"])
    c = container()
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert set(c[probe]) - {"periodSeconds", "timeoutSeconds", "failureThreshold"} \
            == {"grpc"}, probe
        assert c[probe]["grpc"]["port"] == port, probe
        assert c[probe]["grpc"].get("service", "") in ("", SERVICE_NAME, OIP_SERVICE)
    # Readiness asks for a service (not ""), which turns NOT_SERVING when a drain
    # starts; liveness only needs the process to answer.
    assert c["readinessProbe"]["grpc"]["service"] == OIP_SERVICE


def test_the_model_repository_is_the_mounted_claim():
    path = args()["model-repository"]
    [mount] = [m for m in container()["volumeMounts"] if m["mountPath"] == path]
    assert mount["readOnly"] is True
    [volume] = [v for v in predictor()["volumes"] if v["name"] == mount["name"]]
    claim = volume["persistentVolumeClaim"]["claimName"]
    assert claim == one("PersistentVolumeClaim")["metadata"]["name"]
    # The read-only root filesystem needs a writable /tmp.
    assert "/tmp" in [m["mountPath"] for m in container()["volumeMounts"]]
    assert container()["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_kv_cache_cap_is_below_the_memory_limit():
    resources = container()["resources"]
    limit = quantity_bytes(resources["limits"]["memory"])
    assert int(args()["max-kv-cache-bytes"]) < limit
    # Guaranteed QoS and one compute thread per core, as in deploy/k8s.
    assert resources["requests"] == resources["limits"]
    assert int(args()["compute-threads"]) == int(resources["limits"]["cpu"])


def test_the_image_is_deploy_k8s_s():
    [deployment] = [o for o in kustomize.render(DEPLOY_DIR / "k8s" / "base")
                    if o["kind"] == "Deployment"]
    [k8s_container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container()["image"] == k8s_container["image"]
    assert predictor()["securityContext"]["runAsUser"] == 10001  # the image's user


def test_every_arg_is_a_flag_of_the_binary_and_the_drain_fits_the_grace():
    # --help lists flags as "  --name=TYPE".
    help_text = subprocess.run([SERVER, "--help"], capture_output=True, text=True,
                               timeout=30, check=True).stdout
    for name in args():
        assert f"\n  --{name}=" in help_text, f"unknown flag --{name}"
    pre_stop = container()["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    grace = re.fullmatch(r"(\d+)s", args()["shutdown-grace"])
    assert predictor()["terminationGracePeriodSeconds"] > \
        int(pre_stop[1]) + int(grace.group(1))


def pod_and_claim(tmp_path, edit=None):
    """deploy/kserve as Kubernetes objects validate.cjs knows: the predictor's pod
    part as a Pod, and the claim."""
    spec = {k: v for k, v in predictor().items() if k not in COMPONENT_EXTENSION}
    if edit:
        edit(spec)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": one("InferenceService")["metadata"]["name"]},
           "spec": spec}
    rendered = tmp_path / "kserve.yaml"
    rendered.write_text(yaml.safe_dump_all([pod, one("PersistentVolumeClaim")],
                                           sort_keys=False))
    return rendered


def validate(rendered, node_modules):
    return subprocess.run(["node", str(DEPLOY_DIR / "k8s" / "validate.cjs"), str(rendered)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NODE_PATH": str(node_modules)})


def test_the_predictors_pod_and_the_claim_pass_kubernetes_schemas(tmp_path, node_modules):
    assert sorted(d["kind"] for d in documents()) == \
        ["InferenceService", "PersistentVolumeClaim"]
    result = validate(pod_and_claim(tmp_path), node_modules)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["valid", "Pod/layerserve",
                                     "valid", "PersistentVolumeClaim/layerserve-models"]


@pytest.mark.parametrize("edit,message", [
    # A field KServe's custom predictor does not have: only the types see it.
    pytest.param(lambda spec: spec.update(protocolVersion="grpc-v2"),
                 "'\"protocolVersion\"' does not exist", id="protocolVersion"),
    # A port number as a string: the schema sees it.
    pytest.param(lambda spec: spec["containers"][0]["ports"][0].update(
        containerPort="50051"), "must be integer", id="port-as-string"),
])
def test_the_check_rejects_mistakes(edit, message, tmp_path, node_modules):
    result = validate(pod_and_claim(tmp_path, edit), node_modules)
    assert result.returncode == 1
    assert message in result.stderr, result.stderr


def test_the_server_with_these_args_answers_every_probe_serving(tmp_path):
    """The container's arguments, on loopback: the repository path becomes a copy of
    a golden tiny model, --port the one ServerProcess picks."""
    repository = tmp_path / "models"
    shutil.copytree(SOURCE_DIR / "tests" / "golden" / "models" / "tiny-llama",
                    repository / "tiny-llama")
    server_args = [f"--{name}={value}" for name, value in args().items()
                   if name not in ("port", "model-repository")]
    server = ServerProcess(*server_args, f"--model-repository={repository}")
    try:
        with grpc.insecure_channel(server.target) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                service = container()[probe]["grpc"].get("service", "")
                reply = health.Check(health_pb2.HealthCheckRequest(service=service),
                                     timeout=10)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING, probe
            stub = oip_grpc.GRPCInferenceServiceStub(channel)
            assert stub.ServerReady(oip.ServerReadyRequest(), timeout=10).ready
            assert stub.ModelReady(oip.ModelReadyRequest(name="tiny-llama"),
                                   timeout=10).ready
    finally:
        assert server.stop() == 0, server.output()
