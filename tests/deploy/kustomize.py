"""Renders deploy/k8s's kustomizations as `kubectl kustomize` does, for the part of
kustomize they use, so the deploy tests need no kubectl: Debian's (1.20, kustomize
2.0) cannot read a folder in `resources`, and a newer one is not packaged.

Supported, and nothing more: `resources` (files, or folders holding a
kustomization), `namespace`, `images` (`newName`, `newTag`) and `patches` with a
`path` to a strategic-merge patch whose lists replace the target's lists whole (as
the HPA's `metrics`, a list without a merge key, does). Anything else is an error,
not a guess. test_k8s.py holds this to `kubectl kustomize` where a kubectl is
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
        if set(patch) != {"path"}:
            raise ValueError(f"{folder}: only patches with a path are supported: {patch}")
        _apply_patch(objects, yaml.safe_load((folder / patch["path"]).read_text()))
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
