"""Renders deploy/k8s's kustomizations as `kubectl kustomize` does, for the part of
kustomize they use, so the deploy tests need no kubectl: Debian's (1.20, kustomize
2.0) cannot read a folder in `resources`, and a newer one is not packaged.

Supported, and nothing more: `resources` (files, or folders holding a
kustomization), `namespace`, `images` (`newName`, `newTag`) and `patches` with a
`path`: either a strategic-merge patch whose lists replace the target's lists whole
(as the HPA's `metrics`, a list without a merge key, does), or, with a `target`
(`kind` and `name`), a JSON patch (RFC 6902: `add`, `replace`, `remove`, `test`; `-` appends
to a list). Anything else is an error, not a guess. test_k8s.py holds this to `kubectl kustomize` where a kubectl is
installed."""
import copy
from pathlib import Path

import yaml

_KNOWN = {"apiVersion", "kind", "namespace", "resources", "images", "patches"}
_CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding",
                   "CustomResourceDefinition", "PriorityClass", "StorageClass"}


def render(folder):
    """The objects of the kustomization in `folder`, in the order of its resources."""
    folder = Path(folder)
    spec = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = set(spec) - _KNOWN
    if unknown:
        raise ValueError(f"{folder}: kustomize fields not supported here: {sorted(unknown)}")
    objects = []
    for resource in spec.get("resources", []):
        path = folder / resource
        if path.is_dir():
            objects += render(path)
        else:
            objects += [d for d in yaml.safe_load_all(path.read_text()) if d]
    for patch in spec.get("patches", []):
        body = yaml.safe_load((folder / patch["path"]).read_text())
        if set(patch) == {"path"}:
            _apply_patch(objects, body)
        elif set(patch) == {"path", "target"} and set(patch["target"]) == {"kind", "name"}:
            _apply_json_patch(objects, patch["target"], body)
        else:
            raise ValueError(f"{folder}: unsupported patch: {patch}")
    if "namespace" in spec:
        for o in objects:
            if o["kind"] not in _CLUSTER_SCOPED:
                o.setdefault("metadata", {})["namespace"] = spec["namespace"]
    for image in spec.get("images", []):
        _set_image(objects, image)
    return objects


def _apply_patch(objects, patch):
    key = (patch["kind"], patch["metadata"]["name"])
    targets = [o for o in objects if (o["kind"], o["metadata"]["name"]) == key]
    if len(targets) != 1:
        raise ValueError(f"a patch must match one object; {key} matches {len(targets)}")
    _merge(targets[0], patch)


def _apply_json_patch(objects, target, operations):
    key = (target["kind"], target["name"])
    targets = [o for o in objects if (o["kind"], o["metadata"]["name"]) == key]
    if len(targets) != 1:
        raise ValueError(f"a patch must match one object; {key} matches {len(targets)}")
    for op in operations:
        if op["op"] not in ("add", "replace", "remove", "test"):
            raise ValueError(f"JSON patch operation not supported here: {op}")
        *parents, last = [p.replace("~1", "/").replace("~0", "~")
                          for p in op["path"].split("/")[1:]]
        node = targets[0]
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if op["op"] == "test":
            found = node[int(last)] if isinstance(node, list) else node.get(last)
            if found != op["value"]:
                raise ValueError(f"JSON patch test failed at {op['path']}: {found!r}")
        elif isinstance(node, list):
            if op["op"] == "add":
                node.insert(len(node) if last == "-" else int(last), copy.deepcopy(op["value"]))
            elif op["op"] == "replace":
                node[int(last)] = copy.deepcopy(op["value"])
            else:
                del node[int(last)]
        elif op["op"] == "remove":
            del node[last]
        else:
            if op["op"] == "replace" and last not in node:
                raise ValueError(f"replace of a missing field: {op['path']}")
            node[last] = copy.deepcopy(op["value"])


def _merge(target, patch):
    for k, v in patch.items():
        if isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)


def _set_image(objects, image):
    def containers(o):
        pod = o.get("spec", {}).get("template", {}).get("spec", {})
        return pod.get("containers", []) + pod.get("initContainers", [])

    for o in objects:
        for c in containers(o):
            name, _, tag = c["image"].partition(":")
            if name != image["name"]:
                continue
            name = image.get("newName", name)
            tag = image.get("newTag", tag)
            c["image"] = f"{name}:{tag}" if tag else name
