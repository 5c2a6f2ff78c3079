#!/usr/bin/env python3
"""Holds the source tree to its layering (docs/ARCHITECTURE.md): each folder may
include headers only from itself and the folders below it. The CMake libraries
catch an upward call at link time; this catches an upward include of a header-only
piece (a template, an inline function) that would link anyway.

Usage: tests/architecture/check_layers.py [SOURCE_DIR]
Exits 1 listing every include that breaks the layering.
"""
import os
import re
import sys

# Folder -> the folders its files may include from (besides itself). Generated
# protobuf headers ("layerserve/v1/...", "grpc/health/...", "inference/...") are
# allowed where PROTO is listed. Order: lowest layer first.
PROTO = "proto"
# A layer allows a folder and every folder below it: "kernels" is any kernels/
# family.
KERNEL_BASICS = {"common", "kernels/common", "kernels/value_stats"}
LAYERS = {
    "common": set(),
    # Hand-written code beside the generated protobuf code (proto/wire_dtype.h).
    "proto": {"common"},
    # The kernels, a folder per family; what every family may use is below them.
    "kernels/common": {"common"},
    "kernels/value_stats": {"common", "kernels/common"},
    "kernels/norm": KERNEL_BASICS,
    "kernels/activation": KERNEL_BASICS,
    "kernels/positional": KERNEL_BASICS,
    "kernels/rope": KERNEL_BASICS,
    "kernels/attention": KERNEL_BASICS,
    # With its implementations' sub-folders (hwy, avx512_bf16, amx, int8): one layer.
    "kernels/linear": KERNEL_BASICS,
    # A Transformer block composes the families.
    "kernels/block": KERNEL_BASICS | {"kernels/norm", "kernels/activation", "kernels/rope",
                                      "kernels/attention", "kernels/linear"},
    # The oneDNN baselines the kernels were measured against: for benches and tests
    # only, so no layer above may include them.
    "bench/baseline": {"common", "kernels"},
    "server/metrics": {"common", "kernels", PROTO},
    "server/models": {"common", "kernels", PROTO},
    "server/sessions": {"common", "kernels", "server/models", "server/metrics"},
    # metrics: an operation records the series only it has (server/ops/operation.h).
    "server/ops": {"common", "kernels", "server/metrics", "server/models",
                   "server/sessions", PROTO},
    # The Open Inference Protocol's mapping onto v1 operations: no gRPC.
    "server/oip": {"common", "kernels", "server/metrics", "server/models",
                   "server/sessions", "server/ops", PROTO},
    "server/batching": {"common", "kernels"},
    "server/security": {"common"},
    "server/rpc": {"common", "kernels", "server/metrics", "server/models",
                   "server/sessions", "server/ops", "server/oip", "server/batching",
                   "server/security", PROTO},
    "client/cpp": {"common", PROTO},
    "tools/cli": {"common", "client/cpp", PROTO},
    "tools/loadgen": {"common", "client/cpp", "tools/cli", PROTO},
}
PROJECT_ROOTS = ("common/", "proto/", "kernels/", "server/", "client/", "tools/", "tests/",
                 "bench/", "fuzz/")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def layer_of(path):
    """The LAYERS key a project path belongs to, or None (tests, benches...)."""
    best = None
    for layer in LAYERS:
        if path.startswith(layer + "/") and (best is None or len(layer) > len(best)):
            best = layer
    return best


def included_layer(header):
    if header.startswith(("layerserve/v1/", "grpc/health/", "inference/")):
        return PROTO
    if not header.startswith(PROJECT_ROOTS):
        return None  # A third-party header.
    return layer_of(header) or header.split("/")[0]


def allowed(target, layer):
    """Whether `layer` may include from `target`: itself, or a folder it lists or one
    below such a folder."""
    return target == layer or any(target == a or target.startswith(a + "/")
                                  for a in LAYERS[layer])


def sources(source_dir, layer):
    """The project paths of the .h and .cc files of `layer`, its sub-folders included
    unless they are layers of their own."""
    top = os.path.join(source_dir, layer)
    for folder, dirs, names in os.walk(top):
        dirs.sort()
        for name in sorted(names):
            if not name.endswith((".h", ".cc")):
                continue
            path = os.path.relpath(os.path.join(folder, name), source_dir)
            if layer_of(path) == layer:
                yield path


def violations(source_dir):
    found = []
    for layer in LAYERS:
        for path in sources(source_dir, layer):
            with open(os.path.join(source_dir, path), encoding="utf-8") as f:
                text = f.read()
            for header in INCLUDE.findall(text):
                target = included_layer(header)
                if target is None or allowed(target, layer):
                    continue
                found.append(f"{path}: includes \"{header}\" ({target}), but {layer} "
                             f"may include only {sorted(LAYERS[layer]) or 'itself'}")
    # A kernel outside every family folder would escape the rules above.
    for folder, _, names in os.walk(os.path.join(source_dir, "kernels")):
        for name in sorted(names):
            path = os.path.relpath(os.path.join(folder, name), source_dir)
            if name.endswith((".h", ".cc")) and layer_of(path) is None:
                found.append(f"{path}: in no family folder of kernels/ (LAYERS)")
    return found


def main():
    source_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..")
    missing = [layer for layer in LAYERS if not os.path.isdir(os.path.join(source_dir, layer))]
    if missing:
        print(f"check_layers: folders missing: {missing}; update LAYERS")
        return 1
    found = violations(source_dir)
    for line in found:
        print(line)
    print(f"check_layers: {len(found)} include(s) against the layering")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
