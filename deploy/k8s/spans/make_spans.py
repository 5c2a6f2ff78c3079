#!/usr/bin/python3
"""Writes spans.yaml: one Deployment, one headless Service and one
PodDisruptionBudget per span of a model split across replicas (the server's
--layers=START:END), each made from deploy/k8s/base's objects of the same kind, and
one ServiceMonitor that scrapes every span pod.

    deploy/k8s/spans/make_spans.py --model deploy/k8s/spans/llama-3-8b-config.json \\
        --spans 0:11,11:22,22:32 --weight-dtype bfloat16 --replicas 2 \\
        > deploy/k8s/spans/spans.yaml

The model: a model's folder (its *.safetensors headers give each layer's parameter
count; without them its config.json's shapes do), its config.json alone, or
--num-layers with --layer-bytes. Each span's memory request and limit (equal:
Guaranteed QoS) is

    the span's layers x bytes per layer at --weight-dtype
    + --kv-cache-bytes (passed as --max-kv-cache-bytes, so sessions are evicted
      before the pod is OOM-killed)
    + --headroom-bytes (code, gRPC, oneDNN, warm-up and batch buffers, messages)

rounded up to a MiB; the arithmetic is written in spans.yaml's header.

Every span pod mounts the model repository read-only at /models from a
PersistentVolumeClaim (--model-claim, created by the operator: its access mode must
let many pods on many nodes read it, ReadOnlyMany or ReadWriteMany) and runs with
--model-repository=/models. docs/operations/deploy.md shows an image volume or an
init container instead.

Each span's pods carry app.kubernetes.io/component=span and the label
layerserve.dev/layers=START-END, which its Deployment, Service and budget select, so
no object of one span reaches another span's pods, nor the base's (component
"server"). A client chains the spans with layerserve_client.Pipeline (or the C++
Pipeline), each stage's targets the pod addresses of that span's headless Service
(dns:///layerserve-layers-START-END.layerserve.svc.cluster.local:50051 lists them).
The spans must chain from 0 to the model's layer count: anything else is refused
here rather than found by a client at run time. tests/deploy/test_k8s.py checks the
committed spans.yaml is this script's output for the defaults below.
"""
import argparse
import copy
import json
import math
import re
import struct
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent
BASE = HERE.parent / "base"
LABEL = "layerserve.dev/layers"
COMPONENT = "app.kubernetes.io/component"
MODELS_MOUNT = "/models"
WEIGHT_BYTES_ANNOTATION = "layerserve.dev/weight-bytes"
MIB = 2**20
DEFAULT_MODEL = HERE / "llama-3-8b-config.json"
# Bytes a weight takes in memory per --weight-dtype; int8 adds a float32 scale per
# --weight-group-size (64) inputs.
WEIGHT_BYTES = {"float32": 4.0, "bfloat16": 2.0, "int8": 1.0 + 4 / 64}
# A tensor of layer N in the checkpoints the server reads (Llama-style
# model.layers.N., GPT-2's h.N., GPT-NeoX's gpt_neox.layers.N.).
LAYER_TENSOR = re.compile(r"(?:^|\.)(?:layers|h)\.(\d+)\.")


def parse_spans(text, num_layers):
    spans = []
    for part in text.split(","):
        start, _, end = part.partition(":")
        spans.append((int(start), int(end)))
    expected = 0
    for start, end in spans:
        if start != expected or end <= start:
            sys.exit(f"--spans: {start}:{end} does not continue from layer {expected}")
        expected = end
    if expected != num_layers:
        sys.exit(f"--spans end at layer {expected}, the model has {num_layers} layers")
    return spans


def config_layer_parameters(config):
    """Parameters of one Llama-style block from config.json's shapes: attention
    D·(H + 2·Hkv)·Dh + H·Dh·D, gated MLP 3·D·F, two norms 2·D."""
    d = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or d // heads
    ff = config["intermediate_size"]
    return d * (heads + 2 * kv_heads) * head_dim + heads * head_dim * d + 3 * d * ff + 2 * d


def safetensors_layer_parameters(folder):
    """{layer: parameters} summed over the tensors of the *.safetensors headers."""
    per_layer = {}
    for path in sorted(folder.glob("*.safetensors")):
        with path.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        for name, tensor in header.items():
            m = LAYER_TENSOR.search(name)
            if name != "__metadata__" and m:
                per_layer[int(m.group(1))] = (per_layer.get(int(m.group(1)), 0)
                                              + math.prod(tensor["shape"]))
    return per_layer


def layer_parameters(model):
    """(num_layers, {layer: parameters}, what it was read from) of a model folder or
    its config.json."""
    model = Path(model)
    folder, config_path = (model, model / "config.json") if model.is_dir() else \
        (model.parent, model)
    config = json.loads(config_path.read_text())
    num_layers = config.get("num_hidden_layers", config.get("n_layer"))
    per_layer = safetensors_layer_parameters(folder) if model.is_dir() else {}
    if per_layer:
        if sorted(per_layer) != list(range(num_layers)):
            sys.exit(f"{folder}: the checkpoint's layers {sorted(per_layer)} are not "
                     f"the config's {num_layers}")
        return num_layers, per_layer, "safetensors headers"
    return num_layers, {i: config_layer_parameters(config) for i in range(num_layers)}, \
        "config.json shapes"


def span_memory(layer_bytes, start, end, kv_cache_bytes, headroom_bytes):
    """(bytes of the span's weights, memory request = limit rounded up to a MiB)."""
    weights = sum(layer_bytes[i] for i in range(start, end))
    total = weights + kv_cache_bytes + headroom_bytes
    return weights, math.ceil(total / MIB) * MIB


def base(name):
    return yaml.safe_load((BASE / name).read_text())


def select_span(selector_labels, span_label):
    selector_labels[COMPONENT] = "span"
    selector_labels[LABEL] = span_label


def span_objects(start, end, replicas, weights, memory_bytes, options):
    span = f"{start}-{end}"
    name = f"layerserve-layers-{span}"
    deployment = copy.deepcopy(base("deployment.yaml"))
    deployment["metadata"]["name"] = name
    select_span(deployment["metadata"]["labels"], span)
    deployment["spec"]["replicas"] = replicas
    select_span(deployment["spec"]["selector"]["matchLabels"], span)
    pod = deployment["spec"]["template"]
    select_span(pod["metadata"]["labels"], span)
    # The weights the memory is sized for (tests/deploy/test_k8s.py checks them).
    pod["metadata"].setdefault("annotations", {})[WEIGHT_BYTES_ANNOTATION] = str(weights)
    for constraint in pod["spec"].get("topologySpreadConstraints", []):
        select_span(constraint["labelSelector"]["matchLabels"], span)
    [container] = pod["spec"]["containers"]
    args = [a for a in container["args"] if not a.startswith("--max-kv-cache-bytes=")]
    container["args"] = args + [
        f"--model-repository={MODELS_MOUNT}",
        f"--layers={start}:{end}",
        f"--weight-dtype={options.weight_dtype}",
        f"--max-kv-cache-bytes={options.kv_cache_bytes}",
    ]
    memory = f"{memory_bytes // MIB}Mi"
    for kind in ("requests", "limits"):
        container["resources"][kind]["memory"] = memory
    [models] = [m for m in container["volumeMounts"] if m["mountPath"] == MODELS_MOUNT]
    for volume in pod["spec"]["volumes"]:
        if volume["name"] == models["name"]:
            volume.clear()
            volume.update({"name": models["name"], "persistentVolumeClaim": {
                "claimName": options.model_claim, "readOnly": True}})

    # Both ports, so the span ServiceMonitor below scrapes every pod through it.
    service = copy.deepcopy(base("service-headless.yaml"))
    service["metadata"]["name"] = name
    select_span(service["metadata"]["labels"], span)
    select_span(service["spec"]["selector"], span)
    service["spec"]["ports"] = copy.deepcopy(base("service.yaml")["spec"]["ports"])

    budget = copy.deepcopy(base("pdb.yaml"))
    budget["metadata"]["name"] = name
    select_span(budget["metadata"]["labels"], span)
    select_span(budget["spec"]["selector"]["matchLabels"], span)
    return [deployment, service, budget]


def span_monitor():
    monitor = copy.deepcopy(base("servicemonitor.yaml"))
    monitor["metadata"]["name"] = "layerserve-layers"
    monitor["metadata"]["labels"][COMPONENT] = "span"
    monitor["spec"]["selector"]["matchLabels"][COMPONENT] = "span"
    return monitor


def command_line(options):
    model = (f"--num-layers {options.num_layers} --layer-bytes {options.layer_bytes}"
             if options.layer_bytes else f"--model {options.model}")
    return (f"deploy/k8s/spans/make_spans.py {model} --spans {options.spans} "
            f"--weight-dtype {options.weight_dtype} --kv-cache-bytes "
            f"{options.kv_cache_bytes} --headroom-bytes {options.headroom_bytes} "
            f"--model-claim {options.model_claim} --replicas {options.replicas}")


def render(options):
    if options.layer_bytes:
        if not options.num_layers:
            sys.exit("--layer-bytes needs --num-layers")
        num_layers, source = options.num_layers, "--layer-bytes"
        layer_bytes = {i: options.layer_bytes for i in range(num_layers)}
    else:
        model = Path(options.model)
        if not model.is_absolute() and not model.exists():
            model = ROOT / model  # the default, from another folder
        num_layers, parameters, source = layer_parameters(model)
        if options.num_layers and options.num_layers != num_layers:
            sys.exit(f"--num-layers {options.num_layers}: the model has {num_layers}")
        per_weight = WEIGHT_BYTES[options.weight_dtype]
        layer_bytes = {i: math.ceil(p * per_weight) for i, p in parameters.items()}
    lines = [f"Generated by {command_line(options)}: edit that, not this.",
             f"Memory per pod (request = limit, rounded up to a MiB), bytes per layer "
             f"from {source} at {options.weight_dtype}:"]
    objects = []
    for start, end in parse_spans(options.spans, num_layers):
        weights, memory = span_memory(layer_bytes, start, end, options.kv_cache_bytes,
                                      options.headroom_bytes)
        lines.append(f"  layers {start}:{end}: weights {weights} + KV cache "
                     f"{options.kv_cache_bytes} + headroom {options.headroom_bytes} "
                     f"<= {memory} ({memory // MIB}Mi)")
        objects += span_objects(start, end, options.replicas, weights, memory, options)
    objects.append(span_monitor())
    header = "".join(f"# {line}\n" for line in lines)
    return header + yaml.safe_dump_all(objects, sort_keys=False)


def parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=str(DEFAULT_MODEL.relative_to(ROOT)),
                   help="a model's folder (config.json and *.safetensors) or its "
                        "config.json (default: %(default)s)")
    p.add_argument("--num-layers", type=int, help="with --layer-bytes instead of --model")
    p.add_argument("--layer-bytes", type=int,
                   help="bytes of one layer's weights at --weight-dtype")
    p.add_argument("--spans", default="0:11,11:22,22:32")
    p.add_argument("--weight-dtype", choices=sorted(WEIGHT_BYTES), default="bfloat16")
    p.add_argument("--kv-cache-bytes", type=int, default=2 * 2**30,
                   help="each pod's --max-kv-cache-bytes (default 2 GiB)")
    p.add_argument("--headroom-bytes", type=int, default=2**30,
                   help="memory beyond weights and KV caches (default 1 GiB)")
    p.add_argument("--model-claim", default="layerserve-models",
                   help="PersistentVolumeClaim holding the model repository")
    p.add_argument("--replicas", type=int, default=2)
    return p


def main():
    options = parser().parse_args()
    sys.stdout.write(render(options))


if __name__ == "__main__":
    main()
