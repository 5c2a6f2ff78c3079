"""deploy/kserve holds two ways to run layerserve on KServe, and the server agrees
with both:
- inferenceservice.yaml, a custom predictor: the InferenceService lists the
  container itself;
- servingruntime.yaml and inferenceservice-runtime.yaml: a ServingRuntime that
  declares grpc-v2 and the container, and an InferenceService whose `model` names
  that runtime and format with protocolVersion grpc-v2 and the claim as storageUri.
Either container has one port, named h2c (KServe routes gRPC there), that is the
server's --port, gRPC probes on that port asking for services the server registers,
flags the binary knows, its model repository where KServe puts the models, a
KV-cache cap below the memory limit, and deploy/k8s's image. No KServe schema is
available offline: each pod KServe would make is checked as a Kubernetes Pod
(kubernetes-models' schema and TypeScript types, deploy/k8s/validate.cjs) and the
KServe fields against KServe's Go types, named where they are listed; then the real
binary runs with each container's arguments and answers every probe SERVING."""
import copy
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
INLINE = "inferenceservice.yaml"
RUNTIME = "servingruntime.yaml"
RUNTIME_ISVC = "inferenceservice-runtime.yaml"
OIP_SERVICE = "inference.GRPCInferenceService"
# The fields of KServe's PredictorSpec that are not a Kubernetes PodSpec's
# (ComponentExtensionSpec, pkg/apis/serving/v1beta1/component.go). `protocolVersion`
# is not one: it belongs to `model` (and the built-in runtimes' specs), not to
# `containers`.
COMPONENT_EXTENSION = {"minReplicas", "maxReplicas", "scaleTarget", "scaleMetric",
                       "autoScaling", "containerConcurrency", "timeout",
                       "canaryTrafficPercent", "logger", "batcher", "labels",
                       "annotations", "deploymentStrategy"}
# KServe's ServingRuntimeSpec (pkg/apis/serving/v1alpha1/servingruntime_types.go),
# with its inline ServingRuntimePodSpec, and SupportedModelFormat.
SERVING_RUNTIME_SPEC = {"supportedModelFormats", "multiModel", "disabled",
                        "protocolVersions", "workerSpec", "grpcEndpoint",
                        "grpcDataEndpoint", "httpDataEndpoint", "replicas",
                        "storageHelper", "builtInAdapter", "containers", "volumes",
                        "nodeSelector", "affinity", "tolerations", "labels",
                        "annotations", "imagePullSecrets", "hostIPC"}
SUPPORTED_MODEL_FORMAT = {"name", "version", "autoSelect", "priority"}
# ModelSpec (pkg/apis/serving/v1beta1/predictor_model.go) and the non-container
# fields of its PredictorExtensionSpec (predictor.go); the rest would be container
# overrides, which this InferenceService leaves to the runtime.
MODEL_SPEC = {"modelFormat", "runtime", "storageUri", "runtimeVersion",
              "protocolVersion", "storage"}
# InferenceServiceProtocol's values (pkg/constants/constants.go).
PROTOCOLS = {"v1", "v2", "grpc-v1", "grpc-v2"}
# Where KServe puts a storageUri's models (DefaultModelLocalMountPath) and the
# volume it mounts a pvc:// claim from (PvcSourceMountName,
# pkg/webhook/admission/pod/storage_initializer_injector.go).
MODEL_MOUNT_PATH = "/mnt/models"
PVC_SOURCE_VOLUME = "kserve-pvc-source"
QUANTITY = re.compile(r"(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?")
UNITS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
         "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def load(name):
    """The one object of deploy/kserve/<name>."""
    [doc] = [d for d in yaml.safe_load_all((KSERVE / name).read_text()) if d]
    return doc


def claim_name():
    return load("pvc.yaml")["metadata"]["name"]


def predictor(isvc_file=INLINE):
    return load(isvc_file)["spec"]["predictor"]


def inline_container():
    [c] = predictor(INLINE)["containers"]
    return c


def runtime_container():
    [c] = load(RUNTIME)["spec"]["containers"]
    return c


# Each way: the file of its InferenceService and the container KServe runs.
VARIANTS = {"inline": (INLINE, inline_container),
            "runtime": (RUNTIME_ISVC, runtime_container)}


@pytest.fixture(params=sorted(VARIANTS))
def variant(request):
    """(the InferenceService's predictor, the container) of one way."""
    isvc_file, container = VARIANTS[request.param]
    return predictor(isvc_file), container()


def args(container):
    """{flag: value} of the container's args, each "--flag=value"."""
    pairs = [a.split("=", 1) for a in container["args"]]
    assert all(len(p) == 2 and p[0].startswith("--") for p in pairs), container["args"]
    return {name[2:]: value for name, value in pairs}


def quantity_bytes(text):
    m = QUANTITY.fullmatch(str(text))
    assert m, f"not a byte quantity: {text}"
    return int(m.group(1)) * UNITS[m.group(2)]


def test_deploy_kserve_holds_both_ways_and_the_claim():
    kinds = {path.name: load(path.name)["kind"] for path in KSERVE.glob("*.yaml")}
    assert kinds == {INLINE: "InferenceService", RUNTIME_ISVC: "InferenceService",
                     RUNTIME: "ServingRuntime", "pvc.yaml": "PersistentVolumeClaim"}
    # Both may run side by side in one namespace.
    assert load(INLINE)["metadata"]["name"] != load(RUNTIME_ISVC)["metadata"]["name"]


def test_a_custom_predictor_with_one_container():
    isvc = load(INLINE)
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
    # Raw deployment: sequences live in a pod's memory (no scale to zero, no
    # activator); newer KServe reads "RawDeployment" as its "Standard".
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == \
        "RawDeployment"
    assert set(isvc["spec"]) == {"predictor"}
    spec = predictor(INLINE)
    assert len(spec["containers"]) == 1
    # KServe finds a custom predictor's container by this name.
    assert inline_container()["name"] == "kserve-container"
    # A custom container's protocol is its PROTOCOL variable (v1 or v2, KServe's
    # validation); protocolVersion on the predictor is no field of KServe's.
    assert "protocolVersion" not in spec and "model" not in spec
    assert {e["name"]: e["value"] for e in inline_container()["env"]}["PROTOCOL"] == "v2"
    assert spec["minReplicas"] <= spec["maxReplicas"]
    # KServe's webhook validates scaleMetric as Knative's (concurrency, rps) unless
    # the mode is spelt "Standard": `cpu` would be refused. Its HPA's default is CPU.
    assert "scaleMetric" not in spec and "scaleTarget" not in spec


def test_the_serving_runtime_declares_grpc_v2_and_one_container():
    runtime = load(RUNTIME)
    assert runtime["apiVersion"] == "serving.kserve.io/v1alpha1"
    spec = runtime["spec"]
    assert set(spec) <= SERVING_RUNTIME_SPEC, set(spec) - SERVING_RUNTIME_SPEC
    # The server speaks the Open Inference Protocol over gRPC only.
    assert spec["protocolVersions"] == ["grpc-v2"]
    assert spec["multiModel"] is False
    assert spec["supportedModelFormats"] == [
        {"name": "layerserve", "version": "1", "autoSelect": True}]
    for model_format in spec["supportedModelFormats"]:
        assert set(model_format) <= SUPPORTED_MODEL_FORMAT
    # KServe merges the InferenceService into the runtime's container of this name
    # and fails the InferenceService without one.
    assert [c["name"] for c in spec["containers"]] == ["kserve-container"]


def test_the_inference_service_names_the_runtime_with_grpc_v2_and_the_claim():
    isvc = load(RUNTIME_ISVC)
    runtime = load(RUNTIME)
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
    annotations = isvc["metadata"]["annotations"]
    assert annotations["serving.kserve.io/deploymentMode"] == "RawDeployment"
    # KServe mounts the claim read-only unless this says "false".
    assert annotations.get("storage.kserve.io/readonly", "true") == "true"
    assert set(isvc["spec"]) == {"predictor"}
    spec = predictor(RUNTIME_ISVC)
    assert "containers" not in spec
    assert spec["minReplicas"] <= spec["maxReplicas"]
    assert "scaleMetric" not in spec and "scaleTarget" not in spec
    model = spec["model"]
    # No container overrides: KServe would append args to the runtime's.
    assert set(model) <= MODEL_SPEC, set(model) - MODEL_SPEC
    assert model["runtime"] == runtime["metadata"]["name"]
    formats = {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    assert set(model["modelFormat"]) == {"name"}
    assert model["modelFormat"]["name"] in formats
    assert model["protocolVersion"] == "grpc-v2"
    assert model["protocolVersion"] in PROTOCOLS
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
    # The claim's root: every sub-directory a model, as in the inline variant.
    assert model["storageUri"] == f"pvc://{claim_name()}/"


def test_the_runtime_reads_the_models_where_kserve_mounts_the_storage_uri():
    c = runtime_container()
    assert args(c)["model-repository"] == MODEL_MOUNT_PATH
    # KServe adds the mount at /mnt/models; one of the runtime's own there would
    # be a second mount at the same path, which Kubernetes refuses.
    assert MODEL_MOUNT_PATH not in [m["mountPath"] for m in c["volumeMounts"]]
    # The read-only root filesystem needs a writable /tmp, from the runtime's volumes.
    [tmp] = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert tmp["name"] in [v["name"] for v in load(RUNTIME)["spec"]["volumes"]]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_inline_model_repository_is_the_mounted_claim():
    c = inline_container()
    path = args(c)["model-repository"]
    [mount] = [m for m in c["volumeMounts"] if m["mountPath"] == path]
    assert mount["readOnly"] is True
    [volume] = [v for v in predictor(INLINE)["volumes"] if v["name"] == mount["name"]]
    assert volume["persistentVolumeClaim"]["claimName"] == claim_name()
    # The read-only root filesystem needs a writable /tmp.
    assert "/tmp" in [m["mountPath"] for m in c["volumeMounts"]]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True


def test_both_ways_run_the_same_container_but_for_the_model_repository():
    inline, runtime = inline_container(), runtime_container()
    assert {k: v for k, v in args(runtime).items() if k != "model-repository"} == \
        {k: v for k, v in args(inline).items() if k != "model-repository"}
    for field in ("name", "image", "env", "ports", "startupProbe", "readinessProbe",
                  "livenessProbe", "lifecycle", "resources", "securityContext"):
        assert runtime[field] == inline[field], field
    pod_fields = ("terminationGracePeriodSeconds", "securityContext", "minReplicas",
                  "maxReplicas")
    assert {f: predictor(RUNTIME_ISVC)[f] for f in pod_fields} == \
        {f: predictor(INLINE)[f] for f in pod_fields}


def test_the_one_port_is_h2c_and_the_servers_port(variant):
    _, c = variant
    ports = c["ports"]
    # KServe routes gRPC (HTTP/2 cleartext) to the port named h2c; Knative allows one.
    assert [p["name"] for p in ports] == ["h2c"]
    assert ports[0]["containerPort"] == int(args(c)["port"])


def test_grpc_probes_on_that_port_ask_for_services_the_server_knows(variant):
    _, c = variant
    port = int(args(c)["port"])
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert set(c[probe]) - {"periodSeconds", "timeoutSeconds", "failureThreshold"} \
            == {"grpc"}, probe
        assert c[probe]["grpc"]["port"] == port, probe
        assert c[probe]["grpc"].get("service", "") in ("", SERVICE_NAME, OIP_SERVICE)
    # Readiness asks for a service (not ""), which turns NOT_SERVING when a drain
    # starts; liveness only needs the process to answer.
    assert c["readinessProbe"]["grpc"]["service"] == OIP_SERVICE


def test_the_kv_cache_cap_is_below_the_memory_limit(variant):
    _, c = variant
    resources = c["resources"]
    limit = quantity_bytes(resources["limits"]["memory"])
    assert int(args(c)["max-kv-cache-bytes"]) < limit
    # Guaranteed QoS and one compute thread per core, as in deploy/k8s.
    assert resources["requests"] == resources["limits"]
    assert int(args(c)["compute-threads"]) == int(resources["limits"]["cpu"])


def test_the_image_is_deploy_k8s_s(variant):
    spec, c = variant
    [deployment] = [o for o in kustomize.render(DEPLOY_DIR / "k8s" / "base")
                    if o["kind"] == "Deployment"]
    [k8s_container] = deployment["spec"]["template"]["spec"]["containers"]
    assert c["image"] == k8s_container["image"]
    assert spec["securityContext"]["runAsUser"] == 10001  # the image's user


def test_every_arg_is_a_flag_of_the_binary_and_the_drain_fits_the_grace(variant):
    spec, c = variant
    # --help lists flags as "  --name=TYPE".
    help_text = subprocess.run([SERVER, "--help"], capture_output=True, text=True,
                               timeout=30, check=True).stdout
    for name in args(c):
        assert f"\n  --{name}=" in help_text, f"unknown flag --{name}"
    pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    grace = re.fullmatch(r"(\d+)s", args(c)["shutdown-grace"])
    assert spec["terminationGracePeriodSeconds"] > int(pre_stop[1]) + int(grace.group(1))


def inline_pod(edit=None):
    """The pod part of the custom predictor, as a Pod."""
    spec = {k: v for k, v in predictor(INLINE).items() if k not in COMPONENT_EXTENSION}
    if edit:
        edit(spec)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": load(INLINE)["metadata"]["name"]}, "spec": spec}


def runtime_pod():
    """The pod KServe makes of the runtime and its InferenceService: the runtime's
    volumes under the predictor's pod fields (MergePodSpec), the runtime's container,
    and the claim of the pvc:// storageUri mounted read-only at /mnt/models, as the
    storage initializer injector mounts it with enableDirectPvcVolumeMount (KServe's
    default)."""
    runtime = load(RUNTIME)["spec"]
    spec = {k: v for k, v in predictor(RUNTIME_ISVC).items()
            if k not in COMPONENT_EXTENSION | {"model"}}
    container = copy.deepcopy(runtime_container())
    container["volumeMounts"].append(
        {"name": PVC_SOURCE_VOLUME, "mountPath": MODEL_MOUNT_PATH, "readOnly": True})
    spec["containers"] = [container]
    spec["volumes"] = runtime["volumes"] + [
        {"name": PVC_SOURCE_VOLUME, "persistentVolumeClaim": {"claimName": claim_name()}}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": load(RUNTIME_ISVC)["metadata"]["name"]}, "spec": spec}


def pods_and_claim(tmp_path, edit=None):
    """deploy/kserve as Kubernetes objects validate.cjs knows: both pods, the claim."""
    rendered = tmp_path / "kserve.yaml"
    rendered.write_text(yaml.safe_dump_all(
        [inline_pod(edit), runtime_pod(), load("pvc.yaml")], sort_keys=False))
    return rendered


def validate(rendered, node_modules):
    return subprocess.run(["node", str(DEPLOY_DIR / "k8s" / "validate.cjs"), str(rendered)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NODE_PATH": str(node_modules)})


def test_the_pods_and_the_claim_pass_kubernetes_schemas(tmp_path, node_modules):
    result = validate(pods_and_claim(tmp_path), node_modules)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["valid", "Pod/layerserve",
                                     "valid", "Pod/layerserve-runtime",
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
    result = validate(pods_and_claim(tmp_path, edit), node_modules)
    assert result.returncode == 1
    assert message in result.stderr, result.stderr


def model_repository(tmp_path, name):
    """A repository of the golden tiny model: for the inline container a copy, as the
    claim holds it; for the runtime's, links to the models, as KServe's storage
    initializer makes /mnt/models when it does not mount the claim there itself."""
    golden = SOURCE_DIR / "tests" / "golden" / "models" / "tiny-llama"
    repository = tmp_path / "models"
    if name == "inline":
        shutil.copytree(golden, repository / "tiny-llama")
    else:
        shutil.copytree(golden, tmp_path / "pvc" / "tiny-llama")
        repository.mkdir()
        (repository / "tiny-llama").symlink_to(tmp_path / "pvc" / "tiny-llama")
    return repository


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_the_server_with_these_args_answers_every_probe_serving(name, tmp_path):
    """The container's arguments, on loopback: the repository path becomes a
    repository of a golden tiny model, --port the one ServerProcess picks."""
    c = VARIANTS[name][1]()
    server_args = [f"--{flag}={value}" for flag, value in args(c).items()
                   if flag not in ("port", "model-repository")]
    repository = model_repository(tmp_path, name)
    server = ServerProcess(*server_args, f"--model-repository={repository}")
    try:
        with grpc.insecure_channel(server.target) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                service = c[probe]["grpc"].get("service", "")
                reply = health.Check(health_pb2.HealthCheckRequest(service=service),
                                     timeout=10)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING, probe
            stub = oip_grpc.GRPCInferenceServiceStub(channel)
            assert stub.ServerReady(oip.ServerReadyRequest(), timeout=10).ready
            assert stub.ModelReady(oip.ModelReadyRequest(name="tiny-llama"),
                                   timeout=10).ready
    finally:
        assert server.stop() == 0, server.output()
