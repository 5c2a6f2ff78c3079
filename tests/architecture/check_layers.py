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
LAYERS = {
    "common": set(),
    # Hand-written code beside the generated protobuf code (proto/wire_dtype.h).
    "proto": {"common"},
    "kernels": {"common"},
    # The oneDNN baselines the kernels were measured against: for benches and tests
    # only, so no layer above may include them.
    "kernels/baseline": {"common", "kernels"},
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


def violations(source_dir):
    found = []
    for layer in LAYERS:
        folder = os.path.join(source_dir, layer)
        for name in sorted(os.listdir(folder)):
            if not name.endswith((".h", ".cc")):
                continue
            path = f"{layer}/{name}"
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                text = f.read()
            for header in INCLUDE.findall(text):
                target = included_layer(header)
                if target is None or target == layer or target in LAYERS[layer]:
                    continue
                found.append(f"{path}: includes \"{header}\" ({target}), but {layer} "
                             f"may include only {sorted(LAYERS[layer]) or 'itself'}")
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
