"""deploy/k8s renders (kustomize.py, held to `kubectl kustomize`), every object passes the
kubernetes-models schemas and TypeScript types (deploy/k8s/validate.cjs), and the
numbers that must agree with the server do: probe ports and service name, flags the
binary knows, the grace period against --shutdown-grace plus the preStop sleep.
Across every overlay: memory limits hold weights + KV-cache cap + headroom (spans
sized by make_spans.py from the checkpoint's layers), model repositories come from
their volume, Services, budgets and monitors select only their own pods, every
metrics port is scraped once, one image name; the secured overlay's TLS, token and
probes run against the real binary; docs/operations/deploy.md's numbers agree."""
import os
import re
import shutil
import subprocess

import pytest
import yaml

import kustomize
from conftest import DEPLOY_DIR, SERVICE_NAME
from server_process import CLI, SERVER, ServerProcess

K8S = DEPLOY_DIR / "k8s"


def render(path, tmp_path):
    objects = kustomize.render(path)
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return rendered, objects


def _by_name(objects):
    return sorted(objects, key=lambda o: (o["kind"], o["metadata"]["name"]))


# Every kustomization under deploy/k8s: each is rendered and checked below.
VARIANTS = sorted(p.parent.name for p in K8S.glob("*/kustomization.yaml"))


def test_the_variants_are_the_known_ones():
    assert VARIANTS == ["base", "model-repository", "queue-depth", "secured", "spans"]


@pytest.mark.parametrize("variant", VARIANTS)
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


@pytest.mark.parametrize("variant", ["base", "queue-depth", "model-repository"])
def test_renders_and_every_object_passes_its_schema(variant, tmp_path, node_modules):
    rendered, objects = render(K8S / variant, tmp_path)
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted(["Namespace", "Deployment", "Service", "Service",
                            "HorizontalPodAutoscaler", "PodDisruptionBudget",
                            "ServiceMonitor", "PrometheusRule"])
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
    assert committed == make_spans.render(make_spans.parser().parse_args([])), \
        "regenerate: deploy/k8s/spans/make_spans.py > deploy/k8s/spans/spans.yaml"


def test_spans_render_pass_their_schemas_and_each_object_keeps_to_its_span(
        tmp_path, node_modules):
    rendered, objects = render(K8S / "spans", tmp_path)
    result = validate(rendered, node_modules)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("valid ") == len(objects) == 10, result.stdout
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


# --- Memory: weights + KV-cache cap + headroom fit every container's limit. ---

QUANTITY = re.compile(r"(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?")
UNITS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
         "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
# What a pod needs beyond weights and KV caches: code, gRPC and oneDNN state
# (~40 MB), warm-up and batch buffers, messages in flight.
MIN_HEADROOM = 512 * 2**20
# The built-in demo model (server/models/demo_model.h): Llama-style, hidden 512,
# 8 heads of 64, 2 KV heads, d_ff 1408, 4 layers.
DEMO = {"hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2,
        "intermediate_size": 1408, "num_hidden_layers": 4}
BYTES_PER_WEIGHT = {"float32": 4, "bfloat16": 2, "int8": 1 + 4 / 64}
SERVER_DEFAULT_KV_CACHE = 2**31  # --max-kv-cache-bytes's default


def quantity_bytes(text):
    m = QUANTITY.fullmatch(str(text))
    assert m, text
    return int(m.group(1)) * UNITS[m.group(2)]


def layer_parameters(config):
    """One Llama-style block: attention D(H + 2Hkv)Dh + H·Dh·D, MLP 3·D·F, norms 2·D."""
    d, h = config["hidden_size"], config["num_attention_heads"]
    hkv, dh = config.get("num_key_value_heads", h), config.get("head_dim") or d // h
    return d * (h + 2 * hkv) * dh + h * dh * d + 3 * d * config["intermediate_size"] + 2 * d


def flag_values(container):
    return dict(a.lstrip("-").split("=", 1) for a in container["args"] if "=" in a)


def deployments(objects):
    for o in objects:
        if o["kind"] == "Deployment":
            yield o, o["spec"]["template"]


def weight_bytes(pod, container):
    """The weights a container holds: the demo model's (its span of them) without a
    model repository, else the bytes its pod is sized for (its annotation)."""
    flags = flag_values(container)
    if "model-repository" not in flags:
        start, end = 0, DEMO["num_hidden_layers"]
        if "layers" in flags:
            start, end = (int(x) for x in flags["layers"].split(":"))
        per_weight = BYTES_PER_WEIGHT[flags.get("weight-dtype", "float32")]
        return (end - start) * layer_parameters(DEMO) * per_weight
    return int(pod["metadata"]["annotations"]["layerserve.dev/weight-bytes"])


@pytest.mark.parametrize("variant", VARIANTS)
def test_memory_limit_holds_weights_kv_cache_and_headroom(variant):
    """Sessions cannot OOM-kill a pod: the KV-cache cap is set on every container
    (the server's 2 GiB default would fill the base's limit alone) and weights + cap
    + headroom fit the memory limit, which equals the request (Guaranteed QoS)."""
    found = 0
    for deployment, pod in deployments(kustomize.render(K8S / variant)):
        for c in pod["spec"]["containers"]:
            flags = flag_values(c)
            assert "max-kv-cache-bytes" in flags, (deployment["metadata"]["name"], c["name"])
            kv = int(flags["max-kv-cache-bytes"])
            limit = quantity_bytes(c["resources"]["limits"]["memory"])
            assert c["resources"]["requests"]["memory"] == c["resources"]["limits"]["memory"]
            weights = weight_bytes(pod, c)
            assert limit >= weights + kv + MIN_HEADROOM, \
                (deployment["metadata"]["name"], limit, weights, kv)
            found += 1
    assert found


def test_the_base_lowers_the_servers_kv_cache_default():
    [(_, pod)] = deployments(kustomize.render(K8S / "base"))
    [c] = pod["spec"]["containers"]
    assert int(flag_values(c)["max-kv-cache-bytes"]) < SERVER_DEFAULT_KV_CACHE
    assert quantity_bytes(c["resources"]["limits"]["memory"]) <= SERVER_DEFAULT_KV_CACHE


def _make_spans():
    import sys
    sys.path.insert(0, str(K8S / "spans"))
    import make_spans
    return make_spans


def test_span_pods_are_sized_for_the_example_models_layers():
    """spans.yaml's weights are its model's (Llama-3-8B: 436 MB per layer in
    bfloat16) for its layers, computed here from the config independently."""
    make_spans = _make_spans()
    defaults = make_spans.parser().parse_args([])
    config = yaml.safe_load((K8S.parent.parent / defaults.model).read_text())
    per_layer = layer_parameters(config) * 2
    assert 436_000_000 < per_layer < 437_000_000
    for _, pod in deployments(kustomize.render(K8S / "spans")):
        [c] = pod["spec"]["containers"]
        start, end = (int(x) for x in flag_values(c)["layers"].split(":"))
        assert weight_bytes(pod, c) == (end - start) * per_layer
        assert flag_values(c)["weight-dtype"] == "bfloat16"


def _span_memory(text):
    """{(start, end): (Deployment memory limit, weight annotation, args)} of a spans.yaml."""
    spans = {}
    for o in yaml.safe_load_all(text):
        if o and o["kind"] == "Deployment":
            pod = o["spec"]["template"]
            [c] = pod["spec"]["containers"]
            start, end = (int(x) for x in flag_values(c)["layers"].split(":"))
            spans[(start, end)] = (quantity_bytes(c["resources"]["limits"]["memory"]),
                                   int(pod["metadata"]["annotations"]
                                       ["layerserve.dev/weight-bytes"]), flag_values(c))
    return spans


MIB = 2**20


def test_make_spans_sizes_each_span_from_a_checkpoints_layers():
    """tests/golden/models/tiny-llama: 3 layers (biases included) read from its
    safetensors headers, at float32."""
    make_spans = _make_spans()
    model = K8S.parent.parent / "tests" / "golden" / "models" / "tiny-llama"
    options = make_spans.parser().parse_args([
        "--model", str(model), "--spans", "0:1,1:3", "--weight-dtype", "float32",
        "--kv-cache-bytes", str(100 * MIB), "--headroom-bytes", str(600 * MIB),
        "--model-claim", "my-models"])
    text = make_spans.render(options)
    # Per layer: q 48x48+48, k and v 24x48+24, o 48x48+48, gate and up 72x48+72,
    # down 48x72+48, two norms 48: 17712 parameters, 70848 bytes.
    layer = 4 * (48 * 48 + 48 + 2 * (24 * 48 + 24) + 48 * 48 + 48
                 + 2 * (72 * 48 + 72) + 48 * 72 + 48 + 2 * 48)
    assert layer == 70848
    spans = _span_memory(text)
    for (start, end), (limit, weights, flags) in spans.items():
        assert weights == (end - start) * layer
        # Rounded up to a MiB: 700 MiB + weights < 1 MiB.
        assert limit == 701 * MIB
        assert flags["max-kv-cache-bytes"] == str(100 * MIB)
        assert flags["weight-dtype"] == "float32"
    assert sorted(spans) == [(0, 1), (1, 3)]
    assert "claimName: my-models" in text
    assert "safetensors headers" in text.splitlines()[1]


def test_make_spans_from_a_config_or_explicit_numbers():
    make_spans = _make_spans()
    config = K8S / "spans" / "llama-3-8b-config.json"
    # int8: one byte a weight plus a float32 scale per 64.
    text = make_spans.render(make_spans.parser().parse_args([
        "--model", str(config), "--spans", "0:16,16:32", "--weight-dtype", "int8",
        "--kv-cache-bytes", str(2**30), "--headroom-bytes", str(2**30)]))
    per_layer = -(-layer_parameters(yaml.safe_load(config.read_text())) * 17 // 16)
    for (start, end), (limit, weights, _) in _span_memory(text).items():
        assert weights == 16 * per_layer
        assert limit == -(-(weights + 2 * 2**30) // MIB) * MIB
    text = make_spans.render(make_spans.parser().parse_args([
        "--num-layers", "4", "--layer-bytes", str(300 * MIB), "--spans", "0:1,1:4",
        "--kv-cache-bytes", str(2**30), "--headroom-bytes", str(2**30)]))
    assert {k: v[0] for k, v in _span_memory(text).items()} == {
        (0, 1): 2348 * MIB, (1, 4): 2948 * MIB}


@pytest.mark.parametrize("spans,message", [
    ("0:10,11:32", "does not continue from layer 10"),
    ("0:11,11:30", "the model has 32 layers"),
])
def test_make_spans_refuses_spans_that_do_not_chain(spans, message, capsys):
    make_spans = _make_spans()
    with pytest.raises(SystemExit) as exit_info:
        make_spans.render(make_spans.parser().parse_args(["--spans", spans]))
    assert message in str(exit_info.value)


# --- Model repositories: a volume, mounted where --model-repository points. ---

@pytest.mark.parametrize("variant", ["spans", "model-repository"])
def test_pods_serve_the_model_repository_of_their_claim(variant):
    found = 0
    for deployment, pod in deployments(kustomize.render(K8S / variant)):
        [c] = pod["spec"]["containers"]
        path = flag_values(c)["model-repository"]
        [mount] = [m for m in c["volumeMounts"] if m["mountPath"] == path]
        assert mount["readOnly"] is True
        [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
        assert volume["persistentVolumeClaim"]["claimName"] == "layerserve-models"
        found += 1
    assert found == (3 if variant == "spans" else 1)


# --- Selectors: each Service, budget and monitor reaches its own pods only. ---

def _everything():
    """The base and the spans as one cluster would hold them (same namespace)."""
    return kustomize.render(K8S / "base") + kustomize.render(K8S / "spans")


def _pods(objects):
    return {d["metadata"]["name"]: pod for d, pod in deployments(objects)}


def _selects(selector, labels):
    return selector.items() <= labels.items()


def test_services_and_budgets_select_only_their_own_pods():
    objects = _everything()
    pods = _pods(objects)
    assert len(pods) == 4
    seen = set()
    for o in objects:
        if o["kind"] == "Service":
            selector = o["spec"]["selector"]
        elif o["kind"] == "PodDisruptionBudget":
            selector = o["spec"]["selector"]["matchLabels"]
        else:
            continue
        selected = [n for n, pod in pods.items()
                    if _selects(selector, pod["metadata"]["labels"])]
        # The base's Services and budget are named layerserve[-headless]; a span's
        # objects are named like its Deployment.
        own = o["metadata"]["name"].removesuffix("-headless")
        assert selected == [own], (o["kind"], o["metadata"]["name"], selected)
        seen.add(own)
    assert seen == set(pods)
    # Each Deployment's own selector and spread constraints stay on its pods too.
    for d, pod in deployments(objects):
        selectors = [d["spec"]["selector"]["matchLabels"]] + [
            t["labelSelector"]["matchLabels"]
            for t in pod["spec"].get("topologySpreadConstraints", [])]
        for selector in selectors:
            assert [n for n, p in pods.items()
                    if _selects(selector, p["metadata"]["labels"])] == [d["metadata"]["name"]]


@pytest.mark.parametrize("objects", [
    pytest.param(lambda: _everything(), id="base+spans"),
    pytest.param(lambda: kustomize.render(K8S / "spans"), id="spans"),
    pytest.param(lambda: kustomize.render(K8S / "model-repository"), id="model-repository"),
    pytest.param(lambda: kustomize.render(K8S / "secured"), id="secured"),
])
def test_every_metrics_port_is_scraped_once(objects):
    """Per pod: the ServiceMonitors whose selector matches a Service that selects
    the pod and has the monitor's port, targeting the container port named
    metrics. Exactly one such (monitor, Service) pair per pod."""
    objects = objects()
    pods = _pods(objects)
    services = [o for o in objects if o["kind"] == "Service"]
    monitors = [o for o in objects if o["kind"] == "ServiceMonitor"]
    for name, pod in pods.items():
        [c] = pod["spec"]["containers"]
        assert "metrics" in [p["name"] for p in c["ports"]], name
        scrapes = []
        for m in monitors:
            for endpoint in m["spec"]["endpoints"]:
                for s in services:
                    ports = {p["name"]: p["targetPort"] for p in s["spec"]["ports"]}
                    if (_selects(m["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
                            and _selects(s["spec"]["selector"], pod["metadata"]["labels"])
                            and ports.get(endpoint["port"]) == "metrics"):
                        scrapes.append((m["metadata"]["name"], s["metadata"]["name"]))
                        # The job label the alert rules and dashboard select.
                        assert s["metadata"]["labels"][m["spec"]["jobLabel"]] == "layerserve"
        assert len(scrapes) == 1, (name, scrapes)


# --- One image name: layerserve:VERSION in every manifest and script. ---

def _layerserve_images():
    """{where: image} of every container running the server under deploy/."""
    images = {}
    for variant in VARIANTS:
        for d, pod in deployments(kustomize.render(K8S / variant)):
            for c in pod["spec"]["containers"]:
                images[f"k8s/{variant}: {d['metadata']['name']}"] = c["image"]
    kserve = DEPLOY_DIR / "kserve"
    for path in sorted(kserve.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            spec = (doc or {}).get("spec", {})
            for c in spec.get("containers", []) + spec.get("predictor", {}).get("containers", []):
                images[f"kserve/{path.name}: {c['name']}"] = c["image"]
    compose = yaml.safe_load((DEPLOY_DIR / "compose.yaml").read_text())
    for name, service in compose["services"].items():
        if name.startswith("layerserve-"):
            images[f"compose: {name}"] = service["image"]
    return images


def test_every_manifest_names_the_image_layerserve_version():
    version = (K8S.parent.parent / "VERSION").read_text().strip()
    images = _layerserve_images()
    assert len([w for w in images if w.startswith("kserve/")]) == 2
    assert len([w for w in images if w.startswith("compose")]) == 3
    assert set(images.values()) == {f"layerserve:{version}"}, images
    # The scripts that build and test the image default to the same name.
    for script in ("container-build", "container-test"):
        text = (K8S.parent.parent / "scripts" / script).read_text()
        assert "layerserve:$(cat VERSION)" in text, script
        assert "localhost/layerserve:ci" not in text, script


# --- The secured overlay: TLS and tokens from Secrets, a NetworkPolicy. ---

def test_secured_renders_and_passes_its_schemas(tmp_path, node_modules):
    rendered, objects = render(K8S / "secured", tmp_path)
    result = validate(rendered, node_modules)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("valid ") == len(objects), result.stdout
    assert all(o["metadata"]["namespace"] == "layerserve" for o in objects
               if o["kind"] != "Namespace")
    services = [o for o in objects if o["kind"] == "Service"]
    assert len(services) == 2
    for s in services:
        [grpc_port] = [p for p in s["spec"]["ports"] if p["name"] == "grpc"]
        assert "appProtocol" not in grpc_port  # not h2c: TLS


def test_network_policy_opens_grpc_and_keeps_metrics_to_monitoring():
    objects = _everything() + kustomize.render(K8S / "secured")
    [policy] = [o for o in objects if o["kind"] == "NetworkPolicy"]
    # It covers every layerserve pod of the namespace: the base's and the spans'.
    for name, pod in _pods(objects).items():
        assert _selects(policy["spec"]["podSelector"]["matchLabels"],
                        pod["metadata"]["labels"]), name
    rules = {r["ports"][0]["port"]: r["from"] for r in policy["spec"]["ingress"]}
    assert set(rules) == {"grpc", "metrics"}
    assert rules["grpc"] == [{"namespaceSelector": {}}]
    assert rules["metrics"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "monitoring"}}}]


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _secrets(folder):
    """A CA, and a server certificate it signed for localhost: the files of the
    layerserve-tls Secret (tls.crt, tls.key, ca.crt) and of layerserve-token."""
    tls, token = folder / "tls", folder / "token"
    tls.mkdir()
    token.mkdir()
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
             "/CN=test-ca", "-keyout", "ca.key", "-out", "ca.crt", cwd=tls)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=layerserve",
             "-keyout", "tls.key", "-out", "tls.csr", cwd=tls)
    (tls / "ext.cnf").write_text("subjectAltName=DNS:localhost,"
                                 "DNS:layerserve.layerserve.svc\n")
    _openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "1", "-extfile", "ext.cnf", "-out", "tls.crt",
             cwd=tls)
    (token / "tokens").write_text("s3cret-token\n")
    return {"tls": tls, "token": token}


def test_secured_pod_serves_tls_and_tokens_and_its_probes_pass(tmp_path):
    """The secured container's own arguments run the real binary, its Secret
    mounts mapped to local folders; each exec probe, run as written (its port the
    one picked here), answers SERVING over TLS; calls need the token."""
    [(_, pod)] = deployments(kustomize.render(K8S / "secured"))
    [c] = pod["spec"]["containers"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "layerserve-tls"
    assert volumes["token"]["secret"]["secretName"] == "layerserve-token"
    files = _secrets(tmp_path)
    mounts = {m["mountPath"]: str(files[m["name"]]) for m in c["volumeMounts"]
              if m["name"] in files}
    assert all(m["readOnly"] for m in c["volumeMounts"] if m["name"] in files)

    def local(text):
        for mount, folder in mounts.items():
            text = text.replace(mount, folder)
        return text

    args = [local(a) for a in c["args"]]
    flags = flag_values(c)
    assert {"tls-cert", "tls-key", "auth-token-file"} <= set(flags)
    server = ServerProcess(*args, "--warm-up=false")
    try:
        port = server.target.rsplit(":", 1)[1]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            command = [local(a).replace("localhost:50051", f"localhost:{port}")
                       for a in c[probe]["exec"]["command"]]
            assert command[0] == "layerserve-cli"
            done = subprocess.run([CLI, *command[1:]], capture_output=True, text=True,
                                  timeout=30)
            assert done.returncode == 0 and "SERVING" in done.stdout, (probe, done.stderr)
        # Plaintext, as a native gRPC probe would speak, fails against TLS.
        plain = subprocess.run([CLI, "--target", f"localhost:{port}", "--retries", "0",
                                "--timeout-ms", "2000", "health"],
                               capture_output=True, text=True, timeout=30)
        assert plain.returncode != 0
        tls = [CLI, "--tls-ca", str(files["tls"] / "ca.crt"), "--target",
               f"localhost:{port}", "--retries", "0"]
        refused = subprocess.run([*tls, "list-models"], capture_output=True, text=True,
                                 timeout=30)
        assert refused.returncode != 0 and "UNAUTHENTICATED" in refused.stdout + refused.stderr
        allowed = subprocess.run([*tls, "--token-file", str(files["token"] / "tokens"),
                                  "list-models"], capture_output=True, text=True, timeout=30)
        assert allowed.returncode == 0 and "demo" in allowed.stdout, allowed.stderr
    finally:
        server.stop()


# --- docs/operations/deploy.md agrees with the manifests. ---

DEPLOY_DOC = K8S.parent.parent / "docs" / "operations" / "deploy.md"


def test_deploy_doc_make_spans_command_parses_and_sizing_table_matches():
    import shlex
    text = DEPLOY_DOC.read_text()
    make_spans = _make_spans()
    # The documented command, its continuation lines joined, up to the redirection.
    start = text.index("deploy/k8s/spans/make_spans.py --model")
    command = text[start:text.index(">", start)].replace("\\\n", " ")
    args = shlex.split(command)[1:]
    args[args.index("--model") + 1] = str(K8S / "spans" / "llama-3-8b-config.json")
    options = make_spans.parser().parse_args(args)
    # With the example model's config it writes the committed spans.yaml's pods.
    documented = _span_memory(make_spans.render(options))
    committed = _span_memory((K8S / "spans" / "spans.yaml").read_text())
    assert {k: v[:2] for k, v in documented.items()} == {k: v[:2] for k, v in committed.items()}
    # The sizing table's rows for the shipped manifests.
    rows = {line.split("|")[1].strip(): line for line in text.splitlines()
            if line.startswith("| `")}
    for (span_start, span_end), (limit, _, _) in committed.items():
        [row] = [line for name, line in rows.items()
                 if name.startswith("`spans`") and f"{span_start}:{span_end}" in name]
        assert f"| {limit // MIB}Mi |" in row, row
    [(_, pod)] = deployments(kustomize.render(K8S / "base"))
    assert f"| {pod['spec']['containers'][0]['resources']['limits']['memory']} |" in \
        rows["`base` (demo, 4 layers, float32)"]
    [(_, pod)] = deployments(kustomize.render(K8S / "model-repository"))
    assert f"| {pod['spec']['containers'][0]['resources']['limits']['memory']} |" in \
        rows["`model-repository` as shipped"]
