"""deploy/k8s renders (kustomize.py, held to `kubectl kustomize`), every object passes the
kubernetes-models schemas and TypeScript types (deploy/k8s/validate.cjs), and the
numbers that must agree with the server do: probe ports and service name, flags the
binary knows, the grace period against --shutdown-grace plus the preStop sleep."""
import os
import re
import shutil
import subprocess

import pytest
import yaml

import kustomize
from conftest import DEPLOY_DIR, SERVICE_NAME
from server_process import SERVER

K8S = DEPLOY_DIR / "k8s"


def render(path, tmp_path):
    objects = kustomize.render(path)
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return rendered, objects


def _by_name(objects):
    return sorted(objects, key=lambda o: (o["kind"], o["metadata"]["name"]))


@pytest.mark.parametrize("variant", ["base", "queue-depth", "spans"])
def test_rendering_matches_kubectl_kustomize(variant):
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl on this machine: kustomize.py is not compared with it")
    out = subprocess.run([kubectl, "kustomize", str(K8S / variant)], capture_output=True,
                         text=True, timeout=60)
    if out.returncode != 0 and "must be a file" in out.stderr:
        pytest.skip("this kubectl's kustomize is too old to read a folder in resources")
    assert out.returncode == 0, out.stderr
    theirs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert _by_name(kustomize.render(K8S / variant)) == _by_name(theirs)


def validate(rendered, node_modules):
    return subprocess.run(["node", str(K8S / "validate.cjs"), str(rendered)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NODE_PATH": str(node_modules)})


def by_kind(objects):
    kinds = {}
    for o in objects:
        kinds.setdefault(o["kind"], []).append(o)
    return kinds


@pytest.mark.parametrize("variant", ["base", "queue-depth"])
def test_renders_and_every_object_passes_its_schema(variant, tmp_path, node_modules):
    rendered, objects = render(K8S / variant, tmp_path)
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted(["Namespace", "Deployment", "Service", "Service",
                            "HorizontalPodAutoscaler", "PodDisruptionBudget",
                            "ServiceMonitor"])
    result = validate(rendered, node_modules)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("valid ") == len(objects), result.stdout
    assert all(o["metadata"]["namespace"] == "layerserve" for o in objects
               if o["kind"] != "Namespace")


@pytest.mark.parametrize("mistake,message", [
    # A misspelt field: only the TypeScript check sees it.
    (("readinessProbe:", "readinessProb:"), "'\"readinessProb\"' does not exist"),
    # A wrong type: the JSON schema sees it.
    (("averageUtilization: 70", "averageUtilization: '70'"), "must be integer"),
])
def test_validator_rejects_mistakes(mistake, message, tmp_path, node_modules):
    rendered, _ = render(K8S / "base", tmp_path)
    text = rendered.read_text()
    assert mistake[0] in text
    rendered.write_text(text.replace(mistake[0], mistake[1], 1))
    result = validate(rendered, node_modules)
    assert result.returncode == 1
    assert message in result.stderr, result.stderr


def _duration_seconds(text):
    m = re.fullmatch(r"(\d+)s", text)
    assert m, f"expected a duration in seconds, got {text}"
    return int(m.group(1))


def test_deployment_agrees_with_the_server(tmp_path):
    _, objects = render(K8S / "base", tmp_path)
    kinds = by_kind(objects)
    deployment = kinds["Deployment"][0]
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    # The image's ENTRYPOINT ports (Dockerfile).
    assert ports == {"grpc": 50051, "metrics": 9464}

    # Every flag is one the binary accepts: --help lists them as "  --name=TYPE".
    help_text = subprocess.run([SERVER, "--help"], capture_output=True, text=True,
                               timeout=30, check=True).stdout
    args = dict(a.lstrip("-").split("=", 1) for a in container["args"])
    for name in args:
        assert f"\n  --{name}=" in help_text, f"unknown flag --{name}"

    # Probes: native gRPC on the gRPC port; readiness asks for the service the
    # server registers, so it turns NOT_SERVING the moment a drain starts.
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == 50051
    assert container["readinessProbe"]["grpc"]["service"] == SERVICE_NAME

    # The kubelet must not SIGKILL a draining server: grace > preStop + --shutdown-grace.
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    assert grace > int(pre_stop[1]) + _duration_seconds(args["shutdown-grace"])

    # Guaranteed QoS, and one compute thread per requested core.
    resources = container["resources"]
    assert resources["requests"] == resources["limits"]
    assert int(args["compute-threads"]) == int(resources["requests"]["cpu"])
    assert pod["spec"]["securityContext"]["runAsUser"] == 10001  # the image's user


def test_services_autoscaler_budget_and_monitor_select_the_pods(tmp_path):
    _, objects = render(K8S / "base", tmp_path)
    kinds = by_kind(objects)
    deployment = kinds["Deployment"][0]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()

    services = {s["metadata"]["name"]: s for s in kinds["Service"]}
    for service in services.values():
        assert service["spec"]["selector"].items() <= pod_labels.items()
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ("grpc", "metrics")
    assert services["layerserve-headless"]["spec"]["clusterIP"] == "None"

    hpa = kinds["HorizontalPodAutoscaler"][0]
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert hpa["spec"]["minReplicas"] <= deployment["spec"]["replicas"] <= hpa["spec"]["maxReplicas"]
    pdb = kinds["PodDisruptionBudget"][0]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["maxUnavailable"] < hpa["spec"]["minReplicas"]

    # The ServiceMonitor matches both Services' labels, but only the ClusterIP one
    # has the port it scrapes, so each pod is scraped once.
    monitor = kinds["ServiceMonitor"][0]
    endpoint_port = monitor["spec"]["endpoints"][0]["port"]
    scraped = [s for s in services.values()
               if monitor["spec"]["selector"]["matchLabels"].items()
               <= s["metadata"]["labels"].items()
               and endpoint_port in [p["name"] for p in s["spec"]["ports"]]]
    assert [s["metadata"]["name"] for s in scraped] == ["layerserve"]


def test_queue_depth_overlay_scales_on_cpu_and_queue(tmp_path):
    _, objects = render(K8S / "queue-depth", tmp_path)
    hpa = by_kind(objects)["HorizontalPodAutoscaler"][0]
    metrics = hpa["spec"]["metrics"]
    assert [m["type"] for m in metrics] == ["Resource", "Pods"]
    assert metrics[0]["resource"]["name"] == "cpu"
    assert metrics[1]["pods"]["metric"]["name"] == "layerserve_queue_depth"
    # The adapter rule serves that very name.
    adapter = yaml.safe_load((K8S / "queue-depth" / "prometheus-adapter-rules.yaml").read_text())
    assert adapter["rules"][0]["name"]["as"] == "layerserve_queue_depth"


def test_spans_yaml_is_make_spans_output_for_its_defaults():
    import sys
    sys.path.insert(0, str(K8S / "spans"))
    import make_spans
    committed = (K8S / "spans" / "spans.yaml").read_text()
    assert committed == make_spans.render(32, "0:11,11:22,22:32", 2), \
        "regenerate: deploy/k8s/spans/make_spans.py > deploy/k8s/spans/spans.yaml"


def test_spans_render_pass_their_schemas_and_each_object_keeps_to_its_span(
        tmp_path, node_modules):
    rendered, objects = render(K8S / "spans", tmp_path)
    result = validate(rendered, node_modules)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("valid ") == len(objects) == 9, result.stdout
    kinds = by_kind(objects)
    help_text = subprocess.run([SERVER, "--help"], capture_output=True, text=True,
                               timeout=30, check=True).stdout
    spans, pod_labels = [], {}
    for deployment in kinds["Deployment"]:
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        for a in args:
            assert f"\n  --{a.lstrip('-').split('=', 1)[0]}=" in help_text, a
        [layers] = [a.split("=", 1)[1] for a in args if a.startswith("--layers=")]
        start, end = (int(x) for x in layers.split(":"))
        spans.append((start, end))
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert labels["layerserve.dev/layers"] == f"{start}-{end}"
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
        pod_labels[deployment["metadata"]["name"]] = labels
    # The spans chain from layer 0 to the model's 32.
    assert sorted(spans) == [(0, 11), (11, 22), (22, 32)]
    # Each span's Service and budget select its own pods and no other span's.
    for kind, selector in (("Service", lambda o: o["spec"]["selector"]),
                           ("PodDisruptionBudget",
                            lambda o: o["spec"]["selector"]["matchLabels"])):
        for o in kinds[kind]:
            selected = [name for name, labels in pod_labels.items()
                        if selector(o).items() <= labels.items()]
            assert selected == [o["metadata"]["name"]], (kind, o["metadata"]["name"])
    assert all(s["spec"]["clusterIP"] == "None" for s in kinds["Service"])
